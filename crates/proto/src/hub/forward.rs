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
//! sessions (`server::relay_io` owns those).

use super::admit::Admission;
use super::commit::Target;
use super::conns::Phase;
use super::fold_hash::FoldMap;
use super::{AuditEvent, Hub, Now, Output, Queued, State, StoreOp};
use crate::kernel::names::HUB_NAME;
use crate::wire::Envelope;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Hubs an envelope may cross (seed §8's cluster-wide cap). This build never forwards an
/// envelope it received (its `to` must name a local agent), so it sends hop 1; a peer's
/// message claiming 0 or more than this is refused.
pub const MAX_HOPS: u32 = 8;

/// Envelope text bytes sent to one peer and not yet acked, beyond which no further envelope
/// is sent (one is always allowed). The relay drops a link with more than 16 MiB unsent
/// (`server::relay_io::MAX_PEER_BACKLOG_BYTES`); a window of large envelopes, each up to 6
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

/// An envelope from a peer, checked and restamped for local delivery.
struct Incoming {
    env: Envelope,
}

impl Hub {
    /// Enables forwarding: `local_peer` is this hub's relay peer id, `peers` those configured
    /// with `forward = true`, `window` the most envelopes unacked per peer.
    pub fn enable_forwarding(
        &mut self,
        local_peer: &str,
        peers: impl IntoIterator<Item = String>,
        window: usize,
    ) {
        self.forwarding = Some(Forwarding {
            local: local_peer.to_owned(),
            window: window.max(1),
            ack_timeout: self.settings.limits.ack_timeout(),
            links: peers.into_iter().map(|p| (p, Link::default())).collect(),
        });
    }

    /// The peer hub `to` belongs to: `name@peer` (split at the last `@`) where `peer` is a
    /// forwarding peer and `to` is not itself a roster name. A roster name always stays
    /// local, so no address that works without forwarding changes meaning.
    pub fn remote_peer(&self, to: &str) -> Option<String> {
        let f = self.forwarding.as_ref()?;
        let (name, peer) = to.rsplit_once('@')?;
        (!name.is_empty() && f.links.contains_key(peer) && !self.settings.roster.contains(to))
            .then(|| peer.to_owned())
    }

    /// Whether `peer` is one this hub forwards mail to (`forward = true`).
    pub(super) fn forwards_to(&self, peer: &str) -> bool {
        self.forwarding
            .as_ref()
            .is_some_and(|f| f.links.contains_key(peer))
    }

    /// The peers this hub forwards mail to, in no particular order; none without forwarding.
    pub(super) fn forwarding_peers(&self) -> impl Iterator<Item = &str> {
        self.forwarding
            .iter()
            .flat_map(|f| f.links.keys().map(String::as_str))
    }

    /// This hub's own relay peer id, when it forwards mail.
    pub(super) fn local_peer_id(&self) -> Option<&str> {
        self.forwarding.as_ref().map(|f| f.local.as_str())
    }

    /// The relay link with `peer` is up and agreed `bus-forward`: start handing it mail.
    pub fn handle_link_up(&mut self, peer: &str, now: Now) {
        let Some(link) = self.link_mut(peer) else {
            return;
        };
        link.up = true;
        self.pump_forward(peer, now);
    }

    /// The link with `peer` is gone: everything it had not acked is queued again, in
    /// acceptance order, for the next link.
    pub fn handle_link_down(&mut self, peer: &str, reason: &str, now: Now) {
        let Some(link) = self.link_mut(peer) else {
            return;
        };
        link.up = false;
        self.requeue_inflight(peer, reason, now);
    }

    /// The peer acked the envelope of acceptance `seq` (`Output::Forward`). `error` None: it
    /// is queued there, durably, and leaves this hub. `error` Some: refused for good (or the
    /// link could not carry it); it is bounced to its sender. An ack for an envelope no longer
    /// in flight (requeued after a deadline, then acked late) is ignored: the copy sent
    /// again is answered as a duplicate.
    pub fn handle_forward_ack(&mut self, peer: &str, seq: u64, error: Option<String>, now: Now) {
        let Some(link) = self.link_mut(peer) else {
            return;
        };
        let Some((env, _)) = link.inflight.remove(&seq) else {
            return;
        };
        link.inflight_bytes -= env.size_bytes();
        self.commit.store(StoreOp::Remove { seq });
        let (from, id) = (env.from.clone(), env.id.clone());
        self.outputs.audit(AuditEvent::ForwardAcked {
            peer: peer.to_owned(),
            id: id.to_string(),
            to: env.to.to_string(),
            attempts: env.attempts,
            error: error.clone(),
        });
        match error {
            None => self.set_state(&from, &id, State::Forwarded, false, now),
            Some(why) => {
                let bounced = &*env.kind != Envelope::BOUNCE_KIND;
                let state = if bounced { State::Bounced } else { State::Lost };
                let reason = format!("refused by {peer}: {why}");
                self.settle_gone(&env, state, &reason, now);
                if bounced {
                    self.stage_bounce(&env, &reason, None, now);
                }
            }
        }
        self.pump_forward(peer, now);
    }

    /// A `bus_forward` from `peer` (relay message id `ack_id`) carrying `text`, an envelope
    /// addressed `name@<this hub>`. Checked, restamped (`from` gets `@peer`, `to` loses
    /// `@<this hub>`), deduplicated by sender and id, and staged like a send: the ack goes
    /// out once it is durable. A refusal is acked at once with its reason (the sending hub
    /// bounces the envelope); a failure of this hub's store is not acked at all (the peer
    /// sends it again).
    pub fn handle_forwarded(&mut self, peer: &str, ack_id: String, text: &str, hop: u32) {
        let Incoming { mut env } = match self.check_forwarded(peer, text, hop) {
            Ok(i) => i,
            Err((id, reason)) => return self.refuse_forward(peer, ack_id, id, reason),
        };
        if self.commit.flush_failed().is_some() {
            let msg = format!(
                "an envelope from {peer} not queued: an earlier flush of the queue store failed; not acked until the hub is restarted"
            );
            return self.outputs.log(msg);
        }
        match self.admit(&mut env, None, Some((peer.to_owned(), ack_id.clone()))) {
            Admission::Staged => {}
            Admission::Duplicate => {
                self.commit
                    .ack_forward_durable(peer.to_owned(), ack_id, &mut self.outputs)
            }
            Admission::Conflict => {
                let reason = format!(
                    "id {:?} was already accepted from {} with another destination, kind, correlationId or body",
                    env.id, env.from
                );
                self.refuse_forward(peer, ack_id, env.id, reason)
            }
            // A resend while the first copy waits for its commit: that copy's ack answers
            // for both (the sender maps either ack to the same envelope).
            Admission::InProgress => {}
            Admission::Full(reason) => self.refuse_forward(peer, ack_id, env.id, reason),
        }
    }

    /// Hands the link with `peer` the oldest queued envelopes for it while it is up and its
    /// window has room.
    pub(super) fn pump_forward(&mut self, peer: &str, now: Now) {
        loop {
            let Some(f) = &self.forwarding else { return };
            let Some(link) = f.links.get(peer) else {
                return;
            };
            if !link.up || link.inflight.len() >= f.window {
                return;
            }
            let (busy, in_bytes) = (!link.inflight.is_empty(), link.inflight_bytes);
            let roster = &self.settings.roster;
            let Some(env) = self.router.take_oldest_where(|name| {
                name.rsplit_once('@')
                    .is_some_and(|(n, p)| !n.is_empty() && p == peer)
                    && !roster.contains(name)
            }) else {
                return;
            };
            if busy && in_bytes + env.size_bytes() > FORWARD_WINDOW_BYTES {
                // Its turn comes with the next ack.
                return self.router.requeue(env);
            }
            let ms = now.wall.timestamp_millis();
            // Ledger only, as for an ack-mode delivery: on disk it stays queued until acked.
            self.memory
                .ledger
                .set_state(&env.from, &env.id, State::Delivered, true, ms);
            self.receipt_changed(&env.from, &env.id, now);
            self.outputs.audit(AuditEvent::Forwarded {
                peer: peer.to_owned(),
                id: env.id.to_string(),
                to: env.to.to_string(),
            });
            self.outputs.push(Output::Forward {
                peer: peer.to_owned(),
                seq: env.seq,
                envelope: env.shared_text(),
            });
            if let Some(link) = self.link_mut(peer) {
                link.inflight_bytes += env.size_bytes();
                link.inflight.insert(env.seq, (env, now.mono));
            }
        }
    }

    /// When the oldest unacked forward of any link runs out of time.
    pub(super) fn forward_deadline(&self) -> Option<Instant> {
        let f = self.forwarding.as_ref()?;
        f.links
            .values()
            .flat_map(|l| l.inflight.values().map(|(_, sent)| *sent))
            .min()
            .map(|sent| crate::kernel::deadline::after(sent, f.ack_timeout))
    }

    /// A link whose oldest forward went unacked past the deadline has everything in flight
    /// queued again and sent again (the peer answers what it already has as duplicates).
    pub(super) fn expire_forwards(&mut self, now: Now) {
        let Some(f) = &self.forwarding else { return };
        let ack_timeout = f.ack_timeout;
        let stuck: Vec<String> = f
            .links
            .iter()
            .filter(|(_, l)| {
                l.inflight
                    .values()
                    .any(|(_, sent)| crate::kernel::deadline::after(*sent, ack_timeout) <= now.mono)
            })
            .map(|(p, _)| p.clone())
            .collect();
        if stuck.is_empty() {
            return;
        }
        let reason = format!("no ack within {} ms", ack_timeout.as_millis());
        for peer in stuck {
            self.requeue_inflight(&peer, &reason, now);
            self.pump_forward(&peer, now);
        }
    }

    /// Where a new envelope goes: the most specific, oldest parked await (claimed now), or
    /// room reserved in its queue.
    pub(super) fn stage_target(
        &mut self,
        queued: &Queued,
    ) -> Result<Target, super::router::QueueFull> {
        if let Some((waiter, parked)) = self.router.claim_waiter(queued) {
            let w = self
                .conns
                .get_mut(&waiter)
                .expect("parked waiters are live connections");
            let Phase::Parked { deadline, ack, .. } = w.phase else {
                unreachable!("router waiters are parked")
            };
            w.phase = Phase::Claimed {
                parked,
                deadline,
                ack,
            };
            self.set_deadline(waiter, None);
            return Ok(Target::Waiter(waiter));
        }
        self.router
            .reserve(&queued.to, queued.size_bytes())
            .map(|()| Target::Queue { reserved: true })
    }

    fn check_forwarded(
        &self,
        peer: &str,
        text: &str,
        hop: u32,
    ) -> Result<Incoming, (String, String)> {
        let Some(f) = &self.forwarding else {
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
        if text.len() > self.settings.limits.max_line_bytes {
            return Err((
                String::new(),
                format!(
                    "envelope of {} bytes exceeds this hub's line cap of {} bytes",
                    text.len(),
                    self.settings.limits.max_line_bytes
                ),
            ));
        }
        // The texts of `wire::decode`: a refusal never quotes the peer's envelope.
        let mut env = crate::wire::decode_envelope(text).map_err(|e| match e {
            crate::wire::WireError::Envelope(e) => {
                (String::new(), format!("invalid envelope: {e}"))
            }
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
        if !self.settings.roster.contains(&name) {
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
            return refuse(
                "from must not contain control or invisible formatting characters".into(),
            );
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
        Ok(Incoming { env })
    }

    fn refuse_forward(&mut self, peer: &str, ack_id: String, id: String, reason: String) {
        self.outputs.audit(AuditEvent::ForwardRefused {
            peer: peer.to_owned(),
            id,
            reason: reason.clone(),
        });
        self.outputs.push(Output::ForwardAck {
            peer: peer.to_owned(),
            ack_id,
            error: Some(reason),
        });
    }

    /// An unacked forward goes back to its queue in acceptance order, its attempt counted.
    fn forward_back(&mut self, peer: &str, mut env: Queued, reason: &str, now: Now) {
        self.count_return(&mut env, now);
        self.outputs.audit(AuditEvent::ForwardRequeued {
            peer: peer.to_owned(),
            id: env.id.to_string(),
            to: env.to.to_string(),
            reason: reason.to_owned(),
            attempts: env.attempts,
        });
        self.router.requeue(env);
    }

    /// Everything in flight to `peer` goes back to its queues, in acceptance order.
    fn requeue_inflight(&mut self, peer: &str, reason: &str, now: Now) {
        let Some(link) = self.link_mut(peer) else {
            return;
        };
        link.inflight_bytes = 0;
        for (_, (env, _)) in std::mem::take(&mut link.inflight) {
            self.forward_back(peer, env, reason, now);
        }
    }

    fn link_mut(&mut self, peer: &str) -> Option<&mut Link> {
        self.forwarding.as_mut()?.links.get_mut(peer)
    }
}
