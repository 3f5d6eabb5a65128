//! Mail across hubs (SPEC §15): which `to` addresses belong to a peer hub, the window of
//! envelopes handed to each peer's relay link and not yet acked, and the checks an envelope
//! from a peer passes before it is queued here.
//!
//! Owns the forwarding half of the sans-IO core. An envelope for `name@peer` is accepted and
//! queued like any other (its queue is named by the whole address, so caps, the store and
//! `status` need nothing new); while the link with `peer` is up, the oldest of that peer's
//! queued envelopes are handed to it, at most `window` unacked at once, and each is removed
//! only when the peer acks it. A link that drops, or an ack that does not come within
//! `ack_timeout_ms`, puts them back in acceptance order to be sent again; the receiving hub
//! answers a resend as a duplicate, so nothing is lost or doubled. Refuses: sockets and
//! sessions (`event_loop::relay_io` owns those), and what a forward's outcome does to the ledger,
//! the queues and the outputs: the hub's glue carries that out (`hub::routing`).

use super::router::Queued;
use crate::kernel::fold_hash::FoldMap;
use crate::kernel::names::HUB_NAME;
use crate::kernel::now::Now;
use crate::roster::Roster;
use crate::wire::Envelope;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Hubs an envelope may cross (seed §8's cluster-wide cap). This build never forwards an
/// envelope it received (its `to` must name a local agent), so it sends hop 1; a peer's
/// message claiming 0 or more than this is refused.
pub const MAX_HOPS: u32 = 8;

/// Envelope text bytes sent to one peer and not yet acked, beyond which no further envelope
/// is sent (one is always allowed). The relay drops a link with more than 16 MiB unsent
/// (`event_loop::relay_io::MAX_PEER_BACKLOG_BYTES`); a window of large envelopes, each up to 6
/// times larger on the wire when its text is escaped into the `bus_forward` string, must stay
/// under that, or the link would drop and the same window be sent again forever.
pub const FORWARD_WINDOW_BYTES: usize = 2 * 1024 * 1024;

/// Forwarding state: this hub's relay peer id and one entry per forwarding peer.
#[derive(Debug)]
pub struct Forwarding {
    local: String,
    window: usize,
    ack_timeout: Duration,
    links: FoldMap<String, Link>,
}

#[derive(Debug, Default)]
struct Link {
    up: bool,
    /// Sent on the link and not yet acked, by acceptance seq, with when each was sent.
    inflight: BTreeMap<u64, (Queued, Instant)>,
    /// Text bytes of `inflight`.
    inflight_bytes: usize,
}

impl Forwarding {
    /// Forwarding to `peers` (those configured with `forward = true`): `local` is this hub's
    /// relay peer id, `window` the most envelopes unacked per peer, `ack_timeout` how long a
    /// peer has to ack one (`limits.ack_timeout_ms`).
    pub(super) fn new(
        local: &str,
        peers: impl IntoIterator<Item = String>,
        window: usize,
        ack_timeout: Duration,
    ) -> Forwarding {
        Forwarding {
            local: local.to_owned(),
            window: window.max(1),
            ack_timeout,
            links: peers.into_iter().map(|p| (p, Link::default())).collect(),
        }
    }

    /// The peer hub `to` belongs to: `name@peer` (split at the last `@`) where `peer` is a
    /// forwarding peer and `to` is not itself a roster name. A roster name always stays
    /// local, so no address that works without forwarding changes meaning.
    pub(super) fn remote_peer(&self, roster: &Roster, to: &str) -> Option<String> {
        let (name, peer) = to.rsplit_once('@')?;
        (!name.is_empty() && self.links.contains_key(peer) && !roster.contains(to))
            .then(|| peer.to_owned())
    }

    /// Whether `peer` is one this hub forwards mail to (`forward = true`).
    pub(super) fn forwards_to(&self, peer: &str) -> bool {
        self.links.contains_key(peer)
    }

    /// The peers this hub forwards mail to, in no particular order.
    pub(super) fn peers(&self) -> impl Iterator<Item = &str> {
        self.links.keys().map(String::as_str)
    }

    /// This hub's own relay peer id.
    pub(super) fn local(&self) -> &str {
        &self.local
    }

    /// The link with `peer` came up or went down; false for a peer this hub does not
    /// forward to.
    pub(super) fn set_up(&mut self, peer: &str, up: bool) -> bool {
        match self.links.get_mut(peer) {
            Some(link) => {
                link.up = up;
                true
            }
            None => false,
        }
    }

    /// The peer acked the envelope of acceptance `seq`: it leaves the window. None when it
    /// is not in flight (unknown peer, or requeued after a deadline and acked late).
    pub(super) fn acked(&mut self, peer: &str, seq: u64) -> Option<Queued> {
        let link = self.links.get_mut(peer)?;
        let (env, _) = link.inflight.remove(&seq)?;
        link.inflight_bytes -= env.size_bytes();
        Some(env)
    }

    /// Whether the link with `peer` may take another envelope now (it is up and its window
    /// has room), and if so whether it holds any and how many text bytes
    /// (`FORWARD_WINDOW_BYTES`).
    pub(super) fn room(&self, peer: &str) -> Option<(bool, usize)> {
        let link = self.links.get(peer)?;
        if !link.up || link.inflight.len() >= self.window {
            return None;
        }
        Some((!link.inflight.is_empty(), link.inflight_bytes))
    }

    /// `env` was handed to the link with `peer` at `now`: it waits in the window for its ack.
    pub(super) fn sent(&mut self, peer: &str, env: Queued, now: Now) {
        if let Some(link) = self.links.get_mut(peer) {
            link.inflight_bytes += env.size_bytes();
            link.inflight.insert(env.seq, (env, now.mono));
        }
    }

    /// Everything in flight to `peer`, in acceptance order, taken out of its window.
    pub(super) fn take_inflight(&mut self, peer: &str) -> impl Iterator<Item = Queued> {
        let inflight = match self.links.get_mut(peer) {
            Some(link) => {
                link.inflight_bytes = 0;
                std::mem::take(&mut link.inflight)
            }
            None => BTreeMap::new(),
        };
        inflight.into_values().map(|(env, _)| env)
    }

    /// When the oldest unacked forward of any link runs out of time.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.links
            .values()
            .flat_map(|l| l.inflight.values().map(|(_, sent)| *sent))
            .min()
            .map(|sent| crate::kernel::deadline::after(sent, self.ack_timeout))
    }

    /// The peers whose oldest forward went unacked past the deadline at `now`.
    pub(super) fn stuck(&self, now: Now) -> Vec<String> {
        let ack_timeout = self.ack_timeout;
        self.links
            .iter()
            .filter(|(_, l)| {
                l.inflight
                    .values()
                    .any(|(_, sent)| crate::kernel::deadline::after(*sent, ack_timeout) <= now.mono)
            })
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// How long a peer has to ack a forward.
    pub(super) fn ack_timeout(&self) -> Duration {
        self.ack_timeout
    }
}

/// Whether the queue `name` is mail for the peer hub `peer` (`name@peer`, not a roster name):
/// what `pump` takes from the router for that peer's link.
pub(super) fn queued_for(peer: &str, roster: &Roster, name: &str) -> bool {
    name.rsplit_once('@')
        .is_some_and(|(n, p)| !n.is_empty() && p == peer)
        && !roster.contains(name)
}

/// A `bus_forward`'s envelope `text` from `peer` with `hop`, checked against this hub
/// (its `to` must be `name@<this hub>` for a roster `name`; `max_line_bytes` is
/// `limits.max_line_bytes`) and restamped: `from` gets `@peer`, `to` loses `@<this hub>`.
/// A refusal is the envelope's id (empty when unknown) and the reason for its ack.
pub(super) fn check(
    f: Option<&Forwarding>,
    roster: &Roster,
    max_line_bytes: usize,
    peer: &str,
    text: &str,
    hop: u32,
) -> Result<Envelope, (String, String)> {
    let Some(f) = f else {
        return Err((
            String::new(),
            "this hub does not take forwarded mail".into(),
        ));
    };
    if !f.links.contains_key(peer) {
        return Err((
            String::new(),
            format!("this hub does not take forwarded mail from {peer}"),
        ));
    }
    if text.len() > max_line_bytes {
        return Err((
            String::new(),
            format!(
                "envelope of {} bytes exceeds this hub's line cap of {} bytes",
                text.len(),
                max_line_bytes
            ),
        ));
    }
    // The texts of `wire::decode`: a refusal never quotes the peer's envelope.
    let mut env = crate::wire::decode_envelope(text).map_err(|e| match e {
        crate::wire::WireError::Envelope(e) => (String::new(), format!("invalid envelope: {e}")),
        crate::wire::WireError::Malformed(why) => {
            (String::new(), format!("invalid envelope: {why}"))
        }
        other => (String::new(), format!("invalid envelope: {other}")),
    })?;
    let id = env.id.clone();
    let refuse = |why: String| Err((id.clone(), why));
    if hop == 0 || hop > MAX_HOPS {
        return refuse(format!("hop {hop} is outside 1..={MAX_HOPS}"));
    }
    let local = &f.local;
    let name = match env.to.rsplit_once('@') {
        Some((name, p)) if p == local.as_str() && !name.is_empty() => name.to_owned(),
        _ => {
            return refuse(format!(
                "to {:?} is not an address of this hub (name@{local})",
                env.to
            ))
        }
    };
    if !roster.contains(&name) {
        return refuse(format!("no agent named {name:?} on {local}"));
    }
    if env.from.is_empty() {
        return refuse("from must not be empty".into());
    }
    // The restamped sender is remembered for a day (`ledger`) and shown: capped like a
    // `to`, and printable.
    if env.from.len() > crate::wire::envelope::MAX_NAME_BYTES {
        return refuse(format!(
            "from is over {} bytes",
            crate::wire::envelope::MAX_NAME_BYTES
        ));
    }
    if crate::kernel::text::has_unsafe(&env.from) {
        return refuse("from must not contain control or invisible formatting characters".into());
    }
    // A task's outcome and progress are this hub's own word to its delegator (SPEC §3.4,
    // §16); no peer speaks for them, whatever `from` it claims.
    if let Some(kind) =
        crate::wire::envelope::hub_kind(&env.kind).filter(|k| *k != Envelope::BOUNCE_KIND)
    {
        return refuse(crate::wire::EnvelopeError::ReservedKind(kind).to_string());
    }
    // Only a hub makes bounces, and a hub sends nothing else under its own name.
    if (env.from == HUB_NAME) != (env.kind == Envelope::BOUNCE_KIND) {
        return refuse(format!(
            "kind \"bounce\" comes only from \"{HUB_NAME}\", which sends only bounces"
        ));
    }
    env.from = format!("{}@{peer}", env.from);
    env.to = name;
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn roster() -> Roster {
        Roster::parse("[agents]\nbee = \"tok-bee\"\n\"ant@west\" = \"tok-ant\"\n")
            .expect("test roster is valid")
    }

    fn clock() -> impl Fn(u64) -> Now {
        let origin = crate::kernel::deadline::test_origin();
        let wall = DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
            .expect("fixed time")
            .with_timezone(&Utc);
        move |ms| Now {
            mono: origin + Duration::from_millis(ms),
            wall: wall + chrono::Duration::milliseconds(ms as i64),
        }
    }

    fn queued(seq: u64, to: &str) -> Queued {
        let mut q = Queued::new(&format!("e{seq}"), "bee", to, "task", None, "{}");
        q.seq = seq;
        q
    }

    /// `name@peer` is a peer's address unless the roster holds it; the queue a peer's link
    /// drains is named the same way.
    #[test]
    fn an_address_belongs_to_a_forwarding_peer_unless_the_roster_holds_it() {
        let f = Forwarding::new("east", ["west".to_owned()], 4, Duration::from_secs(5));
        let roster = roster();
        assert_eq!(f.remote_peer(&roster, "cat@west"), Some("west".into()));
        assert_eq!(f.remote_peer(&roster, "ant@west"), None, "a roster name");
        assert_eq!(
            f.remote_peer(&roster, "cat@north"),
            None,
            "not a forwarding peer"
        );
        assert_eq!(f.remote_peer(&roster, "@west"), None);
        assert!(queued_for("west", &roster, "cat@west"));
        assert!(!queued_for("west", &roster, "ant@west"));
        assert!(f.forwards_to("west") && !f.forwards_to("east"));
        assert_eq!(
            (f.local(), f.peers().collect::<Vec<_>>()),
            ("east", vec!["west"])
        );
    }

    /// The window takes envelopes while the link is up and has room; an ack frees its place;
    /// the oldest unacked one sets the deadline; a dropped link gives back the rest in order.
    #[test]
    fn the_window_holds_what_was_sent_until_its_ack() {
        let now = clock();
        let mut f = Forwarding::new("east", ["west".to_owned()], 2, Duration::from_secs(5));
        assert_eq!(f.room("west"), None, "down");
        assert!(f.set_up("west", true) && !f.set_up("north", true));
        assert_eq!(f.room("west"), Some((false, 0)));
        f.sent("west", queued(3, "cat@west"), now(0));
        f.sent("west", queued(7, "cat@west"), now(10));
        assert_eq!(f.room("west"), None, "the window is full");
        assert_eq!(f.poll_timeout(), Some(now(5000).mono));
        assert!(f.stuck(now(4999)).is_empty());
        assert_eq!(f.stuck(now(5000)), ["west"]);
        assert_eq!(f.acked("west", 3).map(|e| e.seq), Some(3));
        assert_eq!(f.acked("west", 3).map(|e| e.seq), None, "acked once");
        let (busy, bytes) = f.room("west").expect("room again");
        assert!(busy && bytes == queued(7, "cat@west").size_bytes());
        f.sent("west", queued(9, "cat@west"), now(20));
        let back: Vec<u64> = f.take_inflight("west").map(|e| e.seq).collect();
        assert_eq!(back, [7, 9], "in acceptance order");
        assert_eq!(f.room("west"), Some((false, 0)));
        assert_eq!(f.poll_timeout(), None);
    }

    /// A peer's envelope is restamped for local delivery, or refused with a reason that never
    /// quotes it.
    #[test]
    fn a_peers_envelope_is_checked_and_restamped() {
        let f = Forwarding::new("east", ["west".to_owned()], 2, Duration::from_secs(5));
        let roster = roster();
        let text = |to: &str, from: &str| {
            Envelope::new(
                "e1".into(),
                from.into(),
                to.into(),
                "2026-07-21T06:40:51Z".into(),
                "task".into(),
                None,
                "{}".into(),
            )
            .expect("valid body")
            .to_json()
        };
        let ok = check(
            Some(&f),
            &roster,
            1 << 20,
            "west",
            &text("bee@east", "cat"),
            1,
        )
        .expect("taken");
        assert_eq!((ok.from.as_str(), ok.to.as_str()), ("cat@west", "bee"));
        let refused = |r: Result<Envelope, (String, String)>| r.expect_err("refused").1;
        let why = refused(check(
            None,
            &roster,
            1 << 20,
            "west",
            &text("bee@east", "c"),
            1,
        ));
        assert_eq!(why, "this hub does not take forwarded mail");
        let why = refused(check(
            Some(&f),
            &roster,
            1 << 20,
            "north",
            &text("bee@east", "c"),
            1,
        ));
        assert_eq!(why, "this hub does not take forwarded mail from north");
        let why = refused(check(
            Some(&f),
            &roster,
            1 << 20,
            "west",
            &text("bee@east", "c"),
            0,
        ));
        assert_eq!(why, format!("hop 0 is outside 1..={MAX_HOPS}"));
        let why = refused(check(
            Some(&f),
            &roster,
            1 << 20,
            "west",
            &text("cow@east", "c"),
            1,
        ));
        assert_eq!(why, "no agent named \"cow\" on east");
        let why = refused(check(
            Some(&f),
            &roster,
            10,
            "west",
            &text("bee@east", "c"),
            1,
        ));
        assert!(why.starts_with("envelope of ") && why.ends_with("line cap of 10 bytes"));
    }
}
