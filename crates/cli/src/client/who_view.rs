//! The `agent-hub who` table (SPEC §14): one row per agent with its state, parked awaits and
//! their filters (spelled as the live view spells them), queue length and last times. Every
//! cell is another party's text (a name a roster or a peer chose, a filter an agent chose,
//! times a hub wrote) and goes through `agent_hub_proto::kernel::text::for_terminal`, so none can drive the
//! terminal of whoever runs `who`.

use super::top::render::filter_label;
use agent_hub_proto::kernel::text::for_terminal as t;
use agent_hub_proto::wire::Presence;

/// The `who` table: one row per agent, parked filters spelled out.
pub fn render(p: &Presence) -> String {
    let mut out = format!(
        "{:<24} {:<8} {:<24} {:>6} {:>6}  {:<24} {:<24} {}\n",
        "AGENT", "STATE", "SINCE", "PARKED", "QUEUED", "LAST SEEN", "LAST DELIVERY", "FILTERS"
    );
    for a in &p.agents {
        let filters: Vec<String> = a
            .parked
            .iter()
            .map(|f| filter_label(f.reply_to.as_deref(), f.kind.as_deref()))
            .collect();
        out.push_str(&format!(
            "{:<24} {:<8} {:<24} {:>6} {:>6}  {:<24} {:<24} {}\n",
            t(&a.name),
            t(&a.state),
            t(a.since.as_deref().unwrap_or("-")),
            a.parked.len(),
            a.queued,
            t(a.last_seen.as_deref().unwrap_or("-")),
            t(a.last_delivery.as_deref().unwrap_or("-")),
            t(&filters.join(", "))
        ));
    }
    out
}
