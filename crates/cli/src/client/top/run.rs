//! The loop of `agent-hub top`: fetch a snapshot, draw it, wait for the next refresh or a
//! key. Decides nothing itself: `render` draws, `keys` interprets, `snapshot` reads.

use super::keys::{self, Action};
use super::render::{self, Context, ViewState};
use super::snapshot::{self, LinkView, Snapshot, Source};
use super::term::{self, Screen};
use crate::client::{ClientError, Endpoint, Exchange};
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

struct Fetcher {
    ep: Endpoint,
    /// Set once the hub answered `activity` with an unknown-tag error: ask `who` instead.
    who_only: bool,
    status_path: Option<Result<PathBuf, String>>,
}

impl Fetcher {
    fn hub(&mut self) -> Result<(Source, snapshot::ActivityView), String> {
        if !self.who_only {
            match exchange(&self.ep, "{\"activity\":{}}\n", "activity") {
                Err(ClientError::Hub(m)) if m.contains("unknown tag") => self.who_only = true,
                other => {
                    return other
                        .map(|v| (Source::Activity, v))
                        .map_err(|e| e.to_string())
                }
            }
        }
        exchange(&self.ep, "{\"who\":{}}\n", "who")
            .map(|v| (Source::WhoOnly, v))
            .map_err(|e| e.to_string())
    }

    fn snapshot(&mut self) -> Snapshot {
        let hub = self.hub();
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
pub fn run(o: Options) -> Result<bool, String> {
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
        return plain(&mut f, &ctx, o.interval, o.once);
    }
    ctx.interactive = true;
    let screen = Screen::enter().map_err(|e| format!("cannot set up the terminal: {e}"))?;
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
            let bytes = screen.keys(left).map_err(|e| e.to_string())?;
            match keys::apply(&bytes, &mut view) {
                Action::Quit => return Ok(snap.hub.is_ok()),
                Action::Redraw => draw(&screen, &snap, &view, &ctx)?,
                Action::Nothing => {}
            }
        }
    }
}

fn draw(screen: &Screen, snap: &Snapshot, view: &ViewState, ctx: &Context) -> Result<(), String> {
    let (w, h) = screen.size();
    let frame = render::ansi(&render::fit(render::render(snap, view, ctx), w, h));
    let mut out = std::io::stdout().lock();
    out.write_all(frame.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write to the terminal: {e}"))
}

/// Plain lines: one snapshot per interval, separated by a blank line. A closed stdout (the
/// reader of a pipe went away) ends the view quietly.
fn plain(f: &mut Fetcher, ctx: &Context, interval: Duration, once: bool) -> Result<bool, String> {
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
            return Ok(snap.hub.is_ok());
        }
        drop(out);
        if once {
            return Ok(snap.hub.is_ok());
        }
        std::thread::sleep(interval);
    }
}
