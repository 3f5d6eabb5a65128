//! The disk under the temp dir: its filesystem and device, raw `fdatasync` timings, and the
//! device's flush count from `/proc/diskstats`.

use crate::base::Res;
use crate::options::{FAST_FLUSH_US, PROBE_BLOCK};
use crate::stats::Latency;
use serde_json::json;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

// ----- the disk under the temp dir -----

/// The filesystem the temp dir (and so the SQLite store) lives on, and how long a raw flush
/// takes there: the floor under every durable commit.
#[derive(Default)]
pub(crate) struct Disk {
    pub(crate) dir: PathBuf,
    pub(crate) mount_point: String,
    pub(crate) fs_type: String,
    pub(crate) source: String,
    /// `major:minor` of the filesystem's device.
    pub(crate) device: String,
    pub(crate) size_bytes: u64,
    pub(crate) avail_bytes: u64,
    /// `/sys/dev/block/M:m/queue/write_cache` ("write back": the kernel sends flushes).
    pub(crate) write_cache: Option<String>,
    pub(crate) rotational: Option<bool>,
    /// The whole device's name in /proc/diskstats, when there is one.
    pub(crate) diskstats_name: Option<String>,
    pub(crate) probes: usize,
    /// Device flushes completed during the append probe, and the ms the device spent on them.
    pub(crate) probe_flushes: Option<(u64, u64)>,
    /// 4 KiB appended, then `fdatasync` (the file grows: a WAL before its first reset).
    pub(crate) append_sync: Option<Latency>,
    /// 4 KiB rewritten in place, then `fdatasync` (a WAL reused after a checkpoint).
    pub(crate) overwrite_sync: Option<Latency>,
}

