//! Answering a task's request from `agent-hub top` (issue 37; docs/delegation.md "Approvals"):
//! `a` starts, a digit picks the request (numbered `[n]` under TASKS; skipped when only one
//! waits), a digit picks one of its options, and the view sends `task_answer`; Esc goes back
//! a step. The result (the request answered, or the hub's refusal in its own words) stays on
//! the prompt line until the next `a` or Esc.
//!
//! Owns the picking state, its prompt and its notice; pure (`keys` feeds it bytes, `run` sends
//! the answer and reports back, `render` shows the prompt). Refuses to guess: a request that
//! is no longer listed after a refresh ends the pick with a notice saying so, never answering
//! another one in its place, and only requests with an id and options are numbered.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::snapshot::OpenRequest;

/// Most requests and options a digit can pick (`1`–`9`).
pub const MAX_PICK: usize = 9;

/// Where a pick stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum Pick {
    #[default]
    Idle,
    /// Choosing which request (several wait).
    Request,
    /// Choosing an option of this request (named by ids, not by place: the list may change
    /// between refreshes).
    Option { task: String, request: String },
}

/// The line under the header: what to press, or how the last answer went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// A refusal or a request that went away (shown as a warning), else plain.
    pub warn: bool,
    pub text: String,
}

/// An answer picked: what `run` sends as `task_answer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub task: String,
    pub request: String,
    pub option: String,
}

/// What a key did to the pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing changed.
    Nothing,
    /// The pick or its prompt changed: draw again.
    Redraw,
    /// An option was picked: send it.
    Chosen(Choice),
}

/// The requests `top` can answer, in the order shown: the n-th is `[n]`.
pub fn answerable(requests: &[OpenRequest]) -> Vec<&OpenRequest> {
    requests.iter().filter(|r| r.answerable()).collect()
}

/// The answering sub-machine `ViewState` holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answering {
    pick: Pick,
    notice: Option<Prompt>,
}

impl Answering {
    /// Whether a pick is under way (keys go to it).
    pub fn active(&self) -> bool {
        self.pick != Pick::Idle
    }

    /// `a`: straight to the options of the only answerable request, to the choice of one
    /// among several, or a notice that none waits.
    pub fn begin(&mut self, requests: &[OpenRequest]) -> Step {
        self.notice = None;
        let list = answerable(requests);
        match list.as_slice() {
            [] => {
                self.pick = Pick::Idle;
                self.notice = Some(Prompt {
                    warn: false,
                    text: "no request waits for an answer you can give".into(),
                });
            }
            [one] => self.pick = option_pick(one),
            _ => self.pick = Pick::Request,
        }
        Step::Redraw
    }

    /// Esc: one step back (from the options of one of several, to the choice of a request),
    /// or out; the notice goes too.
    pub fn back(&mut self, requests: &[OpenRequest]) -> Step {
        self.notice = None;
        self.pick = match self.pick {
            Pick::Option { .. } if answerable(requests).len() > 1 => Pick::Request,
            _ => Pick::Idle,
        };
        Step::Redraw
    }

    /// A digit while a pick is under way; anything else is ignored.
    pub fn digit(&mut self, d: u8, requests: &[OpenRequest]) -> Step {
        let Some(n) = (b'1'..=b'9').contains(&d).then(|| usize::from(d - b'0')) else {
            return Step::Nothing;
        };
        match &self.pick {
            Pick::Idle => Step::Nothing,
            Pick::Request => match answerable(requests).get(n - 1) {
                Some(r) => {
                    self.pick = option_pick(r);
                    Step::Redraw
                }
                None => Step::Nothing,
            },
            Pick::Option { task, request } => {
                let (task, request) = (task.clone(), request.clone());
                let Some(r) = find(requests, &task, &request) else {
                    return self.gone(requests);
                };
                match r.request.options.get(n - 1) {
                    Some(option) => {
                        let choice = Choice {
                            task,
                            request,
                            option: option.clone(),
                        };
                        self.pick = Pick::Idle;
                        Step::Chosen(choice)
                    }
                    None => Step::Nothing,
                }
            }
        }
    }

