//! Pre-approval rules (issue 37 design §2; docs/acp.md "Pre-approval"): a delegator's
//! `allow` list, `{"kinds":["read","edit"],"under":"src/"}`, that lets a request through at
//! once under `Ask` when its ACP tool kind is listed and, with `under`, every path it names
//! lies in that folder of the task's cwd.
//!
//! Owns the ACP `ToolKind` vocabulary, a rule's validation (kinds known, `under` relative,
//! at most `MAX_UNDER_BYTES`, lexically normalised and inside the cwd) and the match, all on
//! text: `.`, `..` and repeated slashes are resolved on the path's words, never on the disk.
//! Refuses, so that a rule never lets through more than it reads as: a request without a
//! known kind; with `under`, a request naming no path or any path it cannot read exactly
//! (over `MAX_UNDER_BYTES`, more than `MAX_REQUEST_PATHS`, a control or bidi character, a
//! leading `~` or a `$`, which a tool may expand); and a request carrying a shell command
//! unless the rule lists `execute` (a command reaches where its words say, not where its
//! `locations` point). What it cannot see, a symlink inside the folder that leads out of
//! it, is the OS sandbox's to contain (docs/delegation.md "Task identity").

use crate::kernel::text::has_unsafe;
use std::fmt;

/// Rules in one delegation, at most.
pub const MAX_ALLOW_RULES: usize = 8;
/// Longest `under`, and longest request path a rule can match.
pub const MAX_UNDER_BYTES: usize = 512;
/// Paths of one request read for a match; a request naming more matches no `under` rule.
pub const MAX_REQUEST_PATHS: usize = 8;

/// ACP's `ToolKind` (schema `ToolKind`): what a tool call does, as the agent classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    SwitchMode,
    Other,
}

impl ToolKind {
    pub const TAGS: &'static [&'static str] = &[
        "read",
        "edit",
        "delete",
        "move",
        "search",
        "execute",
        "think",
        "fetch",
        "switch_mode",
        "other",
    ];

    pub fn from_tag(s: &str) -> Option<ToolKind> {
        Some(match s {
            "read" => ToolKind::Read,
            "edit" => ToolKind::Edit,
            "delete" => ToolKind::Delete,
            "move" => ToolKind::Move,
            "search" => ToolKind::Search,
            "execute" => ToolKind::Execute,
            "think" => ToolKind::Think,
            "fetch" => ToolKind::Fetch,
            "switch_mode" => ToolKind::SwitchMode,
            "other" => ToolKind::Other,
            _ => return None,
        })
    }

    pub fn tag(self) -> &'static str {
        match self {
            ToolKind::Read => "read",
            ToolKind::Edit => "edit",
            ToolKind::Delete => "delete",
            ToolKind::Move => "move",
            ToolKind::Search => "search",
            ToolKind::Execute => "execute",
            ToolKind::Think => "think",
            ToolKind::Fetch => "fetch",
            ToolKind::SwitchMode => "switch_mode",
            ToolKind::Other => "other",
        }
    }
}

/// What a request says about itself, read exactly (not the sanitised excerpts a person sees):
/// the input of a match (`acp::request` reads it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFacts {
    pub tool_kind: Option<ToolKind>,
    pub paths: PathFacts,
    /// `rawInput.command` is present: the request runs a command.
    pub has_command: bool,
}

/// The paths a request names, for a match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathFacts {
    /// Every path, as the agent wrote it (possibly none).
    Exact(Vec<String>),
    /// At least one path could not be read exactly (see the module doc): no `under` rule
    /// matches.
    Unusable,
}

impl PathFacts {
    /// The paths from the strings a request names: `Unusable` if any is unusable or there
    /// are more than `MAX_REQUEST_PATHS`.
    pub fn read<'a>(paths: impl IntoIterator<Item = Option<&'a str>>) -> PathFacts {
        let mut out = Vec::new();
        for p in paths {
            let Some(p) = p.filter(|p| usable_path(p)) else {
                return PathFacts::Unusable;
            };
            if out.len() == MAX_REQUEST_PATHS {
                return PathFacts::Unusable;
            }
            out.push(p.to_owned());
        }
        PathFacts::Exact(out)
    }
}

fn usable_path(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= MAX_UNDER_BYTES
        && !has_unsafe(p)
        && !p.starts_with('~')
        && !p.contains('$')
}