impl Disk {
    pub(crate) fn probe(dir: &Path, probes: usize) -> Res<Disk> {
        let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut disk = Disk {
            dir: dir.clone(),
            probes,
            ..Disk::default()
        };
        // SAFETY: statvfs with a NUL-terminated path and a pointer to a local struct.
        unsafe {
            use std::os::unix::ffi::OsStrExt;
            let c =
                std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
            let mut st: libc::statvfs = std::mem::zeroed();
            if libc::statvfs(c.as_ptr(), &mut st) == 0 {
                disk.size_bytes = st.f_blocks as u64 * st.f_frsize as u64;
                disk.avail_bytes = st.f_bavail as u64 * st.f_frsize as u64;
            }
        }
        // The mount whose mount point is the longest prefix of the dir (/proc/self/mountinfo:
        // id parent major:minor root mountpoint options ... - fstype source superoptions).
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut best: Option<(usize, &str)> = None;
        for line in info.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 5 {
                continue;
            }
            let mp = unescape_mount(f[4]);
            if dir.starts_with(&mp) && best.map_or(true, |(len, _)| mp.len() >= len) {
                best = Some((mp.len(), line));
            }
        }
        if let Some((_, line)) = best {
            let f: Vec<&str> = line.split(' ').collect();
            disk.device = f[2].to_owned();
            disk.mount_point = unescape_mount(f[4]);
            if let Some(dash) = f.iter().position(|x| *x == "-") {
                disk.fs_type = f
                    .get(dash + 1)
                    .map_or_else(String::new, |s| (*s).to_owned());
                disk.source = f
                    .get(dash + 2)
                    .map_or_else(String::new, |s| unescape_mount(s));
            }
            // A partition's queue is its parent device's.
            if let Ok(sys) = std::fs::canonicalize(format!("/sys/dev/block/{}", disk.device)) {
                let whole = if sys.join("partition").exists() {
                    sys.parent().map(Path::to_path_buf)
                } else {
                    Some(sys)
                };
                let whole = whole.unwrap_or_default();
                let queue = whole.join("queue");
                disk.diskstats_name = whole.file_name().map(|n| n.to_string_lossy().into_owned());
                let read = |name: &str| {
                    std::fs::read_to_string(queue.join(name))
                        .ok()
                        .map(|s| s.trim().to_owned())
                };
                disk.write_cache = read("write_cache");
                disk.rotational = read("rotational").map(|r| r == "1");
            }
        }
        if probes > 0 {
            let path = dir.join("fsync-probe");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let block = vec![b'x'; PROBE_BLOCK];
            let timed = |offset: &dyn Fn(usize) -> u64| -> Res<Latency> {
                let mut lat = Vec::with_capacity(probes);
                for i in 0..probes {
                    file.write_all_at(&block, offset(i))
                        .map_err(|e| format!("fsync probe write: {e}"))?;
                    let t0 = Instant::now();
                    file.sync_data().map_err(|e| format!("fsync probe: {e}"))?;
                    lat.push(t0.elapsed());
                }
                Ok(Latency::of(lat))
            };
            let before = diskstats(disk.diskstats_name.as_deref());
            let append = timed(&|i| (i * PROBE_BLOCK) as u64);
            let after = diskstats(disk.diskstats_name.as_deref());
            disk.probe_flushes = before
                .zip(after)
                .map(|(b, a)| (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1)));
            let overwrite = append.as_ref().ok().map(|_| timed(&|_| 0));
            drop(file);
            let _ = std::fs::remove_file(&path);
            disk.append_sync = Some(append?);
            disk.overwrite_sync = overwrite.transpose()?;
        }
        let _ = DISKSTATS_NAME.set(disk.diskstats_name.clone());
        Ok(disk)
    }

    /// Whether a flush here reaches stable storage, as far as can be told from outside.
    pub(crate) fn verdict(&self) -> String {
        if self.fs_type == "tmpfs" || self.fs_type == "ramfs" {
            return format!(
                "{}: memory, not a disk; fsync does nothing and nothing survives a reboot",
                self.fs_type
            );
        }
        let Some(l) = &self.append_sync else {
            return "not probed (--fsync-probes 0)".into();
        };
        let cache = match self.write_cache.as_deref() {
            Some(c) => format!("device write cache: {c}"),
            None => "device write cache: unknown".to_owned(),
        };
        let device = match self.probe_flushes {
            Some((0, _)) => "the device completed no flush request during the probe: fdatasync \
                             does not reach it, so nothing is durable across a power loss"
                .to_owned(),
            Some((n, ms)) => {
                let each_us = ms as f64 * 1000.0 / n as f64;
                let judgement = if each_us < FAST_FLUSH_US {
                    "too quick for a write to stable media unless the device's cache survives \
                     power loss; from inside a virtual machine whether the host persists a flush \
                     cannot be told"
                } else {
                    "the device takes real time per flush"
                };
                format!(
                    "fdatasync is real as far as the kernel goes: {:.1} flush requests per \
                     fdatasync, completed by the device in {each_us:.0} µs each on average \
                     (diskstats, 1 ms grain); {judgement}",
                    n as f64 / self.probes as f64
                )
            }
            None => "device flush counts unreadable".to_owned(),
        };
        format!("append+fdatasync p50 {:.0} µs; {cache}; {device}", l.p50_us)
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "dir": self.dir.display().to_string(),
            "mount_point": self.mount_point,
            "fs_type": self.fs_type,
            "source": self.source,
            "device": self.device,
            "size_bytes": self.size_bytes,
            "avail_bytes": self.avail_bytes,
            "write_cache": self.write_cache,
            "rotational": self.rotational,
            "diskstats_name": self.diskstats_name,
            "fsync_probes": self.probes,
            "probe_device_flushes": self.probe_flushes.map(|f| f.0),
            "probe_device_flush_ms": self.probe_flushes.map(|f| f.1),
            "append_4k_fdatasync": self.append_sync.as_ref().map(Latency::to_json),
            "overwrite_4k_fdatasync": self.overwrite_sync.as_ref().map(Latency::to_json),
            "fsync_verdict": self.verdict(),
        })
    }
}

/// The temp dir's whole block device in /proc/diskstats (set once by `Disk::probe`).
pub(crate) static DISKSTATS_NAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Flush requests completed by `name`, and milliseconds spent on them: fields 18 and 19 of its
/// /proc/diskstats line (kernel 5.5 and later).
pub(crate) fn diskstats(name: Option<&str>) -> Option<(u64, u64)> {
    let name = name?;
    let text = std::fs::read_to_string("/proc/diskstats").ok()?;
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(name))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    Some((*f.get(15)?, *f.get(16)?))
}

/// The temp dir's device flush count now, if readable.
pub(crate) fn dev_flushes() -> Option<u64> {
    diskstats(DISKSTATS_NAME.get().and_then(Option::as_deref)).map(|f| f.0)
}

pub(crate) fn flushes_since(before: Option<u64>) -> Option<u64> {
    before.zip(dev_flushes()).map(|(b, a)| a.saturating_sub(b))
}

/// Undoes mountinfo's octal escapes (`\040` for a space, and so on).
pub(crate) fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn human_bytes(n: u64) -> String {
    let g = n as f64 / (1u64 << 30) as f64;
    if g >= 1.0 {
        format!("{g:.0} GiB")
    } else {
        format!("{:.0} MiB", n as f64 / 1048576.0)
    }
}
