//! The agent's questions (issue 37 design §4b; docs/acp.md "Questions"): `elicitation/create`
//! under `Ask` held for a person like a permission request (the same numbering, cap and
//! `Event::Request`, of kind `Question`), and the person's answer, a cancel or the turn's end
//! written back as the elicitation's flat result. Part of `Session`; split out so each file
//! does one job. The question's own shapes are `acp::question`'s.
//!
//! What is not held is answered at once, never left waiting: under `Reject` or `Allow` (the
//! hub advertised no elicitation, so nobody would see it) and a form that cannot be carried
//! (url mode, no schema, a schema over its cap) get `decline`; after a cancel, for another
//! session, or past the cap (the question's fallback, as the task book's expiry) `cancel`.
//! Refuses: logging the question's words (a log holds no agent text), and answering `accept`
//! with anything but the form's content the owner gave.

use super::pending::Held;
use super::{Level, Phase, Session};
use crate::acp::config::PermissionPolicy;
use crate::acp::question::{self, Action, BadAnswer};
use crate::acp::request::{RequestAnswer, RequestKind};
use crate::acp::Event;
use serde_json::Value;
use std::time::Instant;

impl Session {
    /// `elicitation/create` from the agent.
    pub(super) fn on_question(&mut self, id: &Value, params: &Value, now: Instant) {
        const WHAT: &str = "question asked (elicitation/create)";
        if self.foreign_session(params) {
            self.anomaly("question for another session; answered cancel".into());
            return self.reply_question(
                id,
                &Action::Cancel,
                WHAT.into(),
                "(another session)".into(),
            );
        }
        if matches!(
            self.phase,
            Phase::Cancelling { .. } | Phase::Idle | Phase::Closing { .. }
        ) {
            let how = "(the turn is being cancelled)".into();
            return self.reply_question(id, &Action::Cancel, WHAT.into(), how);
        }
        if self.permission != PermissionPolicy::Ask {
            // Not advertised under this policy: there is nobody to ask.
            let how = format!(
                "(policy {}: the hub offers questions under ask only)",
                self.permission.tag()
            );
            return self.reply_question(id, &Action::Decline, WHAT.into(), how);
        }
        let mut ask = match question::read(params, &self.secrets) {
            Ok(ask) => ask,
            Err(why) => {
                let what = format!("{WHAT}, not carried: {why}");
                return self.reply_question(id, &Action::Decline, what, "(policy ask)".into());
            }
        };
        let offered = ask
            .options
            .iter()
            .map(|o| (o.option_id.clone(), o.kind))
            .collect();
        match self.pending.hold(id, RequestKind::Question, offered) {
            Ok(seq) => {
                self.log(
                    Level::Info,
                    format!("{WHAT}: held as request {seq} for an answer (policy ask)"),
                );
                ask.seq = seq;
                self.events.push_back(Event::Request(ask));
                self.progress_changed(now);
            }
            Err(why) => {
                let why = self.not_held(why);
                let what = format!("{WHAT}, not held: {why}");
                self.reply_question(id, &Action::Cancel, what, "(policy ask)".into());
            }
        }
    }

    /// The owner's answer to the held question `held` (`Session::answer`).
    pub(super) fn answer_question(&mut self, held: Held, answer: &RequestAnswer) {
        let seq = held.seq;
        let action = match question::action(answer) {
            Ok(a) => a,
            Err(bad) => {
                let why = match bad {
                    BadAnswer::NotOffered => "names an option the question does not offer",
                    BadAnswer::AcceptWithoutObject => {
                        "accepts without the form's content as a JSON object"
                    }
                };
                self.log(
                    Level::Warn,
                    format!("answer to request {seq} {why}; answering cancel"),
                );
                Action::Cancel
            }
        };
        let how = "(answered by the owner)".into();
        self.reply_question(&held.rpc_id, &action, format!("request {seq}"), how);
    }

    /// Writes `action` as the result of the agent's question `id` and logs `what: <action>
    /// how` (never the content).
    pub(super) fn reply_question(
        &mut self,
        id: &Value,
        action: &Action,
        what: String,
        how: String,
    ) {
        self.log(Level::Info, format!("{what}: {} {how}", action.tag()));
        self.reply(id, action.result());
    }
}
