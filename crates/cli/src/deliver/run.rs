//! The delivery commands' IO: `agent-hub hook stop`, `agent-hub drain` and `agent-hub nudge`.
//! Takes mail from the hub without blocking (ack-mode awaits with `timeoutSecs` 0, repeated
//! until the hub answers `timeout` or the budget is spent), writes it out, flushes, and only
//! then acks (SPEC §12.2): if the output fails, nothing is acked and the hub delivers the same
//! envelopes again.
//!
//! Owns the order of those steps and their time bounds. Refuses decisions (`policy`),
//! formatting (`render`, `terminal`) and exit codes (`crate::app`).

use super::hook_input::{parse_hook_input, HookInputError};
use super::policy::{gate, session_key, Admit, Budget, Gate, StopState};
use super::render::{
    block_decision, fence_is_safe, item_len, parse_mail, render_mail, Cut, Mail, Shown, NONCE_LEN,
};
use super::state::{load_state, save_state, spool_envelope, state_file, HookLog, StateError};
use super::terminal::{
    check_name, check_pane_target, default_notice, neutralise, tmux_argv, TerminalError,
};
use crate::client::{self, Acked, ClientError, Endpoint, HeldEnvelope, Taken};
use agent_hub_proto::wire::{AwaitRequest, Reader};
use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Wall time one run may spend taking mail. Hooks run inside the agent's turn under the
/// agent's own hook timeout (Claude and Codex default to 60 s or more; installers set 30 s);
/// a healthy hub answers a poll in well under a millisecond.
pub const TAKE_BUDGET: Duration = Duration::from_secs(10);
/// Bound on any one connect, write or read while taking.
pub const PER_CALL: Duration = Duration::from_secs(3);
/// Bound on reading each `acked` once the output is out.
pub const ACK_PATIENCE: Duration = Duration::from_secs(5);
/// How long `drain --confirm` waits for its reader's confirmation: well inside the hub's
/// default ack deadline (`limits.ack_timeout_ms`, 30 s), which runs from the delivery.
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(20);
/// Hook input read at most; real inputs are a few KiB plus the last assistant message.
pub const MAX_HOOK_INPUT_BYTES: u64 = 16 * 1024 * 1024;

/// Who to take mail as.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub token_file: PathBuf,
    pub port: u16,
}

/// How much one run takes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_messages: usize,
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_messages: super::DEFAULT_MAX_MESSAGES,
            max_bytes: super::DEFAULT_MAX_BYTES,
        }
    }
}

/// Everything that made a run do nothing or stop early.
#[derive(Debug)]
pub enum DeliverError {
    Input(HookInputError),
    Client(ClientError),
    /// The output could not be written or flushed; nothing was acked.
    Output(std::io::Error),
    /// `drain --confirm` printed the mail but the reader did not confirm taking it.
    NotConfirmed,
}

impl fmt::Display for DeliverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeliverError::Input(e) => e.fmt(f),
            DeliverError::Client(e) => e.fmt(f),
            DeliverError::Output(e) => write!(
                f,
                "the mail could not be written out ({e}); not acked, the hub will deliver it again"
            ),
            DeliverError::NotConfirmed => f.write_str(
                "the reader did not confirm taking the mail; not acked, the hub will deliver it again",
            ),
        }
    }
}

impl std::error::Error for DeliverError {}

impl From<ClientError> for DeliverError {
    fn from(e: ClientError) -> DeliverError {
        DeliverError::Client(e)
    }
}

// ----- taking -----

/// What one run took from the hub.
#[derive(Default)]
struct Batch {
    /// Messages to show, in queue order, with the envelope text each came from.
    shown: Vec<(Shown, String)>,
    /// Held deliveries of the shown messages: acked after the output is out.
    held: Vec<HeldEnvelope>,
    /// Held deliveries already handed over in an earlier run (their ack went unconfirmed):
    /// acked, never shown twice.
    repeats: Vec<HeldEnvelope>,
    /// Why taking stopped early, if it did after something was taken.
    notes: Vec<String>,
}

impl Batch {
    fn shown_ids(&self) -> impl Iterator<Item = &str> {
        self.shown.iter().map(|(s, _)| s.mail.id.as_str())
    }
}

/// How the output measures a message against the byte budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// Rendered text for a model: a body too large for the budget is cut and spooled.
    Rendered,
    /// Envelope lines for a program: never cut.
    Raw,
}

