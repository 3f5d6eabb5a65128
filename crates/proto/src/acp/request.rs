//! A request the hub holds open for a person (issue 37 design §4.1): the plain data the
//! session emits when it holds a `session/request_permission` (`RequestAsk`) and the answer
//! that comes back for it (`RequestAnswer`). `tasks::event` re-exports them, where the task
//! book consumes them; they live here, below the book, because the session produces the one
//! and consumes the other (PLAN.md §14: imports run downward only).
//!
//! Owns reading a request's params into that data (`read_permission`): every string bounded
//! and sanitised (`kernel::text` through `sanitize::Secrets`, which also redacts the MCP
//! servers' env values), over a cap cut with `…` and never refused for size, so no agent is
//! stuck on a long title. Option ids are the exception: they are echoed back to the agent, so
//! one that cannot be carried exactly (over `MAX_OPTION_ID_BYTES`, or holding a control or
//! bidi character) is left out, never cut. Refuses: deciding anything (the session and the
//! book do), and keeping the request's raw input beyond what a person needs to judge it.

use super::permission::{PathFacts, RequestFacts, ToolKind};
use super::sanitize::{floor_char_boundary, Secrets};
use crate::kernel::text::has_unsafe;
use serde_json::Value;

/// Caps of design §4.1, in bytes.
pub const MAX_TOOL_CALL_ID_BYTES: usize = 128;
pub const MAX_TITLE_BYTES: usize = 256;
pub const MAX_PATHS: usize = 8;
pub const MAX_PATH_BYTES: usize = 512;
pub const MAX_COMMAND_BYTES: usize = 1024;
pub const MAX_MESSAGE_BYTES: usize = 2048;
pub const MAX_OPTIONS: usize = 8;
pub const MAX_OPTION_ID_BYTES: usize = 128;
pub const MAX_OPTION_NAME_BYTES: usize = 256;
/// A question's `requestedSchema` as compact JSON text (design §4b): never cut, since the
/// answer's content must match it; a longer one is declined (`acp::question`).
pub const MAX_SCHEMA_BYTES: usize = 4096;

/// What kind of question a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// ACP `session/request_permission`, or headless Claude Code's permission tool.
    Permission,
    /// A form with a text (`message`) and a schema: ACP `elicitation/create` in form mode,
    /// which the hub advertises under `Ask` only (design §4b; `acp::question`). Claude Code's
    /// current ACP adapter sends one for its `AskUserQuestion` tool (../notes capture §6).
    Question,
}

impl RequestKind {
    /// The envelope's `type` (design §5).
    pub fn tag(self) -> &'static str {
        match self {
            RequestKind::Permission => "permission",
            RequestKind::Question => "question",
        }
    }
}

/// An option's kind: ACP `PermissionOptionKind` for a permission, and for a question the
/// three actions of an elicitation's answer, named as the envelope names them (design §4b:
/// "kinds the same words").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
    /// A question answered with the form's content.
    Accept,
    /// A question the person chose not to answer.
    Decline,
    /// A question dismissed without a choice (also what expiry and a cancel answer).
    Cancel,
}

impl OptionKind {
    /// A permission option's kind as an agent sends it; None for anything else, the question
    /// kinds among them (those are the hub's own, never read from an agent's options).
    pub fn from_tag(s: &str) -> Option<OptionKind> {
        Some(match s {
            "allow_once" => OptionKind::AllowOnce,
            "allow_always" => OptionKind::AllowAlways,
            "reject_once" => OptionKind::RejectOnce,
            "reject_always" => OptionKind::RejectAlways,
            _ => return None,
        })
    }

    pub fn tag(self) -> &'static str {
        match self {
            OptionKind::AllowOnce => "allow_once",
            OptionKind::AllowAlways => "allow_always",
            OptionKind::RejectOnce => "reject_once",
            OptionKind::RejectAlways => "reject_always",
            OptionKind::Accept => "accept",
            OptionKind::Decline => "decline",
            OptionKind::Cancel => "cancel",
        }
    }

    pub fn allows(self) -> bool {
        matches!(self, OptionKind::AllowOnce | OptionKind::AllowAlways)
    }
}

/// One option the agent offers, as a person sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOption {
    /// Exactly the agent's id (an id that cannot be carried exactly is not offered).
    pub option_id: String,
    /// Sanitised, at most `MAX_OPTION_NAME_BYTES` (the current Claude adapter puts model text
    /// in it: ../notes capture §2.2).
    pub name: String,
    pub kind: OptionKind,
}

