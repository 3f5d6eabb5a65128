//! The token roster (SPEC §6): `[agents] name = "token"`, validated strictly, and the
//! constant-time check of a hello against it.
//!
//! Owns parsing and validation of roster text. Refuses IO: the loop (`agent_hub_server::event_loop`) reads the file and checks
//! its mode before handing the text here.

use crate::kernel::fold_hash::FoldMap;
use crate::kernel::names::HUB_NAME;
use std::collections::BTreeMap;
use std::fmt;

/// The longest roster name, in bytes. With `MAX_TOKEN_BYTES`, what makes every roster
/// agent's hello fit the hello line cap (`wire::HELLO_MAX_LINE_BYTES`, SPEC §2.1, §6.1);
/// `agent-hub agents install` writes names of at most 64 characters.
pub const MAX_NAME_BYTES: usize = 256;
/// The longest roster token, in bytes (`openssl rand -hex 16` makes 32).
pub const MAX_TOKEN_BYTES: usize = 1024;
/// Tokens at least this long are also looked for inside a failed hello's name before the
/// name is recorded (`holds_token`): a token pasted with something around it. Shorter ones
/// (test rosters' "t1") would hide every name that happens to contain them.
const TOKEN_INSIDE_MIN_BYTES: usize = 8;

/// A validated roster. `Debug` never shows tokens.
#[derive(Clone)]
pub struct Roster {
    tokens: FoldMap<String, Vec<u8>>,
    /// Compared against when the name is unknown, so a miss costs the same as a wrong token.
    decoy: Vec<u8>,
}

impl fmt::Debug for Roster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&String> = self.tokens.keys().collect();
        names.sort();
        f.debug_struct("Roster").field("names", &names).finish()
    }
}

/// Why a roster is refused. Each text says what to fix; none contains a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RosterError {
    Toml(String),
    NoAgentsTable,
    KeyOutsideAgents(String),
    NotAString(String),
    Empty,
    BlankName,
    BlankToken(String),
    ReservedName(String),
    SharedToken(String, String),
    /// A name longer than `MAX_NAME_BYTES` (its length).
    NameTooLong(usize),
    /// The named entry's token is longer than `MAX_TOKEN_BYTES`.
    TokenTooLong(String),
}

impl fmt::Display for RosterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RosterError::Toml(e) => write!(f, "roster is not valid TOML: {e}"),
            RosterError::NoAgentsTable => {
                write!(f, "roster has no [agents] table, so no agent could log in")
            }
            RosterError::KeyOutsideAgents(k) => {
                write!(f, "roster key {k:?} is outside [agents]; only [agents] name = \"token\" entries are allowed")
            }
            RosterError::NotAString(n) => write!(f, "roster entry {n:?} must be a string token"),
            RosterError::Empty => write!(
                f,
                "roster [agents] is empty: a hub that can authenticate nobody must not start"
            ),
            RosterError::BlankName => write!(f, "roster has a blank or whitespace-only agent name"),
            RosterError::BlankToken(n) => {
                write!(f, "roster entry {n:?} has a blank or whitespace-only token")
            }
            RosterError::ReservedName(n) if n.eq_ignore_ascii_case(HUB_NAME) => write!(
                f,
                "roster defines {n:?}: the name \"hub\" is reserved in any letter case"
            ),
            RosterError::ReservedName(n) => write!(
                f,
                "roster defines {n:?}: names starting with \"task-\" are the hub's task identities (docs/delegation.md)"
            ),
            RosterError::SharedToken(a, b) => write!(
                f,
                "roster entries {a:?} and {b:?} share one token; every agent needs its own"
            ),
            RosterError::NameTooLong(len) => write!(
                f,
                "roster has a name of {len} bytes; names may have at most {MAX_NAME_BYTES} (a hello must fit the hello line cap)"
            ),
            RosterError::TokenTooLong(n) => write!(
                f,
                "roster entry {n:?} has a token longer than {MAX_TOKEN_BYTES} bytes (a hello must fit the hello line cap)"
            ),
        }
    }
}

impl std::error::Error for RosterError {}

impl RosterError {
    /// The roster is well formed but names no agent (an empty file, or an empty `[agents]`):
    /// the mistake of a first setup, which `add_agent_hint` answers.
    pub fn names_nobody(&self) -> bool {
        matches!(self, RosterError::NoAgentsTable | RosterError::Empty)
    }
}