/// One pre-approval rule, validated (`AllowRule::new`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    kinds: Vec<ToolKind>,
    /// The folder under the cwd, as normalised path words (empty: the cwd itself); None: no
    /// path condition.
    under: Option<Vec<String>>,
}

/// Why a rule is refused (at the verb: design §2). Never quotes more than a bounded,
/// sanitised excerpt of what the delegator wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowRuleError {
    NoKinds,
    UnknownKind(String),
    UnderTooLong(usize),
    UnderAbsolute,
    UnderUnsafe,
    UnderLeaves,
}

impl fmt::Display for AllowRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowRuleError::NoKinds => write!(f, "kinds must name at least one tool kind"),
            AllowRuleError::UnknownKind(k) => {
                write!(f, "kind {k:?} is not one of {}", ToolKind::TAGS.join(", "))
            }
            AllowRuleError::UnderTooLong(n) => {
                write!(f, "under is {n} bytes, at most {MAX_UNDER_BYTES}")
            }
            AllowRuleError::UnderAbsolute => {
                write!(f, "under must be a path relative to the task's cwd")
            }
            AllowRuleError::UnderUnsafe => write!(
                f,
                "under must not hold a control character, a leading ~ or a $"
            ),
            AllowRuleError::UnderLeaves => write!(f, "under leaves the task's cwd"),
        }
    }
}

impl std::error::Error for AllowRuleError {}

impl AllowRule {
    /// A rule from the delegator's `kinds` (ACP tool kinds, repeats folded) and `under` (a
    /// folder relative to the task's cwd, lexically normalised; `.` is the cwd itself).
    pub fn new<S: AsRef<str>>(
        kinds: &[S],
        under: Option<&str>,
    ) -> Result<AllowRule, AllowRuleError> {
        if kinds.is_empty() {
            return Err(AllowRuleError::NoKinds);
        }
        let mut parsed = Vec::new();
        for k in kinds {
            let k = k.as_ref();
            let kind = ToolKind::from_tag(k).ok_or_else(|| {
                AllowRuleError::UnknownKind(crate::acp::sanitize::Secrets::default().token(k))
            })?;
            if !parsed.contains(&kind) {
                parsed.push(kind);
            }
        }
        parsed.sort();
        let under = match under {
            None => None,
            Some(u) => Some(normalise_under(u)?),
        };
        Ok(AllowRule {
            kinds: parsed,
            under,
        })
    }

    pub fn kinds(&self) -> &[ToolKind] {
        &self.kinds
    }

    /// The folder, normalised (`.` for the cwd itself); None: no path condition.
    pub fn under(&self) -> Option<String> {
        self.under.as_ref().map(|w| {
            if w.is_empty() {
                ".".to_owned()
            } else {
                w.join("/")
            }
        })
    }

    /// The rule as the CLI writes it, `KIND[,KIND][:PATH]`: for logs and audit records.
    pub fn describe(&self) -> String {
        let kinds: Vec<&str> = self.kinds.iter().map(|k| k.tag()).collect();
        match self.under() {
            Some(u) => format!("{}:{u}", kinds.join(",")),
            None => kinds.join(","),
        }
    }

    /// Whether a request with `facts`, in a task running in `cwd` (absolute), is let
    /// through by this rule (see the module doc for what never is).
    pub fn matches(&self, cwd: &str, facts: &RequestFacts) -> bool {
        let Some(kind) = facts.tool_kind else {
            return false;
        };
        if !self.kinds.contains(&kind) {
            return false;
        }
        if facts.has_command && !self.kinds.contains(&ToolKind::Execute) {
            return false;
        }
        let Some(under) = &self.under else {
            return true;
        };
        match &facts.paths {
            PathFacts::Unusable => false,
            PathFacts::Exact(paths) => {
                !paths.is_empty() && paths.iter().all(|p| lexical_under(cwd, p, under))
            }
        }
    }
}

