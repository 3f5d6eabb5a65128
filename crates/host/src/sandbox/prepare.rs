//! One task's sandbox, made ready just before the agent starts (on the task's own thread,
//! never the event loop): which of the hub's paths exist now, the per-task copies of the
//! agent's installed config without the user's agent-hub entries (`agents::install::overlay`),
//! then the bubblewrap argv or the Landlock ruleset for the `Layout`.
//!
//! Owns the IO of that: canonicalising and stat-ing candidates, reading the user's agent
//! config files, writing the copies into the task's private folder (mode 0600, created
//! exclusively), listing folders for the Landlock complement. Refuses: starting a task whose
//! installed config it cannot read or clean (the agent would load the user's identity), and
//! naming a path that does not exist to bwrap (bwrap would create it on the host).

use super::layout::{self, Facts, Found, Layout, Step};
use super::{bwrap, landlock, landlock_sys, Kind, TaskSandbox};
use std::ffi::OsString;
use std::fmt;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What the runner needs to start a sandboxed agent.
#[derive(Debug)]
pub struct Prepared {
    /// The argv to exec: bwrap's around the agent's, or the agent's own (Landlock).
    pub argv: Vec<OsString>,
    /// Variables to set on top of the task's environment (Landlock: `TMPDIR`).
    pub env: Vec<(OsString, OsString)>,
    /// The ruleset the child restricts itself with (Landlock).
    pub ruleset: Option<landlock_sys::Ruleset>,
    /// One line for the task's log: which sandbox, what it hides and shows.
    pub summary: String,
}

/// Why a task's sandbox could not be made; the task does not start.
#[derive(Debug)]
pub enum PrepareError {
    /// The agent's argv has no program.
    EmptyArgv,
    /// The task's temporary folder (Landlock) could not be made.
    TempFolder(std::io::Error),
    /// The agent's installed config could not be read or its agent-hub entries not taken out
    /// (`agents::install::task_view`): the agent would load the user's identity.
    Overlay {
        agent: String,
        source: crate::agents::install::PlanError,
    },
    /// A per-task copy of a config file could not be written.
    WriteCopy(PathBuf, std::io::Error),
    /// The Landlock ruleset could not be built.
    Ruleset(std::io::Error),
}

impl fmt::Display for PrepareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrepareError::EmptyArgv => f.write_str("the agent's argv is empty"),
            PrepareError::TempFolder(e) => {
                write!(f, "cannot make the task's temporary folder: {e}")
            }
            PrepareError::Overlay { agent, source } => write!(
                f,
                "cannot take agent-hub's entries out of {agent}'s config: {source}"
            ),
            PrepareError::WriteCopy(path, e) => write!(f, "cannot write {}: {e}", path.display()),
            PrepareError::Ruleset(e) => write!(f, "cannot build the Landlock ruleset: {e}"),
        }
    }
}

impl std::error::Error for PrepareError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PrepareError::EmptyArgv => None,
            PrepareError::TempFolder(e)
            | PrepareError::WriteCopy(_, e)
            | PrepareError::Ruleset(e) => Some(e),
            PrepareError::Overlay { source, .. } => Some(source),
        }
    }
}

/// An existing path, canonical, or None.
fn found(p: &Path) -> Option<Found> {
    let path = std::fs::canonicalize(p).ok()?;
    let meta = std::fs::metadata(&path).ok()?;
    Some(Found {
        dir: meta.is_dir(),
        path,
    })
}

fn canonical_or_same(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned())
}

