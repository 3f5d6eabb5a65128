//! The loop of `agent-hub top`: fetch a snapshot, draw it, wait for the next refresh or a
//! key, send an answer the keys picked (issue 37). Decides nothing itself: `render` draws,
//! `keys` and `answer` interpret, `snapshot` reads.

use super::answer::Choice;
use super::keys::{self, Action};
use super::render::{self, Context, ViewState};
use super::snapshot::{self, LinkView, OpenRequest, Snapshot, Source};
use super::term::{self, Screen};
use super::usage::UsageSums;
use crate::client::{ClientError, Endpoint, Exchange};
use agent_hub_proto::wire::{ClientLine, WhoRequest};
use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Bounds of one refresh's exchange with the hub: a view must not freeze behind a stuck hub
/// for the client's usual 30 s, and a hub that answers `who` answers this within them.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Options {
    pub endpoint: Endpoint,
    pub interval: Duration,
    /// One snapshot as plain lines, then exit.
    pub once: bool,
    /// A hub config whose `[relay] status_path` gives the relay links.
    pub config: Option<PathBuf>,
}

/// Why the view stopped early: its terminal failed, or the hub (or what answers on the port)
/// said something that another refresh cannot change. A hub that cannot be reached is not one
/// of these: the view says so and keeps retrying (`retryable`).
#[derive(Debug)]
pub enum TopError {
    /// Raw mode or the alternate screen could not be set up.
    Terminal(std::io::Error),
    /// The keys could not be read.
    Keys(std::io::Error),
    /// A frame could not be written.
    Write(std::io::Error),
    /// The hub refused the view for good (a wrong token, a name it does not know, a verb it
    /// refuses this asker), or the port is not a hub's client port: the client's error, whose
    /// text is the hub's own line where there is one.
    Hub(ClientError),
}

impl fmt::Display for TopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopError::Terminal(e) => write!(f, "cannot set up the terminal: {e}"),
            TopError::Keys(e) => write!(f, "{e}"),
            TopError::Write(e) => write!(f, "cannot write to the terminal: {e}"),
            TopError::Hub(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TopError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TopError::Terminal(e) | TopError::Keys(e) | TopError::Write(e) => Some(e),
            TopError::Hub(e) => Some(e),
        }
    }
}

/// Whether another refresh may succeed where this one failed (issue 35: a wrong token was
/// retried for ever). Yes when the hub could not be reached or the connection was lost (a hub
/// restarting, stopping, or killed mid-answer), or the hub said to try again (its connection
/// caps, SPEC §4.6) or that it is stopping. No for everything else: an authentication
/// failure, a refusal of the verb, a port that does not speak the hub's protocol (a relay
/// listener, another program); the same request would get the same answer.
pub fn retryable(e: &ClientError) -> bool {
    match e {
        ClientError::Connect(_) | ClientError::Io(_) => true,
        ClientError::Hub(m) => {
            m.contains("try again later")
                || m.starts_with("hub is shutting down")
                || m.starts_with("no hello within")
                || m.starts_with("no verb within")
        }
        // A line cut off by a connection that closed under it: the hub went away mid-answer.
        ClientError::Protocol(m) => m == "reply line cut short",
        _ => false,
    }
}

struct Fetcher {
    ep: Endpoint,
    /// Set once the hub answered `activity` with an unknown-tag error: ask `who` instead.
    who_only: bool,
    /// When the refreshes began to fail, while they do (the view says for how long).
    down_since: Option<chrono::DateTime<chrono::Utc>>,
    /// Set once the hub refused `tasks` for good (no `[tasks]` table, a task identity): its
    /// open requests are not asked for again.
    no_tasks: bool,
    status_path: Option<Result<PathBuf, String>>,
}

impl Fetcher {
    fn hub(&mut self) -> Result<(Source, snapshot::ActivityView), ClientError> {
        if !self.who_only {
            match exchange(&self.ep, &ClientLine::Activity, "activity") {
                Err(ClientError::Hub(m)) if m.contains("unknown tag") => self.who_only = true,
                other => return other.map(|v| (Source::Activity, v)),
            }
        }
        // A hub without `activity` predates `offRoster` too: the plain `who` it knows.
        let who = ClientLine::Who(WhoRequest::default());
        exchange(&self.ep, &who, "who").map(|v| (Source::WhoOnly, v))
    }

