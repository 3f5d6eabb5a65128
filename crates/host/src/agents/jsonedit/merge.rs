//! Merging an entry install owns into an object that already exists (issue 12, docs/agents.md
//! "Reinstall keeps your keys"): replace the values of the keys install owns when they differ,
//! add the missing ones, and leave every other member — keys the user added, comments, layout —
//! byte for byte as it was.
//!
//! Owns `set_member` (one member, at any path of keys and indexes) and `merge_object` (a list
//! of owned keys plus keys written only when absent). Each edit checks itself like the rest of
//! the editor: the result parses to the old value with exactly that change, or nothing is
//! written. Refuses IO.

use super::parse::{find, parse, to_value, Kind, Node};
use super::splice::{add_child, apply, line_indent, render_entry, style_of, Seps, Splice, Style};
use super::{show_path, verify, JsonEditError, Result, Seg, J};
use serde_json::Value;

/// The text that replaces the value of an existing member, in the layout of its object: one
/// line when the object is written on one line (or the whole file is), else pretty, indented
/// from the member's own line.
pub(super) fn replacement(
    text: &str,
    style: &Style,
    object: &Node,
    member_key_start: usize,
    old_value: &Node,
    j: &J,
) -> String {
    let first_key = match &object.kind {
        Kind::Obj(ms) => ms.first().map_or(member_key_start, |m| m.key_start),
        _ => member_key_start,
    };
    let inline = style.compact || !text[object.start..first_key].contains('\n');
    if inline {
        let seps = Seps {
            colon: ":",
            comma: if text[old_value.start..old_value.end].contains(", ") {
                ", "
            } else {
                ","
            },
        };
        render_entry(None, j, "", "", Some(seps))
    } else {
        render_entry(
            None,
            j,
            &style.unit,
            line_indent(text, member_key_start),
            None,
        )
    }
}

