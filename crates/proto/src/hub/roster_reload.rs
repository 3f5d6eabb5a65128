//! A new roster taken while the hub runs (SIGHUP, docs/operations.md "Changing the roster"):
//! who may authenticate from now on, and what happens to connections authenticated under a
//! name that was removed or given a new token.
//!
//! Owns that decision, as a function over the machines it changes (the settings, the
//! connections, the router); the IO layer only reads and parses the file and hands the parsed
//! roster here (an invalid file never reaches the core: the old roster stays). Refuses IO.
//!
//! The rules: every hello from now on is checked against the new roster, so a removed
//! name's token and a rotated name's old token are refused at once. A connection that
//! authenticated under such a name and can still act as it (waiting for its verb, or a
//! parked await) gets an error line and is closed, nothing consumed: revoking a token must
//! revoke what it opened. A connection whose verb is already under way (a send being
//! committed, a delivery on the wire, an ack being committed) finishes as it would have,
//! since its outcome was decided under the roster it authenticated with, and each of those
//! is bounded by its own deadline. Queues belong to names, not to the roster (SPEC §3.2
//! "Unknown recipients"): a removed agent's queue stays, mail for it is still accepted,
//! and re-adding the name gives it the same queue back.

use super::conn_map::ConnId;
use super::conns::{Conns, Phase};
use super::outbox::Outbox;
use super::router::Router;
use super::settings::Settings;
use crate::kernel::now::Now;
use crate::roster::{Roster, RosterDiff};

/// The error line for a connection whose name left the roster.
pub const REMOVED: &str = "this agent was removed from the hub's roster; nothing was consumed";
/// The error line for a connection whose name has a new token.
pub const ROTATED: &str =
    "this agent's token was rotated; connect again with the new token; nothing was consumed";

/// What a roster replacement did: the names it changed and how many connections it closed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RosterChange {
    pub diff: RosterDiff,
    pub closed: usize,
    /// Agents on the new roster.
    pub agents: usize,
}

/// Takes `roster` in place of the current one (`settings`) and closes, through `conns`, what
/// the change revokes (the module's rules; a parked await leaves the `router`). Emits one
/// service-log line naming what changed (never a token).
pub(super) fn replace(
    settings: &mut Settings,
    conns: &mut Conns,
    router: &mut Router,
    out: &mut Outbox,
    roster: Roster,
    now: Now,
) -> RosterChange {
    let diff = settings.roster.diff(&roster);
    let agents = roster.names().len();
    settings.roster = roster;
    let mut revoked: Vec<(ConnId, &'static str)> = conns
        .iter()
        .filter_map(|(id, c)| {
            let name = c.name.as_deref()?;
            if diff.removed.iter().any(|n| n == name) {
                Some((id, REMOVED))
            } else if diff.rotated.iter().any(|n| n == name) {
                Some((id, ROTATED))
            } else {
                None
            }
        })
        .collect();
    revoked.sort_unstable();
    let mut closed = 0;
    for (conn, message) in revoked {
        let Some(c) = conns.get(&conn) else {
            continue;
        };
        match &c.phase {
            Phase::Verb => {}
            Phase::Parked { parked, .. } => {
                let parked = parked.clone();
                router.unpark(&parked);
            }
            // Already out of the router: the staged send that claimed it is routed to
            // the queue at its commit, as for any waiter that went away (`finish`).
            Phase::Claimed { .. } => {}
            _ => continue,
        }
        conns.fail(out, conn, message, now);
        closed += 1;
    }
    let line = reload_line(&diff, agents, closed);
    out.log(line);
    RosterChange {
        diff,
        closed,
        agents,
    }
}

/// `roster reloaded: N agents; added ["a"]; removed ["b"]; rotated ["c"]; closed K
/// connections`, or `...; unchanged`. Names are quoted and escaped: a TOML key may hold any
/// character, a newline included, and none may start a line of its own in the log.
fn reload_line(diff: &RosterDiff, agents: usize, closed: usize) -> String {
    if diff.is_empty() {
        return format!("roster reloaded: {agents} agents; unchanged");
    }
    format!(
        "roster reloaded: {agents} agents; added {:?}; removed {:?}; rotated {:?}; closed {closed} connections",
        diff.added, diff.removed, diff.rotated
    )
}