    /// After a refresh: a request being answered that is no longer listed (answered by
    /// someone else, expired, its task ended) ends the pick, saying so.
    pub fn reconcile(&mut self, requests: &[OpenRequest]) {
        match &self.pick {
            Pick::Option { task, request } if find(requests, task, request).is_none() => {
                self.gone(requests);
            }
            Pick::Request if answerable(requests).is_empty() => {
                self.pick = Pick::Idle;
                self.notice = Some(Prompt {
                    warn: true,
                    text: "no request waits for an answer any more".into(),
                });
            }
            _ => {}
        }
    }

    /// How the answer `run` sent went: the hub's reply (`answered REQ with OPTION`) or its
    /// refusal, in its words.
    pub fn answered(&mut self, result: Result<String, String>) {
        self.notice = Some(match result {
            Ok(text) => Prompt { warn: false, text },
            Err(why) => Prompt {
                warn: true,
                text: format!("not answered: {why}"),
            },
        });
    }

    /// The prompt lines under the header: what the pick needs next (a request's options on
    /// a line of their own, so a narrow terminal cuts the title, never them), or the last
    /// notice; none when idle without one.
    pub fn prompt(&self, requests: &[OpenRequest]) -> Vec<Prompt> {
        let plain = |text: String| Prompt { warn: false, text };
        match &self.pick {
            Pick::Idle => self.notice.clone().into_iter().collect(),
            Pick::Request => {
                let n = answerable(requests).len().min(MAX_PICK);
                vec![plain(format!(
                    "answer which request? 1-{n} (its [n] under TASKS); Esc: back"
                ))]
            }
            Pick::Option { task, request } => {
                let Some(r) = find(requests, task, request) else {
                    return Vec::new();
                };
                let options: Vec<String> = r
                    .request
                    .options
                    .iter()
                    .take(MAX_PICK)
                    .enumerate()
                    .map(|(i, o)| format!("{} {o}", i + 1))
                    .collect();
                let title = r
                    .request
                    .title
                    .as_deref()
                    .map(|t| format!(": {t}"))
                    .unwrap_or_default();
                vec![
                    plain(format!("answer {request} with (Esc: back){title}")),
                    plain(format!("  {}", options.join("   "))),
                ]
            }
        }
    }

    fn gone(&mut self, requests: &[OpenRequest]) -> Step {
        if let Pick::Option { request, .. } = &self.pick {
            self.notice = Some(Prompt {
                warn: true,
                text: format!("{request} is no longer open (answered, expired, or its task ended)"),
            });
        }
        self.pick = if answerable(requests).len() > 1 {
            Pick::Request
        } else {
            Pick::Idle
        };
        Step::Redraw
    }
}

fn option_pick(r: &OpenRequest) -> Pick {
    Pick::Option {
        task: r.task.clone(),
        request: r.id().unwrap_or_default().to_owned(),
    }
}