/// What to do about a roster that names nobody (or is not there yet), for a hub started
/// with `config_word` (the `--config` argument as the operator gave it, already quoted for
/// a shell): `roster add` writes the roster line and the agent's token file, mode 600, and
/// makes the roster file when it is missing (README, "Running the server yourself").
pub fn add_agent_hint(config_word: &str) -> String {
    format!("add an agent with: agent-hub-server roster add NAME --config {config_word}")
}

impl Roster {
    /// Parses and validates roster TOML text.
    pub fn parse(text: &str) -> Result<Roster, RosterError> {
        let doc: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| RosterError::Toml(e.message().to_owned()))?;
        let mut agents = None;
        for (key, value) in doc {
            if key == "agents" {
                agents = Some(value);
            } else {
                return Err(RosterError::KeyOutsideAgents(key));
            }
        }
        let agents = match agents {
            Some(toml::Value::Table(t)) => t,
            Some(_) => return Err(RosterError::KeyOutsideAgents("agents".into())),
            None => return Err(RosterError::NoAgentsTable),
        };
        if agents.is_empty() {
            return Err(RosterError::Empty);
        }
        let mut tokens = FoldMap::default();
        let mut owners: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in agents {
            if name.trim().is_empty() {
                return Err(RosterError::BlankName);
            }
            if crate::kernel::names::is_reserved(&name) {
                return Err(RosterError::ReservedName(name));
            }
            let token = match value {
                toml::Value::String(s) => s,
                toml::Value::Table(_) => {
                    return Err(RosterError::KeyOutsideAgents(format!("agents.{name}")))
                }
                _ => return Err(RosterError::NotAString(name)),
            };
            if token.trim().is_empty() {
                return Err(RosterError::BlankToken(name));
            }
            if name.len() > MAX_NAME_BYTES {
                return Err(RosterError::NameTooLong(name.len()));
            }
            if token.len() > MAX_TOKEN_BYTES {
                return Err(RosterError::TokenTooLong(name));
            }
            if let Some(other) = owners.insert(token.clone(), name.clone()) {
                let (a, b) = if other < name {
                    (other, name)
                } else {
                    (name, other)
                };
                return Err(RosterError::SharedToken(a, b));
            }
            tokens.insert(name, token.into_bytes());
        }
        let longest = tokens.values().map(Vec::len).max().unwrap_or(0);
        Ok(Roster {
            tokens,
            decoy: vec![0xA5; longest.max(32)],
        })
    }

    /// True when `name` is on the roster and `token` is its token. The comparison time does
    /// not depend on where the presented token first differs, nor on whether the name exists.
    pub fn verify(&self, name: &str, token: &str) -> bool {
        let (expected, known) = match self.tokens.get(name) {
            Some(t) => (t.as_slice(), true),
            None => (self.decoy.as_slice(), false),
        };
        ct_eq(expected, token.as_bytes()) & known
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tokens.contains_key(name)
    }

    /// Whether `text` (a name a failed hello asserted) is, or holds, one of the roster's
    /// tokens: the token pasted in the name field, alone, with surrounding whitespace, or
    /// (for tokens of `TOKEN_INSIDE_MIN_BYTES` or more) inside other text. Such a name is
    /// never recorded (SPEC §6.2). Every token is compared, in constant time for the
    /// equality, so the time says little about which one matched.
    pub fn holds_token(&self, text: &str) -> bool {
        let trimmed = text.trim().as_bytes();
        let mut found = false;
        for token in self.tokens.values() {
            found |= ct_eq(token, trimmed);
            if token.len() >= TOKEN_INSIDE_MIN_BYTES && text.len() > token.len() {
                found |= text
                    .as_bytes()
                    .windows(token.len())
                    .any(|w| w == token.as_slice());
            }
        }
        found
    }

    /// Roster names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.tokens.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// What replacing this roster with `new` changes, by name (a reload on SIGHUP,
    /// docs/operations.md "Changing the roster"). Tokens are compared, never returned.
    pub fn diff(&self, new: &Roster) -> RosterDiff {
        let mut d = RosterDiff::default();
        for name in new.names() {
            match self.tokens.get(name) {
                None => d.added.push(name.to_owned()),
                Some(old) if *old != new.tokens[name] => d.rotated.push(name.to_owned()),
                Some(_) => {}
            }
        }
        d.removed = self
            .names()
            .into_iter()
            .filter(|n| !new.contains(n))
            .map(str::to_owned)
            .collect();
        d
    }
}

