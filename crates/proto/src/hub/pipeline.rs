//! What follows a connection's verb (SPEC §4.3, §12.2): lines taken strictly in the order they
//! came, whatever reads they arrived in, so that no outcome depends on how the client's bytes
//! were split into TCP segments.
//!
//! Owns what held input is reduced to (`AckInput`: the line after an ack-mode delivery), the
//! error a line after the verb gets, and the redaction of service-log details. The holding
//! itself, and the end of an exchange once its final line is out, are the connection's
//! (`Conns::hold`, `Conns::end_exchange`). A leaf. Refuses IO, like the rest of the core.
//!
//! The rule: a verb runs as if it were alone. A line that arrives while it is pending is not
//! looked at until the verb's answer is out; then it is what it would have been had it come
//! later: the ack candidate after an ack-mode delivery, otherwise a line after the verb,
//! answered with `LINE_AFTER_THE_VERB` after the verb's own reply. Held input is summarised at
//! once (an ack's id as a digest), so a connection never holds more than a few bytes of it.

use crate::wire::{ClientLine, IdRequest};
use sha2::{Digest, Sha256};

/// The error a line after the verb's reply gets (SPEC §4.3); it is the connection's last line.
pub const LINE_AFTER_THE_VERB: &str =
    "a line after the verb: one verb per connection; that line was not executed";

/// The line after an ack-mode delivery, reduced to what decides its outcome (SPEC §12.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckInput {
    /// An `ack` line: the SHA-256 of the id it names.
    Ack([u8; 32]),
    /// Anything else: the error line it gets, the envelope going back to routing.
    NotAck(String),
}

pub(in crate::hub) fn id_digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl AckInput {
    pub fn of_line(line: &[u8]) -> AckInput {
        match ClientLine::decode(line) {
            Ok(ClientLine::Ack(IdRequest { id })) => AckInput::Ack(id_digest(&id)),
            Ok(other) => AckInput::NotAck(format!(
                "expected an ack, got {}; the envelope will be delivered again",
                other.tag()
            )),
            Err(e) => AckInput::NotAck(format!("{e}; the envelope will be delivered again")),
        }
    }
}

/// `text` with every double-quoted span, as `{:?}` writes a string, replaced by `"…"`. Error
/// texts quote only values that came from clients or peers (an id, a recipient), so the
/// service log, which holds none of them (SPEC §8.2), gets the text without them.
pub fn redact_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            out.push(c);
            continue;
        }
        out.push_str("\"…\"");
        let mut escaped = false;
        for c in chars.by_ref() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => break,
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_spans_are_left_out_escapes_and_all() {
        let id = "se\"cr\\et\u{1}";
        let text = format!(
            "id {id:?} was already accepted; queue for {:?} is full",
            "x"
        );
        let red = redact_quoted(&text);
        assert_eq!(
            red,
            "id \"…\" was already accepted; queue for \"…\" is full"
        );
        assert!(!red.contains("cr"));
        assert_eq!(
            redact_quoted("no quotes (os error 28)"),
            "no quotes (os error 28)"
        );
        // An unterminated quote swallows the rest rather than leaking it.
        assert_eq!(redact_quoted("a \"secret"), "a \"…\"");
    }

    #[test]
    fn an_ack_line_is_known_by_its_id_digest_only() {
        let a = AckInput::of_line(br#"{"ack":{"id":"e1"}}"#);
        assert_eq!(a, AckInput::Ack(id_digest("e1")));
        assert_ne!(a, AckInput::Ack(id_digest("e2")));
        assert_eq!(
            AckInput::of_line(br#"{"send":{}}"#),
            AckInput::NotAck(
                "malformed line: missing field `id`; the envelope will be delivered again".into()
            )
        );
        assert_eq!(
            AckInput::of_line(b""),
            AckInput::NotAck(
                "malformed line: EOF while parsing a value; the envelope will be delivered again"
                    .into()
            )
        );
    }
}
