//! The memory a relay message may cost once parsed (docs/relay-protocol.md, "Limits"). A
//! message's JSON becomes a `serde_json::Value` tree, and a tree costs far more than its text:
//! every value is a 32-byte `Value`, every object entry a map slot and a key allocation, every
//! array grows by doubling. So `[[],[],…]` or `{"a0":0,"a1":0,…}` in a 4 MiB decompressed frame
//! body would become 50–100 MiB of tree. `check` counts the values in the text first, without
//! allocating, and a message with more than `MAX_JSON_VALUES` is refused before any tree exists.
//!
//! Counting is a byte scan, not a parse: it counts each string (keys included), each array,
//! each object and each bare scalar, and stops at the end of the first top-level value (a framed
//! `session_transfer` carries raw bytes after its JSON). It never rejects text that would parse
//! within the cap; malformed text is left for serde_json to refuse. Refuses: IO, and deciding
//! what a message means.

/// Values (strings, keys included; numbers; literals; arrays; objects) one relay message may
/// hold. The largest message this hub sends legitimately is a heartbeat directory: at most
/// `MAX_PEER_AGENTS_BOUND` agents, about 6 values each in a full beat and 8 in a delta, well
/// inside this. A parsed message within the cap costs at most a few MiB more than its text
/// (measured in this file's tests).
pub const MAX_JSON_VALUES: usize = 65_536;

/// Counts the JSON values in `bytes` up to the end of its first top-level value. `Err(n)` as
/// soon as the count passes `cap` (`n` = cap + 1): the scan stops there.
pub fn count_values(bytes: &[u8], cap: usize) -> Result<usize, usize> {
    let mut count = 0usize;
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut in_scalar = false;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                if depth == 0 {
                    break;
                }
            }
            continue;
        }
        match b {
            b'"' => {
                count += 1;
                in_string = true;
                in_scalar = false;
            }
            b'[' | b'{' => {
                count += 1;
                depth += 1;
                in_scalar = false;
            }
            b']' | b'}' => {
                in_scalar = false;
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
            b',' | b':' | b' ' | b'\t' | b'\n' | b'\r' => {
                if in_scalar && depth == 0 {
                    break;
                }
                in_scalar = false;
            }
            _ => {
                if !in_scalar {
                    count += 1;
                    in_scalar = true;
                }
            }
        }
        if count > cap {
            return Err(count);
        }
    }
    Ok(count)
}

