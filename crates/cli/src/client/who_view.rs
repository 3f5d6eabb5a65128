//! The `agent-hub who` table (SPEC §14): one row per agent with its state, parked awaits and
//! their filters (spelled as the live view spells them, `hidden` where the asker may not see
//! them), queue length and last times; then, when any, the names nobody holds that have mail
//! waiting, with why (SPEC §14 "Mail nobody holds"). Every cell is another party's text (a
//! name a roster, a peer or a sender chose, a filter an agent chose, times a hub wrote) and
//! goes through `agent_hub_proto::kernel::text::for_terminal`, so none can drive the terminal
//! of whoever runs `who`. Reads the client's tolerant type (`top::snapshot::ActivityView`): a
//! value of an unexpected type is shown as its JSON text.

use super::top::render;
use super::top::snapshot::{text_of, ActivityView};
use agent_hub_proto::kernel::text::for_terminal as t;

/// The `who` table: one row per agent, parked filters spelled out; then the queues of names
/// nobody holds, when the hub reported any.
pub fn render(p: &ActivityView) -> String {
    let mut out = format!(
        "{:<24} {:<8} {:<24} {:>6} {:>6}  {:<24} {:<24} {}\n",
        "AGENT", "STATE", "SINCE", "PARKED", "QUEUED", "LAST SEEN", "LAST DELIVERY", "FILTERS"
    );
    for a in &p.agents {
        // As the live view spells them: `hidden` (and `?` parked) where the hub left another
        // agent's filters out of this asker's answer, `on its hub` for a linked hub's agent
        // that waits; nothing where nothing is parked.
        let filters = match render::filters(a) {
            none if none == "-" => String::new(),
            f => f,
        };
        out.push_str(&format!(
            "{:<24} {:<8} {:<24} {:>6} {:>6}  {:<24} {:<24} {}\n",
            t(&a.name),
            t(&a.state_text().unwrap_or_else(|| "unknown".into())),
            t(&text_of(&a.since).unwrap_or_else(|| "-".into())),
            render::awaits(a),
            a.queued,
            t(a.last_seen.as_deref().unwrap_or("-")),
            t(a.last_delivery.as_deref().unwrap_or("-")),
            t(&filters)
        ));
    }
    let nobodys = p.off_roster.as_deref().unwrap_or_default();
    if !nobodys.is_empty() {
        out.push_str("\nmail queued for names nobody holds (SPEC §14 \"Mail nobody holds\"):\n");
        out.push_str(&format!("{:<24} {:>6}  {}\n", "NAME", "QUEUED", "WHY"));
        for q in nobodys {
            out.push_str(&format!(
                "{:<24} {:>6}  {}\n",
                t(&q.name),
                q.queued,
                t(&q.reason)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::top::snapshot::read_payload;
    use super::*;

    #[test]
    fn the_table_lists_agents_then_the_names_nobody_holds_with_why() {
        let p = read_payload(
            r#"{"agents":[{"name":"worker","state":"waiting","since":"2026-12-01T10:00:00.000Z","parked":[{"replyTo":null,"kind":"review"}],"queued":1,"lastSeen":null,"lastDelivery":null}],"offRoster":[{"name":"wrker","queued":2,"reason":"no such agent"},{"name":"x@nowhere\u001b[2J","queued":1,"reason":"unknown peer","later":true}]}"#,
        )
        .unwrap();
        let text = render(&p);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].starts_with("worker "), "{text}");
        assert!(lines[1].contains("waiting") && lines[1].ends_with("kind=review"));
        assert!(
            lines[1].contains("      1      1  "),
            "one parked, one queued: {text}"
        );
        let wrker = lines.iter().find(|l| l.starts_with("wrker ")).expect(&text);
        assert!(wrker.contains(" 2  no such agent"), "{wrker}");
        assert!(
            text.contains("x@nowhere?[2J"),
            "escaped for the terminal: {text}"
        );
        assert!(!text.contains('\x1b'));
        // Another agent's await, as an asker who is not an operator gets it.
        let hidden = read_payload(
            r#"{"agents":[{"name":"worker","state":"waiting","parked":[],"queued":1,"lastSeen":null,"lastDelivery":null}],"offRoster":[]}"#,
        )
        .unwrap();
        let text = render(&hidden);
        let worker = text.lines().nth(1).unwrap();
        assert!(worker.contains("      ?      1  "), "{worker}");
        assert!(worker.ends_with("hidden"), "{worker}");
        assert!(
            !text.contains("nobody"),
            "an empty list has no section: {text}"
        );
        // An older hub's answer (no offRoster, no state): no section, the state reads unknown.
        let old = read_payload(
            r#"{"agents":[{"name":"a","parked":[],"queued":0,"lastSeen":null,"lastDelivery":null}]}"#,
        )
        .unwrap();
        let text = render(&old);
        assert!(!text.contains("nobody"), "{text}");
        assert!(text.lines().nth(1).unwrap().contains("unknown"), "{text}");
    }
}
