//! A request's id and its envelope's body (issue 37 design §4.2, §5): the id's hash, the
//! ACP vocabulary turned into the wire's, the fallback's answer, and the body cut to fit
//! `tasks.max_request_bytes`. Pure functions; refuses deciding when a request opens or
//! closes (`Approvals`).

use crate::acp::{OptionKind, PermissionFallback, RequestAnswer, RequestAsk, RequestKind};
use crate::tasks::types::TaskId;
use crate::wire::approval::{Fallback, RequestOpened, RequestOption, RequestType, TaskRequestBody};
use sha2::{Digest, Sha256};

/// `req-` and the first 16 hex digits of SHA-256(task ‖ 0 ‖ seq ‖ 0 ‖ tool_call_id ‖ 0 ‖
/// options), `seq` in decimal and the options as the envelope's JSON array
/// (`[{"optionId","name","kind"},…]`, compact) (design §4.2): the same request always has the
/// same id, and a request whose call or options changed has another.
pub fn request_id(task: &TaskId, ask: &RequestAsk) -> String {
    let mut h = Sha256::new();
    h.update(task.as_str().as_bytes());
    h.update([0]);
    h.update(ask.seq.to_string().as_bytes());
    h.update([0]);
    h.update(ask.tool_call_id.as_bytes());
    h.update([0]);
    h.update(crate::wire::to_json(&wire_options(ask)).as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("req-{hex}")
}

/// Whether `s` has the shape of a request id (`req-` and 16 lowercase hex digits).
pub fn is_request_id(s: &str) -> bool {
    s.strip_prefix("req-").is_some_and(|hex| {
        hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

pub(super) fn wire_options(ask: &RequestAsk) -> Vec<RequestOption> {
    ask.options
        .iter()
        .map(|o| RequestOption {
            option_id: o.option_id.clone(),
            name: o.name.clone(),
            kind: o.kind.tag().to_owned(),
        })
        .collect()
}

pub(super) fn wire_type(kind: RequestKind) -> RequestType {
    match kind {
        RequestKind::Permission => RequestType::Permission,
        RequestKind::Question => RequestType::Question,
    }
}

pub(super) fn wire_fallback(f: PermissionFallback) -> Fallback {
    match f {
        PermissionFallback::Reject => Fallback::Reject,
        PermissionFallback::Cancel => Fallback::Cancel,
    }
}

/// What a request gets from the fallback when it is not held, or expires under `reject`:
/// never an allow (design §4.5). A permission: the agent's `reject_once`, else
/// `reject_always`, else `cancelled` (under `cancel`: `cancelled`). A question: its `cancel`
/// option (design §4b), else `cancelled`.
pub fn fallback_answer(ask: &RequestAsk, fallback: PermissionFallback) -> RequestAnswer {
    let option_id = match (ask.kind, fallback) {
        (RequestKind::Question, _) => ask
            .options
            .iter()
            .find(|o| o.option_id == "cancel")
            .map(|o| o.option_id.clone()),
        (RequestKind::Permission, PermissionFallback::Cancel) => None,
        (RequestKind::Permission, PermissionFallback::Reject) => {
            let find = |k: OptionKind| ask.options.iter().find(|o| o.kind == k);
            find(OptionKind::RejectOnce)
                .or_else(|| find(OptionKind::RejectAlways))
                .map(|o| o.option_id.clone())
        }
    };
    RequestAnswer {
        option_id,
        message: None,
    }
}

/// Cuts `s` to about half, on a character boundary, ending in `…`; false when it is too
/// short to cut further.
pub(super) fn cut_half(s: &mut String) -> bool {
    let body = s.strip_suffix('…').unwrap_or(s);
    if body.len() < 2 {
        return false;
    }
    let mut at = body.len() / 2;
    while !body.is_char_boundary(at) {
        at -= 1;
    }
    let mut cut = body[..at].to_owned();
    cut.push('…');
    *s = cut;
    true
}

/// The open body, its longest free texts (title, command, message, paths, option names) cut
/// with `…` until the whole body fits `max_bytes` (`tasks.max_request_bytes`); None when it
/// cannot (ids, or a question's schema, alone too long): the request then gets the fallback,
/// never an envelope over the cap. A question's schema is never cut: an answer must match
/// the agent's form exactly.
pub(super) fn fit(mut o: RequestOpened, max_bytes: usize) -> Option<RequestOpened> {
    loop {
        let len = TaskRequestBody::Open(Box::new(o.clone())).to_json().len();
        if len <= max_bytes {
            return Some(o);
        }
        let mut texts: Vec<&mut String> = vec![&mut o.tool_call.title];
        texts.extend(o.tool_call.command.as_mut());
        texts.extend(o.message.as_mut());
        texts.extend(o.tool_call.paths.iter_mut());
        texts.extend(o.options.iter_mut().map(|x| &mut x.name));
        let longest = texts.into_iter().max_by_key(|s| s.len())?;
        if !cut_half(longest) {
            return None;
        }
    }
}