/// `count_values` against `MAX_JSON_VALUES`.
pub fn check(bytes: &[u8]) -> Result<(), usize> {
    count_values(bytes, MAX_JSON_VALUES).map(|_| ())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::relay::frame::{decode_body, decode_frame, encode_frame, DECOMPRESSED_CAP_BYTES};
    use crate::relay::message::{RelayError, RelayMessage, LINE_CAP_BYTES};
    use serde_json::Value;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// Counts the bytes this thread holds allocated while a measurement runs, and the peak.
    /// Per thread, so tests running in parallel do not disturb each other's numbers.
    struct Counting;

    thread_local! {
        static MEASURING: Cell<bool> = const { Cell::new(false) };
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    fn note(delta: isize) {
        let _ = MEASURING.try_with(|m| {
            if m.get() {
                let live = LIVE.with(|l| {
                    l.set(l.get() + delta);
                    l.get()
                });
                PEAK.with(|p| p.set(p.get().max(live)));
            }
        });
    }

    // SAFETY: every call is passed to the system allocator unchanged; the counting touches
    // only const-initialised thread-locals of Copy types, which never allocate.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let p = System.alloc(layout);
            if !p.is_null() {
                note(layout.size() as isize);
            }
            p
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            let p = System.alloc_zeroed(layout);
            if !p.is_null() {
                note(layout.size() as isize);
            }
            p
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            System.dealloc(ptr, layout);
            note(-(layout.size() as isize));
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let p = System.realloc(ptr, layout, new_size);
            if !p.is_null() {
                note(new_size as isize - layout.size() as isize);
            }
            p
        }
    }

    #[global_allocator]
    static ALLOC: Counting = Counting;

    /// The most bytes held at once (above what was held before) while `f` runs, counting what
    /// it returns. This thread's allocations only.
    pub(crate) fn peak_bytes<T>(f: impl FnOnce() -> T) -> (usize, T) {
        LIVE.with(|l| l.set(0));
        PEAK.with(|p| p.set(0));
        MEASURING.with(|m| m.set(true));
        let out = f();
        MEASURING.with(|m| m.set(false));
        (PEAK.with(|p| p.get()).max(0) as usize, out)
    }

    const MIB: usize = 1 << 20;

    /// A shape a peer may fill a message with: one item (`#` is replaced by the item's index),
    /// and the brackets around the items.
    struct Shape {
        name: &'static str,
        item: &'static str,
        open: &'static str,
        close: &'static str,
    }

    const SHAPES: [Shape; 5] = [
        Shape {
            name: "empty arrays",
            item: "[]",
            open: "[",
            close: "]",
        },
        Shape {
            name: "zeros",
            item: "0",
            open: "[",
            close: "]",
        },
        Shape {
            name: "empty objects",
            item: "{}",
            open: "[",
            close: "]",
        },
        Shape {
            name: "empty strings",
            item: r#""""#,
            open: "[",
            close: "]",
        },
        Shape {
            name: "distinct keys",
            item: r##""#":0"##,
            open: "{",
            close: "}",
        },
    ];

    /// A `knowledge_sync` line whose `units` hold `n` items of `shape`.
    fn message_n(shape: &Shape, n: usize) -> Vec<u8> {
        let head = r#"{"id":"m1","msg_type":"knowledge_sync","from_peer":"p","timestamp":1,"payload":{"sync_epoch":1,"units":"#;
        let mut v = Vec::new();
        v.extend_from_slice(head.as_bytes());
        v.extend_from_slice(shape.open.as_bytes());
        for i in 0..n {
            if i > 0 {
                v.push(b',');
            }
            v.extend_from_slice(shape.item.replace('#', &i.to_string()).as_bytes());
        }
        v.extend_from_slice(shape.close.as_bytes());
        v.extend_from_slice(b"}}");
        v
    }

    /// Each shape, as many items as fit in `bytes`.
    fn swelling_shapes(bytes: usize) -> Vec<(&'static str, Vec<u8>)> {
        SHAPES
            .iter()
            .map(|shape| {
                // Items with indices up to 7 digits: an upper bound of each item's length.
                let item = shape.item.replace('#', "1234567").len() + 1;
                (shape.name, message_n(shape, (bytes - 200) / item))
            })
            .collect()
    }

    #[test]
    fn counting_matches_the_values_a_parse_makes() {
        let cases: [(&str, usize); 9] = [
            ("{}", 1),
            ("[]", 1),
            (r#"{"a":1}"#, 3),
            (r#"{"a":[1,2,{"b":null}],"c":"x,y:]}"}"#, 10),
            (r#"[true,false,null,-1.5e3,"\"\\"]"#, 6),
            (r#" { "k" : "v" } trailing raw ]]]"#, 3),
            (r#""top-level string" 1 2 3"#, 1),
            ("12345 678", 1),
            ("", 0),
        ];
        for (text, want) in cases {
            assert_eq!(count_values(text.as_bytes(), 100), Ok(want), "{text}");
        }
        // The scan stops at the end of the first value: a framed session_transfer's raw tail
        // (here bytes that look like JSON) is never counted.
        let mut body = br#"{"a":1}"#.to_vec();
        body.extend_from_slice(&b"[0,".repeat(10_000));
        assert_eq!(count_values(&body, 100), Ok(3));
        // Over the cap: refused as soon as the count passes it.
        assert_eq!(count_values(b"[0,0,0,0]", 4), Err(5));
        assert_eq!(count_values(b"[0,0,0]", 4), Ok(4));
        // Never fewer than a parse makes, for any shape a peer could choose.
        for (name, text) in swelling_shapes(64 * 1024) {
            let v: Value = serde_json::from_slice(&text).unwrap();
            let n = count_values(&text, usize::MAX).unwrap();
            assert!(
                n >= values_in(&v),
                "{name}: counted {n} < {}",
                values_in(&v)
            );
        }
    }

    /// Values in a parsed tree, keys included, as `count_values` counts them.
    fn values_in(v: &Value) -> usize {
        match v {
            Value::Array(a) => 1 + a.iter().map(values_in).sum::<usize>(),
            Value::Object(o) => 1 + o.iter().map(|(_, v)| 1 + values_in(v)).sum::<usize>(),
            _ => 1,
        }
    }

    #[test]
    fn a_4_mib_body_never_becomes_tens_of_mib_of_values() {
        let mut framed = 0;
        for (name, body) in swelling_shapes(DECOMPRESSED_CAP_BYTES) {
            assert!(body.len() <= DECOMPRESSED_CAP_BYTES, "{name}");
            // The attack is real: parsed without the check, the body swells many times over.
            let (unchecked, v) = peak_bytes(|| serde_json::from_slice::<Value>(&body).unwrap());
            drop(v);
            assert!(
                unchecked > 8 * body.len(),
                "{name}: {unchecked} bytes parsed unchecked"
            );
            let refused = Err(RelayError::TooManyValues {
                cap: MAX_JSON_VALUES,
            });
            // A decompressed body is refused before any tree exists.
            let (peak, decoded) = peak_bytes(|| decode_body(&body));
            assert_eq!(decoded, refused, "{name}");
            assert!(peak < 64 * 1024, "{name}: {peak} bytes held refusing it");
            // Most shapes compress into one frame, as a peer would send them: what is held at
            // the peak is the decompressed body, never a tree.
            let Ok(frame) = encode_frame(&body, true) else {
                continue;
            };
            framed += 1;
            let (peak, decoded) = peak_bytes(|| {
                let (f, _) = decode_frame(&frame).unwrap().unwrap();
                decode_body(&f.body)
            });
            assert_eq!(decoded, refused, "{name}");
            assert!(
                peak < body.len() + MIB,
                "{name}: {peak} bytes held decoding a {} byte body",
                body.len()
            );
        }
        assert!(framed >= 4, "only {framed} shapes fit a frame");
    }

    #[test]
    fn a_message_at_the_cap_costs_a_few_mib_at_most() {
        for shape in &SHAPES {
            // The most items under the cap (the count is monotonic in the items).
            let (mut lo, mut hi) = (0usize, MAX_JSON_VALUES);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if check(&message_n(shape, mid)).is_ok() {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            let msg = message_n(shape, lo);
            assert!(check(&message_n(shape, lo + 1)).is_err(), "{}", shape.name);
            assert!(msg.len() <= LINE_CAP_BYTES, "{}: fits a line", shape.name);
            let (peak, decoded) = peak_bytes(|| RelayMessage::decode_line(&msg));
            decoded.unwrap_or_else(|e| panic!("{}: {e}", shape.name));
            assert!(
                peak < 8 * MIB,
                "{}: {peak} bytes for a {} byte message of {lo} items",
                shape.name,
                msg.len(),
            );
        }
    }

    #[test]
    fn lines_over_the_cap_are_refused_before_parsing() {
        let (_, line) = swelling_shapes(LINE_CAP_BYTES).swap_remove(1);
        let (peak, decoded) = peak_bytes(|| RelayMessage::decode_line(&line));
        assert_eq!(
            decoded.unwrap_err(),
            RelayError::TooManyValues {
                cap: MAX_JSON_VALUES
            }
        );
        assert!(peak < 64 * 1024, "{peak} bytes held refusing a line");
    }
}
