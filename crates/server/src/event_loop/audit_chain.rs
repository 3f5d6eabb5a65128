//! The audit log's hash chain (docs/operations.md, "Audit log format", version 3): every
//! record carries `"prev"`, the SHA-256 of the exact bytes of the line before it (without its
//! newline), so a changed, removed, inserted or reordered record breaks the chain at the
//! record after it. The first record of a chain is a `chain_start` record saying why the
//! chain starts there; its `prev` names the last record of the previous file when the hub
//! knew it, and is null otherwise.
//!
//! Owns the chain's rules: how `prev` is spliced into an encoded record, the `chain_start`
//! record, and `Verifier`, which checks a sequence of lines (pure: it is fed bytes).
//! `verify_files` is the thin IO around it for `agent-hub-server audit verify`.
//!
//! What the chain proves, and what it cannot: the hash is unkeyed, so whoever can rewrite the
//! whole file can recompute every hash. It detects damage, edits and deletions by anyone
//! who does not rewrite everything after them, and, against a head hash kept somewhere else
//! (the service log's shutdown line, `audit verify`'s output saved off the machine, the
//! `.head` file beside the log), any rewrite at all of the records up to that head.

use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

pub type Hash = [u8; 32];

/// The chain field's name in every version-3 record.
pub const PREV: &str = "prev";

/// The event of the record that starts a chain.
pub const CHAIN_START: &str = "chain_start";

/// SHA-256 of one line's bytes, without its newline.
pub fn line_hash(line: &[u8]) -> Hash {
    Sha256::digest(line).into()
}

pub fn hex(h: &Hash) -> String {
    let mut s = String::with_capacity(64);
    push_hex(h, &mut s);
    s
}

/// Appends the 64 lowercase hex digits of `h` to `out`. Per record on the hot path (every
/// `prev`): a digit table, not `format!` per byte, which was a tenth of the hub's CPU under
/// connection-per-op sends (docs/performance.md, issue 13).
pub fn push_hex(h: &Hash, out: &mut String) {
    agent_hub_proto::relay::auth::push_hex(h, out);
}

