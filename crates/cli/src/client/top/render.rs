//! Drawing one refresh of `agent-hub top` (docs/operations.md "Watching a hub"): a snapshot
//! and the view's settings in, styled lines out — agents (sorted, stuck ones marked), the
//! last envelopes' metadata, unfinished tasks with the requests they wait on (issue 37,
//! numbered for `a`), relay links, and the answering prompt under the header. `fit` cuts them
//! to a terminal's size; `ansi` and `plain` turn them into text for a terminal or for a pipe.
//!
//! Pure: no IO, no clock (the snapshot's time is "now"), so every frame is a unit test.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::answer::{answerable, Answering};
use super::snapshot::{
    attention, filters_hidden, is_remote, text_of, ActivityView, AgentView, Attention, OpenRequest,
    Snapshot, Source,
};
use super::usage::UsageSums;
use chrono::{DateTime, Utc};
use std::cmp::Ordering;

/// The agents table's sort column; `s` cycles through them in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortBy {
    Name,
    Queue,
    State,
    LastSeen,
}

impl SortBy {
    pub fn next(self) -> SortBy {
        match self {
            SortBy::Name => SortBy::Queue,
            SortBy::Queue => SortBy::State,
            SortBy::State => SortBy::LastSeen,
            SortBy::LastSeen => SortBy::Name,
        }
    }

    fn label(self) -> &'static str {
        match self {
            SortBy::Name => "name",
            SortBy::Queue => "queue",
            SortBy::State => "state",
            SortBy::LastSeen => "last seen",
        }
    }
}

/// What the operator chose with keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewState {
    pub sort: SortBy,
    pub reverse: bool,
    /// Answering a task's request (`a`, issue 37).
    pub answering: Answering,
}

impl Default for ViewState {
    /// Stuck agents first: what an operator opens the view for.
    fn default() -> ViewState {
        ViewState {
            sort: SortBy::State,
            reverse: false,
            answering: Answering::default(),
        }
    }
}

/// Fixed facts shown in the header, and the room there is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    pub port: u16,
    pub name: String,
    pub interval_ms: u64,
    /// Whether keys work (a terminal): the header then lists them.
    pub interactive: bool,
    /// One snapshot and out (`--once`): nothing is retried.
    pub once: bool,
    /// The terminal's width, when drawing on one: the agents table then narrows its widest
    /// columns so its NOTE stays readable. None (a pipe): every column as wide as its content.
    pub width: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Normal,
    Title,
    /// A table's column heads.
    Head,
    Stuck,
    Warn,
    Dim,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub style: Style,
    pub text: String,
}

/// A line of the frame. Control and bidi characters (an envelope's id or kind is any string a
/// sender chose) become `?` (`agent_hub_proto::kernel::text`, the one sanitiser), so nothing from the hub can
/// drive the operator's terminal.
fn line(style: Style, text: impl Into<String>) -> Line {
    let text: String = text.into();
    let text = match agent_hub_proto::kernel::text::for_terminal(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(clean) => clean,
    };
    Line { style, text }
}

/// `s` cut to `w` characters (the last one `…` when cut) and padded to `w`.
fn cell(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return format!("{s}{}", " ".repeat(w - n));
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    if w > 0 {
        out.push('…');
    }
    out
}

/// `cell`, right-aligned (numbers).
fn rcell(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n >= w {
        cell(s, w)
    } else {
        format!("{}{s}", " ".repeat(w - n))
    }
}

/// How long before `now` an RFC 3339 time was: `4s`, `12m`, `3h`, `2d`; `-` if absent.
pub fn ago(t: Option<&str>, now: DateTime<Utc>) -> String {
    let Some(t) = t.and_then(|t| DateTime::parse_from_rfc3339(t).ok()) else {
        return "-".into();
    };
    short((now - t.with_timezone(&Utc)).num_seconds())
}

/// A parked await's filter as `who` and `top` print it (SPEC §14): `any`, `reply-to=C`,
/// `kind=K` or both joined by `+`.
pub fn filter_label(reply_to: Option<&str>, kind: Option<&str>) -> String {
    match (reply_to, kind) {
        (None, None) => "any".to_owned(),
        (Some(r), None) => format!("reply-to={r}"),
        (None, Some(k)) => format!("kind={k}"),
        (Some(r), Some(k)) => format!("reply-to={r}+kind={k}"),
    }
}

