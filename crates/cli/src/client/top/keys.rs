//! The keys of `agent-hub top`: bytes read from the terminal in raw mode to actions.
//! `q` (or `Q`, Ctrl-C, Ctrl-D) quits, `s` cycles the sort column, `r` reverses it, `a`
//! answers a task's request (issue 37: digits pick, a lone Esc steps back; `answer`). Escape
//! sequences (arrows, function keys) are skipped whole, so their letters never act.
//!
//! Pure: the loop reads the bytes, this decides.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::answer::{Choice, Step};
use super::render::ViewState;
use super::snapshot::OpenRequest;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// The view changed: draw again now.
    Redraw,
    Nothing,
    /// Send this answer (`task_answer`), then draw again.
    Answer(Choice),
}

/// Applies the keys in `bytes` to `view`, with the requests on screen (`requests`); Quit as
/// soon as a quit key comes, Answer as soon as an option is picked (the keys after it wait
/// for the next read).
pub fn apply(bytes: &[u8], view: &mut ViewState, requests: &[OpenRequest]) -> Action {
    let mut action = Action::Nothing;
    let mut i = 0;
    while i < bytes.len() {
        let step = match bytes[i] {
            b'q' | b'Q' | 0x03 | 0x04 => return Action::Quit,
            b'0'..=b'9' if view.answering.active() => view.answering.digit(bytes[i], requests),
            b'a' | b'A' => view.answering.begin(requests),
            0x1b if !matches!(bytes.get(i + 1), Some(b'[' | b'O')) && view.answering.active() => {
                view.answering.back(requests)
            }
            _ => Step::Nothing,
        };
        match step {
            Step::Chosen(c) => return Action::Answer(c),
            Step::Redraw => action = Action::Redraw,
            Step::Nothing => {}
        }
        match bytes[i] {
            b's' | b'S' => {
                view.sort = view.sort.next();
                action = Action::Redraw;
            }
            b'r' | b'R' => {
                view.reverse = !view.reverse;
                action = Action::Redraw;
            }
            0x1b => {
                // ESC [ params final, or ESC O final, or a lone ESC.
                match bytes.get(i + 1) {
                    Some(b'[') => {
                        i += 2;
                        while i < bytes.len() && !(0x40..=0x7e).contains(&bytes[i]) {
                            i += 1;
                        }
                    }
                    Some(b'O') => i += 2,
                    _ => {}
                }
            }
            _ => {}
        }
        i += 1;
    }
    action
}

#[cfg(test)]
mod tests {
    use super::super::render::SortBy;
    use super::*;

    #[test]
    fn q_and_ctrl_c_quit_s_cycles_r_reverses_and_escape_sequences_do_nothing() {
        let mut v = ViewState::default();
        assert_eq!(apply(b"q", &mut v, &[]), Action::Quit);
        assert_eq!(apply(b"\x03", &mut v, &[]), Action::Quit);
        assert_eq!(apply(b"s", &mut v, &[]), Action::Redraw);
        assert_eq!(v.sort, SortBy::LastSeen);
        assert_eq!(apply(b"r", &mut v, &[]), Action::Redraw);
        assert!(v.reverse);
        let before = v.clone();
        // Up, down, F1, a CSI with parameters ending in `q`-free finals: nothing.
        assert_eq!(
            apply(b"\x1b[A\x1b[B\x1bOP\x1b[1;5r", &mut v, &[]),
            Action::Nothing
        );
        assert_eq!(v, before);
        assert_eq!(apply(b"x\x1b", &mut v, &[]), Action::Nothing);
        assert_eq!(apply(b"ssq", &mut v, &[]), Action::Quit);
    }

    fn waiting() -> Vec<OpenRequest> {
        let r = |task: &str, id: &str| OpenRequest {
            task: task.into(),
            request: crate::client::task::RequestView {
                request: Some(id.into()),
                options: vec!["allow".into(), "reject".into()],
                ..Default::default()
            },
        };
        vec![r("task-1", "req-1"), r("task-2", "req-2")]
    }

    /// `a`, a request's number, an option's number: the answer; a lone Esc steps back, an
    /// arrow key's escape sequence does not, and digits outside a pick do nothing.
    #[test]
    fn a_then_two_digits_answers_and_esc_steps_back() {
        let list = waiting();
        let mut v = ViewState::default();
        assert_eq!(apply(b"12", &mut v, &list), Action::Nothing, "no pick yet");
        assert_eq!(apply(b"a", &mut v, &list), Action::Redraw);
        assert_eq!(apply(b"\x1b[A", &mut v, &list), Action::Nothing);
        assert!(v.answering.active(), "an arrow is not Esc");
        assert_eq!(apply(b"2", &mut v, &list), Action::Redraw);
        assert_eq!(
            apply(b"1", &mut v, &list),
            Action::Answer(Choice {
                task: "task-2".into(),
                request: "req-2".into(),
                option: "allow".into()
            })
        );
        // In one read, as a fast typist or a paste sends it.
        let mut v = ViewState::default();
        assert_eq!(
            apply(b"a12", &mut v, &list),
            Action::Answer(Choice {
                task: "task-1".into(),
                request: "req-1".into(),
                option: "reject".into()
            })
        );
        let mut v = ViewState::default();
        apply(b"a1", &mut v, &list);
        assert_eq!(apply(b"\x1b", &mut v, &list), Action::Redraw);
        assert_eq!(apply(b"\x1b", &mut v, &list), Action::Redraw);
        assert!(!v.answering.active());
        // q quits even mid-pick; s and r still work.
        apply(b"a", &mut v, &list);
        assert_eq!(apply(b"s", &mut v, &list), Action::Redraw);
        assert_eq!(apply(b"q", &mut v, &list), Action::Quit);
    }
}