/// `reader` is the kind the awaits declare (SPEC §12.4 "Readers"), so a sender's `status`
/// says which path took its mail.
fn take_batch(
    ep: &Endpoint,
    state: Option<&StopState>,
    limits: Limits,
    measure: Measure,
    spool_dir: Option<&Path>,
    reader: Reader,
) -> Result<Batch, ClientError> {
    let deadline = Instant::now() + TAKE_BUDGET;
    let mut budget = Budget::new(limits.max_messages, limits.max_bytes);
    let mut batch = Batch::default();
    while budget.can_take() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            batch
                .notes
                .push("time budget spent; the rest stays queued".into());
            break;
        }
        let patience = left.min(PER_CALL);
        let req = AwaitRequest {
            reply_to: None,
            kind: None,
            timeout_secs: Some(0),
            ack: None,
            reader: Some(reader.as_str().to_owned()),
        };
        let taken = match client::take_acked(ep, req, patience, patience, Some(patience)) {
            Ok(None) => break,
            Ok(Some(t)) => t,
            Err(e) if batch.shown.is_empty() && batch.repeats.is_empty() => return Err(e),
            Err(e) => {
                // What is held so far is still delivered; the rest waits for the next run.
                batch.notes.push(format!("stopped taking: {e}"));
                break;
            }
        };
        budget.note_taken();
        let (text, held) = match taken {
            Taken::Held(h) => (h.text().to_owned(), Some(h)),
            // A hub without ack mode: already consumed, so it is shown whatever the budget.
            Taken::Plain(text) => (text, None),
        };
        let mail =
            parse_mail(&text).unwrap_or_else(|e| opaque_mail(&text, held.as_ref(), &e.to_string()));
        if state.is_some_and(|s| s.already_delivered(&mail.id)) {
            if let Some(h) = held {
                batch.repeats.push(h);
            }
            continue;
        }
        let admit = match measure {
            Measure::Rendered => {
                budget.admit(item_len(batch.shown.len() + 1, &mail), mail.body.len())
            }
            Measure::Raw => match budget.admit(text.len(), text.len()) {
                Admit::Cut { .. } => Admit::Whole,
                a => a,
            },
        };
        let admit = if held.is_none() && admit == Admit::Later {
            Admit::Whole
        } else {
            admit
        };
        let cut = match admit {
            Admit::Whole => None,
            Admit::Later => {
                // Back to the front of the queue for the next run.
                if let Some(h) = held {
                    h.release();
                }
                break;
            }
            Admit::Cut { body_bytes } => {
                let saved = spool_dir
                    .ok_or_else(|| std::io::Error::other("no state directory"))
                    .and_then(|d| spool_envelope(d, &mail.id, &text, SystemTime::now()));
                match saved {
                    Ok(path) => Some(Cut {
                        shown_bytes: body_bytes,
                        saved_to: path.display().to_string(),
                    }),
                    Err(e) if held.is_some() => {
                        // Showing part of it without the rest saved would lose the rest:
                        // give it back instead.
                        batch.notes.push(format!(
                            "a large envelope could not be saved ({e}); left queued"
                        ));
                        if let Some(h) = held {
                            h.release();
                        }
                        break;
                    }
                    Err(_) => None, // consumed already (plain): show it whole
                }
            }
        };
        batch.shown.push((Shown { mail, cut }, text));
        if let Some(h) = held {
            batch.held.push(h);
        }
    }
    Ok(batch)
}

/// An envelope line the hub sent that does not parse (no hub sends one) is still shown, as
/// opaque text, so that it is not silently dropped.
fn opaque_mail(text: &str, held: Option<&HeldEnvelope>, why: &str) -> Mail {
    Mail {
        id: held.map(|h| h.id().to_owned()).unwrap_or_default(),
        from: String::new(),
        kind: format!("(unreadable envelope: {why})"),
        correlation_id: None,
        ts: String::new(),
        body: text.to_owned(),
    }
}

fn fresh_nonce(shown: &[Shown]) -> String {
    loop {
        let n: String = uuid::Uuid::new_v4().simple().to_string()[..NONCE_LEN].to_owned();
        if fence_is_safe(&n, shown) {
            return n;
        }
    }
}

/// Acks after the output is out; counts the acks the hub did not confirm.
fn settle(batch: Batch) -> (usize, Vec<String>) {
    let mut all = batch.held;
    all.extend(batch.repeats);
    let results = client::ack_all(all, ACK_PATIENCE);
    let mut unconfirmed = Vec::new();
    let mut confirmed = 0;
    for (id, outcome) in results {
        match outcome {
            Acked::Confirmed | Acked::Plain => confirmed += 1,
            Acked::Unconfirmed(why) => unconfirmed.push(format!("{id}: {why}")),
        }
    }
    (confirmed, unconfirmed)
}