/// 64 lowercase hex digits, as `hex` writes them.
pub fn parse_hex(s: &str) -> Option<Hash> {
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut h = [0u8; 32];
    for (i, pair) in s.chunks(2).enumerate() {
        h[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(h)
}

/// Appends `record` (one encoded record, `{"v":…,"ts":…,"event":…}\n`) to `out` with
/// `"prev"` inserted before `"event"`, and returns the hash of the line as written.
pub fn chain_line(record: &str, prev: Option<&Hash>, out: &mut String) -> Hash {
    let body = record.strip_suffix('\n').unwrap_or(record);
    let push_field = |out: &mut String| match prev {
        Some(h) => {
            out.push('"');
            out.push_str(PREV);
            out.push_str("\":\"");
            push_hex(h, out);
            out.push_str("\",");
        }
        None => {
            out.push('"');
            out.push_str(PREV);
            out.push_str("\":null,");
        }
    };
    let start = out.len();
    // Every record the hub encodes has `"event"` right after `v` and `ts`; anything else
    // (never produced) still gets its `prev`, first.
    match event_key(body) {
        Some(i) => {
            out.push_str(&body[..=i]);
            push_field(out);
            out.push_str(&body[i + 1..]);
        }
        None => {
            out.push('{');
            push_field(out);
            out.push_str(body.strip_prefix('{').unwrap_or(body));
        }
    }
    let hash = line_hash(&out.as_bytes()[start..]);
    out.push('\n');
    hash
}

/// Where the first `,"event":` of `body` is: `str::find`'s answer, by a scan of the commas
/// (the key follows the second comma of every record the hub writes), without building a
/// substring searcher per record (docs/performance.md, issue 13, "Design decisions").
fn event_key(body: &str) -> Option<usize> {
    const KEY: &[u8] = b",\"event\":";
    let bytes = body.as_bytes();
    let mut from = 0;
    while let Some(i) = bytes[from..].iter().position(|&b| b == b',') {
        let at = from + i;
        if bytes[at..].starts_with(KEY) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// A `chain_start` record (without its `prev`, which `chain_line` adds).
pub fn chain_start_record(version: u32, ts: &str, reason: &str) -> String {
    format!(
        "{{\"v\":{version},\"ts\":\"{ts}\",\"event\":\"{CHAIN_START}\",\"reason\":{}}}\n",
        agent_hub_proto::wire::to_json(reason)
    )
}

/// Where the chain breaks: the first record that does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    /// Index of the file in the list given.
    pub file: usize,
    /// 1-based line number in that file.
    pub line: u64,
    pub why: String,
}

/// A sequence that holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub records: u64,
    /// Version-3 records, each checked against the one before it.
    pub chained: u64,
    /// Version-1 and -2 records (written before the chain existed): only the last of them is
    /// covered, by the first version-3 record after it.
    pub legacy: u64,
    /// The last record's hash: keep it somewhere else to check this log against later.
    pub head: Option<Hash>,
    /// Things an auditor should know that do not break the chain (where chains start).
    pub notes: Vec<String>,
}

/// The fields the chain needs; everything else in a record is skipped unparsed (a body may
/// hold numbers no f64 can carry).
#[derive(Deserialize)]
struct Head {
    v: u64,
    event: String,
    #[serde(default, deserialize_with = "present")]
    prev: Option<Option<String>>,
    #[serde(default)]
    reason: Option<String>,
}

/// `"prev": null` is `Some(None)`; no `prev` at all stays `None`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// A hash that must be among the records: the hash, what it is, where it was found (file
/// index, line, and how many records came before it).
type Anchor = (Hash, String, Option<(usize, u64, u64)>);

/// Checks lines in order, across files (pure; `verify_files` feeds it).
#[derive(Debug)]
pub struct Verifier {
    names: Vec<String>,
    /// The previous line's hash and where it was.
    prev: Option<(Hash, usize, u64)>,
    /// The highest chained format version seen so far (0: none): 3, or 4 from issue 29 on.
    /// Both chain alike; an older version after a newer one is flagged, as v1/v2 after v3.
    seen_chained: u64,
    summary: Summary,
    /// Hashes that must be among the records, with what they are (for the message), and
    /// where each was found.
    anchors: Vec<Anchor>,
}

impl Verifier {
    /// `names` are the files' names for messages, in the order they are fed.
    pub fn new(names: Vec<String>) -> Verifier {
        Verifier {
            names,
            prev: None,
            seen_chained: 0,
            summary: Summary::default(),
            anchors: Vec::new(),
        }
    }

    /// `anchor` must be the hash of one of the records (a head kept elsewhere).
    pub fn expect(&mut self, anchor: Hash, what: String) {
        self.anchors.push((anchor, what, None));
    }

    fn name(&self, file: usize) -> &str {
        self.names.get(file).map_or("?", String::as_str)
    }

    /// One complete line of file `file` (its newline removed), line number `line_no`.
    pub fn line(&mut self, file: usize, line_no: u64, bytes: &[u8]) -> Result<(), Break> {
        let broken = |why: String| Break {
            file,
            line: line_no,
            why,
        };
        let hash = line_hash(bytes);
        let head: Head = serde_json::from_slice(bytes).map_err(|e| {
            broken(match e.classify() {
                serde_json::error::Category::Data => format!("not an audit record ({e})"),
                _ => format!("not a JSON object ({e})"),
            })
        })?;
        match head.v {
            1 | 2 => {
                if self.seen_chained > 0 {
                    return Err(broken(format!(
                        "a version-{} record after version-{} records: written by an older agent-hub-server, or inserted",
                        head.v, self.seen_chained
                    )));
                }
                self.summary.legacy += 1;
            }
            3 | 4 => {
                if head.v < self.seen_chained {
                    return Err(broken(format!(
                        "a version-{} record after version-{} records: written by an older agent-hub-server, or inserted",
                        head.v, self.seen_chained
                    )));
                }
                self.seen_chained = head.v;
                let reason = head.reason.as_deref().unwrap_or("no reason given");
                match head.prev {
                    None => {
                        return Err(broken(
                            "no \"prev\": every version-3 or later record names the one before it".into(),
                        ))
                    }
                    Some(None) if head.event != CHAIN_START => {
                        return Err(broken(
                            "\"prev\" is null, but only a chain_start record may have no predecessor"
                                .into(),
                        ))
                    }
                    Some(None) if line_no != 1 => {
                        return Err(broken(format!(
                            "a chain_start with no predecessor in the middle of a file: the {} records before it are not linked to it (records may have been removed)",
                            line_no - 1
                        )))
                    }
                    Some(None) => {
                        let after = if file > 0 {
                            format!(
                                "; its link to {} is not proven",
                                self.name(file - 1)
                            )
                        } else {
                            String::new()
                        };
                        let note = format!(
                            "{}:1: a new chain starts ({reason}){after}",
                            self.name(file)
                        );
                        self.summary.notes.push(note);
                    }
                    Some(Some(text)) => {
                        let Some(want) = parse_hex(&text) else {
                            return Err(broken(
                                "\"prev\" is not a SHA-256 digest (64 lowercase hex digits)"
                                    .into(),
                            ));
                        };
                        match self.prev {
                            Some((got, pf, pl)) if got != want => {
                                let whose = if pf == file {
                                    format!("line {pl}")
                                } else {
                                    format!("the last record of {} (line {pl})", self.name(pf))
                                };
                                return Err(broken(format!(
                                    "\"prev\" does not match {whose}: that record was changed, or records between them were removed, inserted or reordered{}",
                                    if pf == file { "" } else { ", or the files are out of order or one is missing" }
                                )));
                            }
                            Some(_) => {}
                            None => self.summary.notes.push(format!(
                                "{}:{line_no}: continues a chain from a record not given here (prev {})",
                                self.name(file),
                                &text[..16]
                            )),
                        }
                        if head.event == CHAIN_START {
                            let note = format!("{}:{line_no}: chain_start: {reason}", self.name(file));
                            self.summary.notes.push(note);
                        }
                    }
                }
                self.summary.chained += 1;
            }
            v => return Err(broken(format!("unknown audit format version {v}"))),
        }
        for (anchor, _, found) in &mut self.anchors {
            if *anchor == hash {
                *found = Some((file, line_no, self.summary.records));
            }
        }
        self.prev = Some((hash, file, line_no));
        self.summary.records += 1;
        Ok(())
    }

    /// File `file` ended with `bytes` after its last newline (a torn or cut last line).
    pub fn incomplete(&self, file: usize, line_no: u64, bytes: &[u8]) -> Break {
        Break {
            file,
            line: line_no,
            why: format!(
                "the line is incomplete ({} bytes and no newline): a write was cut short, or the file was truncated",
                bytes.len()
            ),
        }
    }

    /// The end of the last file: every anchor must have been found.
    pub fn finish(mut self) -> Result<Summary, Break> {
        let last = self.prev;
        for (anchor, what, found) in &self.anchors {
            match (found, last) {
                (Some(_), _) => {}
                (None, Some((_, file, line))) => {
                    return Err(Break {
                        file,
                        line: line + 1,
                        why: format!(
                            "the log ends at line {line}, but {what} names record {}…, which is not here: records were cut from the end, or the last record was changed",
                            &hex(anchor)[..16]
                        ),
                    })
                }
                (None, None) => {
                    return Err(Break {
                        file: self.names.len().saturating_sub(1),
                        line: 1,
                        why: format!("no records, but {what} names record {}…", &hex(anchor)[..16]),
                    })
                }
            }
        }
        // An anchor before the end: the records after it are intact as a chain but not
        // anchored by it. For the `.head` file that is what a hub killed within its write
        // interval leaves (`Records::record_head_due`, docs/operations.md "The hash chain").
        for (_, what, found) in &self.anchors {
            if let (Some((f, l, before)), Some((_, lf, ll))) = (found, last) {
                if (*f, *l) != (lf, ll) {
                    let after = self.summary.records - before - 1;
                    let note = format!(
                        "{what} is {}:{l}; the {after} records after it are not anchored by it: written after it (a hub killed without an orderly stop leaves its .head up to one write interval behind), or appended by someone else",
                        self.names.get(*f).map_or("?", String::as_str)
                    );
                    self.summary.notes.push(note);
                }
            }
        }
        self.summary.head = last.map(|(h, _, _)| h);
        Ok(self.summary)
    }
}

/// The `.head` file beside an audit log: the hash of its last record, rewritten by the hub
/// at most once per `limits.service_log_flush_ms` and at every stop
/// (`Records::record_head_due`), so it may name a record shortly before the last one.
pub fn head_path(audit: &Path) -> PathBuf {
    let mut name = audit.as_os_str().to_owned();
    name.push(".head");
    PathBuf::from(name)
}

/// Why a `.head` file gave no head.
#[derive(Debug)]
pub enum HeadError {
    /// It could not be read (other than being absent).
    Read { path: PathBuf, error: io::Error },
    /// It holds something other than a hash.
    NotAHash { path: PathBuf },
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::Read { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            HeadError::NotAHash { path } => {
                write!(f, "{} does not hold a SHA-256 hex digest", path.display())
            }
        }
    }
}

impl std::error::Error for HeadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HeadError::Read { error, .. } => Some(error),
            HeadError::NotAHash { .. } => None,
        }
    }
}

