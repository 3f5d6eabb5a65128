//! Answering the agent's requests (docs/acp.md "How the
//! agent's messages are answered"): `session/request_permission` by policy,
//! `elicitation/create` as a question (`questions.rs`), -32601 for `fs/*`, `terminal/*` (not
//! advertised) and everything else, the request flood cap, and noticing reused ids. Part of
//! `Session`; split out so each file does one job.
//!
//! A permission request goes, in this order (issue 37 design §2-§4): after a cancel, or for
//! another session, `cancelled`; a tool of the hub's own MCP server, allow under every
//! policy; `Reject` and `Allow` as before; under `Ask`, a request no person could answer
//! (no usable option) gets the fallback, one a delegator's rule matches is allowed and
//! reported (`Event::Preapproved`), and the rest is held (`pending.rs`) and reported
//! (`Event::Request`) until `answer`, a cancel or the turn's end, unless the cap is reached
//! (the fallback at once).

use super::pending::{Held, NotHeld};
use super::{Event, Level, Phase, Session, RECENT_AGENT_IDS};
use crate::acp::permission::{self, Decision};
use crate::acp::question::{self, Action};
use crate::acp::request::{self, RequestAnswer, RequestKind};
use crate::acp::rpc;
use serde_json::Value;
use std::time::Instant;

impl Session {
    pub(super) fn on_request(&mut self, id: Value, method: &str, params: Value, now: Instant) {
        self.agent_requests += 1;
        if self.agent_requests > self.limits.max_agent_requests {
            let why = format!(
                "more than {} requests (max_agent_requests)",
                self.limits.max_agent_requests
            );
            self.garbage(why, now);
            return;
        }
        if self.recent_agent_ids.contains(&id) {
            let shown = self.secrets.token(&id.to_string());
            self.anomaly(format!("agent reused request id {shown}"));
        }
        if self.recent_agent_ids.len() == RECENT_AGENT_IDS {
            self.recent_agent_ids.pop_front();
        }
        self.recent_agent_ids.push_back(id.clone());
        match method {
            "session/request_permission" => self.on_permission(&id, &params, now),
            question::METHOD => self.on_question(&id, &params, now),
            m if m.starts_with("fs/") || m.starts_with("terminal/") => {
                // Not advertised in clientCapabilities (§1.3), so an agent should not ask.
                let m = self.secrets.token(m);
                self.log(
                    Level::Info,
                    format!("agent asked for {m}, which the hub does not offer; answered -32601"),
                );
                self.answer_error(
                    &id,
                    rpc::METHOD_NOT_FOUND,
                    format!("Method not found: {m} (the client advertised fs and terminal as unsupported)"),
                );
            }
            other => {
                let m = self.secrets.token(other);
                self.log(
                    Level::Info,
                    format!("agent sent unknown request {m}; answered -32601"),
                );
                self.answer_error(&id, rpc::METHOD_NOT_FOUND, format!("Method not found: {m}"));
            }
        }
    }

    pub(super) fn on_permission(&mut self, id: &Value, params: &Value, now: Instant) {
        let Some(options) = params.get("options").and_then(Value::as_array) else {
            self.anomaly("permission request without an options array; answered -32602".into());
            self.answer_error(
                id,
                rpc::INVALID_PARAMS,
                "Invalid params: options must be an array".into(),
            );
            return;
        };
        self.fold.progress.permissions.asked += 1;
        let foreign = self.foreign_session(params);
        if foreign {
            self.anomaly("permission request for another session; answered cancelled".into());
        }
        // Between turns (a kept session) nothing may act either: no turn is open.
        let cancelling = matches!(
            self.phase,
            Phase::Cancelling { .. } | Phase::Idle | Phase::Closing { .. }
        );
        let tool = params
            .get("toolCall")
            .and_then(|t| t.get("title"))
            .and_then(Value::as_str)
            .map(|t| self.secrets.token(t))
            .unwrap_or_else(|| "?".into());
        let policy = self.permission.tag();
        if cancelling || foreign {
            return self.decided(
                id,
                Decision::Cancelled,
                format!("permission asked for tool {tool}"),
                format!("(policy {policy})"),
                now,
            );
        }
        if let Some(own) = self.own_tool(params) {
            if let Some(d) = permission::allow_choice(options) {
                let what = format!("permission asked for the hub's own tool {own}");
                return self.decided(id, d, what, "(under every policy)".into(), now);
            }
        }
        if self.permission != crate::acp::PermissionPolicy::Ask {
            let decision = permission::decide(self.permission, options, false);
            let what = format!("permission asked for tool {tool}");
            return self.decided(id, decision, what, format!("(policy {policy})"), now);
        }
        self.ask(id, params, options, &tool, now);
    }

