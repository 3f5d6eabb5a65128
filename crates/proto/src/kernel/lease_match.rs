//! The lease resource rules (lease design §0, docs/design/leases.md): which kinds, values,
//! ids and sessions are well formed, and when two values of one kind name overlapping
//! resources. One rule for the hub's lease table, the client's early refusal and (later) the
//! relay reader, so none of them can disagree.
//!
//! `overlaps` is claudectl 0.92.4's `resources_overlap` bit for bit (its `paths_overlap` for
//! `path_glob`, string equality for every other kind), string-prefix stems included: `src`
//! overlaps `src2/x`. A stricter rule here would answer claudectl's clients differently from
//! their own authority (design §0), so the quirk is kept and documented (docs/leases.md).
//!
//! Owns pure functions over strings. Refuses IO and any notion of a file system: a value is
//! compared as text, never resolved.

/// The kind whose values are paths and globs, compared by prefix (`overlaps`).
pub const PATH_GLOB: &str = "path_glob";

/// The longest kind claudectl accepts (`[a-z0-9_-]`, 1-32 bytes).
pub const MAX_KIND_BYTES: usize = 32;

/// The longest value claudectl accepts; `leases.max_value_bytes` may only lower it.
pub const MAX_VALUE_BYTES: usize = 512;

/// Lease, waiter and request ids: 1-96 bytes (claudectl's bound).
pub const MAX_TOKEN_BYTES: usize = 96;

/// A relay session name: 1-128 bytes (claudectl's bound).
pub const MAX_SESSION_BYTES: usize = 128;

/// `kind` is 1-32 characters of `a-z`, `0-9`, `_` or `-`.
pub fn check_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= MAX_KIND_BYTES
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// `value` is 1..=`max` bytes with no control character (claudectl's "printable": it
/// refuses `char::is_control` only, so other text, spaces included, passes).
pub fn check_value(value: &str, max: usize) -> bool {
    !value.is_empty() && value.len() <= max && !value.chars().any(char::is_control)
}

/// A lease, waiter or request id: 1-96 bytes of ASCII graphic characters (no space), no `@`.
pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_TOKEN_BYTES
        && s.bytes().all(|b| b.is_ascii_graphic() && b != b'@')
}

/// A relay session name: 1-128 bytes, no `@` (it is joined to a peer id with one), no
/// control character.
pub fn is_session(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SESSION_BYTES
        && !s.contains('@')
        && !s.chars().any(char::is_control)
}

/// Whether two values of `kind` name overlapping resources: for `path_glob`, `paths_overlap`;
/// for every other kind, equality.
pub fn overlaps(kind: &str, a: &str, b: &str) -> bool {
    if kind == PATH_GLOB {
        paths_overlap(a, b)
    } else {
        a == b
    }
}

/// claudectl's `paths_overlap`: equal; or either is `**` (everything); or, after trimming
/// `*` and `/` from the end of each, the non-empty stem of one is a string prefix of the
/// other. A string prefix, not a path prefix: `src/**` holds `src/relay/peer.rs`, and `src`
/// also overlaps `src2/x` (kept on purpose, module doc).
pub fn paths_overlap(a: &str, b: &str) -> bool {
    if a == b || a == "**" || b == "**" {
        return true;
    }
    let stem = |v: &str| v.trim_end_matches(['*', '/']).len();
    let (sa, sb) = (&a[..stem(a)], &b[..stem(b)]);
    (!sa.is_empty() && b.starts_with(sa)) || (!sb.is_empty() && a.starts_with(sb))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// claudectl's store tests (0.92.4 `coord::store` overlap cases) and the quirks design §0
    /// names: the string-prefix stem, `**`, a lone `/`, empty stems.
    #[test]
    fn path_overlap_is_claudectls_rule() {
        let cases = [
            // (a, b, overlap)
            ("src/**", "src/relay/peer.rs", true),
            ("src/relay/peer.rs", "src/**", true),
            ("src/**", "src/**", true),
            ("src/relay/**", "src/**", true),
            ("src/relay/**", "src/hub/**", false),
            ("src/a.rs", "src/b.rs", false),
            ("src/a.rs", "src/a.rs", true),
            ("docs/**", "src/**", false),
            ("**", "anything/at/all", true),
            ("x", "**", true),
            // The string-prefix stem: `src` is a prefix of `src2/x`.
            ("src", "src2/x", true),
            ("src/**", "src2/x", true),
            ("src/", "src2", true),
            // A lone `/` or `*` trims to an empty stem: only equality or `**` overlaps it.
            ("/", "/etc", false),
            ("/", "/", true),
            ("*", "src", false),
            ("*/", "*", false),
            ("***", "a", false),
            // Absolute values compare the same way.
            ("/repo/src/**", "/repo/src/x.rs", true),
            ("/repo/src/**", "/repo/docs/x.md", false),
        ];
        for (a, b, want) in cases {
            assert_eq!(paths_overlap(a, b), want, "{a} vs {b}");
            assert_eq!(paths_overlap(b, a), want, "{b} vs {a} (symmetric)");
            assert_eq!(overlaps(PATH_GLOB, a, b), want, "{a} vs {b} as path_glob");
        }
    }

    /// Every other kind matches exactly: no prefix, no glob.
    #[test]
    fn other_kinds_match_exactly() {
        assert!(overlaps("db", "main", "main"));
        assert!(!overlaps("db", "main", "main2"));
        assert!(!overlaps("db", "**", "main"));
        assert!(!overlaps("port", "80", "8080"));
    }

    #[test]
    fn kinds_values_tokens_and_sessions_meet_claudectls_bounds() {
        for ok in ["path_glob", "db", "a", "x-1_2", &"k".repeat(32)] {
            assert!(check_kind(ok), "{ok}");
        }
        for bad in ["", "DB", "a b", "a.b", "é", &"k".repeat(33)] {
            assert!(!check_kind(bad), "{bad:?}");
        }
        assert!(check_value("src/**", 512));
        assert!(check_value("a file with spaces.rs", 512));
        assert!(check_value(&"v".repeat(512), 512));
        assert!(!check_value(&"v".repeat(513), 512));
        assert!(!check_value("vv", 1));
        assert!(!check_value("", 512));
        assert!(!check_value("a\nb", 512));
        assert!(!check_value("a\u{1b}b", 512));
        assert!(!check_value("a\u{9b}b", 512));
        for ok in ["lease-0123456789abcdef", "x", &"i".repeat(96), "a~!#"] {
            assert!(is_token(ok), "{ok}");
        }
        for bad in ["", "a b", "a@b", "é", &"i".repeat(97), "a\tb"] {
            assert!(!is_token(bad), "{bad:?}");
        }
        for ok in ["bee", "a session", &"s".repeat(128)] {
            assert!(is_session(ok), "{ok}");
        }
        for bad in ["", "s@p", "a\nb", &"s".repeat(129)] {
            assert!(!is_session(bad), "{bad:?}");
        }
    }
}
