//! The keys of `agent-hub top`: bytes read from the terminal in raw mode to actions.
//! `q` (or `Q`, Ctrl-C, Ctrl-D) quits, `s` cycles the sort column, `r` reverses it. Escape
//! sequences (arrows, function keys) are skipped whole, so their letters never act.
//!
//! Pure: the loop reads the bytes, this decides.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::render::ViewState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// The view changed: draw again now.
    Redraw,
    Nothing,
}

/// Applies the keys in `bytes` to `view`; Quit as soon as a quit key comes.
pub fn apply(bytes: &[u8], view: &mut ViewState) -> Action {
    let mut action = Action::Nothing;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'q' | b'Q' | 0x03 | 0x04 => return Action::Quit,
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
        assert_eq!(apply(b"q", &mut v), Action::Quit);
        assert_eq!(apply(b"\x03", &mut v), Action::Quit);
        assert_eq!(apply(b"s", &mut v), Action::Redraw);
        assert_eq!(v.sort, SortBy::LastSeen);
        assert_eq!(apply(b"r", &mut v), Action::Redraw);
        assert!(v.reverse);
        let before = v;
        // Up, down, F1, a CSI with parameters ending in `q`-free finals: nothing.
        assert_eq!(
            apply(b"\x1b[A\x1b[B\x1bOP\x1b[1;5r", &mut v),
            Action::Nothing
        );
        assert_eq!(v, before);
        assert_eq!(apply(b"x\x1b", &mut v), Action::Nothing);
        assert_eq!(apply(b"ssq", &mut v), Action::Quit);
    }
}