    /// One refresh: what the view shows, or the error that ends it (`retryable`).
    fn snapshot(&mut self) -> Result<Snapshot, TopError> {
        let taken = chrono::Utc::now();
        let hub = match self.hub() {
            Ok(v) => {
                self.down_since = None;
                Ok(v)
            }
            Err(e) if retryable(&e) => {
                self.down_since.get_or_insert(taken);
                // The snapshot keeps the error's text only: it is what the view shows.
                Err(e.to_string())
            }
            Err(e) => return Err(TopError::Hub(e)),
        };
        let (requests, usage) = match &hub {
            Ok((Source::Activity, view)) if !self.no_tasks => self.tasks(&view.tasks),
            _ => (Vec::new(), None),
        };
        let links = self.status_path.as_ref().map(|p| {
            p.clone().and_then(|p| {
                agent_hub_host::relay_status::read_status(&p)
                    .map(|s| LinkView::from_status(&s))
                    .map_err(|e| e.to_string())
            })
        });
        Ok(Snapshot {
            taken,
            hub,
            down_since: self.down_since,
            requests,
            usage,
            links,
        })
    }

    /// The open requests the hub's `tasks` answer shows this viewer (issue 37: the ones it may
    /// answer), in the view's task order, and the usage of the tasks it lists (issue 38). One
    /// more short connection per refresh; a refusal that will not change (no `[tasks]` table)
    /// stops the asking, and any other failure shows none this time rather than failing the
    /// refresh.
    fn tasks(&mut self, tasks: &[snapshot::TaskView]) -> (Vec<OpenRequest>, Option<UsageSums>) {
        let verb = ClientLine::Tasks;
        let answer = Exchange::open_within(&self.ep, &verb, CONNECT_TIMEOUT, REPLY_TIMEOUT)
            .and_then(|mut ex| ex.read_raw())
            .and_then(|line| {
                crate::client::task::answer::<crate::client::task::TaskList>(&line, "tasks")
            });
        match answer {
            Ok(a) => (
                snapshot::open_requests(tasks, &a.value.tasks),
                Some(UsageSums::of(&a.value.tasks)),
            ),
            Err(e) => {
                self.no_tasks = !retryable(&e);
                (Vec::new(), None)
            }
        }
    }

