//! The Landlock system calls and the capability drop a Landlock-sandboxed agent gets
//! (issue 29; https://docs.kernel.org/userspace-api/landlock.html). No crate wraps them among
//! the allowed ones; `libc::syscall` with the kernel's own structs does (PLAN.md §10).
//!
//! Owns: asking the kernel for its Landlock ABI, building a ruleset from `landlock::rules`
//! (in the parent, before the fork: it opens paths and allocates), and the steps the
//! child takes between fork and exec (`confine_child`), which only make system
//! calls, as a `pre_exec` hook must. Refuses: leaving a ruleset descriptor to the agent (the
//! kernel creates it close-on-exec), granting a path it cannot open (the rule is skipped:
//! a path that vanished since the listing grants nothing).

use super::landlock::{handled, Rule};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

const CREATE_RULESET_VERSION: u32 = 1;
const RULE_PATH_BENEATH: libc::c_int = 1;
/// ABI 6: a sandboxed process cannot signal a process outside its sandbox (the hub, other
/// tasks).
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

// The kernel's struct is packed (linux/landlock.h).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The kernel's Landlock ABI version, or None when Landlock is not built in or not enabled
/// (`lsm=` without landlock), or the call is filtered (a seccomp profile).
pub fn abi() -> Option<u32> {
    // SAFETY: with a null attr, size 0 and the VERSION flag the call reads no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).ok().filter(|&v| v >= 1)
}

/// A built ruleset, ready for a child to restrict itself with.
#[derive(Debug)]
pub struct Ruleset {
    fd: OwnedFd,
    /// How many rules were added; for the log.
    pub rules: usize,
}

/// Builds the ruleset for `rules` under `abi`.
pub fn build(rules: &[Rule], abi: u32) -> io::Result<Ruleset> {
    let attr = RulesetAttr {
        handled_access_fs: handled(abi),
        handled_access_net: 0,
        scoped: if abi >= 6 { SCOPE_SIGNAL } else { 0 },
    };
    // The struct grew with the ABI; an older kernel refuses a size it does not know.
    let size = match abi {
        0..=3 => 8,
        4 | 5 => 16,
        _ => std::mem::size_of::<RulesetAttr>(),
    };
    // SAFETY: attr lives across the call and `size` never exceeds its size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("ruleset fd out of range"))?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut added = 0;
    for r in rules {
        let Ok(c) = CString::new(r.path.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: a valid NUL-terminated path; O_PATH opens without reading.
        let pfd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if pfd < 0 {
            continue;
        }
        // SAFETY: open returned it and nothing else owns it.
        let pfd = unsafe { OwnedFd::from_raw_fd(pfd) };
        let beneath = PathBeneathAttr {
            allowed_access: r.access,
            parent_fd: pfd.as_raw_fd(),
        };
        // SAFETY: both descriptors are open and `beneath` lives across the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &beneath as *const PathBeneathAttr,
                0u32,
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("landlock rule on {}: {e}", r.path.display()),
            ));
        }
        added += 1;
    }
    Ok(Ruleset { fd, rules: added })
}

impl Ruleset {
    /// The descriptor, for `confine_child` in a `pre_exec` hook; the ruleset must outlive
    /// the spawn.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// In the child, between fork and exec: drop every capability (a hub running as root would
/// otherwise hand its agent the means to load modules or read raw disks, which no file rule
/// stops), forbid gaining privileges (Landlock requires it), and restrict this process and
/// everything it starts to the ruleset `fd`. Only system calls: safe in a `pre_exec` hook.
pub fn confine_child(fd: RawFd) -> io::Result<()> {
    drop_capabilities()?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is the ruleset's descriptor, open across the spawn (the caller keeps the
    // `Ruleset`).
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Empties the bounding, ambient, effective, permitted and inheritable capability sets.
/// Unprivileged processes have none; for them the bounding-set drop fails with EPERM, which
/// is fine (there is nothing to drop).
fn drop_capabilities() -> io::Result<()> {
    // CAP_LAST_CAP is 40 today; the kernel answers EINVAL past its own last one.
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINVAL) => break,
                Some(libc::EPERM) => break,
                _ => return Err(e),
            }
        }
    }
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // _LINUX_CAPABILITY_VERSION_3: two 32-bit words of each set.
    let header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
    ];
    // SAFETY: valid header and two data words, as capset(2) with version 3 reads.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