/// The FILTERS cell: each parked await's filter; `hidden` when the hub left another agent's
/// filters out of this viewer's answer (SPEC §14 "Visibility"); `on its hub` for a linked
/// hub's agent that waits (filters never cross a link); `-` when nothing is parked.
pub fn filters(a: &AgentView) -> String {
    if filters_hidden(a) {
        return "hidden".into();
    }
    if a.parked.is_empty() {
        let waits = a.state_text().as_deref() == Some("waiting");
        return if waits { "on its hub" } else { "-" }.into();
    }
    a.parked
        .iter()
        .map(|f| filter_label(f.reply_to.as_deref(), f.kind.as_deref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The AWAITS cell: how many are parked, `?` where the viewer cannot count them.
pub fn awaits(a: &AgentView) -> String {
    let waits = a.state_text().as_deref() == Some("waiting");
    if a.parked.is_empty() && waits && (filters_hidden(a) || is_remote(a)) {
        "?".into()
    } else {
        a.parked.len().to_string()
    }
}

/// Liveness order for sorting: the states that need a look first.
fn state_rank(a: &AgentView) -> u8 {
    match a.state_text().as_deref() {
        Some("gone") => 0,
        None | Some("unknown") => 1,
        Some("idle") => 2,
        Some("busy") => 3,
        Some("waiting") => 4,
        Some(_) => 1,
    }
}

/// One row of the agents table: an agent of the roster or of a linked hub, or a name nobody
/// holds that has mail waiting (SPEC §14 "Mail nobody holds").
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    name: String,
    state: String,
    /// How long it has been in its state (`FOR`).
    since: String,
    queued: u64,
    awaits: String,
    filters: String,
    last_seen: Option<String>,
    seen: String,
    style: Style,
    note: String,
    severity: u8,
    state_rank: u8,
}

/// The agents table's rows, unsorted: every agent, then every name nobody holds, which is
/// stuck for the reason the hub gives (a typo, a hub this one does not forward to, an ended
/// task). For a viewer who is not an operator the hub lists only the names holding its own
/// mail, counted as its own.
fn rows(hub: &ActivityView, now: DateTime<Utc>) -> Vec<Row> {
    let mut out: Vec<Row> = hub
        .agents
        .iter()
        .map(|a| {
            let att = attention(a);
            let (style, note) = match att {
                Attention::Stuck(why) => (Style::Stuck, format!("STUCK: {why}")),
                Attention::Warn(why) => (Style::Warn, why.to_owned()),
                Attention::Note(what) => (Style::Normal, what.to_owned()),
                Attention::Fine => (Style::Normal, String::new()),
            };
            // How long the agent has been in its state, when the hub says (an RFC 3339 time).
            let since = text_of(&a.since)
                .filter(|s| DateTime::parse_from_rfc3339(s).is_ok())
                .map_or_else(|| "-".to_owned(), |s| ago(Some(&s), now));
            Row {
                name: a.name.clone(),
                state: a.state_text().unwrap_or_else(|| "-".into()),
                since,
                queued: a.queued,
                awaits: awaits(a),
                filters: filters(a),
                last_seen: a.last_seen.clone(),
                seen: ago(a.last_seen.as_deref(), now),
                style,
                note,
                severity: att.severity(),
                state_rank: state_rank(a),
            }
        })
        .collect();
    for q in hub.off_roster.iter().flatten() {
        out.push(Row {
            name: q.name.clone(),
            state: "-".into(),
            since: "-".into(),
            queued: q.queued,
            awaits: "-".into(),
            filters: "-".into(),
            last_seen: None,
            seen: "-".into(),
            style: Style::Stuck,
            note: format!("STUCK: {}", q.reason),
            severity: Attention::Stuck("").severity(), // a name nobody holds is stuck
            state_rank: 0,
        });
    }
    out
}

/// The rows in the order the view shows them; ties broken by name.
fn sort_rows(rows: &mut [Row], view: &ViewState) {
    rows.sort_by(|a, b| {
        let primary = match view.sort {
            SortBy::Name => Ordering::Equal,
            SortBy::Queue => b.queued.cmp(&a.queued),
            SortBy::State => (a.severity, a.state_rank).cmp(&(b.severity, b.state_rank)),
            // RFC 3339 times in UTC with fixed precision (as the hub writes them) sort as
            // text; never seen goes last.
            SortBy::LastSeen => match (&a.last_seen, &b.last_seen) {
                (Some(x), Some(y)) => y.cmp(x),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            },
        };
        let o = primary.then_with(|| a.name.cmp(&b.name));
        if view.reverse {
            o.reverse()
        } else {
            o
        }
    });
}

/// Longest a NAME or FILTERS cell grows with its content on a terminal; past it the cell is
/// cut (`…`).
const NAME_MAX: usize = 32;
const FILTERS_MAX: usize = 48;
/// Narrowest they get to make room for the NOTE on a narrow terminal.
const NAME_MIN: usize = 10;
const FILTERS_MIN: usize = 7;

/// The agents table's column widths (issue 35: an empty FILTERS column took 28 columns and
/// cut the NOTE at 80): each as wide as its widest cell or its head, so a pipe gets every
/// cell whole. On a terminal NAME and FILTERS stop at a cap, and where the widest NOTE still
/// does not fit, FILTERS and then NAME give up columns, down to a floor, so the note that
/// says why an agent is stuck stays readable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Widths {
    name: usize,
    state: usize,
    since: usize,
    queue: usize,
    awaits: usize,
    filters: usize,
    seen: usize,
}

const HEADS: [&str; 8] = [
    "NAME", "STATE", "FOR", "QUEUE", "AWAITS", "FILTERS", "SEEN", "NOTE",
];

fn widths(rows: &[Row], width: Option<usize>) -> Widths {
    let w = |head: usize, cell: &dyn Fn(&Row) -> usize| -> usize {
        rows.iter()
            .map(cell)
            .fold(HEADS[head].chars().count(), usize::max)
    };
    let chars = |s: &str| s.chars().count();
    let mut out = Widths {
        name: w(0, &|r| chars(&r.name)),
        state: w(1, &|r| chars(&r.state)),
        since: w(2, &|r| chars(&r.since)),
        queue: w(3, &|r| chars(&r.queued.to_string())),
        awaits: w(4, &|r| chars(&r.awaits)),
        filters: w(5, &|r| chars(&r.filters)),
        seen: w(6, &|r| chars(&r.seen)),
    };
    let Some(width) = width else {
        return out;
    };
    out.name = out.name.min(NAME_MAX);
    out.filters = out.filters.min(FILTERS_MAX);
    let note = rows.iter().map(|r| chars(&r.note)).max().unwrap_or(0);
    let used = out.name
        + out.state
        + out.since
        + out.queue
        + out.awaits
        + out.filters
        + out.seen
        + HEADS.len()
        - 1
        + note;
    let mut over = used.saturating_sub(width);
    for (col, floor) in [(&mut out.filters, FILTERS_MIN), (&mut out.name, NAME_MIN)] {
        let give = over.min(col.saturating_sub(floor));
        *col -= give;
        over -= give;
    }
    out
}

/// One line of the agents table (the head or a row), cut and padded to `w`.
fn table_line(cells: [&str; 8], w: &Widths) -> String {
    format!(
        "{} {} {} {} {} {} {} {}",
        cell(cells[0], w.name),
        cell(cells[1], w.state),
        rcell(cells[2], w.since),
        rcell(cells[3], w.queue),
        rcell(cells[4], w.awaits),
        cell(cells[5], w.filters),
        rcell(cells[6], w.seen),
        cells[7]
    )
    .trim_end()
    .to_owned()
}

/// Every line of one frame, uncut.
pub fn render(snap: &Snapshot, view: &ViewState, ctx: &Context) -> Vec<Line> {
    let now = snap.taken;
    let mut out = Vec::new();
    let keys = if ctx.interactive {
        "   keys: s sort, r reverse, q quit"
    } else {
        ""
    };
    out.push(line(
        Style::Title,
        format!(
            "agent-hub top — 127.0.0.1:{} as {} — {} — every {:.1}s — sort: {}{}{keys}",
            ctx.port,
            ctx.name,
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            ctx.interval_ms as f64 / 1000.0,
            view.sort.label(),
            if view.reverse { " (reversed)" } else { "" },
        ),
    ));
    for p in view.answering.prompt(&snap.requests) {
        let style = if p.warn { Style::Warn } else { Style::Title };
        out.push(line(style, p.text));
    }
    let (source, hub) = match &snap.hub {
        Ok((source, hub)) => (*source, hub),
        Err(why) => {
            out.push(line(Style::Stuck, format!("hub: {why}")));
            if !ctx.once {
                let down = snap
                    .down_since
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
                out.push(line(
                    Style::Warn,
                    format!(
                        "retrying every {:.1}s; no answer for {}",
                        ctx.interval_ms as f64 / 1000.0,
                        ago(down.as_deref(), now)
                    ),
                ));
            }
            push_links(&mut out, snap);
            return out;
        }
    };
    let mut table = rows(hub, now);
    sort_rows(&mut table, view);
    let stuck = table.iter().filter(|r| r.style == Style::Stuck).count();
    let queued: u64 = table.iter().map(|r| r.queued).sum();
    let nobodys = hub.off_roster.as_ref().map_or(0, Vec::len);
    let nobodys = if nobodys > 0 {
        format!("   names nobody holds {nobodys}")
    } else {
        String::new()
    };
    out.push(line(Style::Normal, ""));
    out.push(line(
        Style::Title,
        format!(
            "AGENTS {}   queued {queued}   stuck {stuck}{nobodys}",
            hub.agents.len()
        ),
    ));
    let w = widths(&table, ctx.width);
    out.push(line(Style::Head, table_line(HEADS, &w)));
    for r in &table {
        let queued = r.queued.to_string();
        let cells = [
            r.name.as_str(),
            &r.state,
            &r.since,
            &queued,
            &r.awaits,
            &r.filters,
            &r.seen,
            &r.note,
        ];
        out.push(line(r.style, table_line(cells, &w)));
    }
    out.push(line(Style::Normal, ""));
    if source == Source::WhoOnly {
        out.push(line(
            Style::Dim,
            "this hub has no `activity` verb: recent envelopes and tasks are not shown",
        ));
    } else {
        push_envelopes(&mut out, hub, now);
        out.push(line(Style::Normal, ""));
        push_tasks(&mut out, hub, &snap.requests, ctx, now);
        if let Some(usage) = snap.usage.as_ref().filter(|u| u.all.tasks > 0) {
            out.push(line(Style::Normal, ""));
            push_usage(&mut out, usage);
        }
    }
    push_links(&mut out, snap);
    out
}

fn push_envelopes(out: &mut Vec<Line>, hub: &super::snapshot::ActivityView, now: DateTime<Utc>) {
    out.push(line(
        Style::Title,
        format!(
            "RECENT ENVELOPES {} (newest first; metadata only)",
            hub.envelopes.len()
        ),
    ));
    if hub.envelopes.is_empty() {
        out.push(line(Style::Dim, "none accepted since the hub started"));
        return;
    }
    out.push(line(
        Style::Head,
        format!(
            "{} {} {} {} {} {}",
            rcell("AGE", 5),
            cell("ID", 14),
            cell("FROM", 16),
            cell("TO", 16),
            cell("KIND", 12),
            "STATE"
        ),
    ));
    for e in &hub.envelopes {
        let state_age = match e.state_at.as_deref() {
            Some(t) => format!("{} ({})", e.state, ago(Some(t), now)),
            None => e.state.clone(),
        };
        out.push(line(
            Style::Normal,
            format!(
                "{} {} {} {} {} {}",
                rcell(&ago(e.accepted_at.as_deref(), now), 5),
                cell(&e.id, 14),
                cell(&e.from, 16),
                cell(&e.to, 16),
                cell(&e.kind, 12),
                state_age
            ),
        ));
    }
}

/// The TASKS section: each unfinished task, the requests it waits on under it (then those of
/// tasks `activity` does not list, which the viewer may answer all the same).
fn push_tasks(
    out: &mut Vec<Line>,
    hub: &super::snapshot::ActivityView,
    requests: &[OpenRequest],
    ctx: &Context,
    now: DateTime<Utc>,
) {
    // The key that answers is named here, where requests wait, not in the header: the header
    // is cut at 132 columns already, and `a` does nothing useful without a request.
    let waiting = if requests.is_empty() {
        String::new()
    } else if ctx.interactive {
        format!("   requests waiting {} (a: answer)", requests.len())
    } else {
        format!("   requests waiting {}", requests.len())
    };
    out.push(line(
        Style::Title,
        format!("TASKS {} unfinished{waiting}", hub.tasks.len()),
    ));
    let numbers = answerable(requests);
    let number = |r: &OpenRequest| {
        numbers
            .iter()
            .position(|n| std::ptr::eq(*n, r))
            .map(|i| i + 1)
    };
    let push_requests = |out: &mut Vec<Line>, task: &str| {
        for r in requests.iter().filter(|r| r.task == task) {
            push_request(out, r, number(r), now);
        }
    };
    if hub.tasks.is_empty() && requests.is_empty() {
        return;
    }
    out.push(line(
        Style::Head,
        format!(
            "{} {} {} {} {}",
            cell("TASK", 22),
            cell("AGENT", 12),
            cell("DELEGATOR", 16),
            cell("STATE", 11),
            "RUNNING"
        ),
    ));
    for t in &hub.tasks {
        let agent = match &t.peer {
            Some(p) => format!("{}@{p}", t.agent),
            None => t.agent.clone(),
        };
        out.push(line(
            Style::Normal,
            format!(
                "{} {} {} {} {}",
                cell(&t.task, 22),
                cell(&agent, 12),
                cell(&t.delegator, 16),
                cell(&t.state, 11),
                ago(t.started_at.as_deref(), now)
            ),
        ));
        push_requests(out, &t.task);
    }
    let mut others: Vec<&str> = requests
        .iter()
        .map(|r| r.task.as_str())
        .filter(|t| !hub.tasks.iter().any(|h| h.task == *t))
        .collect();
    others.dedup();
    for task in others {
        out.push(line(
            Style::Normal,
            format!("{} (a task you may answer for)", cell(task, 22)),
        ));
        push_requests(out, task);
    }
}

/// The USAGE section (issue 38; docs/delegation.md "Cost and usage"): the tokens and cost of
/// the tasks the hub's `tasks` answer lists, in all and per delegator and per agent. A figure
/// nobody reported is `-`, a lower bound ends in `+`, and `unmetered N` counts the tasks that
/// ran and reported nothing (never `unmetered 0`).
fn push_usage(out: &mut Vec<Line>, u: &UsageSums) {
    let unmetered = u.all.unmetered_text();
    let unmetered = if unmetered.is_empty() {
        String::new()
    } else {
        format!("   {unmetered}")
    };
    out.push(line(
        Style::Title,
        format!(
            "USAGE {} tasks (the records you may see)   tokens {}   cost {}{unmetered}",
            u.all.tasks,
            u.all.tokens_text(),
            u.all.cost_text()
        ),
    ));
    for (head, groups) in [("DELEGATOR", &u.by_delegator), ("AGENT", &u.by_agent)] {
        out.push(line(
            Style::Head,
            format!(
                "{} {} {} {}",
                cell(head, 22),
                rcell("TASKS", 6),
                rcell("TOKENS", 15),
                "COST"
            ),
        ));
        for (name, s) in groups.iter() {
            let cost = s.cost_text();
            let text = match s.unmetered_text() {
                n if n.is_empty() => cost,
                n => format!("{} {n}", cell(&cost, 16)),
            };
            out.push(line(
                Style::Normal,
                format!(
                    "{} {} {} {}",
                    cell(name, 22),
                    rcell(&s.tasks.to_string(), 6),
                    rcell(&s.tokens_text(), 15),
                    text
                ),
            ));
        }
    }
}

/// One request under its task, in two lines that keep what answering needs at the start, so
/// a narrow terminal cuts only the title's end: its number for `a` (`[n]`; `[-]` when it has
/// no id or options to answer with, `[+]` past the ninth), id, type and tool kind, title;
/// then its options, how long it has waited and when its fallback answers it.
fn push_request(out: &mut Vec<Line>, r: &OpenRequest, number: Option<usize>, now: DateTime<Utc>) {
    let v = &r.request;
    let n = match number {
        Some(n) if n <= super::answer::MAX_PICK => format!("[{n}]"),
        Some(_) => "[+]".to_owned(),
        None => "[-]".to_owned(),
    };
    let tool = v
        .tool_kind
        .as_deref()
        .map(|k| format!(" {k}"))
        .unwrap_or_default();
    out.push(line(
        Style::Warn,
        format!(
            "  {n} {} {}{tool} {}",
            v.request.as_deref().unwrap_or("-"),
            v.kind.as_deref().unwrap_or("request"),
            v.title.as_deref().unwrap_or("")
        )
        .trim_end()
        .to_owned(),
    ));
    let options = if v.options.is_empty() {
        "-".to_owned()
    } else {
        v.options.join(", ")
    };
    let waited = v
        .waiting_ms
        .map_or_else(|| "-".to_owned(), |ms| short((ms / 1000) as i64));
    let expires = match v
        .expires_at
        .as_deref()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
    {
        Some(t) => {
            let left = (t.with_timezone(&Utc) - now).num_seconds();
            if left > 0 {
                format!("expires in {}", short(left))
            } else {
                "expires now".to_owned()
            }
        }
        None => "expiry unknown".to_owned(),
    };
    out.push(line(
        Style::Normal,
        format!("      options {options}   waiting {waited}   {expires}"),
    ));
}

/// `4s`, `12m`, `3h`, `2d` for a count of seconds, as `ago` counts.
fn short(secs: i64) -> String {
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn push_links(out: &mut Vec<Line>, snap: &Snapshot) {
    let Some(links) = &snap.links else {
        return;
    };
    out.push(line(Style::Normal, ""));
    let links = match links {
        Ok(l) => l,
        Err(why) => {
            out.push(line(Style::Title, "RELAY LINKS"));
            out.push(line(Style::Warn, why.clone()));
            return;
        }
    };
    out.push(line(Style::Title, format!("RELAY LINKS {}", links.len())));
    if links.is_empty() {
        return;
    }
    out.push(line(
        Style::Head,
        format!(
            "{} {} {} {} {} {}",
            cell("PEER", 20),
            cell("STATE", 11),
            cell("LINK", 9),
            rcell("BEAT", 5),
            rcell("RECONN", 6),
            "LAST ERROR"
        ),
    ));
    for l in links {
        let style = if l.state == "up" {
            Style::Normal
        } else {
            Style::Warn
        };
        out.push(line(
            style,
            format!(
                "{} {} {} {} {} {}",
                cell(&l.peer, 20),
                cell(&l.state, 11),
                cell(l.direction.as_deref().unwrap_or("-"), 9),
                rcell(&ago(l.last_heartbeat.as_deref(), snap.taken), 5),
                rcell(&l.reconnects.to_string(), 6),
                l.last_error.as_deref().unwrap_or("")
            )
            .trim_end()
            .to_owned(),
        ));
    }
}

/// The lines cut to a terminal of `width` columns and `height` rows: each line to `width`
/// characters, and past `height` the last row says how many lines did not fit.
pub fn fit(lines: Vec<Line>, width: usize, height: usize) -> Vec<Line> {
    let width = width.max(1);
    let height = height.max(1);
    let hidden = lines.len().saturating_sub(height);
    let keep = if hidden > 0 { height - 1 } else { lines.len() };
    let mut out: Vec<Line> = lines
        .into_iter()
        .take(keep)
        .map(|l| Line {
            text: cut(&l.text, width),
            style: l.style,
        })
        .collect();
    if hidden > 0 {
        let more = format!("… {} more lines (a taller terminal shows them)", hidden + 1);
        out.push(line(Style::Dim, cut(&more, width)));
    }
    out
}

fn cut(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// A frame for a terminal: home the cursor, each line styled and cleared to its end, then
/// the rest of the screen cleared (so a shorter frame leaves nothing of the last one).
pub fn ansi(lines: &[Line]) -> String {
    let mut out = String::from("\x1b[H");
    for (i, l) in lines.iter().enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        let sgr = match l.style {
            Style::Normal => "",
            Style::Title => "\x1b[1m",
            Style::Head => "\x1b[7m",
            Style::Stuck => "\x1b[1;31m",
            Style::Warn => "\x1b[33m",
            Style::Dim => "\x1b[2m",
        };
        out.push_str(sgr);
        out.push_str(&l.text);
        if !sgr.is_empty() {
            out.push_str("\x1b[0m");
        }
        out.push_str("\x1b[K");
    }
    out.push_str("\x1b[J");
    out
}

/// A frame for a pipe or a file: the lines as they are (control characters already `?`), no
/// escapes, each ending with a newline.
pub fn plain(lines: &[Line]) -> String {
    let mut out = String::new();
    for l in lines {
        out.push_str(&l.text);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::{
        ActivityView, EnvelopeView, FilterView, LinkView, OffRosterView, TaskView,
    };
    use super::*;
    use serde_json::Value;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn agent(name: &str, queued: u64, parked: Vec<FilterView>, state: Option<&str>) -> AgentView {
        AgentView {
            name: name.into(),
            queued,
            parked,
            state: state.map(|s| Value::String(s.into())),
            last_seen: Some("2026-12-01T09:59:50.000Z".into()),
            ..AgentView::default()
        }
    }

    fn snap() -> Snapshot {
        let hub = ActivityView {
            agents: vec![
                agent("alpha", 0, vec![FilterView::default()], Some("waiting")),
                agent("bravo", 3, vec![], None),
                agent(
                    "charlie",
                    1,
                    vec![FilterView {
                        reply_to: Some("x1".into()),
                        kind: Some("result".into()),
                    }],
                    None,
                ),
            ],
            envelopes: vec![EnvelopeView {
                id: "e-1".into(),
                from: "alpha".into(),
                to: "bravo".into(),
                kind: "task".into(),
                accepted_at: Some("2026-12-01T09:59:00.000Z".into()),
                state: "queued".into(),
                state_at: Some("2026-12-01T09:59:00.000Z".into()),
            }],
            tasks: vec![TaskView {
                task: "task-0123".into(),
                agent: "codex".into(),
                delegator: "alpha".into(),
                state: "running".into(),
                started_at: Some("2026-12-01T09:58:00.000Z".into()),
                ..TaskView::default()
            }],
            off_roster: Some(vec![OffRosterView {
                name: "wrker".into(),
                queued: 2,
                reason: "no such agent".into(),
            }]),
        };
        Snapshot {
            taken: t("2026-12-01T10:00:00Z"),
            hub: Ok((Source::Activity, hub)),
            down_since: None,
            requests: Vec::new(),
            usage: None,
            links: Some(Ok(vec![LinkView {
                peer: "lab".into(),
                state: "backoff".into(),
                reconnects: 4,
                last_error: Some("connection refused".into()),
                ..LinkView::default()
            }])),
        }
    }

    fn ctx() -> Context {
        Context {
            port: 46110,
            name: "ops".into(),
            interval_ms: 1000,
            interactive: true,
            once: false,
            width: None,
        }
    }

    fn texts(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| l.text.clone()).collect()
    }

    fn row<'a>(lines: &'a [Line], start: &str) -> &'a Line {
        lines
            .iter()
            .find(|l| l.text.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start:?} in {:#?}", texts(lines)))
    }

    #[test]
    fn a_snapshot_renders_agents_envelopes_tasks_and_links_with_the_stuck_agent_marked() {
        let lines = render(&snap(), &ViewState::default(), &ctx());
        let all = texts(&lines).join("\n");
        assert!(lines[0].text.starts_with("agent-hub top — 127.0.0.1:46110 as ops — 2026-12-01T10:00:00Z — every 1.0s — sort: state"), "{all}");
        assert!(lines[0].text.ends_with("keys: s sort, r reverse, q quit"));
        assert!(
            all.contains("AGENTS 3   queued 6   stuck 2   names nobody holds 1"),
            "{all}"
        );
        let bravo = row(&lines, "bravo");
        assert_eq!(bravo.style, Style::Stuck);
        assert!(
            bravo.text.ends_with("STUCK: mail queued, no reader"),
            "{}",
            bravo.text
        );
        let charlie = row(&lines, "charlie");
        assert_eq!(charlie.style, Style::Warn);
        assert!(charlie.text.contains("reply-to=x1+kind=result"));
        assert!(
            charlie.text.ends_with("waits for other mail"),
            "{}",
            charlie.text
        );
        let alpha = row(&lines, "alpha ");
        assert_eq!(alpha.style, Style::Normal);
        assert!(alpha.text.contains("waiting"));
        assert!(alpha.text.contains(" any "), "{}", alpha.text);
        assert!(
            alpha.text.ends_with("10s"),
            "last seen 10 s ago, no note: {}",
            alpha.text
        );
        // A name nobody holds is a row of its own, stuck for the hub's reason.
        let wrker = row(&lines, "wrker ");
        assert_eq!(wrker.style, Style::Stuck);
        assert!(
            wrker.text.ends_with("STUCK: no such agent"),
            "{}",
            wrker.text
        );
        // Envelope metadata, task, link.
        let env = row(&lines, "  60s e-1");
        assert!(env.text.contains("alpha") && env.text.contains("bravo"));
        assert!(env.text.ends_with("queued (60s)"), "{}", env.text);
        assert!(row(&lines, "task-0123").text.contains("running"));
        let link = row(&lines, "lab ");
        assert_eq!(link.style, Style::Warn);
        assert!(link.text.ends_with("connection refused"));
    }

    #[test]
    fn sort_cycles_through_name_queue_state_and_last_seen_and_reverses() {
        let mut s = snap();
        let Ok((_, hub)) = &mut s.hub else {
            unreachable!()
        };
        hub.agents[0].last_seen = Some("2026-12-01T09:59:59.000Z".into());
        hub.agents[2].last_seen = None;
        let now = s.taken;
        let names = |v: &ViewState| -> Vec<String> {
            let mut r = rows(hub, now);
            sort_rows(&mut r, v);
            r.into_iter().map(|r| r.name).collect()
        };
        let mut v = ViewState::default();
        assert_eq!(
            names(&v),
            ["wrker", "bravo", "charlie", "alpha"],
            "stuck (nobody's first), then warn, then fine"
        );
        v.sort = v.sort.next();
        assert_eq!(v.sort, SortBy::LastSeen);
        assert_eq!(
            names(&v),
            ["alpha", "bravo", "charlie", "wrker"],
            "newest first, never last"
        );
        v.sort = v.sort.next();
        assert_eq!(v.sort, SortBy::Name);
        assert_eq!(names(&v), ["alpha", "bravo", "charlie", "wrker"]);
        v.sort = v.sort.next();
        assert_eq!(v.sort, SortBy::Queue);
        assert_eq!(names(&v), ["bravo", "wrker", "charlie", "alpha"]);
        v.reverse = true;
        assert_eq!(names(&v), ["alpha", "charlie", "wrker", "bravo"]);
        v.sort = v.sort.next();
        assert_eq!(v.sort, SortBy::State);
    }

    /// The demo of issue 35 (`agent-hub-server demo`, `operators = []`): worker parked on
    /// `kind=review` with a `task` queued, and a send to the typo `wrker`, as each of the two
    /// agents sees it.
    fn demo(viewer: &str) -> Snapshot {
        let worker = AgentView {
            name: "worker".into(),
            queued: 1,
            parked: if viewer == "worker" {
                vec![FilterView {
                    reply_to: None,
                    kind: Some("review".into()),
                }]
            } else {
                Vec::new()
            },
            state: Some(Value::String("waiting".into())),
            since: Some(Value::String("2026-12-01T09:59:58.000Z".into())),
            source: Some(Value::String("await".into())),
            last_seen: Some("2026-12-01T09:59:58.000Z".into()),
            ..AgentView::default()
        };
        let orchestrator = AgentView {
            name: "orchestrator".into(),
            state: Some(Value::String("unknown".into())),
            last_seen: Some("2026-12-01T09:59:59.000Z".into()),
            ..AgentView::default()
        };
        // Only the sender of the typo's mail sees that name (SPEC §14 "Visibility").
        let off_roster = (viewer == "orchestrator").then(|| {
            vec![OffRosterView {
                name: "wrker".into(),
                queued: 1,
                reason: "no such agent".into(),
            }]
        });
        Snapshot {
            taken: t("2026-12-01T10:00:00Z"),
            hub: Ok((
                Source::Activity,
                ActivityView {
                    agents: vec![orchestrator, worker],
                    off_roster: Some(off_roster.unwrap_or_default()),
                    ..ActivityView::default()
                },
            )),
            down_since: None,
            requests: Vec::new(),
            usage: None,
            links: None,
        }
    }

    /// Issue 35: at 80 columns the NOTE is whole (widths follow content; an empty FILTERS
    /// column no longer takes 28), and worker's parked await is never called no reader,
    /// whether the viewer may see its filters or not.
    #[test]
    fn at_80_columns_the_demo_reads_the_same_for_both_agents_and_no_note_is_cut() {
        for viewer in ["orchestrator", "worker"] {
            let mut c = ctx();
            c.name = viewer.into();
            c.width = Some(80);
            let lines = fit(render(&demo(viewer), &ViewState::default(), &c), 80, 40);
            let all = texts(&lines).join("\n");
            assert!(!all.contains("STUCK: mail queued"), "{viewer}:\n{all}");
            let head = row(&lines, "NAME ");
            assert!(head.text.ends_with(" NOTE"), "{viewer}: {}", head.text);
            let worker = row(&lines, "worker ");
            assert_eq!(worker.style, Style::Warn, "{viewer}");
            assert!(
                worker.text.ends_with("waits for other mail"),
                "{viewer}: {}",
                worker.text
            );
            let filters = if viewer == "worker" {
                "kind=review"
            } else {
                "hidden"
            };
            assert!(worker.text.contains(filters), "{viewer}: {}", worker.text);
            let awaits = if viewer == "worker" { " 1 " } else { " ? " };
            assert!(worker.text.contains(awaits), "{viewer}: {}", worker.text);
            for l in &lines[1..] {
                assert!(!l.text.contains('…'), "{viewer}: cut at 80: {:?}", l.text);
            }
        }
        let c = Context {
            width: Some(80),
            ..ctx()
        };
        let lines = render(&demo("orchestrator"), &ViewState::default(), &c);
        let wrker = row(&lines, "wrker ");
        assert_eq!(wrker.style, Style::Stuck);
        assert!(
            wrker.text.ends_with("STUCK: no such agent"),
            "{}",
            wrker.text
        );
        assert!(row(&lines, "AGENTS 2").text.contains("stuck 1"));
    }

    /// Long filters and names give up columns on a narrow terminal before the NOTE does; in a
    /// pipe (no width) every cell is whole up to its cap.
    #[test]
    fn a_narrow_terminal_cuts_filters_and_names_before_the_note() {
        let mut s = demo("worker");
        let Ok((_, hub)) = &mut s.hub else {
            unreachable!()
        };
        hub.agents[1].parked[0].reply_to = Some("task-0123456789abcdef0123456789abcdef".into());
        hub.agents[0].name = "orchestrator-of-the-night-shift".into();
        hub.agents[0].queued = 2;
        let wide = render(&s, &ViewState::default(), &ctx());
        assert!(
            row(&wide, "worker ")
                .text
                .contains("reply-to=task-0123456789abcdef0123456789abcdef+kind=review"),
            "whole without a width"
        );
        let c = Context {
            width: Some(80),
            ..ctx()
        };
        let lines = fit(render(&s, &ViewState::default(), &c), 80, 40);
        let worker = row(&lines, "worker ");
        assert!(
            worker.text.ends_with("waits for other mail"),
            "{}",
            worker.text
        );
        assert!(
            worker.text.contains('…'),
            "the filter is cut: {}",
            worker.text
        );
        let night = row(&lines, "orchestrato…");
        assert!(
            night.text.ends_with("STUCK: mail queued, no reader"),
            "{}",
            night.text
        );
        assert!(lines.iter().all(|l| l.text.chars().count() <= 80));
    }

    fn open(task: &str, id: &str, title: &str, options: &[&str]) -> OpenRequest {
        OpenRequest {
            task: task.into(),
            request: crate::client::task::RequestView {
                request: Some(id.into()),
                kind: Some("permission".into()),
                title: Some(title.into()),
                tool_kind: Some("execute".into()),
                options: options.iter().map(|o| (*o).into()).collect(),
                opened_at: Some("2026-12-01T09:58:00.000Z".into()),
                expires_at: Some("2026-12-01T10:08:00.000Z".into()),
                waiting_ms: Some(125_000),
            },
        }
    }

    /// Issue 37: the requests a task waits on, under it in TASKS, at 80 columns: what
    /// answering needs (the number, the id, the options, the time left) is never cut, a long
    /// or hostile title is; the prompt of a pick sits under the header.
    #[test]
    fn at_80_columns_open_requests_show_under_their_task_numbered_for_answering() {
        let mut s = snap();
        s.requests = vec![
            open(
                "task-0123",
                "req-0123456789abcdef",
                "Run cargo test --workspace --all-targets -- --include-ignored and then some more words",
                &["allow", "reject"],
            ),
            open("task-0123", "req-1111111111111111", "Odd one", &[]),
            open("task-other", "req-2222222222222222", "Edit src/\u{1b}]52;c;eA==\u{7}a.rs", &["allow_once", "allow_always", "reject_once"]),
        ];
        let c = Context {
            width: Some(80),
            ..ctx()
        };
        let lines = fit(render(&s, &ViewState::default(), &c), 80, 60);
        let all = texts(&lines).join("\n");
        assert!(lines.iter().all(|l| l.text.chars().count() <= 80), "{all}");
        assert!(!all.contains('\u{1b}'), "{all}");
        assert_eq!(
            row(&lines, "TASKS").text,
            "TASKS 1 unfinished   requests waiting 3 (a: answer)"
        );
        let at = lines
            .iter()
            .position(|l| l.text.starts_with("task-0123"))
            .unwrap();
        let first = &lines[at + 1];
        assert_eq!(first.style, Style::Warn);
        assert!(
            first
                .text
                .starts_with("  [1] req-0123456789abcdef permission execute Run cargo test"),
            "{}",
            first.text
        );
        assert!(
            first.text.ends_with('…'),
            "the long title is cut: {}",
            first.text
        );
        assert_eq!(
            lines[at + 2].text,
            "      options allow, reject   waiting 2m   expires in 8m"
        );
        assert!(
            lines[at + 3].text.starts_with("  [-] req-1111111111111111"),
            "no options: not numbered"
        );
        assert_eq!(
            lines[at + 4].text,
            "      options -   waiting 2m   expires in 8m"
        );
        assert!(
            lines[at + 5].text.starts_with("task-other")
                && lines[at + 5].text.ends_with("(a task you may answer for)")
        );
        assert!(
            lines[at + 6].text.starts_with(
                "  [2] req-2222222222222222 permission execute Edit src/?]52;c;eA==?a.rs"
            ),
            "{}",
            lines[at + 6].text
        );
        assert_eq!(
            lines[at + 7].text,
            "      options allow_once, allow_always, reject_once   waiting 2m   expires in 8m"
        );
        // A pick under way: its prompt under the header, whole at 80 columns.
        let mut v = ViewState::default();
        v.answering.begin(&s.requests);
        let lines = fit(render(&s, &v, &c), 80, 60);
        assert_eq!(
            lines[1].text,
            "answer which request? 1-2 (its [n] under TASKS); Esc: back"
        );
        v.answering.digit(b'2', &s.requests);
        let lines = fit(render(&s, &v, &c), 80, 60);
        assert_eq!(
            lines[1].text,
            "answer req-2222222222222222 with (Esc: back): Edit src/?]52;c;eA==?a.rs"
        );
        assert_eq!(
            lines[2].text,
            "  1 allow_once   2 allow_always   3 reject_once"
        );
        // Plain lines (no keys): the same rows, no hint about a key.
        let mut plain_ctx = ctx();
        plain_ctx.interactive = false;
        let all = texts(&render(&s, &ViewState::default(), &plain_ctx)).join("\n");
        assert!(
            all.contains("TASKS 1 unfinished   requests waiting 3\n"),
            "{all}"
        );
        assert!(all.contains("  [1] req-0123456789abcdef"));
        // None waiting: the section as before.
        let all = texts(&render(&snap(), &ViewState::default(), &c)).join("\n");
        assert!(all.contains("TASKS 1 unfinished\n"), "{all}");
        assert!(!all.contains("[1]"));
    }

    #[test]
    fn fit_cuts_every_line_to_the_width_and_says_what_the_height_hid() {
        let lines = render(&snap(), &ViewState::default(), &ctx());
        let n = lines.len();
        let fitted = fit(lines.clone(), 30, 8);
        assert_eq!(fitted.len(), 8);
        assert!(fitted.iter().all(|l| l.text.chars().count() <= 30));
        assert!(fitted[0].text.ends_with('…'));
        assert_eq!(
            fitted[7].text,
            cut(
                &format!("… {} more lines (a taller terminal shows them)", n - 7),
                30
            )
        );
        // Enough room: unchanged.
        assert_eq!(fit(lines.clone(), 500, 500), lines);
        // Degenerate sizes never panic.
        assert_eq!(fit(lines, 0, 0).len(), 1);
        assert_eq!(cell("abcdef", 4), "abc…");
        assert_eq!(cell("ab", 4), "ab  ");
        assert_eq!(rcell("7", 3), "  7");
    }

    #[test]
    fn plain_mode_has_no_escapes_and_neutralises_control_characters() {
        let mut s = snap();
        if let Ok((_, hub)) = &mut s.hub {
            hub.envelopes[0].kind = "evil\x1b[2Jkind".into();
        }
        let mut c = ctx();
        c.interactive = false;
        let lines = render(&s, &ViewState::default(), &c);
        assert!(
            !lines[0].text.contains("keys:"),
            "no keys without a terminal"
        );
        let text = plain(&lines);
        assert!(!text.contains('\x1b'), "{text}");
        assert!(text.contains("evil?[2Jkind"), "{text}");
        assert!(text.ends_with('\n'));
        assert!(
            text.contains("STUCK: mail queued, no reader"),
            "visible without colour"
        );
        let framed = ansi(&lines);
        assert!(framed.starts_with("\x1b[H") && framed.ends_with("\x1b[J"));
        assert!(framed.contains("\x1b[1;31mbravo"));
    }

    #[test]
    fn a_hub_without_activity_or_an_unreachable_hub_still_renders() {
        let mut s = snap();
        if let Ok((src, _)) = &mut s.hub {
            *src = Source::WhoOnly;
        }
        let all = texts(&render(&s, &ViewState::default(), &ctx())).join("\n");
        assert!(all.contains("no `activity` verb"), "{all}");
        assert!(!all.contains("RECENT ENVELOPES"));
        s.hub = Err("cannot connect to the hub at 127.0.0.1:46110: refused".into());
        s.down_since = Some(t("2026-12-01T09:59:48Z"));
        s.links = Some(Err("cannot read /x/relay-status.json".into()));
        let lines = render(&s, &ViewState::default(), &ctx());
        assert_eq!(row(&lines, "hub: cannot connect").style, Style::Stuck);
        assert_eq!(
            row(&lines, "retrying").text,
            "retrying every 1.0s; no answer for 12s",
            "the view says it keeps trying, and for how long"
        );
        assert_eq!(row(&lines, "cannot read /x").style, Style::Warn);
        // --once does not retry, so it does not say it does.
        let once = Context {
            once: true,
            ..ctx()
        };
        let all = texts(&render(&s, &ViewState::default(), &once)).join("\n");
        assert!(!all.contains("retrying"), "{all}");
    }

    #[test]
    fn ages_are_short_and_absent_times_are_dashes() {
        let now = t("2026-12-01T10:00:00Z");
        assert_eq!(ago(None, now), "-");
        assert_eq!(ago(Some("garbage"), now), "-");
        assert_eq!(ago(Some("2026-12-01T09:59:55Z"), now), "5s");
        assert_eq!(ago(Some("2026-12-01T09:50:00Z"), now), "10m");
        assert_eq!(ago(Some("2026-12-01T05:00:00Z"), now), "5h");
        assert_eq!(ago(Some("2026-11-20T10:00:00Z"), now), "11d");
        assert_eq!(
            ago(Some("2026-12-01T10:00:09Z"), now),
            "0s",
            "a clock ahead is now"
        );
    }

    /// Issue 38: USAGE under TASKS, from the records `tasks` listed: in all, per delegator
    /// and per agent; absent figures are `-`, a lower bound ends in `+`, the tasks that
    /// reported nothing are `unmetered N`, and no row says `unmetered 0`. No records, no
    /// section.
    #[test]
    fn usage_shows_per_delegator_and_per_agent_with_unmetered_and_never_a_zero() {
        use crate::client::task::TaskRecord;
        use agent_hub_proto::wire::usage::{Amount, CostFigures, Tokens, UsageFigures};
        let rec =
            |delegator: &str, agent: &str, tokens: Option<u64>, usd: Option<f64>| TaskRecord {
                task: format!("task-{agent}"),
                agent: Some(agent.into()),
                delegator: Some(delegator.into()),
                state: Some("completed".into()),
                started_at: Some("2026-12-01T09:58:00.000Z".into()),
                usage: tokens.map(|n| UsageFigures {
                    tokens: Tokens {
                        total_tokens: Some(n),
                        ..Tokens::default()
                    },
                    source: "acp".into(),
                    partial: false,
                }),
                cost: usd.map(|a| CostFigures {
                    amount: Amount(a),
                    currency: "USD".into(),
                    source: "acp".into(),
                    partial: false,
                }),
                ..TaskRecord::default()
            };
        let mut s = snap();
        s.usage = Some(UsageSums::of(&[
            rec("alpha", "claude", Some(120), Some(0.3)),
            rec("alpha", "codex", None, None),
            rec("bravo", "gemini", Some(40), None),
        ]));
        let lines = render(&s, &ViewState::default(), &ctx());
        let all = texts(&lines).join("\n");
        assert_eq!(
            row(&lines, "USAGE ").text,
            "USAGE 3 tasks (the records you may see)   tokens 160   cost 0.3000 USD+   unmetered 1"
        );
        let usage_at = all.find("USAGE ").unwrap();
        assert!(all.find("TASKS ").unwrap() < usage_at, "{all}");
        let after = &all[usage_at..];
        let line_of = |start: &str| {
            after
                .lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no {start:?} in {after}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(line_of("DELEGATOR"), "DELEGATOR TASKS TOKENS COST");
        assert_eq!(line_of("alpha "), "alpha 2 120 0.3000 USD unmetered 1");
        assert_eq!(line_of("bravo "), "bravo 1 40 -");
        assert_eq!(line_of("AGENT "), "AGENT TASKS TOKENS COST");
        assert_eq!(line_of("codex "), "codex 1 - - unmetered 1");
        assert_eq!(line_of("claude "), "claude 1 120 0.3000 USD");
        assert!(!all.contains("unmetered 0"), "{all}");
        // Nothing listed (or no `tasks` answer): no section at all.
        s.usage = Some(UsageSums::of(&[]));
        let none = texts(&render(&s, &ViewState::default(), &ctx())).join("\n");
        assert!(!none.contains("USAGE"), "{none}");
    }
}