/// The value at `path` inside `v`, mutably.
fn value_at<'v>(v: &'v mut Value, path: &[Seg]) -> Option<&'v mut Value> {
    let mut cur = v;
    for seg in path {
        cur = match (cur, seg) {
            (Value::Object(m), Seg::Key(k)) => m.get_mut(*k)?,
            (Value::Array(a), Seg::Index(i)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Sets member `key` of the object at `object` (keys and indexes; it must exist and be an
/// object) to `j`: its value is replaced in place, or a missing member is added after the
/// last one. Other members and their comments are not touched.
pub fn set_member(text: &str, object: &[Seg], key: &str, j: &J) -> Result<String> {
    let not_object = || JsonEditError::NotContainer {
        at: show_path(object),
        expected: "an object",
    };
    let root = parse(text)?.ok_or_else(not_object)?;
    let node = find(&root, object).ok_or_else(not_object)?;
    let Kind::Obj(members) = &node.kind else {
        return Err(not_object());
    };
    let style = style_of(text);
    // The last of duplicate keys is the one JSON readers keep.
    let splice = match members.iter().rev().find(|m| m.key == key) {
        Some(m) => Splice::Replace {
            start: m.value.start,
            end: m.value.end,
            text: replacement(text, &style, node, m.key_start, &m.value, j),
        },
        None => {
            let unit = style.unit.clone();
            let render =
                |base: &str, seps: Option<Seps>| render_entry(Some(key), j, &unit, base, seps);
            add_child(text, node, &style, &render)
        }
    };
    let mut expected = to_value(text, &root)?;
    match value_at(&mut expected, object) {
        Some(Value::Object(m)) => {
            m.insert(key.to_owned(), j.to_value());
        }
        _ => return Err(not_object()),
    }
    verify(&apply(text, splice), &expected)
}

/// Merges an entry into the object at `object`: each of `owned` is set when its value differs
/// (or it is missing); each of `defaults` is added only when its key is missing, so a value
/// the user changed stays. Every other key stays as it is. Returns the new text and the keys
/// written, in order; no keys means no change.
pub fn merge_object(
    text: &str,
    object: &[Seg],
    owned: &[(&str, J)],
    defaults: &[(&str, J)],
) -> Result<(String, Vec<String>)> {
    let mut cur = text.to_owned();
    let mut written = Vec::new();
    let current = |t: &str| -> Result<serde_json::Map<String, Value>> {
        match super::get(t, object)? {
            Some(Value::Object(m)) => Ok(m),
            _ => Err(JsonEditError::NotContainer {
                at: show_path(object),
                expected: "an object",
            }),
        }
    };
    for (key, j) in owned {
        if current(&cur)?.get(*key) != Some(&j.to_value()) {
            cur = set_member(&cur, object, key, j)?;
            written.push((*key).to_owned());
        }
    }
    for (key, j) in defaults {
        if !current(&cur)?.contains_key(*key) {
            cur = set_member(&cur, object, key, j)?;
            written.push((*key).to_owned());
        }
    }
    Ok((cur, written))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: [Seg; 2] = [Seg::Key("mcpServers"), Seg::Key("agent-hub")];

    fn args(port: &str) -> J {
        J::Arr(vec![J::str("mcp"), J::str("--port"), J::str(port)])
    }

    fn owned(port: &str) -> Vec<(&'static str, J)> {
        vec![("command", J::str("/bin/hub")), ("args", args(port))]
    }

    #[test]
    fn a_new_port_replaces_only_the_owned_value_and_keeps_the_users_keys_and_comments() {
        let before = "{\n  \"mcpServers\": {\n    \"agent-hub\": {\n      // added by me\n      \"trust\": true,\n      \"command\": \"/bin/hub\",\n      \"args\": [\n        \"mcp\",\n        \"--port\",\n        \"1\"\n      ],\n      \"timeout\": 5000 /* mine too */\n    }\n  }\n}\n";
        let (after, keys) = merge_object(before, &ENTRY, &owned("2"), &[]).unwrap();
        assert_eq!(keys, ["args"]);
        assert_eq!(after, before.replace("\"1\"", "\"2\""));
        let (again, keys) = merge_object(&after, &ENTRY, &owned("2"), &[]).unwrap();
        assert!(keys.is_empty(), "idempotent");
        assert_eq!(again, after);
    }

    #[test]
    fn missing_owned_keys_are_added_after_the_users_and_defaults_never_replace() {
        let before =
            "{\"mcpServers\": {\"agent-hub\": {\"trust\": true, \"env\": {\"A\": \"1\"}}}}";
        let (after, keys) = merge_object(
            before,
            &ENTRY,
            &owned("1"),
            &[("env", J::Obj(vec![])), ("timeout", J::Num(30))],
        )
        .unwrap();
        assert_eq!(keys, ["command", "args", "timeout"]);
        assert_eq!(
            after,
            "{\"mcpServers\": {\"agent-hub\": {\"trust\": true, \"env\": {\"A\": \"1\"}, \"command\": \"/bin/hub\", \"args\": [\"mcp\", \"--port\", \"1\"], \"timeout\": 30}}}"
        );
    }

    #[test]
    fn a_user_value_under_an_owned_key_is_replaced() {
        // Decision (docs/agents.md): install owns command and args; a wrapper the user put
        // there is replaced, and the note names the key.
        let before = "{\n  \"mcpServers\": {\n    \"agent-hub\": {\n      \"command\": \"/home/u/wrap.sh\",\n      \"args\": [\"mcp\", \"--port\", \"1\"],\n      \"trust\": true\n    }\n  }\n}\n";
        let (after, keys) = merge_object(before, &ENTRY, &owned("1"), &[]).unwrap();
        assert_eq!(keys, ["command"]);
        assert_eq!(after, before.replace("/home/u/wrap.sh", "/bin/hub"));
    }

    #[test]
    fn crlf_files_get_crlf_in_the_replaced_value() {
        let before = "{\r\n  \"mcpServers\": {\r\n    \"agent-hub\": {\r\n      \"trust\": true,\r\n      \"args\": []\r\n    }\r\n  }\r\n}\r\n";
        let (after, _) = merge_object(before, &ENTRY, &[("args", args("2"))], &[]).unwrap();
        assert!(!after.replace("\r\n", "").contains('\n'), "{after:?}");
        assert!(after.contains("\"trust\": true,\r\n      \"args\": [\r\n        \"mcp\","));
    }

    #[test]
    fn members_inside_arrays_are_reached_by_index() {
        let before = "{\"hooks\": {\"Stop\": [{\"hooks\": [{\"command\": \"x\"}, {\"command\": \"old\", \"mine\": 1}]}]}}";
        let path = [
            Seg::Key("hooks"),
            Seg::Key("Stop"),
            Seg::Index(0),
            Seg::Key("hooks"),
            Seg::Index(1),
        ];
        let after = set_member(before, &path, "command", &J::str("new")).unwrap();
        assert_eq!(after, before.replace("\"old\"", "\"new\""));
    }

    #[test]
    fn a_path_that_is_not_an_object_is_refused() {
        let before = "{\"mcpServers\": {\"agent-hub\": [1]}}";
        assert!(matches!(
            merge_object(before, &ENTRY, &owned("1"), &[]),
            Err(JsonEditError::NotContainer { .. })
        ));
        assert!(matches!(
            set_member("{}", &ENTRY, "command", &J::str("x")),
            Err(JsonEditError::NotContainer { .. })
        ));
    }

    #[test]
    fn duplicate_keys_edit_the_last_one_which_readers_keep() {
        let before = "{\"mcpServers\": {\"agent-hub\": {\"command\": \"a\", \"command\": \"b\"}}}";
        let after = set_member(before, &ENTRY, "command", &J::str("c")).unwrap();
        assert_eq!(
            after,
            "{\"mcpServers\": {\"agent-hub\": {\"command\": \"a\", \"command\": \"c\"}}}"
        );
    }
}
