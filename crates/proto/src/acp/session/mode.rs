//! Putting the session in a mode where the agent asks (docs/acp.md "Session modes"): after
//! `session/new` and before the prompt, and back into it if the agent leaves it mid-turn.
//! Part of `Session`; split out so each file does one job. What counts as an asking mode and
//! how modes are read is `acp::modes`.
//!
//! The rule: an agent that offers modes is switched to an asking one (ACP
//! `session/set_config_option` or `session/set_mode`) before the prompt. When it offers none,
//! or the switch fails, the task is refused, unless the policy is an explicit `allow`, where
//! running unasked is what the operator asked for (then a warning says so). An agent that
//! offers no modes is prompted as before.

use super::{Cause, Level, Phase, Session};
use crate::acp::modes::{self, Control, Plan, Read};
use crate::acp::outcome::{Refusal, Status, Step};
use crate::acp::rpc::Reply;
use serde_json::Value;
use std::time::Instant;

/// Mid-turn switches back to the asking mode, at most. An agent that keeps leaving it is not
/// cooperating, and the hub cannot make it (the OS sandbox is what contains such an agent);
/// the bound keeps such an agent from making us write forever.
pub const MAX_MODE_RESETS: u32 = 4;

impl Session {
    /// Reads the modes `session/new` answered and either prompts, switches the mode first,
    /// or refuses.
    pub(super) fn choose_mode(&mut self, result: &Value, now: Instant) {
        let offered = match modes::read(result) {
            Read::None => return self.send_prompt(),
            Read::Unreadable(why) => {
                return self.cannot_ask(format!("its session modes cannot be read: {why}"), now)
            }
            Read::Offered(o) => o,
        };
        self.fold.progress.mode = Some(self.secrets.token(&offered.current));
        let plan = modes::plan(&offered, &self.ask_modes);
        let current = self.secrets.token(&offered.current);
        match plan {
            Plan::Keep => {
                self.mode = Some(offered);
                self.log(
                    Level::Info,
                    format!("session mode {current}: the agent asks before acting"),
                );
                self.send_prompt();
            }
            Plan::Switch(target) => {
                let sid = self.session_id.clone().unwrap_or_default();
                let method = offered.control.method();
                let params = offered.control.params(&sid, &target);
                self.log(
                    Level::Info,
                    format!(
                        "session mode {current} does not ask before acting; switching to {} ({method})",
                        self.secrets.token(&target)
                    ),
                );
                self.mode = Some(offered);
                let id = self.request(method, params);
                self.phase = Phase::SettingMode {
                    id,
                    since: now,
                    target,
                };
            }
            Plan::NoAskingMode => {
                let offered_ids: Vec<String> = offered
                    .available
                    .iter()
                    .take(8)
                    .map(|m| self.secrets.token(m))
                    .collect();
                let why = format!(
                    "it runs in mode {current} and offers {}; none is {} ({})",
                    if offered_ids.is_empty() {
                        "no other".to_owned()
                    } else {
                        offered_ids.join(", ")
                    },
                    self.ask_list(),
                    if self.ask_modes_given {
                        "its manifest's run.ask_modes"
                    } else {
                        "the hub's default list, as its manifest names none in run.ask_modes"
                    }
                );
                self.mode = Some(offered);
                self.cannot_ask(why, now);
            }
        }
    }

    /// The answer to the switch sent before the prompt.
    pub(super) fn on_mode_set(&mut self, reply: Reply, target: String, now: Instant) {
        let Some(control) = self.mode.as_ref().map(|m| m.control.clone()) else {
            return self.send_prompt();
        };
        let step = self.mode_step();
        let shown = self.secrets.token(&target);
        let result = match reply {
            Reply::Error(e) => {
                let message = self.secrets.clean(&e.message);
                let why = format!(
                    "it answered {} to mode {shown} with error {}: {message}",
                    step.method(),
                    e.code
                );
                return self.cannot_ask(why, now);
            }
            Reply::Result(r) => r,
        };
        // A set_config_option result holds the whole state after the change (the spec: the
        // complete list "and their current values"): an agent may have put the session
        // somewhere else than asked. A set_mode result is `{}`: the switch is taken as done,
        // and a later `current_mode_update` is watched like any other.
        let now_in = modes::reported_by_result(&control, &result).unwrap_or(target);
        if !modes::asks(&now_in, &self.ask_modes) {
            // The agent reported a non-asking mode after (or instead of) our switch.
            let why = format!(
                "after {} to mode {shown} it reports mode {}",
                step.method(),
                self.secrets.token(&now_in)
            );
            return self.cannot_ask(why, now);
        }
        self.set_current(&now_in);
        self.log(
            Level::Info,
            format!(
                "session mode {}: the agent asks before acting",
                self.secrets.token(&now_in)
            ),
        );
        self.send_prompt();
    }

