//! The `agent-hub agents`, `agents ps`, `install` and `uninstall` verbs, minus argument
//! parsing: `app` parses, calls these, and prints what they return. It stands on the client
//! side, above `agent_hub_host::agents` and `agent_hub_host::sandbox`, both of which it reports.
//!
//! Owns choosing the agents a verb applies to, the tables and reports, and finding the
//! OpenCode plugin source. Every problem with one agent (or one manifest) is reported and the
//! others carry on; `Report::ok` is false when any agent failed, which the binary maps to
//! exit 1. Reads `$HOME` and `$PATH` once, in `Env::from_process`, so tests can set both.
//! A dry run says in one line per file what would change; the whole text of each change
//! (skills run to a hundred lines each) only with `--diff` (issue 35).

use agent_hub_host::agents::diff;
use agent_hub_host::agents::identity::{self, NameRule, TokenRule};
use agent_hub_host::agents::install::{self, Action, AgentPlan, HubIdentity};
use agent_hub_host::agents::manifest::Manifest;
use agent_hub_host::agents::probe::{self, AgentInfo};
use agent_hub_host::agents::procs::{self, AgentProcess};
use agent_hub_host::agents::registry::{self, Origin, Registry};
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

/// What a verb prints, and whether it fully succeeded.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub stdout: String,
    pub stderr: String,
    pub ok: bool,
}

/// The process environment the verbs read.
#[derive(Debug, Clone)]
pub struct Env {
    pub home: PathBuf,
    pub path_var: String,
    pub agents_dir: PathBuf,
    /// The folder was named with `--agents-dir` (a missing one is then reported).
    pub agents_dir_explicit: bool,
    /// A further folder whose manifests replace and add to those (a hub config's
    /// `tasks.manifests_dir`, given with `agents --config`), as the server reads it.
    pub extra_dir: Option<PathBuf>,
    /// The hub config's `tasks.sandbox`, when `agents --config` names a config with a
    /// `[tasks]` table: `agents` says which sandbox its tasks would run in.
    pub sandbox: Option<agent_hub_host::sandbox::Mode>,
}

/// Why the verbs' environment could not be set up; the verb runs on no agent.
#[derive(Debug)]
pub enum EnvError {
    /// `$HOME` is unset, or not an absolute path.
    HomeNotAbsolute,
    /// The hub config of `agents --config` cannot be read, or the server would refuse it.
    Config(agent_hub_host::config::ConfigError),
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvError::HomeNotAbsolute => f.write_str("HOME is not set to an absolute path"),
            EnvError::Config(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for EnvError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EnvError::HomeNotAbsolute => None,
            EnvError::Config(e) => Some(e),
        }
    }
}

impl Env {
    pub fn from_process(agents_dir: Option<PathBuf>) -> Result<Env, EnvError> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_absolute())
            .ok_or(EnvError::HomeNotAbsolute)?;
        let path_var = std::env::var("PATH").unwrap_or_default();
        Ok(Env {
            agents_dir: agents_dir.clone().unwrap_or_else(|| {
                registry::user_dir(&home, std::env::var_os(registry::AGENTS_DIR_ENV))
            }),
            agents_dir_explicit: agents_dir.is_some(),
            home,
            path_var,
            extra_dir: None,
            sandbox: None,
        })
    }

    /// Adds the `tasks.manifests_dir` of the hub config at `path`, read and validated as the
    /// server reads it (a config the server would refuse is refused here too).
    pub fn with_hub_config(mut self, path: &Path) -> Result<Env, EnvError> {
        let cfg = agent_hub_host::config::Config::load(path).map_err(EnvError::Config)?;
        self.sandbox = cfg.tasks.as_ref().map(|t| t.sandbox);
        self.extra_dir = cfg.tasks.and_then(|t| t.manifests_dir);
        Ok(self)
    }

    /// The folders, as the hub's `registry::Sources` (the same precedence and the same
    /// `$AGENT_HUB_AGENTS_DIR` rule), so `agents --config` lists what the hub's `delegate`
    /// accepts (issue 35).
    pub fn sources(&self) -> registry::Sources {
        registry::Sources {
            user_dir: Some(self.agents_dir.clone()),
            user_explicit: self.agents_dir_explicit,
            extra_dir: self.extra_dir.clone(),
        }
    }

    pub fn registry(&self) -> Registry {
        self.sources().load()
    }
}