/// Reads a `.head` file: None if it is absent or empty, an error if it holds anything but a
/// hash.
pub fn read_head(path: &Path) -> Result<Option<Hash>, HeadError> {
    match std::fs::read_to_string(path) {
        Ok(text) if text.trim().is_empty() => Ok(None),
        Ok(text) => parse_hex(text.trim())
            .map(Some)
            .ok_or_else(|| HeadError::NotAHash {
                path: path.to_owned(),
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(HeadError::Read {
            path: path.to_owned(),
            error,
        }),
    }
}

/// `audit verify`: the files in order, plus each anchor (hex hash, what it is). The last
/// file's `.head`, when present, is an anchor too. It is read before the log, so records
/// the running hub appends meanwhile only follow it. An `io::Error` means a file could not be
/// read (nothing was verified).
pub fn verify_files(
    paths: &[PathBuf],
    anchors: &[(Hash, String)],
) -> io::Result<Result<Summary, Break>> {
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let mut v = Verifier::new(names);
    for (h, what) in anchors {
        v.expect(*h, what.clone());
    }
    if let Some(last) = paths.last() {
        let head = head_path(last);
        match read_head(&head) {
            Ok(Some(h)) => v.expect(h, format!("the hub's recorded head ({})", head.display())),
            Ok(None) => {}
            Err(e) => return Err(io::Error::other(e)),
        }
    }
    for (file, path) in paths.iter().enumerate() {
        let f = std::fs::File::open(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display()))
        })?;
        let mut reader = io::BufReader::with_capacity(256 * 1024, f);
        let mut line = Vec::new();
        let mut line_no = 0u64;
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot read {}: {e}", path.display()))
            })?;
            if n == 0 {
                break;
            }
            line_no += 1;
            match line.strip_suffix(b"\n") {
                Some(complete) => {
                    if let Err(b) = v.line(file, line_no, complete) {
                        return Ok(Err(b));
                    }
                }
                None => return Ok(Err(v.incomplete(file, line_no, &line))),
            }
        }
    }
    Ok(v.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: u32 = 3;

    /// The digit table writes what `{:02x}` per byte writes, and `parse_hex` reads it back.
    /// The table-driven hex writer (shared with the relay's keys) writes `{:02x}` per byte,
    /// for every byte value and at lengths around its 32-byte chunks.
    #[test]
    fn hex_writer_is_format_per_byte_at_every_length() {
        let all: Vec<u8> = (0..=255u8).collect();
        for len in [0usize, 1, 31, 32, 33, 64, 65, 256] {
            let bytes: Vec<u8> = all
                .iter()
                .copied()
                .cycle()
                .skip(len * 7)
                .take(len)
                .collect();
            let mut out = String::from("x");
            agent_hub_proto::relay::auth::push_hex(&bytes, &mut out);
            let want: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(out, format!("x{want}"), "{len}");
        }
    }

    /// The comma scan finds what `str::find` finds, wherever the key is or is not.
    #[test]
    fn event_key_is_find() {
        for body in [
            "{\"v\":3,\"ts\":\"t\",\"event\":\"connected\"}",
            "{\"event\":\"x\"}",
            ",\"event\":",
            ",,\"event\":1,\"event\":2",
            "{\"a\":\",\",\"b\":\",\\\"event\\\":\"}",
            ",\"even",
            "",
            ",",
            "{\"v\":3,\"ts\":\"t\"}",
            "é,😀,\"event\":",
        ] {
            assert_eq!(event_key(body), body.find(",\"event\":"), "{body}");
        }
    }

    #[test]
    fn hex_is_lowercase_two_digits_per_byte_and_round_trips() {
        let mut h = [0u8; 32];
        for (i, b) in h.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(9);
        }
        h[0] = 0;
        h[31] = 0xff;
        let slow: String = h.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&h), slow);
        assert_eq!(parse_hex(&hex(&h)), Some(h));
    }

    fn record(ts: &str, event: &str) -> String {
        format!("{{\"v\":{V},\"ts\":\"{ts}\",\"event\":\"{event}\",\"conn\":2}}\n")
    }

    /// A chain of `n` records as the hub writes it, starting a new log.
    fn chain(n: usize) -> Vec<String> {
        let mut out = String::new();
        let mut head = chain_line(
            &chain_start_record(V, "t0", "new audit log"),
            None,
            &mut out,
        );
        for i in 1..n {
            head = chain_line(
                &record(&format!("t{i}"), "connected"),
                Some(&head),
                &mut out,
            );
        }
        out.lines().map(str::to_owned).collect()
    }

    fn verify(lines: &[String]) -> Result<Summary, Break> {
        let mut v = Verifier::new(vec!["audit.jsonl".into()]);
        for (i, l) in lines.iter().enumerate() {
            v.line(0, i as u64 + 1, l.as_bytes())?;
        }
        v.finish()
    }

    #[test]
    fn prev_goes_before_event_and_hashes_the_exact_line() {
        let mut out = String::new();
        let h = chain_line(&record("t", "connected"), Some(&[0xab; 32]), &mut out);
        assert_eq!(
            out,
            format!(
                "{{\"v\":3,\"ts\":\"t\",\"prev\":\"{}\",\"event\":\"connected\",\"conn\":2}}\n",
                "ab".repeat(32)
            )
        );
        assert_eq!(h, line_hash(out.trim_end().as_bytes()));
        assert_eq!(parse_hex(&hex(&h)), Some(h));
        assert_eq!(parse_hex(&"AB".repeat(32)), None, "lowercase only");
        let mut first = String::new();
        chain_line(&chain_start_record(3, "t", "new \"log\""), None, &mut first);
        assert!(
            first.starts_with("{\"v\":3,\"ts\":\"t\",\"prev\":null,\"event\":\"chain_start\",\"reason\":\"new \\\"log\\\"\"}"),
            "{first}"
        );
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(v["reason"], "new \"log\"");
    }

    #[test]
    fn an_intact_chain_verifies_with_its_count_and_head() {
        let lines = chain(5);
        let s = verify(&lines).unwrap();
        assert_eq!((s.records, s.chained, s.legacy), (5, 5, 0));
        assert_eq!(s.head, Some(line_hash(lines[4].as_bytes())));
        assert_eq!(
            s.notes,
            ["audit.jsonl:1: a new chain starts (new audit log)"]
        );
    }

    #[test]
    fn every_kind_of_tampering_names_the_first_broken_record() {
        let lines = chain(6);
        // One byte changed in record 3 (still valid JSON): record 4 no longer matches.
        let mut edited = lines.clone();
        edited[2] = edited[2].replace("\"conn\":2", "\"conn\":3");
        let b = verify(&edited).unwrap_err();
        assert_eq!(b.line, 4, "{b:?}");
        assert!(b.why.contains("does not match line 3"), "{}", b.why);
        // Record 3 deleted: the record now at line 3 names the deleted one.
        let mut deleted = lines.clone();
        deleted.remove(2);
        assert_eq!(verify(&deleted).unwrap_err().line, 3);
        // Records 3 and 4 swapped.
        let mut swapped = lines.clone();
        swapped.swap(2, 3);
        assert_eq!(verify(&swapped).unwrap_err().line, 3);
        // A record inserted (a copy of record 2 after itself).
        let mut inserted = lines.clone();
        inserted.insert(2, lines[1].clone());
        assert_eq!(verify(&inserted).unwrap_err().line, 3);
        // A record's prev removed, nulled or mangled.
        for (from, to) in [
            ("\"prev\":\"", "\"prv\":\""),
            ("\"prev\":\"", "\"prev\":null,\"x\":\""),
            ("\"prev\":\"", "\"prev\":\"zz"),
        ] {
            let mut bad = lines.clone();
            bad[3] = bad[3].replacen(from, to, 1);
            let b = verify(&bad).unwrap_err();
            assert_eq!(b.line, 4, "{to}: {b:?}");
        }
        // A second chain_start spliced in mid-file to hide a cut.
        let mut restarted = lines.clone();
        let mut out = String::new();
        chain_line(
            &chain_start_record(V, "t9", "new audit log"),
            None,
            &mut out,
        );
        restarted[3] = out.trim_end().to_owned();
        let b = verify(&restarted).unwrap_err();
        assert_eq!(b.line, 4);
        assert!(b.why.contains("in the middle of a file"), "{}", b.why);
        // Garbage, a duplicate prev key, an old record after new ones, a future version.
        for (i, bad) in [
            "not json".to_owned(),
            lines[1].replacen(
                "\"event\"",
                &format!("\"prev\":\"{}\",\"event\"", "0".repeat(64)),
                1,
            ),
            "{\"v\":2,\"ts\":\"t\",\"event\":\"connected\",\"conn\":2}".to_owned(),
            lines[1].replacen("\"v\":3", "\"v\":5", 1),
        ]
        .into_iter()
        .enumerate()
        {
            let mut bad_lines = lines.clone();
            bad_lines[1] = bad;
            assert_eq!(verify(&bad_lines).unwrap_err().line, 2, "case {i}");
        }
    }

    #[test]
    fn a_cut_tail_is_caught_only_against_a_head_kept_elsewhere() {
        let lines = chain(6);
        let head = line_hash(lines[5].as_bytes());
        let cut = &lines[..4];
        assert!(
            verify(cut).is_ok(),
            "a chain alone cannot see its own end cut off"
        );
        let mut v = Verifier::new(vec!["audit.jsonl".into()]);
        v.expect(head, "the recorded head".into());
        for (i, l) in cut.iter().enumerate() {
            v.line(0, i as u64 + 1, l.as_bytes()).unwrap();
        }
        let b = v.finish().unwrap_err();
        assert_eq!(b.line, 5, "the first missing record");
        assert!(b.why.contains("records were cut from the end"), "{}", b.why);
    }

    #[test]
    fn legacy_records_then_a_chain_and_files_in_order() {
        let legacy = [
            "{\"v\":1,\"ts\":\"a\",\"event\":\"connected\",\"conn\":2}".to_owned(),
            "{\"v\":2,\"ts\":\"b\",\"event\":\"connected\",\"conn\":3}".to_owned(),
        ];
        let mut out = String::new();
        let mut head = line_hash(legacy[1].as_bytes());
        for i in 0..3 {
            head = chain_line(
                &record(&format!("c{i}"), "connected"),
                Some(&head),
                &mut out,
            );
        }
        let mut lines: Vec<String> = legacy.to_vec();
        lines.extend(out.lines().map(str::to_owned));
        let s = verify(&lines).unwrap();
        assert_eq!((s.records, s.chained, s.legacy), (5, 3, 2));
        // A second file continuing the first (rotation with a known head).
        let mut next = String::new();
        chain_line(
            &chain_start_record(V, "d", "rotated"),
            Some(&head),
            &mut next,
        );
        let mut v = Verifier::new(vec!["old".into(), "new".into()]);
        for (i, l) in lines.iter().enumerate() {
            v.line(0, i as u64 + 1, l.as_bytes()).unwrap();
        }
        v.line(1, 1, next.trim_end().as_bytes()).unwrap();
        let s = v.finish().unwrap();
        assert!(
            s.notes.iter().any(|n| n == "new:1: chain_start: rotated"),
            "{:?}",
            s.notes
        );
        // The same two files in the wrong order break at the second file's first line.
        let mut v = Verifier::new(vec!["new".into(), "old".into()]);
        v.line(0, 1, next.trim_end().as_bytes()).unwrap();
        let b = v.line(1, 1, lines[0].as_bytes()).unwrap_err();
        assert_eq!((b.file, b.line), (1, 1), "{b:?}");
        assert!(
            b.why.contains("version-1 record after version-3"),
            "{}",
            b.why
        );
    }

    /// Version 4 (issue 29) chains exactly as version 3: a log upgraded in place is one chain,
    /// and a version-3 record after version-4 ones is flagged as a v1/v2 after v3 is.
    #[test]
    fn version_3_and_4_records_chain_alike() {
        let rec = |v: u32, i: usize| {
            format!("{{\"v\":{v},\"ts\":\"t{i}\",\"event\":\"connected\",\"conn\":2}}\n")
        };
        let mut out = String::new();
        let mut head = chain_line(
            &chain_start_record(3, "t0", "new audit log"),
            None,
            &mut out,
        );
        for (i, v) in [3, 3, 4, 4].into_iter().enumerate() {
            head = chain_line(&rec(v, i + 1), Some(&head), &mut out);
        }
        let lines: Vec<String> = out.lines().map(str::to_owned).collect();
        let s = verify(&lines).unwrap();
        assert_eq!((s.records, s.chained), (5, 5));
        chain_line(&rec(3, 9), Some(&head), &mut out);
        let lines: Vec<String> = out.lines().map(str::to_owned).collect();
        let b = verify(&lines).unwrap_err();
        assert_eq!(b.line, 6);
        assert!(
            b.why.contains("version-3 record after version-4"),
            "{}",
            b.why
        );
    }
}
