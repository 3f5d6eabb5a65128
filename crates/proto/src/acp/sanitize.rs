//! Turning strings an agent wrote into something safe to put in a log line or a failure
//! reason (docs/acp.md "Limits"): secrets redacted, control and bidi characters replaced,
//! the length bounded. The agent's final text is not passed through here: it is the task's
//! result, capped by `Limits::max_text_bytes`, and goes into an envelope, never into a log.

/// Most characters of an agent-supplied string kept in a log line or failure reason.
pub const EXCERPT_CHARS: usize = 200;
/// Most characters kept of a short agent-supplied token (a method name, a stop reason, an
/// option id, a tool title).
pub const TOKEN_CHARS: usize = 64;
/// Env values shorter than this are not redacted: too short to be a credential, and
/// redacting `1` or `true` everywhere would garble every excerpt.
pub const MIN_SECRET_BYTES: usize = 8;

const REDACTED: &str = "[redacted]";

/// The strings that must never appear in anything this module returns.
#[derive(Debug, Clone, Default)]
pub struct Secrets(Vec<String>);

impl Secrets {
    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        let mut v: Vec<String> = values
            .into_iter()
            .filter(|s| s.len() >= MIN_SECRET_BYTES)
            .collect();
        // Longest first, so a secret that contains another is redacted whole.
        v.sort_by_key(|s| std::cmp::Reverse(s.len()));
        v.dedup();
        Secrets(v)
    }

    /// `s` with every secret replaced, every control or bidi-override character replaced by
    /// `?`, and at most `max_chars` characters (an ellipsis marks a cut).
    pub fn excerpt(&self, s: &str, max_chars: usize) -> String {
        // Look at a bounded prefix only: a hostile agent's 16 MiB error message costs no more
        // than a short one. The margin keeps a secret straddling the cut redactable.
        let longest = self.0.first().map_or(0, String::len);
        let window = floor_char_boundary(s, max_chars.saturating_mul(4) + longest + 4);
        let mut text = s[..window].to_owned();
        for secret in &self.0 {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), REDACTED);
            }
        }
        let cut_input = window < s.len();
        let mut out = String::with_capacity(max_chars.min(text.len()) + 3);
        let mut cut = false;
        for (kept, c) in text.chars().enumerate() {
            if kept == max_chars {
                cut = true;
                break;
            }
            out.push(if is_unsafe(c) { '?' } else { c });
        }
        if cut || cut_input {
            out.push('…');
        }
        out
    }

    /// An excerpt of the default length.
    pub fn clean(&self, s: &str) -> String {
        self.excerpt(s, EXCERPT_CHARS)
    }

    /// An excerpt for a short token.
    pub fn token(&self, s: &str) -> String {
        self.excerpt(s, TOKEN_CHARS)
    }
}

/// Characters that could forge log lines or reorder what a reader sees: the one rule for
/// other parties' strings (`crate::kernel::text`).
fn is_unsafe(c: char) -> bool {
    crate::kernel::text::is_unsafe(c)
}

/// The largest char boundary of `s` at or below `at`.
pub fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut i = at;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_are_replaced() {
        let s = Secrets::default();
        assert_eq!(s.clean("a\nb\r\u{1b}[31mc\u{202e}d\u{0}"), "a?b??[31mc?d?");
    }

    #[test]
    fn long_strings_are_cut_on_char_boundaries() {
        let s = Secrets::default();
        let long = "é".repeat(1000);
        let e = s.excerpt(&long, 10);
        assert_eq!(e, format!("{}…", "é".repeat(10)));
        let exact = "x".repeat(10);
        assert_eq!(s.excerpt(&exact, 10), exact);
        let huge = "y".repeat(20 << 20);
        assert_eq!(s.clean(&huge).chars().count(), EXCERPT_CHARS + 1);
    }

    #[test]
    fn secrets_are_redacted_even_at_the_cut() {
        let s = Secrets::new(["tok-0123456789abcdef".to_owned(), "short".to_owned()]);
        let msg = format!("{}tok-0123456789abcdef tail", "x".repeat(8));
        let e = s.excerpt(&msg, 12);
        assert!(!e.contains("0123456789"), "{e}");
        assert_eq!(e, "xxxxxxxx[red…");
        // Short values are not treated as secrets.
        assert_eq!(s.clean("short"), "short");
        // A secret beyond the window is not in the excerpt anyway.
        let far = format!("{}tok-0123456789abcdef", "z".repeat(5000));
        assert!(!s.clean(&far).contains("0123"));
    }

    #[test]
    fn nested_secrets_redact_whole() {
        let s = Secrets::new(["abcdefgh".to_owned(), "abcdefgh-ijklmnop".to_owned()]);
        assert_eq!(s.clean("[abcdefgh-ijklmnop]"), "[[redacted]]");
    }

    #[test]
    fn floor_boundary() {
        assert_eq!(floor_char_boundary("aé", 2), 1);
        assert_eq!(floor_char_boundary("aé", 3), 3);
        assert_eq!(floor_char_boundary("aé", 99), 3);
    }
}
