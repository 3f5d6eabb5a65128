//! A question an agent asks (issue 37 design §4b; docs/acp.md "Questions"): ACP
//! `elicitation/create` in form mode read into a `RequestAsk` of kind `Question`, and a
//! person's answer turned into the elicitation's result.
//!
//! The capture (../notes capture37-facts.md §6) fixed the shapes: Claude Code's current ACP
//! adapter sends `{"mode":"form","sessionId","toolCallId"?,"message","requestedSchema"}`
//! once the client advertised `elicitation: {form: {}}` (from its `AskUserQuestion` tool, and
//! for an MCP server's own form), and takes the answer only flat:
//! `{"action":"accept","content":{…}}`, `{"action":"decline"}` or `{"action":"cancel"}`
//! (a nested `action` made the tool fail).
//!
//! Owns: the caps on what a person is shown (`message` cut with `…` like every agent string,
//! `requestedSchema` carried exactly as compact JSON text of at most `MAX_SCHEMA_BYTES` or not
//! at all), the three options (`accept`, `decline`, `cancel`, their kinds the same words),
//! and the answer's result. Refuses: holding, numbering or deciding (the session and the task
//! book do), URL mode (the hub never advertises it: a URL for a person to open has no place
//! in a mailed request), and inventing content: `accept` without a JSON object is never
//! written as an accept.

use super::request::{
    clean, OptionKind, RequestAnswer, RequestAsk, RequestKind, RequestOption, MAX_MESSAGE_BYTES,
    MAX_SCHEMA_BYTES, MAX_TITLE_BYTES, MAX_TOOL_CALL_ID_BYTES,
};
use super::sanitize::Secrets;
use serde_json::{json, Map, Value};
use std::fmt;

/// The ACP method of a question.
pub const METHOD: &str = "elicitation/create";

/// Why an `elicitation/create` is not carried to a person: it is answered `decline` at once
/// (the agent learns the person will not see it) and logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCarried {
    /// `mode: "url"`: never advertised.
    UrlMode,
    /// A `mode` that is neither `form` nor `url` (a bounded excerpt of it).
    UnknownMode(String),
    /// No string `message`.
    NoMessage,
    /// No object `requestedSchema`.
    NoSchema,
    /// The schema's compact JSON text is this many bytes, over `MAX_SCHEMA_BYTES`.
    SchemaTooLong(usize),
    /// The schema holds a control or bidi character, or a secret: it cannot be shown exactly,
    /// and a cut or masked schema would ask for other keys than the agent reads.
    SchemaNotExact,
}

impl fmt::Display for NotCarried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotCarried::UrlMode => {
                f.write_str("it is in url mode, which the hub does not offer (form only)")
            }
            NotCarried::UnknownMode(m) => write!(f, "its mode {m} is neither form nor url"),
            NotCarried::NoMessage => f.write_str("it has no message"),
            NotCarried::NoSchema => f.write_str("it has no requestedSchema object"),
            NotCarried::SchemaTooLong(n) => write!(
                f,
                "its requestedSchema is {n} bytes of JSON, over the {MAX_SCHEMA_BYTES} a request carries"
            ),
            NotCarried::SchemaNotExact => f.write_str(
                "its requestedSchema holds a control or formatting character or a secret, so it cannot be shown exactly",
            ),
        }
    }
}

/// Reads `elicitation/create` params (the session checked the session id). The `RequestAsk`
/// has `seq` 0 until the session numbers it.
pub fn read(params: &Value, secrets: &Secrets) -> Result<RequestAsk, NotCarried> {
    match params.get("mode").and_then(Value::as_str) {
        // MCP's rule, which ACP's elicitation follows: a request without a mode is a form.
        None | Some("form") => {}
        Some("url") => return Err(NotCarried::UrlMode),
        Some(other) => return Err(NotCarried::UnknownMode(secrets.token(other))),
    }
    let message = params
        .get("message")
        .and_then(Value::as_str)
        .ok_or(NotCarried::NoMessage)?;
    let schema = params
        .get("requestedSchema")
        .filter(|s| s.is_object())
        .ok_or(NotCarried::NoSchema)?;
    let schema = crate::wire::to_json(schema);
    if schema.len() > MAX_SCHEMA_BYTES {
        return Err(NotCarried::SchemaTooLong(schema.len()));
    }
    // `excerpt` replaces secrets and unsafe characters; a schema it changes is not exact.
    // The text is at most MAX_SCHEMA_BYTES bytes, so at most that many characters: no cut.
    if secrets.excerpt(&schema, MAX_SCHEMA_BYTES) != schema {
        return Err(NotCarried::SchemaNotExact);
    }
    // The title (what `task status`, `task list` and `top` show) is the question's first line.
    let first_line = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let tool_call_id = params
        .get("toolCallId")
        .and_then(Value::as_str)
        .unwrap_or("");
    Ok(RequestAsk {
        seq: 0,
        kind: RequestKind::Question,
        tool_call_id: clean(secrets, tool_call_id, MAX_TOOL_CALL_ID_BYTES),
        title: clean(secrets, first_line.trim(), MAX_TITLE_BYTES),
        tool_kind: None,
        paths: Vec::new(),
        command: None,
        message: Some(clean(secrets, message, MAX_MESSAGE_BYTES)),
        schema: Some(schema),
        options: options(),
    })
}

