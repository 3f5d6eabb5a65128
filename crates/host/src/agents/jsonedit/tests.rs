//! Tests of the JSON editor: layouts kept byte for byte, each edit on pretty, compact, JSONC
//! and CRLF files, and the refusals.

use super::*;

fn entry() -> J {
    J::obj(vec![
        ("command", J::str("/bin/hub")),
        ("args", J::Arr(vec![J::str("mcp")])),
    ])
}

#[test]
fn set_adds_after_the_last_sibling_keeping_order_and_comments() {
    let before = "{\n  // mine\n  \"zeta\": 1,\n  \"alpha\": [1, 2],\n  \"mcpServers\": {\n    \"other\": {\"command\": \"x\"}\n  }\n}\n";
    let after = set(before, &["mcpServers", "agent-hub"], &entry()).unwrap();
    assert_eq!(
        after,
        "{\n  // mine\n  \"zeta\": 1,\n  \"alpha\": [1, 2],\n  \"mcpServers\": {\n    \"other\": {\"command\": \"x\"},\n    \"agent-hub\": {\n      \"command\": \"/bin/hub\",\n      \"args\": [\n        \"mcp\"\n      ]\n    }\n  }\n}\n"
    );
    let back = remove(&after, &[Seg::Key("mcpServers"), Seg::Key("agent-hub")])
        .unwrap()
        .unwrap();
    assert_eq!(back, before);
}

#[test]
fn set_creates_missing_objects_and_remove_reverses_it() {
    let before = "{\n    \"theme\": \"dark\"\n}";
    let after = set(before, &["hooks", "Stop"], &J::Arr(vec![])).unwrap();
    assert_eq!(
        after,
        "{\n    \"theme\": \"dark\",\n    \"hooks\": {\n        \"Stop\": []\n    }\n}"
    );
    assert_eq!(
        remove(&after, &[Seg::Key("hooks")]).unwrap().unwrap(),
        before
    );
}

#[test]
fn empty_documents_and_empty_objects() {
    assert_eq!(set("", &["a"], &J::Num(1)).unwrap(), "{\n  \"a\": 1\n}\n");
    let after = set("{}\n", &["a"], &J::Num(1)).unwrap();
    assert_eq!(after, "{\n  \"a\": 1\n}\n");
    assert_eq!(remove(&after, &[Seg::Key("a")]).unwrap().unwrap(), "{}\n");
    assert_eq!(remove("{}", &[Seg::Key("a")]).unwrap(), None);
    assert_eq!(remove("", &[Seg::Key("a")]).unwrap(), None);
}

#[test]
fn replacing_an_existing_value_leaves_its_neighbours() {
    let before = "{\n  \"a\": {\"old\": true},\n  \"b\": 2\n}\n";
    let after = set(before, &["a"], &J::obj(vec![("new", J::Bool(true))])).unwrap();
    assert_eq!(
        after,
        "{\n  \"a\": {\n    \"new\": true\n  },\n  \"b\": 2\n}\n"
    );
}

#[test]
fn compact_files_stay_compact() {
    let after = set("{\"a\":1,\"b\":{}}", &["c"], &entry()).unwrap();
    assert_eq!(
        after,
        "{\"a\":1,\"b\":{},\"c\":{\"command\":\"/bin/hub\",\"args\":[\"mcp\"]}}"
    );
    let after = set("{\"a\": 1, \"b\": 2}", &["c"], &J::Num(3)).unwrap();
    assert_eq!(after, "{\"a\": 1, \"b\": 2, \"c\": 3}");
}

#[test]
fn append_and_remove_elements() {
    let before = "{\n  \"Stop\": [\n    {\"x\": 1}\n  ]\n}\n";
    let after = append(before, &["Stop"], &J::obj(vec![("y", J::Num(2))])).unwrap();
    assert_eq!(
        after,
        "{\n  \"Stop\": [\n    {\"x\": 1},\n    {\n      \"y\": 2\n    }\n  ]\n}\n"
    );
    assert_eq!(
        remove(&after, &[Seg::Key("Stop"), Seg::Index(1)])
            .unwrap()
            .unwrap(),
        before
    );
    let first_gone = remove(&after, &[Seg::Key("Stop"), Seg::Index(0)])
        .unwrap()
        .unwrap();
    assert_eq!(
        first_gone,
        "{\n  \"Stop\": [\n    {\n      \"y\": 2\n    }\n  ]\n}\n"
    );
    let created = append("{}", &["hooks", "Stop"], &J::Num(1)).unwrap();
    assert_eq!(
        value(&created).unwrap(),
        serde_json::json!({"hooks": {"Stop": [1]}})
    );
}