fn warn_manifests(reg: &Registry, stderr: &mut String) {
    for p in &reg.problems {
        let _ = writeln!(stderr, "agent-hub: warning: {p}; manifest skipped");
    }
}

fn origin_text(o: &Origin) -> String {
    match o {
        Origin::Builtin => "builtin".into(),
        Origin::File(p) => p.display().to_string(),
        Origin::Override(p) => format!("{} (overrides the builtin)", p.display()),
    }
}

/// Lays out rows as columns separated by two spaces; the last column is not padded.
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 < r.len() {
                let _ = write!(line, "{cell:<w$}  ", w = widths[c]);
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `agent-hub agents`: every known agent, installed or not.
pub fn agents(env: &Env, json: bool, with_version: bool) -> Report {
    let reg = env.registry();
    let mut r = Report {
        ok: true,
        ..Report::default()
    };
    warn_manifests(&reg, &mut r.stderr);
    // Probe in parallel: each --version may take a second or two.
    let infos: Vec<AgentInfo> = std::thread::scope(|s| {
        let handles: Vec<_> = reg
            .agents
            .iter()
            .map(|(m, o)| {
                let origin = origin_text(o);
                let path = env.path_var.as_str();
                s.spawn(move || probe::probe(m, origin, path, with_version))
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let sandbox = env.sandbox.map(|mode| sandbox_line(mode, &env.path_var));
    if let Some((_, Some(warning))) = &sandbox {
        let _ = writeln!(r.stderr, "agent-hub: warning: {warning}");
    }
    if json {
        r.stdout = serde_json::to_string_pretty(&infos).unwrap_or_default() + "\n";
        return r;
    }
    let avail = |argv: &Option<Vec<String>>, ok: bool| match (argv, ok) {
        (None, _) => "-".to_owned(),
        (Some(_), true) => "yes".to_owned(),
        (Some(a), false) => format!("no ({} not found)", a[0]),
    };
    let mut rows = vec![[
        "AGENT",
        "NAME",
        "INSTALLED",
        "VERSION",
        "ACP",
        "HEADLESS",
        "DELEGATE",
        "REPORTS",
        "DELIVER",
        "BINARY",
    ]
    .map(String::from)
    .to_vec()];
    for i in &infos {
        rows.push(vec![
            i.name.clone(),
            i.display.clone(),
            if i.installed {
                "yes".into()
            } else {
                "no".into()
            },
            i.version.clone().unwrap_or_else(|| "-".into()),
            avail(&i.acp, i.acp_available),
            avail(&i.headless, i.headless_available),
            i.delegate.tag().to_owned(),
            i.reports.clone(),
            i.deliver.clone(),
            i.binary.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    r.stdout = table(&rows);
    for (m, o) in &reg.agents {
        if !matches!(o, Origin::Builtin) {
            let _ = writeln!(r.stdout, "{}: manifest {}", m.name, origin_text(o));
        }
    }
    if let Some((line, _)) = sandbox {
        let _ = writeln!(r.stdout, "{line}");
    }
    r
}

/// What `agents --config` says about the sandbox the hub's delegated agents run in, found
/// here as the server finds it (`sandbox::probe`, run as this user, who runs the hub), and
/// a warning for `none` or a sandbox that would stop the hub.
fn sandbox_line(mode: agent_hub_host::sandbox::Mode, path_var: &str) -> (String, Option<String>) {
    use agent_hub_host::sandbox::{probe, Kind, Mode, NONE_WARNING};
    let tag = mode.tag();
    if mode == Mode::None {
        return (
            format!("delegated tasks: sandbox none (tasks.sandbox = \"{tag}\"): UNSANDBOXED"),
            Some(NONE_WARNING.to_owned()),
        );
    }
    match probe::detect(mode, path_var, &std::env::temp_dir()) {
        Ok((kind, _)) => {
            let what = match &kind {
                Kind::Bwrap { program } => format!("bubblewrap, {}", program.display()),
                Kind::Landlock { abi } => format!("Landlock ABI {abi}"),
                Kind::None => "none".into(),
            };
            (
                format!(
                    "delegated tasks: sandbox {} (tasks.sandbox = \"{tag}\"; {what})",
                    kind.tag()
                ),
                None,
            )
        }
        Err(e) => (
            format!("delegated tasks: no sandbox works here (tasks.sandbox = \"{tag}\"): the hub would not start"),
            Some(e.to_string()),
        ),
    }
}

/// `agent-hub agents ps`: running agent processes.
pub fn ps(env: &Env, json: bool) -> Report {
    let reg = env.registry();
    let mut r = Report {
        ok: true,
        ..Report::default()
    };
    warn_manifests(&reg, &mut r.stderr);
    let manifests: Vec<&Manifest> = reg.manifests().collect();
    let procs = match procs::list(&manifests) {
        Ok(p) => p,
        Err(e) => {
            r.ok = false;
            let _ = writeln!(r.stderr, "agent-hub: {e}");
            return r;
        }
    };
    r.stdout = render_ps(&procs, json);
    r
}

/// The `agents ps` table or JSON. A process's working directory is whatever folder another
/// user or agent started it in (a name may hold escape sequences), so every cell goes through
/// the one sanitiser (`agent_hub_proto::kernel::text`), and the JSON has such characters escaped.
pub fn render_ps(procs: &[AgentProcess], json: bool) -> String {
    if json {
        let text = serde_json::to_string_pretty(procs).unwrap_or_default();
        return agent_hub_proto::kernel::text::json_for_terminal(&text).into_owned() + "\n";
    }
    let mut rows = vec![["PID", "AGENT", "ELAPSED", "CPU%", "STATUS", "CWD"]
        .map(String::from)
        .to_vec()];
    for p in procs {
        rows.push(vec![
            p.pid.to_string(),
            agent_hub_proto::kernel::text::for_terminal(&p.agent).into_owned(),
            procs::format_elapsed(p.elapsed_secs),
            format!("{:.1}", p.cpu_percent),
            p.status.to_owned(),
            agent_hub_proto::kernel::text::for_terminal(p.cwd.as_deref().unwrap_or("?"))
                .into_owned(),
        ]);
    }
    table(&rows)
}

/// Which agents `install` / `uninstall` act on.
#[derive(Debug, Clone)]
pub enum Selection {
    All,
    Named(Vec<String>),
}

/// Where the OpenCode plugin source is looked for when `--integrations-dir` is not given:
/// beside an installed binary (`<prefix>/share/agent-hub/integrations`) and, for a binary
/// built in this repository (`target/<profile>/agent-hub`), the repository's `integrations/`.
/// Never the current directory: a repository being worked on must not choose what gets
/// installed globally.
pub fn default_integrations_dirs() -> Vec<PathBuf> {
    let Ok(exe) = std::env::current_exe() else {
        return Vec::new();
    };
    let Some(bin_dir) = exe.parent() else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    if let Some(prefix) = bin_dir.parent() {
        dirs.push(prefix.join("share/agent-hub/integrations"));
        // Built by cargo: <repo>/target/<profile>/agent-hub.
        if prefix.file_name().is_some_and(|n| n == "target") {
            if let Some(repo) = prefix.parent() {
                dirs.push(repo.join("integrations"));
            }
        }
    }
    dirs
}

fn find_plugin(dirs: &[PathBuf]) -> Option<String> {
    dirs.iter()
        .map(|d| d.join(install::OPENCODE_PLUGIN_SOURCE))
        .find_map(|p| std::fs::read_to_string(p).ok())
}

/// What `install` and `uninstall` do with their plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// Write the changes.
    Apply,
    /// Write nothing; say in one line per file what would change (`--dry-run`).
    Summary,
    /// Write nothing; show each file's change as a unified diff (`--dry-run --diff`).
    Diff,
}

/// The one line a dry run says about a file: what would become of it and how many lines
/// that touches (`shown`: the path as messages show it).
fn change_line(shown: &str, before: Option<&str>, after: Option<&str>) -> String {
    let lines = |t: &str| t.lines().count();
    let plural = |n: usize| if n == 1 { "line" } else { "lines" };
    match (before, after) {
        (None, Some(a)) => format!("  would create {shown} ({} {})", lines(a), plural(lines(a))),
        (Some(b), None) => format!("  would remove {shown} ({} {})", lines(b), plural(lines(b))),
        (before, after) => {
            // The diff's own lines after its two header lines: ' ', '-', '+' or '\'.
            let d = diff::unified(shown, before, after);
            let body = d.lines().skip(2);
            let (mut added, mut removed) = (0, 0);
            for l in body {
                if l.starts_with('+') {
                    added += 1;
                } else if l.starts_with('-') {
                    removed += 1;
                }
            }
            format!("  would change {shown} (+{added} -{removed} lines)")
        }
    }
}

/// Who an install authenticates as: `identity`'s type, named here as the install takes it.
pub use agent_hub_host::agents::identity::Identities;

/// `agent-hub install` (with `Some(who)`) or `uninstall` (with `None`). `skills`: whether an
/// install places the skills (`--no-skills` turns it off); uninstall ignores it and always
/// removes the skill files install placed.
pub fn install(
    env: &Env,
    selection: &Selection,
    who: Option<&Identities>,
    writes: Writes,
    integrations_dirs: &[PathBuf],
    skills: bool,
) -> Report {
    let dry_run = writes != Writes::Apply;
    let reg = env.registry();
    let mut r = Report {
        ok: true,
        ..Report::default()
    };
    warn_manifests(&reg, &mut r.stderr);
    let several = match selection {
        Selection::All => true,
        Selection::Named(n) => n.len() > 1,
    };
    if let Some(who) = who {
        if several && matches!(who.names, NameRule::Exact(_)) {
            r.ok = false;
            r.stderr.push_str(
                "agent-hub: one name for several agents would put them all on one queue; each agent needs its own identity (docs/agents.md \"One identity per agent\")\n",
            );
            return r;
        }
    }
    let plugin_source = find_plugin(integrations_dirs);
    let installing = who.is_some();
    let detected = |m: &Manifest| {
        m.binaries
            .iter()
            .any(|b| agent_hub_host::agents::on_path::which(b, &env.path_var).is_some())
    };
    let chosen: Vec<&Manifest> = match selection {
        Selection::Named(names) => {
            let mut out = Vec::new();
            for n in names {
                match reg.get(n) {
                    Some(m) => out.push(m),
                    None => {
                        r.ok = false;
                        let known: Vec<&str> = reg.manifests().map(|m| m.name.as_str()).collect();
                        let _ = writeln!(
                            r.stderr,
                            "agent-hub: no agent named {n:?} (known: {})",
                            known.join(", ")
                        );
                    }
                }
            }
            if !r.ok {
                return r;
            }
            out
        }
        Selection::All if installing => {
            let mut out = Vec::new();
            for m in reg.manifests() {
                if detected(m) {
                    out.push(m);
                } else {
                    let _ = writeln!(
                        r.stdout,
                        "{}: skipped, not found on PATH ({})",
                        m.name,
                        m.binaries.join(", ")
                    );
                }
            }
            out
        }
        // Uninstall everywhere: the agent may have been removed before its config was.
        Selection::All => reg.manifests().collect(),
    };
    let mut state = if dry_run {
        install::InstallState::default()
    } else {
        install::load_state(&env.home).unwrap_or_else(|e| {
            let _ = writeln!(
                r.stderr,
                "agent-hub: warning: {e}; starting a new record (folders earlier installs created stay after uninstall)"
            );
            install::InstallState::default()
        })
    };
    let mut given = Vec::new();
    for m in chosen {
        let _ = writeln!(r.stdout, "{} ({}):", m.name, m.display);
        if installing && matches!(selection, Selection::Named(_)) && !detected(m) {
            let _ = writeln!(
                r.stdout,
                "  note: {} is not on PATH; writing its config anyway",
                m.binaries.join(", ")
            );
        }
        // A key the manifest left out that install cannot do without (docs/agents.md
        // "Defaults") is asked for here, before `identity_for` may add a roster entry.
        if installing {
            if let Err(e) = m.ready_to_install() {
                r.ok = false;
                let _ = writeln!(
                    r.stderr,
                    "agent-hub: {}: {e}; nothing was changed for it",
                    m.name
                );
                continue;
            }
        }
        let action = match who {
            None => Action::Uninstall,
            Some(who) => match identity_for(&mut r, who, &m.name, &env.home, dry_run) {
                Some(id) => {
                    given.push(format!("{} as {}", m.name, id.name));
                    Action::Install {
                        id,
                        plugin_source: plugin_source.clone(),
                        skills,
                    }
                }
                None => continue,
            },
        };
        let plan = install::plan(m, &action, &env.home, &install::read_file);
        report_plan(&mut r, m, &plan, &action, &env.home, writes, &mut state);
    }
    if who.is_some_and(|w| !matches!(w.names, NameRule::Exact(_))) && !given.is_empty() {
        let _ = writeln!(
            r.stdout,
            "identities: {} (each its own queue)",
            given.join(", ")
        );
    }
    match writes {
        Writes::Apply => {}
        Writes::Summary => r
            .stdout
            .push_str("dry run: nothing was written (--diff shows each change in full)\n"),
        Writes::Diff => r.stdout.push_str("dry run: nothing was written\n"),
    }
    r
}

/// The identity `m_name` gets, its token file made to exist or the operator's steps printed.
/// `None` (reported, `r.ok` false) when this agent cannot be installed.
fn identity_for(
    r: &mut Report,
    who: &Identities,
    m_name: &str,
    home: &Path,
    dry_run: bool,
) -> Option<HubIdentity> {
    let name = identity::name_for(&who.names, m_name);
    let token = identity::token_for(&who.tokens, &name);
    let fail = |r: &mut Report, e: String| {
        r.ok = false;
        let _ = writeln!(
            r.stderr,
            "agent-hub: {m_name}: {e}; nothing was changed for it"
        );
        None
    };
    let Some(token_s) = token.to_str().map(str::to_owned) else {
        return fail(r, format!("{} is not UTF-8", token.display()));
    };
    let id = HubIdentity {
        command: who.command.clone(),
        name: name.clone(),
        token_file: token_s,
        port: who.port,
    };
    if let Err(e) = id.validate() {
        return fail(r, e.to_string());
    }
    let exact = matches!(who.tokens, TokenRule::Exact(_));
    if !exact {
        if let Err(e) = identity::check_name(&name) {
            return fail(r, e.to_string());
        }
    }
    let exists = std::fs::metadata(&token).is_ok();
    let shown = install::shown(&token, home);
    match (&who.tokens, exists) {
        (TokenRule::Exact(_), true) => {}
        (TokenRule::Exact(_), false) => {
            let e = std::fs::metadata(&token)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            let _ = writeln!(
                r.stderr,
                "agent-hub: warning: token file {shown}: {e}; the MCP server and hook fail until it exists (mode 600)"
            );
        }
        (_, true) => {
            let _ = writeln!(r.stdout, "  identity {name:?}, token file {shown}");
        }
        (TokenRule::Hub(hub), false) if hub.writable => {
            if dry_run {
                let _ = writeln!(
                    r.stdout,
                    "  identity {name:?}: would run agent-hub-server roster add {name} --config {} (token file {shown})",
                    hub.config.display()
                );
            } else {
                let server = match identity::server_binary() {
                    Ok(s) => s,
                    Err(e) => return fail(r, e.to_string()),
                };
                match identity::roster_add(&server, &name, hub) {
                    Ok(lines) => {
                        let _ = writeln!(
                            r.stdout,
                            "  identity {name:?} added to the roster of {} (token file {shown}, mode 600):",
                            hub.config.display()
                        );
                        for l in lines {
                            let _ = writeln!(r.stdout, "    {l}");
                        }
                    }
                    Err(e) => {
                        for l in identity::operator_steps(&name, &token, Some(&hub.config)) {
                            let _ = writeln!(r.stdout, "  operator: {l}");
                        }
                        return fail(r, e.to_string());
                    }
                }
            }
        }
        (TokenRule::Hub(hub), false) => {
            let _ = writeln!(
                r.stdout,
                "  identity {name:?}: the roster {} is not writable by you, so install cannot add it",
                hub.roster.display()
            );
            for l in identity::operator_steps(&name, &token, Some(&hub.config)) {
                let _ = writeln!(r.stdout, "  operator: {l}");
            }
        }
        (TokenRule::Dir(_), false) => {
            for l in identity::operator_steps(&name, &token, None) {
                let _ = writeln!(r.stdout, "  operator: {l}");
            }
        }
    }
    Some(id)
}

fn report_plan(
    r: &mut Report,
    m: &Manifest,
    plan: &AgentPlan,
    action: &Action,
    home: &Path,
    writes: Writes,
    state: &mut install::InstallState,
) {
    for n in &plan.notes {
        let _ = writeln!(r.stdout, "  {n}");
    }
    if plan.error.is_none() {
        for f in &plan.unchanged {
            let _ = writeln!(r.stdout, "  {f}: unchanged");
        }
    }
    if let Some(e) = &plan.error {
        r.ok = false;
        let _ = writeln!(
            r.stderr,
            "agent-hub: {}: {e}; nothing was changed for it",
            m.name
        );
        return;
    }
    if writes == Writes::Summary {
        for c in &plan.changes {
            let line = change_line(&c.shown, c.before.as_deref(), c.after.as_deref());
            let _ = writeln!(r.stdout, "{line}");
        }
    } else if writes == Writes::Diff {
        for c in &plan.changes {
            let label = c.shown.trim_start_matches("~/");
            r.stdout.push_str(&diff::unified(
                label,
                c.before.as_deref(),
                c.after.as_deref(),
            ));
        }
    } else {
        match install::apply(plan, action, home, state) {
            Ok(done) => {
                for b in done.backups {
                    let _ = writeln!(r.stdout, "  backup: {b}");
                }
                for b in done.kept_backups {
                    let _ = writeln!(
                        r.stdout,
                        "  backup: {b} kept (it holds the file as it was before the first install)"
                    );
                }
                for d in done.removed_dirs {
                    let _ = writeln!(r.stdout, "  {d}: folder removed (an install created it)");
                }
            }
            Err(e) => {
                r.ok = false;
                let _ = writeln!(r.stderr, "agent-hub: {}: {e}", m.name);
                return;
            }
        }
    }
    if matches!(action, Action::Install { .. }) {
        for t in &m.install.trust {
            let _ = writeln!(r.stdout, "  next: {t}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let rows = vec![
            vec!["A".to_owned(), "BB".to_owned(), "C".to_owned()],
            vec!["long".to_owned(), "x".to_owned(), "".to_owned()],
        ];
        assert_eq!(table(&rows), "A     BB  C\nlong  x\n");
    }

    #[test]
    fn a_dry_run_says_one_line_per_file() {
        assert_eq!(
            change_line("~/.a.json", None, Some("{\n}\n")),
            "  would create ~/.a.json (2 lines)"
        );
        assert_eq!(
            change_line("~/s/SKILL.md", Some("x\n"), None),
            "  would remove ~/s/SKILL.md (1 line)"
        );
        assert_eq!(
            change_line("~/b", Some("a\nb\nc\n"), Some("a\nB\nc\nd\n")),
            "  would change ~/b (+2 -1 lines)"
        );
    }

    #[test]
    fn ps_rendering() {
        let p = AgentProcess {
            pid: 7,
            ppid: 1,
            agent: "claude".into(),
            program: "claude".into(),
            cwd: None,
            cpu_percent: 1.25,
            elapsed_secs: 61,
            status: "unknown",
            children: vec![],
        };
        assert_eq!(
            render_ps(&[p], false),
            "PID  AGENT   ELAPSED  CPU%  STATUS   CWD\n7    claude  01:01    1.2   unknown  ?\n"
        );
    }
}