/// One held request (design §4.1). Every string is a sanitised, bounded excerpt; only the
/// option ids are exact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestAsk {
    /// Per task, from 1: the key the answer comes back with (`Session::answer`).
    pub seq: u32,
    pub kind: RequestKind,
    pub tool_call_id: String,
    pub title: String,
    /// An ACP `ToolKind` tag, or None when the agent gave none the hub knows.
    pub tool_kind: Option<String>,
    pub paths: Vec<String>,
    /// `rawInput.command`, a string or an argv joined with spaces.
    pub command: Option<String>,
    /// A question's text.
    pub message: Option<String>,
    /// A question's `requestedSchema`, compact JSON text of at most `MAX_SCHEMA_BYTES`,
    /// carried exactly (the answer's content must match it); None for a permission.
    pub schema: Option<String>,
    /// 1..=`MAX_OPTIONS`.
    pub options: Vec<RequestOption>,
}

/// The decision for a held request, on its way down to the session (design §4.4).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestAnswer {
    /// The option chosen; None answers `cancelled`.
    pub option_id: Option<String>,
    /// A text for the agent, where its protocol carries one: a question's `accept` carries
    /// the form's content here, a JSON object (`acp::question`); an ACP permission answer has
    /// none, so it is not sent there.
    pub message: Option<String>,
}

/// A permission request read: what a person sees, and what a rule is matched against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// `seq` is 0 until the session numbers it.
    pub ask: RequestAsk,
    pub facts: RequestFacts,
}

/// Reads `session/request_permission` params. None when no option can be offered to a
/// person (the session then answers by the fallback at once).
pub fn read_permission(params: &Value, secrets: &Secrets) -> Option<Read> {
    let options = read_options(params.get("options")?.as_array()?, secrets);
    if options.is_empty() {
        return None;
    }
    let empty = Value::Null;
    let tc = params.get("toolCall").unwrap_or(&empty);
    let text = |k: &str| tc.get(k).and_then(Value::as_str);
    let tool_kind = text("kind").and_then(ToolKind::from_tag);
    let raw_paths = path_strings(tc);
    let paths = raw_paths
        .iter()
        .take(MAX_PATHS)
        .map(|p| clean(secrets, p.unwrap_or("?"), MAX_PATH_BYTES))
        .collect();
    let raw_command = tc.pointer("/rawInput/command");
    let command = raw_command
        .and_then(command_text)
        .map(|c| clean(secrets, &c, MAX_COMMAND_BYTES));
    let facts = RequestFacts {
        tool_kind,
        paths: PathFacts::read(raw_paths.iter().copied()),
        has_command: raw_command.is_some_and(|c| !c.is_null()),
    };
    let ask = RequestAsk {
        seq: 0,
        kind: RequestKind::Permission,
        tool_call_id: clean(
            secrets,
            text("toolCallId").unwrap_or(""),
            MAX_TOOL_CALL_ID_BYTES,
        ),
        title: clean(secrets, text("title").unwrap_or(""), MAX_TITLE_BYTES),
        tool_kind: tool_kind.map(|k| k.tag().to_owned()),
        paths,
        command,
        message: None,
        schema: None,
        options,
    };
    Some(Read { ask, facts })
}

/// The options a person can be offered: known kinds, ids carried exactly, no repeats, at most
/// `MAX_OPTIONS` (the first ones).
fn read_options(raw: &[Value], secrets: &Secrets) -> Vec<RequestOption> {
    let mut out: Vec<RequestOption> = Vec::new();
    for o in raw {
        if out.len() == MAX_OPTIONS {
            break;
        }
        let Some(kind) = o
            .get("kind")
            .and_then(Value::as_str)
            .and_then(OptionKind::from_tag)
        else {
            continue;
        };
        let Some(id) = o.get("optionId").and_then(Value::as_str) else {
            continue;
        };
        if id.is_empty() || id.len() > MAX_OPTION_ID_BYTES || has_unsafe(id) {
            continue;
        }
        if out.iter().any(|x| x.option_id == id) {
            continue;
        }
        let name = o.get("name").and_then(Value::as_str).unwrap_or(id);
        out.push(RequestOption {
            option_id: id.to_owned(),
            name: clean(secrets, name, MAX_OPTION_NAME_BYTES),
            kind,
        });
    }
    out
}