fn write_flushed(out: &mut dyn Write, text: &str) -> std::io::Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()
}

fn endpoint(id: &Identity) -> Result<Endpoint, ClientError> {
    Ok(Endpoint {
        name: id.name.clone(),
        token: agent_hub_host::token_file::read(&id.token_file)?,
        port: id.port,
    })
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Loads the identity's state: `None` when there is no state directory or the file cannot be
/// read; a fresh state when the file is damaged or from another version (it holds hints only).
fn open_state(path: Option<&Path>, log: &HookLog) -> Option<StopState> {
    let path = path?;
    match load_state(path) {
        Ok(s) => Some(s),
        Err(StateError::Io(e)) => {
            log.line(&format!(
                "state {}: {e}; going on without it",
                path.display()
            ));
            None
        }
        Err(e) => {
            log.line(&format!("state {}: {e}; starting afresh", path.display()));
            Some(StopState::default())
        }
    }
}

fn store_state(path: Option<&Path>, state: Option<&StopState>, log: &HookLog) {
    if let (Some(path), Some(state)) = (path, state) {
        if let Err(e) = save_state(path, state) {
            log.line(&format!("cannot save state {}: {e}", path.display()));
        }
    }
}

// ----- hook stop -----

#[derive(Debug, Clone)]
pub struct HookStopOptions {
    pub identity: Identity,
    pub limits: Limits,
    pub max_blocks: u32,
}

/// How a hook run ended. Every outcome exits 0; only `Blocked` printed anything.
#[derive(Debug)]
pub enum HookOutcome {
    /// The input names another event (e.g. `SubagentStop`).
    NotAStop(String),
    /// `stop_hook_active` and the session hit the block cap.
    Capped {
        blocks: u32,
    },
    /// `stop_hook_active` and no state directory to tell new mail or count blocks.
    ActiveWithoutState,
    NoMail {
        repeats_acked: usize,
        notes: Vec<String>,
    },
    Blocked {
        shown: usize,
        acked: usize,
        unconfirmed: Vec<String>,
        notes: Vec<String>,
    },
    Failed(DeliverError),
}

impl fmt::Display for HookOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookOutcome::NotAStop(e) => write!(f, "event {e:?} is not a stop; nothing done"),
            HookOutcome::Capped { blocks } => write!(
                f,
                "stop_hook_active after {blocks} blocks in a row: cap reached, mail left queued"
            ),
            HookOutcome::ActiveWithoutState => f.write_str(
                "stop_hook_active and no state directory (set HOME or XDG_STATE_HOME): not blocking again",
            ),
            HookOutcome::NoMail {
                repeats_acked,
                notes,
            } => {
                write!(f, "no new mail ({repeats_acked} redelivered envelopes acked)")?;
                for n in notes {
                    write!(f, "; {n}")?;
                }
                Ok(())
            }
            HookOutcome::Blocked {
                shown,
                acked,
                unconfirmed,
                notes,
            } => {
                write!(f, "blocked with {shown} messages; {acked} acks confirmed")?;
                for u in unconfirmed {
                    write!(f, "; ack not confirmed for {u}")?;
                }
                for n in notes {
                    write!(f, "; {n}")?;
                }
                Ok(())
            }
            HookOutcome::Failed(e) => write!(f, "nothing delivered: {e}"),
        }
    }
}