/// `under` as path words: relative, bounded, clean, and inside the cwd after `.` and `..`
/// are resolved on the text.
fn normalise_under(u: &str) -> Result<Vec<String>, AllowRuleError> {
    if u.len() > MAX_UNDER_BYTES {
        return Err(AllowRuleError::UnderTooLong(u.len()));
    }
    if u.starts_with('/') {
        return Err(AllowRuleError::UnderAbsolute);
    }
    if has_unsafe(u) || u.starts_with('~') || u.contains('$') {
        return Err(AllowRuleError::UnderUnsafe);
    }
    let mut words: Vec<String> = Vec::new();
    for w in u.split('/') {
        match w {
            "" | "." => {}
            ".." => {
                if words.pop().is_none() {
                    return Err(AllowRuleError::UnderLeaves);
                }
            }
            w => words.push(w.to_owned()),
        }
    }
    Ok(words)
}

/// Whether `path` (absolute, or relative to `cwd`) lies in `cwd/under` once `.`, `..` and
/// repeated slashes are resolved on the text, by whole path words (`src2` is not under
/// `src`). `..` at the root stays at the root, as POSIX resolves it.
pub fn lexical_under(cwd: &str, path: &str, under: &[String]) -> bool {
    if !cwd.starts_with('/') {
        return false;
    }
    let base = resolve(&[], cwd);
    let full = if path.starts_with('/') {
        resolve(&[], path)
    } else {
        resolve(&base, path)
    };
    let want = base.iter().copied().chain(under.iter().map(String::as_str));
    let mut n = 0;
    for (i, w) in want.enumerate() {
        if full.get(i) != Some(&w) {
            return false;
        }
        n = i + 1;
    }
    full.len() >= n
}

