//! Drawing one refresh of `agent-hub top` (docs/operations.md "Watching a hub"): a snapshot
//! and the view's settings in, styled lines out — agents (sorted, stuck ones marked), the
//! last envelopes' metadata, unfinished tasks, relay links. `fit` cuts them to a terminal's
//! size; `ansi` and `plain` turn them into text for a terminal or for a pipe.
//!
//! Pure: no IO, no clock (the snapshot's time is "now"), so every frame is a unit test.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::snapshot::{attention, text_of, AgentView, Attention, Snapshot, Source};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewState {
    pub sort: SortBy,
    pub reverse: bool,
}

impl Default for ViewState {
    /// Stuck agents first: what an operator opens the view for.
    fn default() -> ViewState {
        ViewState {
            sort: SortBy::State,
            reverse: false,
        }
    }
}

/// Fixed facts shown in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    pub port: u16,
    pub name: String,
    pub interval_ms: u64,
    /// Whether keys work (a terminal): the header then lists them.
    pub interactive: bool,
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
    let secs = (now - t.with_timezone(&Utc)).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
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

fn filters(a: &AgentView) -> String {
    if a.parked.is_empty() {
        return "-".into();
    }
    a.parked
        .iter()
        .map(|f| filter_label(f.reply_to.as_deref(), f.kind.as_deref()))
        .collect::<Vec<_>>()
        .join(", ")
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

fn severity(a: &AgentView) -> u8 {
    match attention(a) {
        Attention::Stuck(_) => 0,
        Attention::Warn(_) => 1,
        Attention::Fine => 2,
    }
}

/// The agents in the order the view shows them; ties broken by name.
pub fn sorted<'a>(agents: &'a [AgentView], view: &ViewState) -> Vec<&'a AgentView> {
    let mut out: Vec<&AgentView> = agents.iter().collect();
    out.sort_by(|a, b| {
        let primary = match view.sort {
            SortBy::Name => Ordering::Equal,
            SortBy::Queue => b.queued.cmp(&a.queued),
            SortBy::State => (severity(a), state_rank(a)).cmp(&(severity(b), state_rank(b))),
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
    out
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
    let (source, hub) = match &snap.hub {
        Ok((source, hub)) => (*source, hub),
        Err(why) => {
            out.push(line(Style::Stuck, format!("hub: {why}")));
            push_links(&mut out, snap);
            return out;
        }
    };
    let stuck = hub
        .agents
        .iter()
        .filter(|a| matches!(attention(a), Attention::Stuck(_)))
        .count();
    let queued: u64 = hub.agents.iter().map(|a| a.queued).sum();
    out.push(line(Style::Normal, ""));
    out.push(line(
        Style::Title,
        format!(
            "AGENTS {}   queued {queued}   stuck {stuck}",
            hub.agents.len()
        ),
    ));
    out.push(line(
        Style::Head,
        format!(
            "{} {} {} {} {} {} {}",
            cell("NAME", 20),
            cell("STATE", 8),
            rcell("QUEUE", 5),
            rcell("AWAITS", 6),
            cell("FILTERS", 26),
            rcell("SEEN", 5),
            "NOTE"
        ),
    ));
    for a in sorted(&hub.agents, view) {
        let (style, note) = match attention(a) {
            Attention::Stuck(why) => (Style::Stuck, format!("STUCK: {why}")),
            Attention::Warn(why) => (Style::Warn, why.to_owned()),
            Attention::Fine => (Style::Normal, String::new()),
        };
        // How long the agent has been in its state, when the hub says (an RFC 3339 time).
        let since = text_of(&a.since)
            .filter(|s| DateTime::parse_from_rfc3339(s).is_ok())
            .map(|s| format!("for {}", ago(Some(&s), now)));
        let note = match since {
            Some(since) if note.is_empty() => since,
            Some(since) => format!("{note}; {since}"),
            None => note,
        };
        out.push(line(
            style,
            format!(
                "{} {} {} {} {} {} {}",
                cell(&a.name, 20),
                cell(a.state_text().as_deref().unwrap_or("-"), 8),
                rcell(&a.queued.to_string(), 5),
                rcell(&a.parked.len().to_string(), 6),
                cell(&filters(a), 26),
                rcell(&ago(a.last_seen.as_deref(), now), 5),
                note
            )
            .trim_end()
            .to_owned(),
        ));
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
        push_tasks(&mut out, hub, now);
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

fn push_tasks(out: &mut Vec<Line>, hub: &super::snapshot::ActivityView, now: DateTime<Utc>) {
    out.push(line(
        Style::Title,
        format!("TASKS {} unfinished", hub.tasks.len()),
    ));
    if hub.tasks.is_empty() {
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
    use super::super::snapshot::{ActivityView, EnvelopeView, FilterView, LinkView, TaskView};
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
        };
        Snapshot {
            taken: t("2026-12-01T10:00:00Z"),
            hub: Ok((Source::Activity, hub)),
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
        assert!(all.contains("AGENTS 3   queued 4   stuck 1"), "{all}");
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
        let alpha = row(&lines, "alpha ");
        assert_eq!(alpha.style, Style::Normal);
        assert!(alpha.text.contains("waiting"));
        assert!(alpha.text.contains(" any "), "{}", alpha.text);
        assert!(
            alpha.text.contains("10s"),
            "last seen 10 s ago: {}",
            alpha.text
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
        let s = snap();
        let Ok((_, hub)) = &s.hub else { unreachable!() };
        let mut agents = hub.agents.clone();
        agents[0].last_seen = Some("2026-12-01T09:59:59.000Z".into());
        agents[2].last_seen = None;
        let names = |v: ViewState| -> Vec<String> {
            sorted(&agents, &v).iter().map(|a| a.name.clone()).collect()
        };
        let mut v = ViewState::default();
        assert_eq!(
            names(v),
            ["bravo", "charlie", "alpha"],
            "stuck, then warn, then fine"
        );
        v.sort = v.sort.next();
        assert_eq!(v.sort, SortBy::LastSeen);
        assert_eq!(
            names(v),
            ["alpha", "bravo", "charlie"],
            "newest first, never last"
        );
        v.sort = v.sort.next();
        assert_eq!(v.sort, SortBy::Name);
        assert_eq!(names(v), ["alpha", "bravo", "charlie"]);
        v.sort = v.sort.next();
        assert_eq!(v.sort, SortBy::Queue);
        assert_eq!(names(v), ["bravo", "charlie", "alpha"]);
        v.reverse = true;
        assert_eq!(names(v), ["alpha", "charlie", "bravo"]);
        v.sort = v.sort.next();
        assert_eq!(v.sort, SortBy::State);
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
        s.links = Some(Err("cannot read /x/relay-status.json".into()));
        let lines = render(&s, &ViewState::default(), &ctx());
        assert_eq!(row(&lines, "hub: cannot connect").style, Style::Stuck);
        assert_eq!(row(&lines, "cannot read /x").style, Style::Warn);
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
}