fn find<'a>(requests: &'a [OpenRequest], task: &str, request: &str) -> Option<&'a OpenRequest> {
    requests
        .iter()
        .find(|r| r.task == task && r.id() == Some(request) && r.answerable())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::task::RequestView;

    fn req(task: &str, id: &str, options: &[&str]) -> OpenRequest {
        OpenRequest {
            task: task.into(),
            request: RequestView {
                request: Some(id.into()),
                title: Some("Run cargo test".into()),
                options: options.iter().map(|o| (*o).into()).collect(),
                ..RequestView::default()
            },
        }
    }

    #[test]
    fn one_request_goes_straight_to_its_options_and_a_digit_answers() {
        let list = [req("task-1", "req-1", &["allow", "reject"])];
        let mut a = Answering::default();
        assert!(!a.active());
        assert_eq!(a.begin(&list), Step::Redraw);
        assert!(a.active());
        assert_eq!(
            a.prompt(&list),
            [
                Prompt {
                    warn: false,
                    text: "answer req-1 with (Esc: back): Run cargo test".into()
                },
                Prompt {
                    warn: false,
                    text: "  1 allow   2 reject".into()
                }
            ]
        );
        assert_eq!(a.digit(b'3', &list), Step::Nothing, "no third option");
        assert_eq!(a.digit(b'x', &list), Step::Nothing);
        assert_eq!(
            a.digit(b'2', &list),
            Step::Chosen(Choice {
                task: "task-1".into(),
                request: "req-1".into(),
                option: "reject".into()
            })
        );
        assert!(!a.active());
        a.answered(Ok("answered req-1 with reject".into()));
        assert_eq!(
            a.prompt(&list),
            [Prompt {
                warn: false,
                text: "answered req-1 with reject".into()
            }]
        );
        a.answered(Err(
            "invalid task_answer: request req-1 is not open (answered)".into(),
        ));
        let p = a.prompt(&list)[0].clone();
        assert!(p.warn && p.text.starts_with("not answered: invalid task_answer"));
    }

    #[test]
    fn several_requests_are_picked_by_number_and_esc_steps_back() {
        let list = [
            req("task-1", "req-1", &["allow", "reject"]),
            req("task-1", "req-noopts", &[]),
            req("task-2", "req-2", &["accept", "decline", "cancel"]),
        ];
        assert_eq!(
            answerable(&list).len(),
            2,
            "one without options is not numbered"
        );
        let mut a = Answering::default();
        a.begin(&list);
        assert_eq!(
            a.prompt(&list)[0].text,
            "answer which request? 1-2 (its [n] under TASKS); Esc: back"
        );
        assert_eq!(a.digit(b'3', &list), Step::Nothing);
        assert_eq!(a.digit(b'2', &list), Step::Redraw);
        assert!(a.prompt(&list)[0].text.starts_with("answer req-2 "));
        a.back(&list);
        assert!(a.prompt(&list)[0].text.starts_with("answer which request?"));
        a.back(&list);
        assert!(!a.active());
        assert!(a.prompt(&list).is_empty());
        a.begin(&list);
        a.digit(b'2', &list);
        assert_eq!(
            a.digit(b'3', &list),
            Step::Chosen(Choice {
                task: "task-2".into(),
                request: "req-2".into(),
                option: "cancel".into()
            })
        );
    }

    /// A request that goes away while its options are shown is never answered in its place
    /// by another that took its number.
    #[test]
    fn a_request_gone_after_a_refresh_ends_the_pick_and_says_so() {
        let before = [
            req("task-1", "req-1", &["allow", "reject"]),
            req("task-2", "req-2", &["allow", "reject"]),
        ];
        let mut a = Answering::default();
        a.begin(&before);
        a.digit(b'1', &before);
        let after = [req("task-2", "req-2", &["allow", "reject"])];
        a.reconcile(&after);
        assert!(!a.active());
        let p = a.prompt(&after)[0].clone();
        assert!(p.warn);
        assert_eq!(
            p.text,
            "req-1 is no longer open (answered, expired, or its task ended)"
        );
        // Gone between the refresh and the key: the digit answers nothing.
        a.begin(&before);
        a.digit(b'2', &before);
        assert_eq!(a.digit(b'1', &[]), Step::Redraw);
        assert!(!a.active());
        // Nothing left to pick from.
        a.begin(&before);
        a.reconcile(&[]);
        assert!(!a.active());
        assert_eq!(
            a.prompt(&[])[0].text,
            "no request waits for an answer any more"
        );
        a.begin(&[]);
        assert_eq!(
            a.prompt(&[])[0].text,
            "no request waits for an answer you can give"
        );
        assert!(!a.active());
    }
}