#[test]
fn middle_member_removal() {
    let t = "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3\n}";
    assert_eq!(
        remove(t, &[Seg::Key("b")]).unwrap().unwrap(),
        "{\n  \"a\": 1,\n  \"c\": 3\n}"
    );
    assert_eq!(
        remove(t, &[Seg::Key("a")]).unwrap().unwrap(),
        "{\n  \"b\": 2,\n  \"c\": 3\n}"
    );
}

#[test]
fn tabs_and_crlf_are_followed() {
    let before = "{\r\n\t\"a\": 1\r\n}\r\n";
    let after = set(before, &["b"], &J::Num(2)).unwrap();
    assert_eq!(value(&after).unwrap(), serde_json::json!({"a": 1, "b": 2}));
    assert_eq!(after, "{\r\n\t\"a\": 1,\r\n\t\"b\": 2\r\n}\r\n");
    assert_eq!(remove(&after, &[Seg::Key("b")]).unwrap().unwrap(), before);
}

#[test]
fn jsonc_trailing_commas_and_block_comments() {
    let before = "{\n  /* block */ \"a\": 1, // line\n}\n";
    let after = set(before, &["b"], &J::Num(2)).unwrap();
    assert_eq!(value(&after).unwrap(), serde_json::json!({"a": 1, "b": 2}));
    assert_eq!(remove(&after, &[Seg::Key("b")]).unwrap().unwrap(), before);
}

#[test]
fn strings_with_escapes_and_unicode_survive() {
    let before = "{\"k\\\"ey\": \"v\\u00e9\\n\", \"ü\": \"✓\"}";
    let after = set(before, &["z"], &J::str("a\"b")).unwrap();
    let v = value(&after).unwrap();
    assert_eq!(v["k\"ey"], "vé\n");
    assert_eq!(v["ü"], "✓");
    assert_eq!(v["z"], "a\"b");
}

#[test]
fn errors() {
    assert!(matches!(
        set("{\"a\": }", &["b"], &J::Num(1)),
        Err(JsonEditError::Parse {
            line: 1,
            column: 7,
            ..
        })
    ));
    assert!(matches!(
        set("[1]", &["b"], &J::Num(1)),
        Err(JsonEditError::NotContainer { .. })
    ));
    assert!(matches!(
        set("{\"hooks\": 3}", &["hooks", "Stop"], &J::Num(1)),
        Err(JsonEditError::NotContainer { .. })
    ));
    assert!(matches!(
        append("{\"a\": {}}", &["a"], &J::Num(1)),
        Err(JsonEditError::NotContainer { .. })
    ));
    assert!(matches!(
        value("{\"a\": 1} x"),
        Err(JsonEditError::Parse { .. })
    ));
    assert!(matches!(value("\"abc"), Err(JsonEditError::Parse { .. })));
    assert!(matches!(value("/* x"), Err(JsonEditError::Parse { .. })));
    assert!(matches!(value("nul"), Err(JsonEditError::Parse { .. })));
    assert!(matches!(value("01x"), Err(JsonEditError::Parse { .. })));
    assert_eq!(value(&"[".repeat(500)), Err(JsonEditError::TooDeep));
}

#[test]
fn duplicate_keys_are_refused_rather_than_guessed() {
    // Removing the last "a" would resurface the first: not the intended change.
    let t = "{\"a\": 1, \"a\": 2}";
    assert!(matches!(
        remove(t, &[Seg::Key("a")]),
        Err(JsonEditError::Verify(_))
    ));
}

#[test]
fn a_bom_is_kept() {
    let before = "\u{feff}{\n  \"a\": 1\n}\n";
    let after = set(before, &["b"], &J::Num(2)).unwrap();
    assert!(after.starts_with('\u{feff}'));
    assert_eq!(remove(&after, &[Seg::Key("b")]).unwrap().unwrap(), before);
}
