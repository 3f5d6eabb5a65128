//! `agent-hub agents ps`: running agent processes, matched by the manifests' binary names.
//!
//! Linux reads /proc (`cmdline`, `stat`, the `cwd` link, `/proc/uptime`); macOS runs
//! `ps -axww -o pid=,ppid=,etime=,pcpu=,args=` and, per matched process, `lsof -a -d cwd -p PID
//! -Fn` (no shell, bounded by a timeout). Owns that IO and — kept pure and unit-tested — the
//! parsing of each text and the matching. Status is always Unknown: no transcript parser is
//! wired in yet, and status degrades rather than guesses (000 §3).

use super::manifest::Manifest;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;

/// Interpreters an agent may run under (`node /usr/bin/gemini …`): the script's name is then
/// the agent's binary name.
const INTERPRETERS: [&str; 6] = ["node", "nodejs", "bun", "deno", "python", "python3"];

/// One running agent process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentProcess {
    pub pid: u32,
    pub ppid: u32,
    pub agent: String,
    /// The matched program's file name (never the arguments: they can hold prompts).
    pub program: String,
    /// None when it cannot be read (another user's process).
    pub cwd: Option<String>,
    /// Linux: average over the process's life, as `ps` computes it. macOS: `ps`'s recent
    /// decaying average. Includes folded child processes.
    pub cpu_percent: f64,
    pub elapsed_secs: u64,
    pub status: &'static str,
    /// Child processes of this one that matched the same agent and are folded into it.
    pub children: Vec<u32>,
}

/// The fields of `/proc/PID/stat` that `ps` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    pub comm: String,
    pub ppid: u32,
    pub utime_ticks: u64,
    pub stime_ticks: u64,
    pub starttime_ticks: u64,
}

/// Parses `/proc/PID/stat`. `comm` is in parentheses and may itself hold spaces and `)`, so
/// the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_owned();
    // Fields after comm, numbered as in proc(5): state is field 3.
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { rest.get(n - 3)?.parse().ok() };
    Some(Stat {
        pid,
        comm,
        ppid: field(4)? as u32,
        utime_ticks: field(14)?,
        stime_ticks: field(15)?,
        starttime_ticks: field(22)?,
    })
}

/// Parses `/proc/PID/cmdline`: NUL-separated arguments.
pub fn parse_cmdline(bytes: &[u8]) -> Vec<String> {
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// Parses `/proc/uptime`: seconds since boot.
pub fn parse_uptime(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

fn base(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

fn is_interpreter(name: &str) -> bool {
    INTERPRETERS.contains(&name)
        || name
            .strip_prefix("python3.")
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
}

/// Which manifest a process is, and the program name that matched. `argv` is the command
/// line (empty for kernel threads, which never match); `comm` the kernel's name for it.
pub fn match_agent<'m>(
    argv: &[String],
    comm: &str,
    manifests: &[&'m Manifest],
) -> Option<(&'m Manifest, String)> {
    let first = argv.first()?;
    let find = |name: &str| {
        manifests
            .iter()
            .find(|m| m.binaries.iter().any(|b| b == name))
            .copied()
    };
    let b0 = base(first);
    if let Some(m) = find(b0) {
        return Some((m, b0.to_owned()));
    }
    if is_interpreter(b0) {
        // The script: the first argument that is not an option.
        if let Some(script) = argv[1..].iter().find(|a| !a.starts_with('-')) {
            let s = base(script);
            if let Some(m) = find(s) {
                return Some((m, s.to_owned()));
            }
        }
        return None;
    }
    find(comm).map(|m| (m, comm.to_owned()))
}

/// `[[dd-]hh:]mm:ss`, as `ps` prints elapsed time.
pub fn format_elapsed(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h) {
        (0, 0) => format!("{m:02}:{s:02}"),
        (0, _) => format!("{h:02}:{m:02}:{s:02}"),
        _ => format!("{d}-{h:02}:{m:02}:{s:02}"),
    }
}

/// Parses `ps`'s `etime` (`[[dd-]hh:]mm:ss`) back into seconds.
pub fn parse_etime(s: &str) -> Option<u64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let parts: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, sec) = match parts.as_slice() {
        [m, s] => (0, *m, *s),
        [h, m, s] => (*h, *m, *s),
        _ => return None,
    };
    Some(days * 86_400 + h * 3600 + m * 60 + sec)
}

