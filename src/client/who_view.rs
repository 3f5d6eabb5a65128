//! The `agent-hub who` table (SPEC §14): one row per agent with its state, parked awaits and
//! their filters (spelled as the live view spells them), queue length and last times.

use super::top::render::filter_label;
use crate::wire::Presence;

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
            a.name,
            a.state,
            a.since.as_deref().unwrap_or("-"),
            a.parked.len(),
            a.queued,
            a.last_seen.as_deref().unwrap_or("-"),
            a.last_delivery.as_deref().unwrap_or("-"),
            filters.join(", ")
        ));
    }
    out
}