/// `agent-hub hook stop`: reads the hook input, takes new mail, prints the block decision,
/// acks. Never fails: every problem is an outcome, stdout is written only for `Blocked`.
pub fn hook_stop(
    opts: &HookStopOptions,
    input: &[u8],
    out: &mut dyn Write,
    state_dir: Option<&Path>,
    log: &HookLog,
) -> HookOutcome {
    let input = match parse_hook_input(input) {
        Ok(i) => i,
        Err(e) => return HookOutcome::Failed(DeliverError::Input(e)),
    };
    if !input.is_stop() {
        let name = match &input.event {
            super::hook_input::HookEvent::Other(n) => n.clone(),
            _ => String::new(),
        };
        return HookOutcome::NotAStop(name);
    }
    log.line(&format!(
        "hook stop as {:?} port {} agent {} session {:?} stop_hook_active {}",
        opts.identity.name,
        opts.identity.port,
        input.agent.as_str(),
        input.session_id.as_deref().unwrap_or(""),
        input.stop_hook_active
    ));
    let key = session_key(input.session_id.as_deref());
    let state_path = state_dir.map(|d| state_file(d, &opts.identity.name, opts.identity.port));
    let mut state = open_state(state_path.as_deref(), log);
    match gate(
        input.stop_hook_active,
        state.as_ref(),
        &key,
        opts.max_blocks,
    ) {
        Gate::Proceed => {}
        Gate::Capped { blocks } => {
            if let Some(s) = state.as_mut() {
                // The chain ends here: the agent stops, and its next stop is a fresh one.
                s.record_stop(&key, true, false, now_secs());
            }
            store_state(state_path.as_deref(), state.as_ref(), log);
            return HookOutcome::Capped { blocks };
        }
        Gate::ActiveWithoutState => return HookOutcome::ActiveWithoutState,
    }
    let ep = match endpoint(&opts.identity) {
        Ok(ep) => ep,
        Err(e) => return HookOutcome::Failed(e.into()),
    };
    let batch = match take_batch(
        &ep,
        state.as_ref(),
        opts.limits,
        Measure::Rendered,
        state_dir,
        Reader::StopHook,
    ) {
        Ok(b) => b,
        Err(e) => return HookOutcome::Failed(e.into()),
    };
    let active = input.stop_hook_active;
    if batch.shown.is_empty() {
        let repeat_ids: Vec<String> = batch.repeats.iter().map(|h| h.id().to_owned()).collect();
        let notes = batch.notes.clone();
        let (acked, _) = settle(batch);
        if let Some(s) = state.as_mut() {
            s.remember_delivered(repeat_ids.iter().map(String::as_str));
            s.record_stop(&key, active, false, now_secs());
        }
        store_state(state_path.as_deref(), state.as_ref(), log);
        return HookOutcome::NoMail {
            repeats_acked: acked,
            notes,
        };
    }
    let shown: Vec<Shown> = batch.shown.iter().map(|(s, _)| s.clone()).collect();
    let reason = render_mail(&opts.identity.name, &shown, &fresh_nonce(&shown));
    let line = block_decision(&reason) + "\n";
    if let Err(e) = write_flushed(out, &line) {
        // Dropping the batch closes every held connection unacked: the hub delivers again.
        drop(batch);
        return HookOutcome::Failed(DeliverError::Output(e));
    }
    let ids: Vec<String> = batch
        .shown_ids()
        .chain(batch.repeats.iter().map(|h| h.id()))
        .map(str::to_owned)
        .collect();
    let notes = batch.notes.clone();
    let shown_count = shown.len();
    let (acked, unconfirmed) = settle(batch);
    if let Some(s) = state.as_mut() {
        s.remember_delivered(ids.iter().map(String::as_str));
        s.record_stop(&key, active, true, now_secs());
    }
    store_state(state_path.as_deref(), state.as_ref(), log);
    HookOutcome::Blocked {
        shown: shown_count,
        acked,
        unconfirmed,
        notes,
    }
}

// ----- drain -----

/// What `drain` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DrainFormat {
    /// The same text a stop hook gives the model: for a plugin to prompt a session with.
    #[default]
    Text,
    /// Each envelope as one JSON line, exactly as the hub sent it (like `agent-hub await`).
    Json,
}

#[derive(Debug, Clone)]
pub struct DrainOptions {
    pub identity: Identity,
    pub limits: Limits,
    pub format: DrainFormat,
}

#[derive(Debug)]
pub enum DrainOutcome {
    /// Nothing to print; `notes` say why taking stopped early, if it did.
    NoMail { notes: Vec<String> },
    Printed {
        shown: usize,
        unconfirmed: Vec<String>,
        notes: Vec<String>,
    },
}