/// One row of macOS `ps -axww -o pid=,ppid=,etime=,pcpu=,args=`.
#[derive(Debug, Clone, PartialEq)]
pub struct PsRow {
    pub pid: u32,
    pub ppid: u32,
    pub elapsed_secs: u64,
    pub cpu_percent: f64,
    /// `args` split on whitespace: exact for the program and script names that matching
    /// reads, unless a path holds a space.
    pub argv: Vec<String>,
}

pub fn parse_ps_line(line: &str) -> Option<PsRow> {
    let mut it = line.split_whitespace();
    let pid = it.next()?.parse().ok()?;
    let ppid = it.next()?.parse().ok()?;
    let elapsed_secs = parse_etime(it.next()?)?;
    let cpu_percent = it.next()?.replace(',', ".").parse().ok()?;
    let argv: Vec<String> = it.map(str::to_owned).collect();
    Some(PsRow {
        pid,
        ppid,
        elapsed_secs,
        cpu_percent,
        argv,
    })
}

/// The cwd from `lsof -a -d cwd -p PID -Fn` output (`p123`, `fcwd`, `n/path`).
pub fn parse_lsof_cwd(out: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.strip_prefix('n'))
        .map(str::to_owned)
}

/// A process as the platform reader saw it, before matching.
#[derive(Debug, Clone, PartialEq)]
pub struct RawProcess {
    pub pid: u32,
    pub ppid: u32,
    pub argv: Vec<String>,
    pub comm: String,
    pub cpu_percent: f64,
    pub elapsed_secs: u64,
}

/// Matches raw processes against the manifests, and folds each matched process whose parent
/// chain reaches a matched process of the same agent into that ancestor (a Node wrapper and
/// its native binary are one agent session). Sorted by pid.
pub fn select(raw: &[RawProcess], manifests: &[&Manifest], skip_pid: u32) -> Vec<AgentProcess> {
    let mut matched: Vec<AgentProcess> = Vec::new();
    for p in raw {
        if p.pid == skip_pid {
            continue;
        }
        if let Some((m, program)) = match_agent(&p.argv, &p.comm, manifests) {
            matched.push(AgentProcess {
                pid: p.pid,
                ppid: p.ppid,
                agent: m.name.clone(),
                program,
                cwd: None,
                cpu_percent: p.cpu_percent,
                elapsed_secs: p.elapsed_secs,
                status: "unknown",
                children: Vec::new(),
            });
        }
    }
    let by_pid: HashMap<u32, (String, u32)> = matched
        .iter()
        .map(|a| (a.pid, (a.agent.clone(), a.ppid)))
        .collect();
    let root_of = |pid: u32, agent: &str| {
        let mut cur = pid;
        let mut steps = 0;
        while let Some((a, ppid)) = by_pid.get(&cur) {
            match by_pid.get(ppid) {
                Some((pa, _)) if pa == agent && a == agent && steps < 64 => {
                    cur = *ppid;
                    steps += 1;
                }
                _ => break,
            }
        }
        cur
    };
    let mut folded: HashMap<u32, (Vec<u32>, f64)> = HashMap::new();
    let mut keep = Vec::new();
    for a in matched {
        let root = root_of(a.pid, &a.agent);
        if root == a.pid {
            keep.push(a);
        } else {
            let e = folded.entry(root).or_default();
            e.0.push(a.pid);
            e.1 += a.cpu_percent;
        }
    }
    for a in &mut keep {
        if let Some((children, cpu)) = folded.remove(&a.pid) {
            a.children = children;
            a.children.sort_unstable();
            a.cpu_percent += cpu;
        }
    }
    keep.sort_by_key(|a| a.pid);
    keep
}

/// Why the running processes could not be listed.
#[derive(Debug)]
pub enum ProcsError {
    /// `/proc/uptime` is missing or unreadable (Linux).
    Uptime,
    /// `/proc` could not be listed (Linux).
    ReadProc(std::io::Error),
    /// `ps` failed or ran too long (macOS).
    Ps,
    /// Neither Linux nor macOS.
    Unsupported,
}

impl fmt::Display for ProcsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcsError::Uptime => f.write_str("cannot read /proc/uptime"),
            ProcsError::ReadProc(e) => write!(f, "cannot read /proc: {e}"),
            ProcsError::Ps => f.write_str("ps -axww failed"),
            ProcsError::Unsupported => {
                f.write_str("agents ps works on Linux (/proc) and macOS (ps, lsof) only")
            }
        }
    }
}

impl std::error::Error for ProcsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProcsError::ReadProc(e) => Some(e),
            _ => None,
        }
    }
}

