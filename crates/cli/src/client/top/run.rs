//! The loop of `agent-hub top`: fetch a snapshot, draw it, wait for the next refresh or a
//! key. Decides nothing itself: `render` draws, `keys` interprets, `snapshot` reads.

use super::keys::{self, Action};
use super::render::{self, Context, ViewState};
use super::snapshot::{self, LinkView, Snapshot, Source};
use super::term::{self, Screen};
use crate::client::{ClientError, Endpoint, Exchange};
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

/// Why the view stopped: its terminal failed. A hub that cannot be reached is not one (the
/// view shows why and keeps refreshing).
#[derive(Debug)]
pub enum TopError {
    /// Raw mode or the alternate screen could not be set up.
    Terminal(std::io::Error),
    /// The keys could not be read.
    Keys(std::io::Error),
    /// A frame could not be written.
    Write(std::io::Error),
}

impl fmt::Display for TopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopError::Terminal(e) => write!(f, "cannot set up the terminal: {e}"),
            TopError::Keys(e) => write!(f, "{e}"),
            TopError::Write(e) => write!(f, "cannot write to the terminal: {e}"),
        }
    }
}

impl std::error::Error for TopError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TopError::Terminal(e) | TopError::Keys(e) | TopError::Write(e) => Some(e),
        }
    }
}

struct Fetcher {
    ep: Endpoint,
    /// Set once the hub answered `activity` with an unknown-tag error: ask `who` instead.
    who_only: bool,
    status_path: Option<Result<PathBuf, String>>,
}

impl Fetcher {
    fn hub(&mut self) -> Result<(Source, snapshot::ActivityView), ClientError> {
        if !self.who_only {
            match exchange(&self.ep, "{\"activity\":{}}\n", "activity") {
                Err(ClientError::Hub(m)) if m.contains("unknown tag") => self.who_only = true,
                other => return other.map(|v| (Source::Activity, v)),
            }
        }
        exchange(&self.ep, "{\"who\":{}}\n", "who").map(|v| (Source::WhoOnly, v))
    }

    fn snapshot(&mut self) -> Snapshot {
        // The snapshot keeps the error's text only: it is what the view shows.
        let hub = self.hub().map_err(|e| e.to_string());
        let links = self.status_path.as_ref().map(|p| {
            p.clone().and_then(|p| {
                agent_hub_host::relay_status::read_status(&p)
                    .map(|s| LinkView::from_status(&s))
                    .map_err(|e| e.to_string())
            })
        });
        Snapshot {
            taken: chrono::Utc::now(),
            hub,
            links,
        }
    }
}

/// One verb line, its `ok`, and its one reply read as the view's tolerant type.
fn exchange(ep: &Endpoint, line: &str, tag: &str) -> Result<snapshot::ActivityView, ClientError> {
    let mut ex = Exchange::open_text(ep, line, CONNECT_TIMEOUT, REPLY_TIMEOUT)?;
    let reply = ex.read_raw()?;
    crate::client::task::answer::<snapshot::ActivityView>(&reply, tag).map(|a| a.value)
}

/// Runs the view until `q`, a stop signal, or (plain) a closed stdout or `--once`. Returns
/// whether the last refresh reached the hub (`--once` exits 1 when it did not).
pub fn run(o: Options) -> Result<bool, TopError> {
    let mut f = Fetcher {
        ep: o.endpoint.clone(),
        who_only: false,
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
    };
    if o.once || !term::is_tty(1) || !term::is_tty(0) {
        return Ok(plain(&mut f, &ctx, o.interval, o.once));
    }
    ctx.interactive = true;
    let screen = Screen::enter().map_err(TopError::Terminal)?;
    let mut view = ViewState::default();
    loop {
        let snap = f.snapshot();
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
            match keys::apply(&bytes, &mut view) {
                Action::Quit => return Ok(snap.hub.is_ok()),
                Action::Redraw => draw(&screen, &snap, &view, &ctx)?,
                Action::Nothing => {}
            }
        }
    }
}

fn draw(screen: &Screen, snap: &Snapshot, view: &ViewState, ctx: &Context) -> Result<(), TopError> {
    let (w, h) = screen.size();
    let frame = render::ansi(&render::fit(render::render(snap, view, ctx), w, h));
    let mut out = std::io::stdout().lock();
    out.write_all(frame.as_bytes())
        .and_then(|()| out.flush())
        .map_err(TopError::Write)
}

/// Plain lines: one snapshot per interval, separated by a blank line. A closed stdout (the
/// reader of a pipe went away) ends the view quietly, so this cannot fail: it returns
/// whether the last refresh reached the hub.
fn plain(f: &mut Fetcher, ctx: &Context, interval: Duration, once: bool) -> bool {
    let view = ViewState::default();
    loop {
        let snap = f.snapshot();
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
            return snap.hub.is_ok();
        }
        drop(out);
        if once {
            return snap.hub.is_ok();
        }
        std::thread::sleep(interval);
    }
}