    /// The hub tool a request asks for, when the hub's server is attached.
    fn own_tool(&self, params: &Value) -> Option<&'static str> {
        let server = self.approval.hub_server.as_deref()?;
        let remembered = params
            .pointer("/toolCall/toolCallId")
            .and_then(Value::as_str)
            .and_then(|id| self.tool_names.get(id));
        permission::own_tool(server, params, remembered)
    }

    /// `Ask`: pre-approved, held, or (when it cannot be held) the fallback.
    fn ask(&mut self, id: &Value, params: &Value, options: &[Value], tool: &str, now: Instant) {
        let fallback = self.approval.fallback;
        let what = format!("permission asked for tool {tool}");
        let by_fallback = format!("(policy ask, fallback {})", fallback.tag());
        let Some(read) = request::read_permission(params, &self.secrets) else {
            let d = permission::fallback(fallback, options);
            return self.decided(
                id,
                d,
                format!("{what}, offering no option a person could choose"),
                by_fallback,
                now,
            );
        };
        let rule = self
            .approval
            .allow_rules
            .iter()
            .position(|r| r.matches(&self.cwd, &read.facts));
        let allow = permission::allow_choice(options);
        if let (Some(rule), Some(d)) = (rule, allow) {
            let Some(seq) = self.pending.next_seq() else {
                let d = permission::fallback(fallback, options);
                return self.decided(id, d, what, by_fallback, now);
            };
            let described = self.approval.allow_rules[rule].describe();
            let how = format!(
                "(pre-approved as request {seq} by allow rule {} {described})",
                rule + 1
            );
            self.decided(id, d, what, how, now);
            let mut ask = read.ask;
            ask.seq = seq;
            self.events.push_back(Event::Preapproved { ask, rule });
            return;
        }
        let offered = read
            .ask
            .options
            .iter()
            .map(|o| (o.option_id.clone(), o.kind))
            .collect();
        match self.pending.hold(id, RequestKind::Permission, offered) {
            Ok(seq) => {
                self.log(
                    Level::Info,
                    format!("{what}: held as request {seq} for an answer (policy ask)"),
                );
                let mut ask = read.ask;
                ask.seq = seq;
                self.events.push_back(Event::Request(ask));
                self.progress_changed(now);
            }
            Err(why) => {
                let why = self.not_held(why);
                let d = permission::fallback(fallback, options);
                self.decided(id, d, format!("{what}, not held: {why}"), by_fallback, now);
            }
        }
    }

    /// Why a request could not be held, in words for the log (a reused id is an anomaly).
    pub(super) fn not_held(&mut self, why: NotHeld) -> String {
        match why {
            NotHeld::Full => format!(
                "{} requests are held already (max_open_requests_per_task)",
                self.pending.len()
            ),
            NotHeld::IdInUse => {
                self.anomaly("request reusing the id of one still held".into());
                "its id is a held request's".to_owned()
            }
            NotHeld::Exhausted => "no request number is left".to_owned(),
        }
    }

    /// Writes the answer `decision` to the agent's request `id`, counts it, and logs
    /// `what: <answer> how`.
    fn decided(&mut self, id: &Value, decision: Decision, what: String, how: String, now: Instant) {
        let answered = self.count(&decision);
        self.log(Level::Info, format!("{what}: {answered} {how}"));
        self.reply(id, decision.result());
        self.progress_changed(now);
    }

    /// Counts an answer; returns it in words for the log.
    fn count(&mut self, decision: &Decision) -> String {
        let counts = &mut self.fold.progress.permissions;
        match decision {
            Decision::Selected {
                allowed: true,
                option_id,
            } => {
                counts.allowed += 1;
                format!("allowed ({})", self.secrets.token(option_id))
            }
            Decision::Selected {
                allowed: false,
                option_id,
            } => {
                counts.rejected += 1;
                format!("rejected ({})", self.secrets.token(option_id))
            }
            Decision::Cancelled => {
                counts.cancelled += 1;
                "answered cancelled".to_owned()
            }
        }
    }

    /// The owner's answer to the held request `seq` (issue 37 design §4.4): the JSON-RPC
    /// result is written for its id. An answer for a request no longer held (answered,
    /// closed by a cancel or the turn's end, or never held) is logged and dropped. An option
    /// the agent did not offer is never written: the request gets the fallback instead, so
    /// the agent is not left waiting on an answer it cannot read.
    pub fn answer(&mut self, seq: u32, answer: RequestAnswer, now: Instant) {
        let Some(held) = self.pending.take(seq) else {
            self.log(
                Level::Info,
                format!("answer to request {seq} dropped: it is not held (answered, closed, or never asked)"),
            );
            return;
        };
        if held.kind == RequestKind::Question {
            return self.answer_question(held, &answer);
        }
        let decision = match &answer.option_id {
            None => Decision::Cancelled,
            Some(chosen) => match held.options.iter().find(|(id, _)| id == chosen) {
                Some((id, kind)) => Decision::Selected {
                    option_id: id.clone(),
                    allowed: kind.allows(),
                },
                None => {
                    let d = permission::fallback(self.approval.fallback, &held.option_values());
                    let shown = self.secrets.token(chosen);
                    self.log(
                        Level::Warn,
                        format!("answer to request {seq} names option {shown}, which the agent did not offer; answering by the fallback"),
                    );
                    d
                }
            },
        };
        self.decided(
            &held.rpc_id,
            decision,
            format!("request {seq}"),
            "(answered by the owner)".into(),
            now,
        );
    }

    /// Answers every held request `cancelled` (a cancel, or the turn's end): ACP §1.7; a
    /// question gets its `cancel` action.
    pub(super) fn close_pending(&mut self, why: &str) {
        for Held {
            seq, rpc_id, kind, ..
        } in self.pending.take_all()
        {
            if kind == RequestKind::Question {
                self.reply_question(
                    &rpc_id,
                    &Action::Cancel,
                    format!("request {seq}"),
                    format!("({why})"),
                );
                continue;
            }
            let answered = self.count(&Decision::Cancelled);
            self.log(Level::Info, format!("request {seq}: {answered} ({why})"));
            self.reply(&rpc_id, Decision::Cancelled.result());
        }
    }
}