/// Lists running agent processes on this machine.
pub fn list(manifests: &[&Manifest]) -> Result<Vec<AgentProcess>, ProcsError> {
    let me = std::process::id();
    #[cfg(target_os = "linux")]
    {
        let raw = linux::read_all()?;
        let mut out = Vec::new();
        for mut a in select(&raw, manifests, me) {
            a.cwd = std::fs::read_link(format!("/proc/{}/cwd", a.pid))
                .ok()
                .map(|p| p.display().to_string());
            out.push(a);
        }
        Ok(out)
    }
    #[cfg(target_os = "macos")]
    {
        let raw = macos::read_all()?;
        let mut out = Vec::new();
        for mut a in select(&raw, manifests, me) {
            a.cwd = macos::cwd(a.pid);
            out.push(a);
        }
        Ok(out)
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = (manifests, me);
        Err(ProcsError::Unsupported)
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{parse_cmdline, parse_stat, parse_uptime, ProcsError, RawProcess};
    use std::path::Path;

    pub fn read_all() -> Result<Vec<RawProcess>, ProcsError> {
        let uptime = std::fs::read_to_string("/proc/uptime")
            .ok()
            .and_then(|t| parse_uptime(&t))
            .ok_or(ProcsError::Uptime)?;
        // SAFETY: sysconf has no memory effects.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let ticks = if ticks > 0 { ticks as f64 } else { 100.0 };
        let dir = std::fs::read_dir("/proc").map_err(ProcsError::ReadProc)?;
        let mut out = Vec::new();
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            // A process can exit between the listing and these reads: skip it then.
            let base = Path::new("/proc").join(pid.to_string());
            let Some(stat) = std::fs::read_to_string(base.join("stat"))
                .ok()
                .and_then(|t| parse_stat(&t))
            else {
                continue;
            };
            let argv = std::fs::read(base.join("cmdline"))
                .map(|b| parse_cmdline(&b))
                .unwrap_or_default();
            let elapsed = (uptime - stat.starttime_ticks as f64 / ticks).max(0.0);
            let cpu_secs = (stat.utime_ticks + stat.stime_ticks) as f64 / ticks;
            let cpu_percent = if elapsed > 0.0 {
                cpu_secs / elapsed * 100.0
            } else {
                0.0
            };
            out.push(RawProcess {
                pid,
                ppid: stat.ppid,
                argv,
                comm: stat.comm,
                cpu_percent,
                elapsed_secs: elapsed as u64,
            });
        }
        Ok(out)
    }
}

#[cfg(target_os = "macos")]
mod macos {
    use super::{base, parse_lsof_cwd, parse_ps_line, ProcsError, RawProcess};
    use std::path::Path;
    use std::time::Duration;

    const TIMEOUT: Duration = Duration::from_secs(5);