/// Makes the sandbox for one task whose agent is `argv` (argv[0] absolute) in `cwd`.
pub fn prepare(t: &TaskSandbox, argv: &[OsString], cwd: &Path) -> Result<Prepared, PrepareError> {
    let hub = &t.hub.paths;
    let program = argv
        .first()
        .map(|p| canonical_or_same(Path::new(p)))
        .ok_or(PrepareError::EmptyArgv)?;
    let mut facts = Facts {
        secret_files: hub.secret_files.iter().filter_map(|p| found(p)).collect(),
        secret_dirs: hub.secret_dirs.iter().filter_map(|p| found(p)).collect(),
        read_only: hub.read_only.iter().filter_map(|p| found(p)).collect(),
        needed: hub
            .needed
            .iter()
            .filter_map(|(p, w)| found(p).map(|f| (f, *w)))
            .collect(),
        keep_whole: hub
            .keep_whole
            .iter()
            .map(|p| canonical_or_same(p))
            .collect(),
        overlays: Vec::new(),
        cwd: canonical_or_same(cwd),
    };
    // The agent's own folder holds what it needs to run (a node package's modules beside
    // its script): never hidden whole.
    if let Some(dir) = program.parent() {
        facts.keep_whole.push(dir.to_owned());
    }
    let bwrap_program = match &t.hub.kind {
        Kind::Bwrap { program } => Some(program.clone()),
        _ => None,
    };
    // The task's own token is shown again inside the hidden credentials folder: to the
    // agent's MCP server (bubblewrap binds the one file, and a headless task's MCP config
    // beside it; Landlock grants the task's folder).
    let mut extra_env = Vec::new();
    match &t.hub.kind {
        Kind::Bwrap { .. } => {
            if let Some(tok) = t.token_file.as_deref().and_then(found) {
                facts.needed.push((tok, false));
            }
            for file in t.shown_files.iter().filter_map(|f| found(f)) {
                facts.needed.push((file, false));
            }
        }
        Kind::Landlock { .. } => {
            if let Some(dir) = found(&t.task_dir) {
                facts.needed.push((dir, false));
            }
            // A writable temporary folder of its own: under Landlock /tmp may hold a hidden
            // path, and then nothing new can be made directly in it.
            let tmp = t.task_dir.join("tmp");
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&tmp)
                .map_err(PrepareError::TempFolder)?;
            if let Some(tmp) = found(&tmp) {
                extra_env.push((OsString::from("TMPDIR"), tmp.path.clone().into_os_string()));
                facts.needed.push((tmp, true));
            }
        }
        Kind::None => {}
    }

    // The user's agent-hub entries in this agent's config: copies without them (bubblewrap
    // mounts each over the original), and every token file they name hidden.
    let mut overlay_note = Vec::new();
    let mut hide_exact: Vec<Found> = Vec::new();
    if let Some(m) = &t.manifest {
        let read = |p: &Path| match std::fs::read_to_string(p) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        };
        let view = crate::agents::install::task_view(m, &hub.home, &read).map_err(|e| {
            PrepareError::Overlay {
                agent: m.name.clone(),
                source: e,
            }
        })?;
        for tf in &view.token_files {
            if let Some(f) = found(tf) {
                facts.secret_files.push(f);
            }
        }
        for (p, _) in &view.hide {
            if let Some(f) = found(p) {
                hide_exact.push(f);
            }
        }
        for (i, (original, text)) in view.replace.iter().enumerate() {
            let shown = crate::agents::install::shown(original, &hub.home);
            if bwrap_program.is_none() {
                // Landlock cannot put another file in a path's place; the user's token
                // files stay hidden, so those entries cannot log in (docs/delegation.md).
                overlay_note.push(format!("{shown} (left as is: its token file is hidden)"));
                continue;
            }
            let Some(orig) = found(original) else {
                continue;
            };
            let copy = t.task_dir.join(format!("config-{i}"));
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&copy)
                .map_err(|e| PrepareError::WriteCopy(copy.clone(), e))?;
            f.write_all(text.as_bytes())
                .map_err(|e| PrepareError::WriteCopy(copy.clone(), e))?;
            facts.overlays.push((copy, orig.path));
            overlay_note.push(shown);
        }
    }

    let mut lay = layout::layout(&facts);
    // Exact hides (an agent-hub skill folder, the OpenCode plugin): the path only, never
    // its folder, applied where still visible.
    for h in hide_exact {
        if lay.visible(&h.path) {
            lay.steps.push(Step::Hide(h));
        }
    }
    let summary = summary(&t.hub.kind, &lay, &overlay_note);
    match &t.hub.kind {
        Kind::Bwrap { program } => Ok(Prepared {
            argv: bwrap::argv(program, &lay, argv),
            env: extra_env,
            ruleset: None,
            summary,
        }),
        Kind::Landlock { abi } => {
            let rules = landlock::rules(&lay, *abi, &mut list);
            let ruleset = landlock_sys::build(&rules, *abi).map_err(PrepareError::Ruleset)?;
            Ok(Prepared {
                argv: argv.to_vec(),
                env: extra_env,
                summary: format!("{summary}; {} rules", ruleset.rules),
                ruleset: Some(ruleset),
            })
        }
        Kind::None => Ok(Prepared {
            argv: argv.to_vec(),
            env: extra_env,
            ruleset: None,
            summary,
        }),
    }
}

/// A folder's entries for the Landlock complement.
fn list(dir: &Path) -> Option<Vec<landlock::Entry>> {
    let rd = std::fs::read_dir(dir).ok()?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let path = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_symlink() {
            let target = std::fs::canonicalize(&path).ok();
            let dir = target.as_deref().is_some_and(Path::is_dir);
            out.push(landlock::Entry {
                path,
                target,
                symlink: true,
                dir,
            });
        } else {
            out.push(landlock::Entry {
                path,
                target: None,
                symlink: false,
                dir: ft.is_dir(),
            });
        }
    }
    Some(out)
}

fn summary(kind: &Kind, lay: &Layout, overlays: &[String]) -> String {
    let join = |v: Vec<String>| {
        if v.is_empty() {
            "-".to_owned()
        } else {
            v.join(", ")
        }
    };
    let hidden = join(lay.hidden().map(|f| f.path.display().to_string()).collect());
    let shown = join(
        lay.shown()
            .map(|(f, w)| format!("{}{}", f.path.display(), if w { "" } else { " (ro)" }))
            .collect(),
    );
    let mut s = format!(
        "sandbox {}: hidden {hidden}; shown again {shown}",
        kind.tag()
    );
    if !overlays.is_empty() {
        s.push_str(&format!(
            "; agent-hub entries taken out of {}",
            overlays.join(", ")
        ));
    }
    s
}
