//! This machine's room for another task, for claudectl's `headroom` (docs/relay-protocol.md
//! §5 "claudectl's heartbeat"): free memory, load per core and free disk, measured off the
//! event loop every `REFRESH` by a thread of its own, and combined on the loop with what the
//! hub knows itself (tasks running, `tasks.max_concurrent`, `relay.tags`).
//!
//! Measured with what the kernel offers directly: `MemAvailable` from `/proc/meminfo`, the
//! one-minute load from `/proc/loadavg` divided by the cores this process may use, and
//! `statvfs` of the folder tasks run in. A figure that cannot be read is left out (claudectl's
//! placement treats an unknown as not meeting a floor, never as plenty). Refuses: what the
//! figures mean on the wire (`relay::worker`).

use super::prober::Prober;
use agent_hub_proto::relay::worker::Headroom;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the machine is measured: placement reads a beat every 30 s, and a figure a
/// little old is still a fair picture of room.
pub const REFRESH: Duration = Duration::from_secs(10);

/// The three measured figures (each None when it could not be read).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Machine {
    pub mem_free_mb: Option<u64>,
    pub load_per_core: Option<f64>,
    pub disk_free_mb: Option<u64>,
}

impl Machine {
    /// The `headroom` a beat carries: these figures and the hub's own.
    pub fn headroom(
        &self,
        running_tasks: u32,
        max_tasks: Option<u32>,
        tags: &[String],
    ) -> Headroom {
        Headroom {
            mem_free_mb: self.mem_free_mb,
            load_per_core: self.load_per_core,
            disk_free_mb: self.disk_free_mb,
            running_tasks,
            max_tasks,
            tags: tags.to_vec(),
        }
        .bounded()
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in MiB.
pub fn parse_meminfo_available_mb(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => Some(kib / 1024),
        Some(_) => None,
    }
}

/// The one-minute load of a `/proc/loadavg` text.
pub fn parse_loadavg_1m(text: &str) -> Option<f64> {
    let l: f64 = text.split_whitespace().next()?.parse().ok()?;
    (l.is_finite() && l >= 0.0).then_some(l)
}

/// Measures this machine now. `disk` is where tasks run (its file system's free space is
/// what a new task uses).
pub fn measure(disk: &Path) -> Machine {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .ok();
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| parse_loadavg_1m(&t));
    Machine {
        mem_free_mb: std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| parse_meminfo_available_mb(&t)),
        load_per_core: load.zip(cores).map(|(l, c)| l / c),
        disk_free_mb: disk_free_mb(disk),
    }
}

fn disk_free_mb(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` points to writable memory of the right
    // type; statvfs writes it whole on success and we read it only then.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: rc == 0, so statvfs filled `st`.
    let st = unsafe { st.assume_init() };
    // The casts are no-ops on 64-bit Linux and widen elsewhere (macOS: `fsblkcnt_t` is 32
    // bits), so clippy's same-type lint does not apply to every target.
    #[allow(clippy::unnecessary_cast)]
    let bytes = (st.f_bavail as u64).checked_mul(st.f_frsize as u64)?;
    Some(bytes / (1024 * 1024))
}

/// The measuring thread's far end (`prober`, the shape it shares with `cards`). Dropping it
/// stops the thread at its next wake-up; `latest` is the newest measurement since the last call.
pub(super) type MachineProber = Prober<Machine>;

impl MachineProber {
    pub(super) fn spawn(disk: PathBuf) -> std::io::Result<MachineProber> {
        Prober::start("relay-headroom", REFRESH, move || measure(&disk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_texts_parse() {
        let meminfo = "MemTotal:       24567890 kB\nMemFree:         1000000 kB\nMemAvailable:   16777216 kB\n";
        assert_eq!(parse_meminfo_available_mb(meminfo), Some(16384));
        assert_eq!(parse_meminfo_available_mb("MemFree: 5 kB\n"), None);
        assert_eq!(parse_meminfo_available_mb("MemAvailable: x kB\n"), None);
        assert_eq!(parse_meminfo_available_mb("MemAvailable: 5 MB\n"), None);
        assert_eq!(parse_loadavg_1m("0.52 0.58 0.59 1/457 12345\n"), Some(0.52));
        assert_eq!(parse_loadavg_1m(""), None);
        assert_eq!(parse_loadavg_1m("NaN 1 1"), None);
        assert_eq!(parse_loadavg_1m("-1 1 1"), None);
    }

    #[test]
    fn this_machine_measures() {
        // A Linux machine has all three; the figures are what the kernel says, so only their
        // presence and sanity are checked.
        let m = measure(Path::new("/"));
        assert!(m.mem_free_mb.is_some_and(|mb| mb > 0), "{m:?}");
        assert!(m.load_per_core.is_some_and(|l| l >= 0.0), "{m:?}");
        assert!(m.disk_free_mb.is_some(), "{m:?}");
        assert_eq!(measure(Path::new("/no/such/folder")).disk_free_mb, None);
    }

    #[test]
    fn headroom_carries_the_hubs_own_figures() {
        let m = Machine {
            mem_free_mb: Some(100),
            load_per_core: Some(f64::NAN),
            disk_free_mb: None,
        };
        let h = m.headroom(2, Some(4), &["gpu".into(), "no spaces".into()]);
        assert_eq!(h.running_tasks, 2);
        assert_eq!(h.max_tasks, Some(4));
        assert_eq!(h.load_per_core, None);
        assert_eq!(h.tags, ["gpu"]);
    }
}