/// Every path the request names: `locations[].path`, and the path keys of `rawInput` the
/// agents' file tools use. More paths make a rule's match stricter, never looser: each must
/// lie under the rule's folder. `None` stands for an entry that is not a string.
fn path_strings(tc: &Value) -> Vec<Option<&str>> {
    let mut out: Vec<Option<&str>> = Vec::new();
    if let Some(locs) = tc.get("locations").and_then(Value::as_array) {
        out.extend(locs.iter().map(|l| l.get("path").and_then(Value::as_str)));
    }
    if let Some(input) = tc.get("rawInput").and_then(Value::as_object) {
        for key in ["file_path", "path", "notebook_path"] {
            if let Some(v) = input.get(key) {
                let p = v.as_str();
                if !out.contains(&p) || p.is_none() {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// `rawInput.command` as text: a string, or an argv of strings joined with spaces.
fn command_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => {
            let words: Option<Vec<&str>> = a.iter().map(Value::as_str).collect();
            words.map(|w| w.join(" "))
        }
        _ => None,
    }
}

/// `s` redacted and sanitised, at most `max_bytes` (a cut ends with `…`, counted in).
pub fn clean(secrets: &Secrets, s: &str, max_bytes: usize) -> String {
    // `excerpt` bounds by characters and looks at a bounded prefix only; the byte cap is
    // applied after it.
    let e = secrets.excerpt(s, max_bytes);
    if e.len() <= max_bytes {
        return e;
    }
    const ELLIPSIS: &str = "…";
    let cut = floor_char_boundary(&e, max_bytes.saturating_sub(ELLIPSIS.len()));
    let mut out = e[..cut].to_owned();
    out.push_str(ELLIPSIS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(params: Value) -> Option<Read> {
        read_permission(&params, &Secrets::new(["sekret-token-123".to_owned()]))
    }

    #[test]
    fn captured_requests_read_as_a_person_needs_them() {
        // Claude adapter 0.101, a shell command (../notes capture §2.2).
        let r = read(json!({"toolCall":{"toolCallId":"toolu_mock_2","name":"Bash","status":"pending","rawInput":{"command":"echo capture37 > proof-allow.txt"},"title":"echo capture37 > proof-allow.txt","kind":"execute","content":[],"locations":[{"path":"/tmp/proj/proof-allow.txt"}]},"options":[{"optionId":"allow-once","name":"Yes","kind":"allow_once"},{"optionId":"allow-with-updates","name":"Yes, and allow access to proj/ and echo capture37 * commands","kind":"allow_always"},{"optionId":"reject","name":"No","kind":"reject_once"}],"sessionId":"s"})).unwrap();
        let a = &r.ask;
        assert_eq!(a.kind, RequestKind::Permission);
        assert_eq!(a.tool_call_id, "toolu_mock_2");
        assert_eq!(a.title, "echo capture37 > proof-allow.txt");
        assert_eq!(a.tool_kind.as_deref(), Some("execute"));
        assert_eq!(a.paths, ["/tmp/proj/proof-allow.txt"]);
        assert_eq!(
            a.command.as_deref(),
            Some("echo capture37 > proof-allow.txt")
        );
        assert_eq!(a.message, None);
        let ids: Vec<(&str, &str)> = a
            .options
            .iter()
            .map(|o| (o.option_id.as_str(), o.kind.tag()))
            .collect();
        assert_eq!(
            ids,
            [
                ("allow-once", "allow_once"),
                ("allow-with-updates", "allow_always"),
                ("reject", "reject_once")
            ]
        );
        assert!(r.facts.has_command);
        assert_eq!(r.facts.tool_kind, Some(ToolKind::Execute));
        assert_eq!(
            r.facts.paths,
            PathFacts::Exact(vec!["/tmp/proj/proof-allow.txt".into()])
        );
        // Gemini 0.61, a shell command: the command only in the title (capture §3.2).
        let g = read(json!({"options":[{"optionId":"proceed_always","name":"Allow for this session","kind":"allow_always"},{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},{"optionId":"cancel","name":"Reject","kind":"reject_once"}],"toolCall":{"toolCallId":"run_shell_command__run_shell_command_1796677860019_0","status":"pending","title":"echo capture37 > proof-allow.txt","content":[],"locations":[],"kind":"execute"}})).unwrap();
        assert_eq!(g.ask.command, None);
        assert!(g.ask.paths.is_empty());
        assert_eq!(g.facts.paths, PathFacts::Exact(vec![]));
        assert_eq!(g.ask.options.len(), 3);
    }

    #[test]
    fn unusable_requests_read_as_none() {
        for p in [
            json!({}),
            json!({"options":{}}),
            json!({"options":[]}),
            json!({"options":[{"kind":"allow_sometimes","optionId":"x"},{"kind":"allow_once"},{"kind":"reject_once","optionId":7}]}),
            json!({"options":[{"kind":"allow_once","optionId":""}]}),
            json!({"options":[{"kind":"allow_once","optionId":"a\u{1b}[2J"}]}),
            json!({"options":[{"kind":"allow_once","optionId":"i".repeat(MAX_OPTION_ID_BYTES + 1)}]}),
        ] {
            assert_eq!(read(p.clone()), None, "{p}");
        }
    }

    #[test]
    fn hostile_strings_are_bounded_clean_and_redacted() {
        let huge = format!(
            "\u{1b}]52;c;x\u{7}{}sekret-token-123{}",
            "t".repeat(10),
            "é".repeat(100_000)
        );
        let mut opts: Vec<Value> = (0..20)
            .map(|i| json!({"kind":"reject_once","optionId":format!("o{i}"),"name":huge}))
            .collect();
        opts.insert(
            0,
            json!({"kind":"allow_once","optionId":"o3","name":"dup later"}),
        );
        let paths: Vec<Value> = (0..20).map(|_| json!({"path": huge})).collect();
        let r = read(json!({"toolCall":{"toolCallId":huge,"title":huge,"kind":"no-such-kind","locations":paths,"rawInput":{"command":["rm","-rf",huge]}},"options":opts})).unwrap();
        let a = &r.ask;
        let caps = [
            (&a.tool_call_id, MAX_TOOL_CALL_ID_BYTES),
            (&a.title, MAX_TITLE_BYTES),
            (a.command.as_ref().unwrap(), MAX_COMMAND_BYTES),
        ];
        for (s, cap) in caps {
            assert!(s.len() <= cap && s.ends_with('…'), "{} > {cap}", s.len());
            assert!(!has_unsafe(s) && !s.contains("sekret"), "{s}");
        }
        assert!(a.command.as_ref().unwrap().starts_with("rm -rf ?]52;c;x?"));
        assert_eq!(a.paths.len(), MAX_PATHS);
        assert!(a
            .paths
            .iter()
            .all(|p| p.len() <= MAX_PATH_BYTES && !has_unsafe(p)));
        assert_eq!(r.facts.paths, PathFacts::Unusable);
        assert_eq!(a.tool_kind, None);
        assert_eq!(a.options.len(), MAX_OPTIONS);
        assert_eq!(a.options[0].option_id, "o3");
        assert_eq!(a.options[0].name, "dup later");
        assert!(
            a.options.iter().filter(|o| o.option_id == "o3").count() == 1,
            "no repeats"
        );
        assert!(a
            .options
            .iter()
            .all(|o| o.name.len() <= MAX_OPTION_NAME_BYTES));
    }

    #[test]
    fn paths_come_from_locations_and_the_file_tools_input() {
        let r = read(json!({"toolCall":{"kind":"edit","locations":[{"path":"src/a.rs"},{"line":3}],"rawInput":{"file_path":"/etc/passwd"}},"options":[{"kind":"allow_once","optionId":"a"}]})).unwrap();
        assert_eq!(
            r.facts.paths,
            PathFacts::Unusable,
            "a location without a path"
        );
        let r = read(json!({"toolCall":{"kind":"edit","locations":[{"path":"src/a.rs"}],"rawInput":{"file_path":"/etc/passwd","path":"src/a.rs"}},"options":[{"kind":"allow_once","optionId":"a"}]})).unwrap();
        assert_eq!(
            r.facts.paths,
            PathFacts::Exact(vec!["src/a.rs".into(), "/etc/passwd".into()])
        );
        assert_eq!(r.ask.paths, ["src/a.rs", "/etc/passwd"]);
        assert!(!r.facts.has_command);
    }

    #[test]
    fn clean_cuts_on_bytes() {
        let s = Secrets::default();
        assert_eq!(clean(&s, "abc", 3), "abc");
        assert_eq!(clean(&s, "abcd", 3), "…");
        assert_eq!(clean(&s, "abcdef", 5), "ab…");
        let e = clean(&s, &"é".repeat(10), 8);
        assert!(e.len() <= 8 && e.ends_with('…'), "{e}");
    }
}