/// The names a roster reload adds, removes and gives a new token, each sorted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RosterDiff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub rotated: Vec<String>,
}

impl RosterDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.rotated.is_empty()
    }
}

/// Constant-time equality over the expected length: every byte of `expected` is visited
/// whatever `given` holds, and the length difference is folded into the result.
pub fn ct_eq(expected: &[u8], given: &[u8]) -> bool {
    let mut diff = (expected.len() ^ given.len()) as u64;
    for (i, &e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!e);
        diff |= u64::from(e ^ g);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_plain_roster_and_verifies() {
        let r = Roster::parse("[agents]\nmneme = \"t1\"\ndatastore = \"t2\"\n").unwrap();
        assert!(r.verify("mneme", "t1"));
        assert!(!r.verify("mneme", "t2"));
        assert!(!r.verify("mneme", "t1x"));
        assert!(!r.verify("mneme", ""));
        assert!(!r.verify("ghost", "t1"));
        assert_eq!(r.names(), vec!["datastore", "mneme"]);
        assert!(!format!("{r:?}").contains("t1"));
    }

    /// A roster entry named like a task identity could be impersonated by, or impersonate, a
    /// delegated task (docs/delegation.md "Task identity"): refused at load.
    #[test]
    fn task_identity_names_are_reserved() {
        let e = Roster::parse("[agents]\nmneme = \"t1\"\n\"task-0123\" = \"t2\"\n").unwrap_err();
        assert_eq!(e, RosterError::ReservedName("task-0123".into()));
        assert!(e.to_string().contains("task identities"), "{e}");
        assert!(Roster::parse("[agents]\ntasker = \"t1\"\n").is_ok());
    }

    #[test]
    fn refuses_every_bad_roster() {
        let cases: &[(&str, RosterError)] = &[
            ("", RosterError::NoAgentsTable),
            ("[agents]\n", RosterError::Empty),
            (
                "x = 1\n[agents]\na = \"t\"\n",
                RosterError::KeyOutsideAgents("x".into()),
            ),
            (
                "[agents]\na = \"t\"\n[other]\nb = \"u\"\n",
                RosterError::KeyOutsideAgents("other".into()),
            ),
            ("[agents]\n\" \" = \"t\"\n", RosterError::BlankName),
            (
                "[agents]\na = \"  \"\n",
                RosterError::BlankToken("a".into()),
            ),
            ("[agents]\na = \"\"\n", RosterError::BlankToken("a".into())),
            (
                "[agents]\nHub = \"t\"\n",
                RosterError::ReservedName("Hub".into()),
            ),
            (
                "[agents]\nhub = \"t\"\n",
                RosterError::ReservedName("hub".into()),
            ),
            (
                "[agents]\na = \"t\"\nb = \"t\"\n",
                RosterError::SharedToken("a".into(), "b".into()),
            ),
            ("[agents]\na = 5\n", RosterError::NotAString("a".into())),
            (
                "[agents]\na = { x = \"t\" }\n",
                RosterError::KeyOutsideAgents("agents.a".into()),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(Roster::parse(text).unwrap_err(), *want, "roster {text:?}");
        }
        assert!(matches!(
            Roster::parse("[agents"),
            Err(RosterError::Toml(_))
        ));
    }

    /// A first setup's empty roster is told apart from a broken one, so the hub can name the
    /// command that fills it (issue 35).
    #[test]
    fn a_roster_naming_nobody_is_told_apart() {
        for text in ["", "\n# nothing yet\n", "[agents]\n"] {
            let e = Roster::parse(text).unwrap_err();
            assert!(e.names_nobody(), "{text:?}: {e}");
        }
        for text in ["[agents]\na = 5\n", "x = 1\n", "[agents"] {
            let e = Roster::parse(text).unwrap_err();
            assert!(!e.names_nobody(), "{text:?}: {e}");
        }
        assert_eq!(
            add_agent_hint("'my hub/config.toml'"),
            "add an agent with: agent-hub-server roster add NAME --config 'my hub/config.toml'"
        );
    }

    #[test]
    fn diff_names_added_removed_and_rotated() {
        let old = Roster::parse("[agents]\na = \"t1\"\nb = \"t2\"\nc = \"t3\"\n").unwrap();
        let new = Roster::parse("[agents]\na = \"t1\"\nc = \"t9\"\nd = \"t4\"\n").unwrap();
        let d = old.diff(&new);
        assert_eq!(d.added, ["d"]);
        assert_eq!(d.removed, ["b"]);
        assert_eq!(d.rotated, ["c"]);
        assert!(!format!("{d:?}").contains("t9"));
        assert!(old.diff(&old).is_empty());
    }

    /// A token that is a prefix of another is not that token: each is compared whole.
    #[test]
    fn a_prefix_token_is_its_own_token() {
        let r = Roster::parse("[agents]\na = \"abcdef\"\nb = \"abc\"\n").unwrap();
        assert!(r.verify("a", "abcdef"));
        assert!(!r.verify("a", "abc"));
        assert!(r.verify("b", "abc"));
        assert!(!r.verify("b", "abcdef"));
    }

    /// A roster refused at startup or on SIGHUP is described in the service log; no broken
    /// line may carry its token there (SPEC §8.2).
    #[test]
    fn a_toml_error_never_quotes_the_token() {
        let broken = [
            "[agents]\na = \"SECRET-1\nb = \"t\"\n",
            "[agents]\na = SECRET-2\n",
            "[agents]\na = \"t\" SECRET-3\n",
            "[agents]\na = \"SECRET-4\\q\"\n",
            "[agents]\na = 'SECRET-5\n",
            "[agents]\na = \"\"\"SECRET-6\n",
            "[agents]\na = \"t\"\na = \"SECRET-7\"\n",
        ];
        for text in broken {
            let e = Roster::parse(text).unwrap_err();
            assert!(matches!(e, RosterError::Toml(_)), "{text:?}: {e:?}");
            assert!(!e.to_string().contains("SECRET"), "{text:?}: {e}");
        }
    }

    /// Names and tokens are bounded so every roster agent's hello fits the hello line cap,
    /// whatever escapes its client writes (issue 29).
    #[test]
    fn names_and_tokens_are_bounded_so_every_hello_fits_its_cap() {
        let name = "n".repeat(MAX_NAME_BYTES);
        let token = "t".repeat(MAX_TOKEN_BYTES);
        assert!(Roster::parse(&format!("[agents]\n{name} = \"{token}\"\n")).is_ok());
        assert_eq!(
            Roster::parse(&format!("[agents]\n{name}n = \"t1\"\n")).unwrap_err(),
            RosterError::NameTooLong(MAX_NAME_BYTES + 1)
        );
        let e = Roster::parse(&format!("[agents]\na = \"{token}t\"\n")).unwrap_err();
        assert_eq!(e, RosterError::TokenTooLong("a".into()));
        assert!(!e.to_string().contains("ttt"), "{e}");
        // The worst case: every byte of both written as a six-byte \u00XX escape.
        let worst =
            r#"{"hello":{"name":"","token":""}}"#.len() + 6 * (MAX_NAME_BYTES + MAX_TOKEN_BYTES);
        assert!(worst <= crate::wire::HELLO_MAX_LINE_BYTES, "{worst}");
    }

    #[test]
    fn a_name_holding_a_token_is_recognised() {
        let r = Roster::parse("[agents]\na = \"tok-a-0123456789\"\nb = \"t1\"\n").unwrap();
        for held in [
            "tok-a-0123456789",
            " tok-a-0123456789\n",
            "x tok-a-0123456789 y",
            "t1",
            " t1 ",
        ] {
            assert!(r.holds_token(held), "{held:?}");
        }
        // A short token only counts whole: "t1x" is a name, as "beta" is not the token "t".
        for name in ["a", "b", "t1x", "tok-a-012345678", "mallory"] {
            assert!(!r.holds_token(name), "{name:?}");
        }
    }

    #[test]
    fn ct_eq_handles_lengths() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert!(!ct_eq(b"ab", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(ct_eq(b"", b""));
    }
}