    /// Sends the answer `a` picked; the view's notice says how it went: the request
    /// answered, or the hub's refusal in its words (which pass the one sanitiser when drawn).
    fn answer(&self, c: Choice) -> Result<String, String> {
        let req = crate::client::task::TaskAnswerRequest {
            task: c.task,
            request: Some(c.request),
            option: c.option,
            message: None,
        };
        match crate::client::task_answer(&self.ep, req) {
            Ok(a) => Ok(format!(
                "{} {} with {}",
                a.value.state.as_deref().unwrap_or("answered"),
                a.value.request.as_deref().unwrap_or("-"),
                a.value.option.as_deref().unwrap_or("-")
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// One verb line, its `ok`, and its one reply read as the view's tolerant type.
fn exchange(
    ep: &Endpoint,
    verb: &ClientLine,
    tag: &str,
) -> Result<snapshot::ActivityView, ClientError> {
    let mut ex = Exchange::open_within(ep, verb, CONNECT_TIMEOUT, REPLY_TIMEOUT)?;
    let reply = ex.read_raw()?;
    crate::client::task::answer::<snapshot::ActivityView>(&reply, tag).map(|a| a.value)
}

/// Runs the view until `q`, a stop signal, or (plain) a closed stdout or `--once`. Returns
/// whether the last refresh reached the hub (`--once` exits 1 when it did not); an error the
/// hub will give again on every refresh ends it at once (`TopError::Hub`), after the terminal
/// is restored.
pub fn run(o: Options) -> Result<bool, TopError> {
    let mut f = Fetcher {
        ep: o.endpoint.clone(),
        who_only: false,
        down_since: None,
        no_tasks: false,
        status_path: o
            .config
            .as_ref()
            .map(|c| agent_hub_host::relay_status::status_path_of(c).map_err(|e| e.to_string())),
    };
    let mut ctx = Context {
        port: o.endpoint.port,
        name: o.endpoint.name.clone(),
        interval_ms: o.interval.as_millis() as u64,
        interactive: false,
        once: o.once,
        width: None,
    };
    if o.once || !term::is_tty(1) || !term::is_tty(0) {
        return plain(&mut f, &ctx, o.interval, o.once);
    }
    ctx.interactive = true;
    // The first refresh before the screen is taken: a wrong token or port then ends the view
    // with the error on a terminal left as it was.
    let mut snap = f.snapshot()?;
    let screen = Screen::enter().map_err(TopError::Terminal)?;
    let mut view = ViewState::default();
    loop {
        let next = Instant::now() + o.interval;
        draw(&screen, &snap, &view, &ctx)?;
        loop {
            if term::stop_requested() {
                return Ok(snap.hub.is_ok());
            }
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let bytes = screen.keys(left).map_err(TopError::Keys)?;
            match keys::apply(&bytes, &mut view, &snap.requests) {
                Action::Quit => return Ok(snap.hub.is_ok()),
                Action::Redraw => draw(&screen, &snap, &view, &ctx)?,
                Action::Nothing => {}
                Action::Answer(choice) => {
                    view.answering.answered(f.answer(choice));
                    // What the answer changed, at once: the request is gone from the list.
                    snap = f.snapshot()?;
                    view.answering.reconcile(&snap.requests);
                    draw(&screen, &snap, &view, &ctx)?;
                }
            }
        }
        snap = f.snapshot()?;
        view.answering.reconcile(&snap.requests);
    }
}

fn draw(screen: &Screen, snap: &Snapshot, view: &ViewState, ctx: &Context) -> Result<(), TopError> {
    let (w, h) = screen.size();
    let ctx = Context {
        width: Some(w),
        ..ctx.clone()
    };
    let frame = render::ansi(&render::fit(render::render(snap, view, &ctx), w, h));
    let mut out = std::io::stdout().lock();
    out.write_all(frame.as_bytes())
        .and_then(|()| out.flush())
        .map_err(TopError::Write)
}

/// Plain lines: one snapshot per interval, separated by a blank line. A closed stdout (the
/// reader of a pipe went away) ends the view quietly; it returns whether the last refresh
/// reached the hub, or the error that no refresh can get past.
fn plain(f: &mut Fetcher, ctx: &Context, interval: Duration, once: bool) -> Result<bool, TopError> {
    let view = ViewState::default();
    loop {
        let snap = f.snapshot()?;
        let mut text = render::plain(&render::render(&snap, &view, ctx));
        if !once {
            text.push('\n');
        }
        let mut out = std::io::stdout().lock();
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return Ok(snap.hub.is_ok());
        }
        drop(out);
        if once {
            return Ok(snap.hub.is_ok());
        }
        std::thread::sleep(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35: only what another refresh can change is retried.
    #[test]
    fn a_lost_hub_is_retried_and_a_refusal_or_a_stranger_port_is_not() {
        let retried = [
            ClientError::Connect("cannot connect to the hub at 127.0.0.1:1: refused".into()),
            ClientError::Io("the hub closed the connection without a reply".into()),
            ClientError::Io("the hub did not answer in time".into()),
            ClientError::Hub("hub is shutting down".into()),
            ClientError::Hub("hub is at its connection limit (4); try again later".into()),
            ClientError::Hub(
                "too many connections for this agent (limit 2); try again later".into(),
            ),
            ClientError::Protocol("reply line cut short".into()),
        ];
        for e in &retried {
            assert!(retryable(e), "{e}");
        }
        let ended = [
            ClientError::Hub("authentication failed: unknown name or wrong token".into()),
            ClientError::Hub(
                "invalid activity: a task identity may not ask for the hub's activity".into(),
            ),
            ClientError::Hub("malformed line: unknown field in `who`, which has no fields".into()),
            ClientError::Protocol("malformed line: expected value".into()),
            ClientError::Protocol("expected ok, got envelope".into()),
            ClientError::Token("token file x is readable by others".into()),
        ];
        for e in &ended {
            assert!(!retryable(e), "{e}");
        }
        assert_eq!(
            TopError::Hub(ClientError::Hub(
                "authentication failed: unknown name or wrong token".into()
            ))
            .to_string(),
            "authentication failed: unknown name or wrong token",
            "the hub's own line, verbatim"
        );
    }
}