/// `agent-hub drain`: prints pending mail with the same take → print → flush → ack order as
/// the hook. Unlike the hook it reports failures (the caller exits 1).
///
/// With `confirm`, the output is not yet the hand-over: after printing, `confirm` is asked
/// (the bin closes stdout and reads one line from stdin), and only a `true` acks. A plugin
/// uses this to ack only once the agent has taken the text (OpenCode's `promptAsync`
/// succeeded); anything else gives the envelopes back to the hub.
pub fn drain(
    opts: &DrainOptions,
    out: &mut dyn Write,
    state_dir: Option<&Path>,
    confirm: Option<&mut dyn FnMut() -> bool>,
) -> Result<DrainOutcome, DeliverError> {
    let log = HookLog::none();
    let state_path = state_dir.map(|d| state_file(d, &opts.identity.name, opts.identity.port));
    let mut state = open_state(state_path.as_deref(), &log);
    let ep = endpoint(&opts.identity)?;
    let measure = match opts.format {
        DrainFormat::Text => Measure::Rendered,
        DrainFormat::Json => Measure::Raw,
    };
    // With a confirmation the hand-over is the plugin's (OpenCode's `promptAsync`), not
    // this process's stdout: the reader is the plugin.
    let reader = if confirm.is_some() {
        Reader::PluginDrain
    } else {
        Reader::Drain
    };
    let batch = take_batch(&ep, state.as_ref(), opts.limits, measure, state_dir, reader)?;
    if batch.shown.is_empty() {
        let repeat_ids: Vec<String> = batch.repeats.iter().map(|h| h.id().to_owned()).collect();
        let notes = batch.notes.clone();
        settle(batch);
        if let Some(s) = state.as_mut() {
            s.remember_delivered(repeat_ids.iter().map(String::as_str));
        }
        store_state(state_path.as_deref(), state.as_ref(), &log);
        return Ok(DrainOutcome::NoMail { notes });
    }
    let text = match opts.format {
        DrainFormat::Text => {
            let shown: Vec<Shown> = batch.shown.iter().map(|(s, _)| s.clone()).collect();
            render_mail(&opts.identity.name, &shown, &fresh_nonce(&shown))
        }
        DrainFormat::Json => batch
            .shown
            .iter()
            .map(|(_, text)| format!("{text}\n"))
            .collect(),
    };
    write_flushed(out, &text).map_err(DeliverError::Output)?;
    if let Some(confirm) = confirm {
        if !confirm() {
            drop(batch);
            return Err(DeliverError::NotConfirmed);
        }
    }
    let ids: Vec<String> = batch
        .shown_ids()
        .chain(batch.repeats.iter().map(|h| h.id()))
        .map(str::to_owned)
        .collect();
    let notes = batch.notes.clone();
    let shown = batch.shown.len();
    let (_, unconfirmed) = settle(batch);
    if let Some(s) = state.as_mut() {
        s.remember_delivered(ids.iter().map(String::as_str));
    }
    store_state(state_path.as_deref(), state.as_ref(), &log);
    Ok(DrainOutcome::Printed {
        shown,
        unconfirmed,
        notes,
    })
}

// ----- nudge -----

#[derive(Debug, Clone)]
pub struct NudgeOptions {
    pub pane: String,
    pub name: String,
    /// With `port`, named in the default notice's drain command.
    pub token_file: Option<PathBuf>,
    pub port: Option<u16>,
    /// Replaces the default notice; neutralised like it.
    pub text: Option<String>,
    /// Press Enter after typing.
    pub submit: bool,
    /// The tmux program.
    pub tmux: OsString,
}

#[derive(Debug)]
pub enum NudgeError {
    Terminal(TerminalError),
    Spawn(std::io::Error),
    Tmux(String),
}

impl fmt::Display for NudgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NudgeError::Terminal(e) => e.fmt(f),
            NudgeError::Spawn(e) => write!(f, "cannot run tmux: {e}"),
            NudgeError::Tmux(e) => write!(f, "tmux send-keys failed: {e}"),
        }
    }
}

impl std::error::Error for NudgeError {}

/// `agent-hub nudge`: types a short, neutralised notice into a tmux pane; returns the text
/// typed. tmux is run directly with an argv, never through a shell.
pub fn nudge(opts: &NudgeOptions) -> Result<String, NudgeError> {
    let pane = check_pane_target(&opts.pane).map_err(NudgeError::Terminal)?;
    let name = check_name(&opts.name).map_err(NudgeError::Terminal)?;
    let raw = match &opts.text {
        Some(t) => t.clone(),
        None => {
            let path = opts.token_file.as_ref().map(|p| p.display().to_string());
            let hint = path.as_deref().zip(opts.port);
            default_notice(name, hint)
        }
    };
    let text = neutralise(&raw).map_err(NudgeError::Terminal)?;
    for argv in tmux_argv(pane, &text, opts.submit) {
        let out = Command::new(&opts.tmux)
            .args(&argv)
            .stdin(Stdio::null())
            .output()
            .map_err(NudgeError::Spawn)?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Err(NudgeError::Tmux(if err.is_empty() {
                out.status.to_string()
            } else {
                err
            }));
        }
    }
    Ok(text)
}