/// The three options every question offers, in this order.
pub fn options() -> Vec<RequestOption> {
    let o = |id: &str, name: &str, kind| RequestOption {
        option_id: id.to_owned(),
        name: name.to_owned(),
        kind,
    };
    vec![
        o(
            "accept",
            "Accept, with message holding the form's content as a JSON object that matches schema",
            OptionKind::Accept,
        ),
        o("decline", "Decline to answer", OptionKind::Decline),
        o(
            "cancel",
            "Cancel (dismiss the question)",
            OptionKind::Cancel,
        ),
    ]
}

/// What a question is answered with.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The form's content.
    Accept(Map<String, Value>),
    Decline,
    Cancel,
}

impl Action {
    /// The elicitation's result, flat as the agent reads it.
    pub fn result(&self) -> Value {
        match self {
            Action::Accept(content) => json!({"action": "accept", "content": content}),
            Action::Decline => json!({"action": "decline"}),
            Action::Cancel => json!({"action": "cancel"}),
        }
    }

    /// The word for the log.
    pub fn tag(&self) -> &'static str {
        match self {
            Action::Accept(_) => "accepted",
            Action::Decline => "declined",
            Action::Cancel => "cancelled",
        }
    }
}

/// Why an answer cannot be written as it came (the session then answers `cancel`, with a
/// WARN: the task book checks both before it sends an answer, so this is a defect or a
/// hostile owner, and the agent must not wait on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadAnswer {
    /// An option other than the three.
    NotOffered,
    /// `accept` whose `message` is not a JSON object.
    AcceptWithoutObject,
}

