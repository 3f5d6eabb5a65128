//! One set of checks for a new envelope, shared by a local `send` (SPEC §5.1, §12.3) and a
//! peer hub's forward (SPEC §15): idempotency against the ledger, a copy already staged or in
//! the batch being written, the queue caps; then the staging itself.
//!
//! Owns what both paths must agree on. Refuses answering: the local path answers with reply
//! and error lines, the forward path with forward acks, each from the `Admission`.

use super::id_key::Id;

use super::commit::Staged;
use super::{ledger, ConnId, Hub};
use crate::wire::Envelope;

/// What became of an envelope offered for staging.
pub(super) enum Admission {
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

impl Hub {
    /// Checks `env` (its `from` already stamped) and stages it when new. `conn` is the
    /// sender's connection, `from_peer` the peer and relay message id of a forward. `env` is
    /// left as it came: the staged copy's fields are the router's shared strings
    /// (`Router::queued_from`), not the envelope's.
    pub(super) fn admit(
        &mut self,
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
        match self.memory.ledger.seen(&env.from, &id, &digest) {
            ledger::Seen::New => {}
            ledger::Seen::Duplicate => return Admission::Duplicate,
            ledger::Seen::Conflict => return Admission::Conflict,
        }
        if self.commit.is_staged(&env.from, &id) {
            return Admission::InProgress;
        }
        let mut queued = self.router.queued_from(env, id);
        queued.seq = self.commit.take_seq();
        let target = match self.stage_target(&queued) {
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
