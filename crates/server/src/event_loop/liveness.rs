//! The loop's half of liveness (SPEC §14, `hub::liveness`): checks the processes the core
//! asks about (`Output::CheckProcesses`) and reports each that exited. Looks only: it reads
//! `/proc/PID/stat` on Linux (`kill(pid, 0)` elsewhere) and never signals. Decides nothing
//! about states; a pid that now belongs to a process with another start time, or a zombie
//! nobody has reaped yet, counts as exited, since the agent that was watched is gone.

use agent_hub_proto::hub::WatchedProcess;

/// Whether the watched process still runs.
pub fn still_runs(p: WatchedProcess) -> bool {
    #[cfg(target_os = "linux")]
    {
        match std::fs::read_to_string(format!("/proc/{}/stat", p.pid)) {
            Ok(text) => stat_says_runs(&text, p.start),
            // Gone. (Another user's process still has a readable stat under the default
            // hidepid=0; with hidepid set it looks gone, which `who` then shows.)
            Err(_) => false,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let Ok(pid) = i32::try_from(p.pid) else {
            return false;
        };
        // SAFETY: signal 0 sends nothing; it only asks whether the pid exists.
        let rc = unsafe { libc::kill(pid, 0) };
        rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
}

/// Reads a `/proc/PID/stat` text: the process runs unless it is a zombie (or dead), or its
/// start time differs from the one reported with its pid.
pub fn stat_says_runs(text: &str, start: Option<u64>) -> bool {
    let Some(close) = text.rfind(')') else {
        return false;
    };
    let state = text[close + 1..].split_whitespace().next();
    if matches!(state, Some("Z" | "X" | "x")) {
        return false;
    }
    match (start, agent_hub_host::agents::procs::parse_stat(text)) {
        (Some(want), Some(stat)) => stat.starttime_ticks == want,
        (None, Some(_)) => true,
        (_, None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (claude) S 17 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 123456 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";

    #[test]
    fn a_running_process_runs_only_with_its_own_start_time() {
        assert!(stat_says_runs(STAT, Some(123456)));
        assert!(stat_says_runs(STAT, None));
        assert!(!stat_says_runs(STAT, Some(123457)), "a reused pid");
    }

    #[test]
    fn a_zombie_or_garbage_is_not_running() {
        let zombie = STAT.replace(") S ", ") Z ");
        assert!(!stat_says_runs(&zombie, None));
        assert!(!stat_says_runs(&zombie, Some(123456)));
        assert!(!stat_says_runs("garbage", None));
        assert!(!stat_says_runs("1 (x) S", None));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_runs_and_a_free_pid_does_not() {
        let me = std::process::id();
        let text = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
        let start = agent_hub_host::agents::procs::parse_stat(&text)
            .unwrap()
            .starttime_ticks;
        assert!(still_runs(WatchedProcess {
            pid: me,
            start: Some(start)
        }));
        assert!(!still_runs(WatchedProcess {
            pid: me,
            start: Some(start + 1)
        }));
        // Above the kernel's pid_max (at most 2^22): no such process can exist.
        assert!(!still_runs(WatchedProcess {
            pid: 4_194_305,
            start: None
        }));
    }
}