/// The owner's answer as an action: no option is `cancel` (expiry, a cancel), `accept` needs
/// the form's content, a JSON object, in `message`.
pub fn action(answer: &RequestAnswer) -> Result<Action, BadAnswer> {
    match answer.option_id.as_deref() {
        None | Some("cancel") => Ok(Action::Cancel),
        Some("decline") => Ok(Action::Decline),
        Some("accept") => match answer
            .message
            .as_deref()
            .and_then(|m| serde_json::from_str::<Value>(m).ok())
        {
            Some(Value::Object(content)) => Ok(Action::Accept(content)),
            _ => Err(BadAnswer::AcceptWithoutObject),
        },
        Some(_) => Err(BadAnswer::NotOffered),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::text::has_unsafe;

    const SECRET: &str = "sekret-token-123";

    fn read_p(p: Value) -> Result<RequestAsk, NotCarried> {
        read(&p, &Secrets::new([SECRET.to_owned()]))
    }

    /// The AskUserQuestion form claude-agent-acp 0.101 sent (capture §6, `elicit-askuser-form`).
    fn captured() -> Value {
        json!({"mode":"form","sessionId":"63b28d30-d032-446d-89ad-123dc2ddc810","toolCallId":"toolu_mock_2","message":"Which color should the capture use?","requestedSchema":{"type":"object","properties":{"question_0":{"type":"string","title":"Color","oneOf":[{"const":"Red","title":"Red","description":"the red one"},{"const":"Blue","title":"Blue","description":"the blue one"}]},"question_0_custom":{"type":"string","title":"Other","description":"Type your own answer, or add a note to the option you chose above (optional)."}}}})
    }

    #[test]
    fn the_captured_form_reads_as_a_question() {
        let a = read_p(captured()).unwrap();
        assert_eq!(a.kind, RequestKind::Question);
        assert_eq!(a.tool_call_id, "toolu_mock_2");
        assert_eq!(a.title, "Which color should the capture use?");
        assert_eq!(
            a.message.as_deref(),
            Some("Which color should the capture use?")
        );
        assert_eq!((a.tool_kind, a.command), (None, None));
        assert!(a.paths.is_empty());
        let schema: Value = serde_json::from_str(a.schema.as_deref().unwrap()).unwrap();
        assert_eq!(schema, captured()["requestedSchema"], "carried exactly");
        let opts: Vec<(&str, &str)> = a
            .options
            .iter()
            .map(|o| (o.option_id.as_str(), o.kind.tag()))
            .collect();
        assert_eq!(
            opts,
            [
                ("accept", "accept"),
                ("decline", "decline"),
                ("cancel", "cancel")
            ]
        );
        // An MCP server's form (capture §6.2): no toolCallId, no mode word needed.
        let mut mcp = captured();
        mcp.as_object_mut().unwrap().remove("toolCallId");
        mcp.as_object_mut().unwrap().remove("mode");
        assert_eq!(read_p(mcp).unwrap().tool_call_id, "");
    }

    #[test]
    fn what_is_not_carried_and_why() {
        let with = |k: &str, v: Value| {
            let mut p = captured();
            p[k] = v;
            p
        };
        let cases = [
            (with("mode", json!("url")), NotCarried::UrlMode),
            (
                with("mode", json!("telepathy")),
                NotCarried::UnknownMode("telepathy".into()),
            ),
            (with("message", json!(7)), NotCarried::NoMessage),
            (with("requestedSchema", json!("{}")), NotCarried::NoSchema),
            (with("requestedSchema", Value::Null), NotCarried::NoSchema),
            (
                with(
                    "requestedSchema",
                    json!({"type":"object","description":"x".repeat(MAX_SCHEMA_BYTES)}),
                ),
                // `{"description":"` + the text + `","type":"object"}` (keys sorted).
                NotCarried::SchemaTooLong(MAX_SCHEMA_BYTES + 34),
            ),
            (
                with(
                    "requestedSchema",
                    json!({"type":"object","properties":{"a\u{202e}b":{"type":"string"}}}),
                ),
                NotCarried::SchemaNotExact,
            ),
            (
                with(
                    "requestedSchema",
                    json!({"type":"object","description":SECRET}),
                ),
                NotCarried::SchemaNotExact,
            ),
        ];
        for (p, want) in cases {
            assert_eq!(read_p(p.clone()), Err(want.clone()), "{p}");
            assert!(!want.to_string().is_empty());
        }
        let mut no_mode = captured();
        no_mode.as_object_mut().unwrap().remove("requestedSchema");
        assert_eq!(read_p(no_mode), Err(NotCarried::NoSchema));
        // A schema at the cap exactly is carried.
        let pad = MAX_SCHEMA_BYTES - r#"{"description":""}"#.len();
        let exact = with("requestedSchema", json!({"description":"y".repeat(pad)}));
        assert_eq!(
            read_p(exact).unwrap().schema.unwrap().len(),
            MAX_SCHEMA_BYTES
        );
    }

    #[test]
    fn a_hostile_message_is_cut_cleaned_and_redacted() {
        let mut p = captured();
        p["message"] = json!(format!(
            "\n  \u{1b}[2J{SECRET} pick one\u{202e}\n{}",
            "é".repeat(5000)
        ));
        p["toolCallId"] = json!("t".repeat(1000));
        let a = read_p(p).unwrap();
        let m = a.message.unwrap();
        assert!(
            m.len() <= MAX_MESSAGE_BYTES && m.ends_with('…'),
            "{}",
            m.len()
        );
        assert!(!has_unsafe(&m) && !m.contains(SECRET));
        assert_eq!(a.title, "?[2J[redacted] pick one?", "its first line");
        assert!(a.tool_call_id.len() <= MAX_TOOL_CALL_ID_BYTES);
    }

    #[test]
    fn answers_become_flat_results() {
        let ans = |o: Option<&str>, m: Option<&str>| RequestAnswer {
            option_id: o.map(str::to_owned),
            message: m.map(str::to_owned),
        };
        let accepted = action(&ans(Some("accept"), Some(r#"{"choice":"b"}"#))).unwrap();
        assert_eq!(
            accepted.result(),
            json!({"action":"accept","content":{"choice":"b"}})
        );
        assert_eq!(
            action(&ans(Some("decline"), Some("ignored")))
                .unwrap()
                .result(),
            json!({"action":"decline"})
        );
        for cancel in [ans(Some("cancel"), None), ans(None, None)] {
            assert_eq!(
                action(&cancel).unwrap().result(),
                json!({"action":"cancel"})
            );
        }
        for bad in [None, Some("b"), Some("[1]"), Some("\"x\""), Some("{")] {
            assert_eq!(
                action(&ans(Some("accept"), bad)),
                Err(BadAnswer::AcceptWithoutObject),
                "{bad:?}"
            );
        }
        assert_eq!(
            action(&ans(Some("allow"), None)),
            Err(BadAnswer::NotOffered)
        );
    }
}