    pub fn read_all() -> Result<Vec<RawProcess>, ProcsError> {
        let out = crate::agents::probe::run_capture(
            Path::new("/bin/ps"),
            &["-axww", "-o", "pid=,ppid=,etime=,pcpu=,args="],
            TIMEOUT,
            16 * 1024 * 1024,
        )
        .filter(|o| o.success)
        .ok_or(ProcsError::Ps)?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(parse_ps_line)
            .map(|r| RawProcess {
                comm: r
                    .argv
                    .first()
                    .map(|a| base(a).to_owned())
                    .unwrap_or_default(),
                pid: r.pid,
                ppid: r.ppid,
                argv: r.argv,
                cpu_percent: r.cpu_percent,
                elapsed_secs: r.elapsed_secs,
            })
            .collect())
    }

    pub fn cwd(pid: u32) -> Option<String> {
        let pid = pid.to_string();
        let out = crate::agents::probe::run_capture(
            Path::new("/usr/sbin/lsof"),
            &["-a", "-d", "cwd", "-p", &pid, "-Fn"],
            TIMEOUT,
            64 * 1024,
        )?;
        parse_lsof_cwd(&String::from_utf8_lossy(&out.stdout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::manifest::builtins;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn stat_with_an_awkward_comm() {
        let text = "4242 (we ird) name)) S 17 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 123456 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                pid: 4242,
                comm: "we ird) name)".into(),
                ppid: 17,
                utime_ticks: 250,
                stime_ticks: 50,
                starttime_ticks: 123456,
            })
        );
        assert_eq!(parse_stat("12 (x) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn cmdline_and_uptime() {
        assert_eq!(
            parse_cmdline(b"node\0/usr/bin/gemini\0--acp\0"),
            v(&["node", "/usr/bin/gemini", "--acp"])
        );
        assert_eq!(parse_cmdline(b""), Vec::<String>::new());
        assert_eq!(parse_cmdline(b"a\0\0b\0"), v(&["a", "", "b"]));
        assert_eq!(parse_uptime("35421.17 123.4\n"), Some(35421.17));
        assert_eq!(parse_uptime(""), None);
    }

    #[test]
    fn matching() {
        let (ms, _) = builtins();
        let ms: Vec<&Manifest> = ms.iter().collect();
        let name = |argv: &[&str], comm: &str| {
            match_agent(&v(argv), comm, &ms).map(|(m, p)| (m.name.clone(), p))
        };
        assert_eq!(
            name(&["claude"], "claude"),
            Some(("claude".into(), "claude".into()))
        );
        assert_eq!(
            name(
                &[
                    "/usr/lib/node_modules/@openai/codex/vendor/x86_64/codex/codex",
                    "exec"
                ],
                "codex"
            ),
            Some(("codex".into(), "codex".into()))
        );
        assert_eq!(
            name(
                &["node", "--no-warnings", "/usr/local/bin/gemini", "--acp"],
                "node"
            ),
            Some(("gemini".into(), "gemini".into()))
        );
        assert_eq!(
            name(&["/usr/bin/python3.11", "/x/opencode"], "python3.11"),
            Some(("opencode".into(), "opencode".into()))
        );
        assert_eq!(name(&["node", "/usr/bin/other", "claude"], "node"), None);
        assert_eq!(name(&["vim", "claude.md"], "vim"), None);
        assert_eq!(
            name(&[], "claude"),
            None,
            "kernel threads and zombies never match"
        );
        // A process that renamed its argv[0] still has the kernel's comm.
        assert_eq!(
            name(&["droid: worker"], "droid"),
            Some(("droid".into(), "droid".into()))
        );
    }

    #[test]
    fn elapsed_both_ways() {
        for (secs, text) in [
            (5, "00:05"),
            (65, "01:05"),
            (3661, "01:01:01"),
            (90061, "1-01:01:01"),
        ] {
            assert_eq!(format_elapsed(secs), text);
            assert_eq!(parse_etime(text), Some(secs));
        }
        assert_eq!(parse_etime("1:2:3:4"), None);
        assert_eq!(parse_etime("x"), None);
    }

    #[test]
    fn macos_ps_and_lsof_text() {
        assert_eq!(
            parse_ps_line("  812     1   02:03:04   3,5 /opt/homebrew/bin/node /opt/homebrew/bin/gemini --acp"),
            Some(PsRow {
                pid: 812,
                ppid: 1,
                elapsed_secs: 7384,
                cpu_percent: 3.5,
                argv: v(&["/opt/homebrew/bin/node", "/opt/homebrew/bin/gemini", "--acp"]),
            })
        );
        assert_eq!(parse_ps_line("PID PPID"), None);
        assert_eq!(
            parse_lsof_cwd("p812\nfcwd\nn/Users/me/proj\n"),
            Some("/Users/me/proj".into())
        );
        assert_eq!(parse_lsof_cwd("p812\n"), None);
    }

    #[test]
    fn wrapper_and_native_child_fold_into_one() {
        let (ms, _) = builtins();
        let ms: Vec<&Manifest> = ms.iter().collect();
        let raw = |pid, ppid, argv: &[&str], cpu| RawProcess {
            pid,
            ppid,
            argv: v(argv),
            comm: String::new(),
            cpu_percent: cpu,
            elapsed_secs: 10,
        };
        let procs = [
            raw(100, 1, &["node", "/usr/bin/codex"], 0.5),
            raw(101, 100, &["/usr/lib/codex/bin/codex"], 20.0),
            raw(102, 101, &["/usr/lib/codex/bin/codex", "sandbox"], 1.0),
            raw(200, 1, &["claude"], 3.0),
            raw(201, 200, &["bash", "-c", "make"], 50.0),
            raw(300, 200, &["gemini"], 2.0),
            raw(999, 1, &["claude"], 1.0),
        ];
        let got = select(&procs, &ms, 999);
        let rows: Vec<(u32, &str, Vec<u32>, f64)> = got
            .iter()
            .map(|a| (a.pid, a.agent.as_str(), a.children.clone(), a.cpu_percent))
            .collect();
        assert_eq!(
            rows,
            vec![
                (100, "codex", vec![101, 102], 21.5),
                (200, "claude", vec![], 3.0),
                (300, "gemini", vec![], 2.0),
            ]
        );
        assert!(got.iter().all(|a| a.status == "unknown"));
    }
}
