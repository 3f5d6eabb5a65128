//! One set of checks for a new envelope, shared by a local `send` (SPEC §5.1, §12.3) and a
//! peer hub's forward (SPEC §15): idempotency against the ledger, a copy already staged or in
//! the batch being written, the queue caps; then the staging itself.
//!
//! Owns what both paths must agree on, as functions over the machines an admission reads and
//! drives: the ledger (`hub::ledger`), the staging (`hub::commit`), the router and, for a
//! claimed waiter, the connections. Refuses answering: the local path answers with reply and
//! error lines (`verbs::send`), the forward path with forward acks (`hub::routing`), each
//! from the `Admission`.

use super::commit::{Commits, Staged, Target};
use super::conn_map::ConnId;
use super::conns::Conns;
use super::id_key::Id;
use super::ledger::{self, Ledger};
use super::router::{QueueFull, Queued, Router};
use crate::wire::Envelope;

/// What became of an envelope offered for staging.
pub(in crate::hub) enum Admission {
    /// Staged for the next batch.
    Staged,
    /// Its id was accepted before from the same sender with the same content.
    Duplicate,
    /// Its id was accepted before from the same sender with other content.
    Conflict,
    /// A copy with its id is staged or being committed.
    InProgress,
    /// Its queue (or the hub) is full: the reason.
    Full(String),
}

/// What an admission reads and drives: the staging (its acceptance order, what is staged or
/// being committed), the ledger of accepted ids, and the router (the queues' caps, the parked
/// awaits a new envelope may claim, the shared names of its queued copy).
pub(in crate::hub) struct Admit<'a> {
    pub(in crate::hub) commit: &'a mut Commits,
    pub(in crate::hub) ledger: &'a Ledger,
    pub(in crate::hub) router: &'a mut Router,
}

impl Admit<'_> {
    /// Checks `env` (its `from` already stamped) and stages it when new. `conn` is the
    /// sender's connection, `from_peer` the peer and relay message id of a forward; `conns`
    /// has the await a new envelope may claim. `env` is left as it came: the staged copy's
    /// fields are the router's shared strings (`Router::queued_from`), not the envelope's.
    pub(in crate::hub) fn admit(
        &mut self,
        conns: &mut Conns,
        env: &mut Envelope,
        conn: Option<ConnId>,
        from_peer: Option<(String, String)>,
    ) -> Admission {
        let digest = ledger::digest(
            &env.to,
            &env.kind,
            env.correlation_id.as_deref(),
            env.body.get(),
        );
        // Parsed once: the ledger's lookup, the staged check and the queued copy share it.
        let id = Id::new(&env.id);
        match self.ledger.seen(&env.from, &id, &digest) {
            ledger::Seen::New => {}
            ledger::Seen::Duplicate => return Admission::Duplicate,
            ledger::Seen::Conflict => return Admission::Conflict,
        }
        if self.commit.is_staged(&env.from, &id) {
            return Admission::InProgress;
        }
        let mut queued = self.router.queued_from(env, id);
        queued.seq = self.commit.take_seq();
        let target = match stage_target(self.router, conns, &queued) {
            Ok(t) => t,
            Err(full) => return Admission::Full(full.to_string()),
        };
        self.commit.stage(Staged {
            conn,
            from_peer,
            env: queued,
            target,
            digest,
            rider: None,
        });
        Admission::Staged
    }
}

/// Where a new envelope goes: the most specific, oldest parked await (claimed now), or room
/// reserved in its queue.
fn stage_target(
    router: &mut Router,
    conns: &mut Conns,
    queued: &Queued,
) -> Result<Target, QueueFull> {
    if let Some((waiter, parked)) = router.claim_waiter(queued) {
        conns.claim(waiter, parked);
        return Ok(Target::Waiter(waiter));
    }
    router
        .reserve(&queued.to, queued.size_bytes())
        .map(|()| Target::Queue { reserved: true })
}