    /// The agent cannot be made to ask: refused, or run anyway under an explicit `allow`.
    pub(super) fn cannot_ask(&mut self, why: String, now: Instant) {
        let policy = self.permission;
        if policy.may_run_unasked() {
            self.log(
                Level::Warn,
                format!(
                    "the agent will run without asking the hub before acting ({why}); running it anyway because permission = \"{}\" allows everything it would ask",
                    policy.tag()
                ),
            );
            return self.send_prompt();
        }
        self.log(
            Level::Warn,
            format!("refusing the task: the agent would not ask before acting ({why})"),
        );
        self.finish(
            Status::Refused(Refusal::Unasked {
                why,
                policy: policy.tag(),
            }),
            now,
        );
    }

    /// A `session/update` that may report a new mode (`current_mode_update`,
    /// `config_option_update`). Mid-turn, a move to a mode that does not ask is undone
    /// (the spec lets the client change the mode "whether the Agent is idle or generating a
    /// response"), unless the policy lets the agent run unasked.
    pub(super) fn on_mode_update(&mut self, update: &Value, now: Instant) {
        let Some(control) = self.mode.as_ref().map(|m| m.control.clone()) else {
            return;
        };
        let Some(reported) = modes::reported_by_update(&control, update) else {
            return;
        };
        if self.mode.as_ref().is_some_and(|m| m.current == reported) {
            return;
        }
        self.set_current(&reported);
        let shown = self.secrets.token(&reported);
        if !matches!(self.phase, Phase::Prompting { .. }) {
            // Before the prompt the switch's answer decides; after a cancel nothing runs.
            return;
        }
        if modes::asks(&reported, &self.ask_modes) {
            self.log(
                Level::Info,
                format!("the agent moved to mode {shown}, which asks"),
            );
            return;
        }
        if self.permission.may_run_unasked() {
            self.log(
                Level::Warn,
                format!(
                    "the agent moved to mode {shown}, which does not ask; left as it is under permission = \"allow\""
                ),
            );
            return;
        }
        let target = self
            .ask_modes
            .iter()
            .find(|a| {
                self.mode
                    .as_ref()
                    .is_some_and(|m| m.available.iter().any(|x| x == *a))
            })
            .cloned();
        let Some(target) = target.filter(|_| self.mode_resets < MAX_MODE_RESETS) else {
            // Running on unasked is what the policy forbids: the turn is cancelled and the
            // task fails with the reason (docs/acp.md "Session modes").
            let why = if self.mode_resets >= MAX_MODE_RESETS {
                format!("after {MAX_MODE_RESETS} switches back")
            } else {
                "and offers no mode that asks".to_owned()
            };
            self.log(
                Level::Warn,
                format!(
                    "the agent moved to mode {shown}, which does not ask, {why}; cancelling its turn"
                ),
            );
            if let Phase::Prompting { id } = self.phase {
                self.send_cancel(id, Cause::LeftAskingMode(shown), now);
            }
            return;
        };
        self.mode_resets += 1;
        let sid = self.session_id.clone().unwrap_or_default();
        let id = self.request(control.method(), control.params(&sid, &target));
        self.mode_requests.push(id);
        self.log(
            Level::Warn,
            format!(
                "the agent moved to mode {shown}, which does not ask; switching it back to {}",
                self.secrets.token(&target)
            ),
        );
    }

    /// The answer to a mid-turn switch back: only an error is worth a line.
    pub(super) fn on_mode_reset_answer(&mut self, reply: Reply, now: Instant) {
        let Reply::Error(e) = reply else {
            return;
        };
        let message = self.secrets.clean(&e.message);
        if self
            .mode
            .as_ref()
            .is_some_and(|m| modes::asks(&m.current, &self.ask_modes))
        {
            // The agent came back to an asking mode by itself meanwhile: nothing to undo.
            return self.anomaly(format!(
                "the switch back to an asking mode failed with error {}: {message}; the agent is in one again",
                e.code
            ));
        }
        // The agent stays where it went, which does not ask: its turn is cancelled.
        let shown = self.mode.as_ref().map_or_else(
            || "(unknown)".to_owned(),
            |m| self.secrets.token(&m.current),
        );
        self.log(
            Level::Warn,
            format!(
                "the switch back to an asking mode failed with error {}: {message}; cancelling the turn",
                e.code
            ),
        );
        if let Phase::Prompting { id } = self.phase {
            self.send_cancel(id, Cause::LeftAskingMode(shown), now);
        }
    }

    /// Which of our requests switches the mode (for reasons that name it).
    pub(super) fn mode_step(&self) -> Step {
        match self.mode.as_ref().map(|m| &m.control) {
            Some(Control::ConfigOption { .. }) => Step::SetConfigOption,
            _ => Step::SetMode,
        }
    }

    fn set_current(&mut self, mode: &str) {
        self.fold.progress.mode = Some(self.secrets.token(mode));
        if let Some(m) = self.mode.as_mut() {
            m.current = mode.to_owned();
        }
    }

    fn ask_list(&self) -> String {
        if self.ask_modes.is_empty() {
            return "an asking mode (the list is empty)".to_owned();
        }
        let ids: Vec<String> = self
            .ask_modes
            .iter()
            .map(|m| self.secrets.token(m))
            .collect();
        format!("an asking mode: {}", ids.join(", "))
    }
}
