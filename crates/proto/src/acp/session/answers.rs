//! Answering the agent's requests (docs/acp.md "How the
//! agent's messages are answered"): `session/request_permission` by policy, -32601 for
//! `fs/*`, `terminal/*` (not advertised) and everything else, the request flood cap, and
//! noticing reused ids. Part of `Session`; split out so each file does one job.

use super::{Level, Phase, Session, RECENT_AGENT_IDS};
use crate::acp::permission::{self, Decision};
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
        let foreign = self.foreign_session(params);
        if foreign {
            self.anomaly("permission request for another session; answered cancelled".into());
        }
        let cancelling = matches!(self.phase, Phase::Cancelling { .. });
        let decision = permission::decide(self.permission, options, cancelling || foreign);
        let counts = &mut self.fold.progress.permissions;
        counts.asked += 1;
        let answered = match &decision {
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
        };
        let tool = params
            .get("toolCall")
            .and_then(|t| t.get("title"))
            .and_then(Value::as_str)
            .map(|t| self.secrets.token(t))
            .unwrap_or_else(|| "?".into());
        let policy = self.permission.tag();
        self.log(
            Level::Info,
            format!("permission asked for tool {tool}: {answered} (policy {policy})"),
        );
        self.answer(id, decision.result());
        self.progress_changed(now);
    }
}