/// `path`'s words appended to `from`, `.` dropped and `..` taking one back (never past the
/// root).
fn resolve<'a>(from: &[&'a str], path: &'a str) -> Vec<&'a str> {
    let mut words = from.to_vec();
    for w in path.split('/') {
        match w {
            "" | "." => {}
            ".." => {
                words.pop();
            }
            w => words.push(w),
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    const CWD: &str = "/work/proj";

    fn rule(kinds: &[&str], under: Option<&str>) -> AllowRule {
        AllowRule::new(kinds, under).unwrap()
    }

    fn facts(kind: &str, paths: &[&str]) -> RequestFacts {
        RequestFacts {
            tool_kind: ToolKind::from_tag(kind),
            paths: PathFacts::read(paths.iter().map(|p| Some(*p))),
            has_command: false,
        }
    }

    #[test]
    fn tags_round_trip() {
        for t in ToolKind::TAGS {
            assert_eq!(ToolKind::from_tag(t).unwrap().tag(), *t);
        }
        assert_eq!(ToolKind::from_tag("Read"), None);
        assert_eq!(ToolKind::from_tag("execute "), None);
    }

    #[test]
    fn rules_are_validated_and_normalised() {
        let r = rule(&["edit", "read", "read"], Some("./src//lib/../"));
        assert_eq!(r.kinds(), &[ToolKind::Read, ToolKind::Edit]);
        assert_eq!(r.under().as_deref(), Some("src"));
        assert_eq!(r.describe(), "read,edit:src");
        assert_eq!(rule(&["read"], Some(".")).under().as_deref(), Some("."));
        assert_eq!(rule(&["read"], Some("a/..")).under().as_deref(), Some("."));
        assert_eq!(rule(&["execute"], None).describe(), "execute");
        let e = |k: &[&str], u: Option<&str>| AllowRule::new(k, u).unwrap_err();
        assert_eq!(e(&[], None), AllowRuleError::NoKinds);
        assert!(matches!(e(&["yolo"], None), AllowRuleError::UnknownKind(k) if k == "yolo"));
        assert_eq!(e(&["read"], Some("/etc")), AllowRuleError::UnderAbsolute);
        assert_eq!(e(&["read"], Some("..")), AllowRuleError::UnderLeaves);
        assert_eq!(
            e(&["read"], Some("src/../../x")),
            AllowRuleError::UnderLeaves
        );
        assert_eq!(e(&["read"], Some("~/x")), AllowRuleError::UnderUnsafe);
        assert_eq!(e(&["read"], Some("$HOME")), AllowRuleError::UnderUnsafe);
        assert_eq!(e(&["read"], Some("a\u{0}b")), AllowRuleError::UnderUnsafe);
        assert_eq!(
            e(&["read"], Some("a\u{202e}b")),
            AllowRuleError::UnderUnsafe
        );
        let long = "d/".repeat(MAX_UNDER_BYTES / 2 + 1);
        assert_eq!(
            e(&["read"], Some(&long)),
            AllowRuleError::UnderTooLong(long.len())
        );
        assert!(AllowRule::new(&["read"], Some(&"d".repeat(MAX_UNDER_BYTES))).is_ok());
        // A hostile kind is quoted bounded and clean.
        let msg = e(&[&format!("\u{1b}]0;x{}", "k".repeat(500))], None).to_string();
        assert!(!has_unsafe(&msg) && msg.len() < 400, "{msg}");
    }

    #[test]
    fn kinds_decide_first() {
        let r = rule(&["read", "search"], None);
        assert!(r.matches(CWD, &facts("read", &[])));
        assert!(
            r.matches(CWD, &facts("search", &["/etc/passwd"])),
            "no under: kind only"
        );
        assert!(!r.matches(CWD, &facts("edit", &[])));
        assert!(
            !r.matches(CWD, &facts("readx", &[])),
            "an unknown kind matches nothing"
        );
        let mut f = facts("read", &[]);
        f.has_command = true;
        assert!(!r.matches(CWD, &f), "a command needs execute");
        assert!(rule(&["read", "execute"], None).matches(CWD, &f));
    }

    #[test]
    fn under_needs_every_path_inside() {
        let r = rule(&["edit"], Some("src"));
        for ok in [
            &["src/a.rs"][..],
            &["./src/a.rs", "src/b/c.rs"],
            &["/work/proj/src/a.rs"],
            &["/work//proj/./src/x/../a.rs"],
            &["src"],
            &["src/"],
            &["src/..\\..\\etc"], // one odd file name on Linux, inside src
            &["src/lnk -> /etc/passwd"], // looks like a symlink; is a name
            &["src/ünï/ｃｏｄｅ.rs"],
            &["src/．．/x"],       // fullwidth dots are a name, not ..
            &["../proj/src/a.rs"], // steps out and back in: where it lands is what counts
        ] {
            assert!(r.matches(CWD, &facts("edit", ok)), "{ok:?}");
        }
        for bad in [
            &[][..],
            &["src2/a.rs"],
            &["sr"],
            &["a.rs"],
            &["src/a.rs", "b.rs"],
            &["src/../b.rs"],
            &["src/../../proj/src/../../etc/passwd"],
            &["/etc/passwd"],
            &["/work/proj/src/../../../../etc"],
            &["/work/projx/src/a.rs"],
            &["/work/proj"],
            &["~/src/a.rs"],
            &["$HOME/src/a.rs"],
            &["src/\u{202e}sr.exe"],
            &["src/a\nb"],
            &[""],
        ] {
            assert!(!r.matches(CWD, &facts("edit", bad)), "{bad:?}");
        }
        let long = format!("src/{}", "x".repeat(MAX_UNDER_BYTES));
        assert!(!r.matches(CWD, &facts("edit", &[&long])), "over-long");
        let many: Vec<String> = (0..=MAX_REQUEST_PATHS)
            .map(|i| format!("src/{i}"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(!r.matches(CWD, &facts("edit", &many)), "too many paths");
        assert!(r.matches(CWD, &facts("edit", &many[..MAX_REQUEST_PATHS])));
        let unreadable = RequestFacts {
            tool_kind: Some(ToolKind::Edit),
            paths: PathFacts::read([Some("src/a"), None]),
            has_command: false,
        };
        assert!(!r.matches(CWD, &unreadable), "a path that is not a string");
    }

    #[test]
    fn under_the_cwd_itself_still_needs_a_path() {
        let r = rule(&["read"], Some("."));
        assert!(r.matches(CWD, &facts("read", &["a"])));
        assert!(r.matches(CWD, &facts("read", &["/work/proj"])));
        assert!(!r.matches(CWD, &facts("read", &[])));
        assert!(!r.matches(CWD, &facts("read", &[".."])));
        assert!(!r.matches(CWD, &facts("read", &["/"])));
        assert!(!r.matches(CWD, &facts("read", &["/../work/proj/../x"])));
        assert!(
            r.matches(CWD, &facts("read", &["/../work/proj/x"])),
            "/.. is /"
        );
        assert!(!r.matches("relative/cwd", &facts("read", &["a"])));
        assert!(
            r.matches("/", &facts("read", &["/etc"])),
            "a task in / owns /"
        );
    }
}
