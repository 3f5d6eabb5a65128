//! Attacks on relay authentication and frame integrity, driven in memory (docs/relay-protocol.md
//! §2, §4.1 and the threat model, §12): an attacker who answers our dials and opens
//! connections to our listener, but holds no key, reflects our challenges back at us, splices
//! two hubs' handshakes, strips the v1 marker or features in flight, replays v0 proofs inside
//! v1 handshakes, and modifies, drops, replays, reorders and injects frames on a live link.
//! Each must fail to link or close the link; none may panic or hand the application a
//! message. Where v0 is weaker by design (`allow_claudectl = true`), the test says so and checks that
//! the weakness stays inside what the docs admit.
//!
//! Refuses: sockets and real time (the end-to-end versions are tests/integration/relay_attack.rs).

use crate::relay::auth;
use crate::relay::frame::encode_frame;
use crate::relay::message::{MsgType, RelayMessage};
use crate::relay::nonces::NonceBook;
use crate::relay::session::*;
use crate::relay::Feature;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x5a; 32];
const T0_MS: i64 = 1_700_000_000_000;
const INTERVAL: Duration = Duration::from_secs(30);

fn cfg(name: &str, book: &NonceBook, t0: Instant) -> SessionConfig {
    let mut c = SessionConfig::new(
        name,
        "0.1.0",
        WallClock {
            at: t0,
            unix_ms: T0_MS,
        },
    );
    c.nonces = book.clone();
    c
}

fn auth(allow_claudectl: bool) -> PeerAuth {
    PeerAuth {
        key: KEY,
        allow_claudectl,
        forward: false,
    }
}

fn keys(peer: &str, allow_claudectl: bool) -> HashMap<String, PeerAuth> {
    HashMap::from([(peer.to_owned(), auth(allow_claudectl))])
}

fn drain(s: &mut Session) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(b) = s.poll_transmit() {
        out.extend_from_slice(&b);
    }
    out
}

fn events(s: &mut Session) -> Vec<SessionEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn closed(evs: &[SessionEvent]) -> Option<String> {
    evs.iter().find_map(|e| match e {
        SessionEvent::Closed { reason } => Some(reason.clone()),
        _ => None,
    })
}

fn established(evs: &[SessionEvent]) -> Option<(String, u32, Vec<Feature>)> {
    evs.iter().find_map(|e| match e {
        SessionEvent::Established {
            peer,
            proto,
            features,
            ..
        } => Some((peer.clone(), *proto, features.clone())),
        _ => None,
    })
}

fn no_messages(evs: &[SessionEvent]) -> bool {
    !evs.iter().any(|e| matches!(e, SessionEvent::Message(_)))
}

/// One line as JSON (the attacker rewrites parsed lines; the session reads any key order).
fn parse(bytes: &[u8]) -> Value {
    let end = bytes.iter().position(|&b| b == b'\n').expect("a line");
    serde_json::from_slice(&bytes[..end]).expect("JSON")
}

fn line(v: &Value) -> Vec<u8> {
    let mut b = v.to_string().into_bytes();
    b.push(b'\n');
    b
}

/// A hub's dialling session to `peer` and an accepting one, sharing the hub's nonce book.
fn dialer(
    me: &str,
    peer: &str,
    allow_claudectl: bool,
    book: &NonceBook,
    nonce: u8,
    t0: Instant,
) -> Session {
    Session::dialer(
        cfg(me, book, t0),
        peer,
        auth(allow_claudectl),
        [nonce; 32],
        1,
        t0,
    )
}

fn acceptor(
    me: &str,
    peer: &str,
    allow_claudectl: bool,
    book: &NonceBook,
    nonce: u8,
    t0: Instant,
) -> Session {
    Session::acceptor(
        cfg(me, book, t0),
        keys(peer, allow_claudectl),
        [nonce; 32],
        2,
        t0,
    )
}

// ----- reflection -----

/// The attacker owns the address hubA dials for hubB (hubB is down, or the LAN is hostile),
/// and also connects to hubA's listener claiming to be hubB. It hands hubA's own challenge to
/// hubA's dial, rewriting the marker's peer id to the one hubA expects.
#[test]
fn a_reflected_challenge_is_refused_before_anything_is_signed() {
    let t0 = crate::kernel::deadline::test_origin();
    for allow_claudectl in [false, true] {
        let book = NonceBook::new();
        let mut dial = dialer("hubA", "hubB", allow_claudectl, &book, 0x11, t0);
        let mut listen = acceptor("hubA", "hubB", allow_claudectl, &book, 0x22, t0);
        let mut ch = parse(&drain(&mut listen));
        ch["payload"]["peer"] = json!("hubB");
        dial.handle_input(&line(&ch), t0);
        assert_eq!(
            dial.poll_transmit(),
            None,
            "nothing signed (allow_claudectl {allow_claudectl})"
        );
        let why = closed(&events(&mut dial)).unwrap();
        assert!(why.contains("nonce is one this hub issued itself"), "{why}");
        // The same with the marker stripped (the v0 path, the only one a v0 peer has).
        let mut dial = dialer("hubA", "hubB", allow_claudectl, &book, 0x13, t0);
        let mut bare = ch.clone();
        bare["payload"] = json!({"nonce": ch["payload"]["nonce"]});
        dial.handle_input(&line(&bare), t0);
        assert_eq!(dial.poll_transmit(), None);
        assert!(closed(&events(&mut dial))
            .unwrap()
            .contains("issued itself"));
        let _ = events(&mut listen);
    }
}

/// Without the nonce book (as if the entry had been evicted), the v1 transcript alone
/// defeats the reflection: hubA's dial signs (dialer hubA, acceptor hubB), hubA's listener
/// checks (dialer hubB, acceptor hubA). Under v0 the same reflection succeeds, which is why
/// the book exists and why `allow_claudectl = true` is documented as unprotected (§12).
#[test]
fn without_the_book_the_transcript_still_refuses_a_reflection_and_v0_does_not() {
    let t0 = crate::kernel::deadline::test_origin();
    // v1: the attacker shuttles the challenge one way and the handshake (from_peer
    // rewritten) the other, on two connections.
    let mut dial = dialer("hubA", "hubB", false, &NonceBook::new(), 0x11, t0);
    let mut listen = acceptor("hubA", "hubB", false, &NonceBook::new(), 0x22, t0);
    let mut ch = parse(&drain(&mut listen));
    ch["payload"]["peer"] = json!("hubB");
    dial.handle_input(&line(&ch), t0);
    let mut hs = parse(&drain(&mut dial));
    assert_eq!(hs["payload"]["proto"], 1);
    hs["from_peer"] = json!("hubB");
    listen.handle_input(&line(&hs), t0);
    let ack = parse(&drain(&mut listen));
    assert_eq!(ack["payload"], json!({"status": "denied"}));
    let evs = events(&mut listen);
    assert!(
        closed(&evs).unwrap().contains("wrong proof from hubB"),
        "{evs:?}"
    );
    assert!(established(&evs).is_none());
    // Forwarding the denial back closes the dial too: no link either way.
    dial.handle_input(&line(&ack), t0);
    assert!(established(&events(&mut dial)).is_none());

    // claudectl's dialect, allow_claudectl on, no book: the reflection links. This is the
    // attack the book stops.
    let mut dial = dialer("hubA", "hubB", true, &NonceBook::new(), 0x11, t0);
    let mut listen = acceptor("hubA", "hubB", true, &NonceBook::new(), 0x22, t0);
    let ch = parse(&drain(&mut listen));
    let bare = json!({"id": "x1", "msg_type": "challenge", "from_peer": "", "timestamp": T0_MS,
                      "payload": {"nonce": ch["payload"]["nonce"]}});
    dial.handle_input(&line(&bare), t0);
    let mut hs = parse(&drain(&mut dial));
    // claudectl's handshake (what 0.90+ sends): the nonce proof, `proto` 1, no nonce of ours.
    assert_eq!(hs["payload"]["proto"], 1, "{hs}");
    assert!(hs["payload"].get("nonce").is_none(), "{hs}");
    assert_eq!(
        hs["payload"]["proof"],
        json!(auth::proof(&KEY, ch["payload"]["nonce"].as_str().unwrap()))
    );
    hs["from_peer"] = json!("hubB");
    listen.handle_input(&line(&hs), t0);
    assert_eq!(
        established(&events(&mut listen)).map(|e| (e.0, e.1)),
        Some(("hubB".to_owned(), 1)),
        "a proof over the nonce alone cannot tell a reflection from its peer: only the nonce book can"
    );
}

/// Both directions at once, with every trick: the attacker holds hubA's dial (to "hubB")
/// and a connection to hubA's listener (as "hubB"), passes each side's challenge to the
/// other — the listener's nonce to the dial, the dial's own nonce back inside the
/// listener's handshake — and rewrites ids so each side sees what it expects.
#[test]
fn shuttling_each_sides_challenge_to_the_other_links_nothing() {
    let t0 = crate::kernel::deadline::test_origin();
    let book = NonceBook::new();
    let mut dial = dialer("hubA", "hubB", false, &book, 0x11, t0);
    let mut listen = acceptor("hubA", "hubB", false, &book, 0x22, t0);
    let _challenge = drain(&mut listen);
    // The dial refuses its own hub's nonce outright, so the attacker makes up a challenge to
    // get the dial's handshake (and with it the dial's nonce).
    let fake = json!({"id": "x1", "msg_type": "challenge", "from_peer": "", "timestamp": T0_MS,
                      "payload": {"nonce": "ee".repeat(32), "peer": "hubB", "proto": 1}});
    dial.handle_input(&line(&fake), t0);
    let dial_hs = parse(&drain(&mut dial));
    let dial_nonce = dial_hs["payload"]["nonce"].as_str().unwrap().to_owned();
    // To the listener: the dial's handshake as hubB, its proof over the fake nonce.
    let mut to_listen = dial_hs.clone();
    to_listen["from_peer"] = json!("hubB");
    listen.handle_input(&line(&to_listen), t0);
    let evs = events(&mut listen);
    assert!(established(&evs).is_none());
    let why = closed(&evs).unwrap();
    assert!(
        why.contains("wrong proof") || why.contains("issued itself"),
        "{why}"
    );
    // A fresh listener connection, offered the dial's nonce as "hubB"'s own: refused as a
    // reflection even though the attacker cannot make a valid proof anyway.
    let mut listen = acceptor("hubA", "hubB", false, &book, 0x23, t0);
    let _challenge = drain(&mut listen);
    let mut hs = dial_hs.clone();
    hs["from_peer"] = json!("hubB");
    hs["payload"]["nonce"] = json!(dial_nonce);
    listen.handle_input(&line(&hs), t0);
    assert_eq!(
        parse(&drain(&mut listen))["payload"],
        json!({"status": "denied"})
    );
    assert!(established(&events(&mut listen)).is_none());
}

/// Two real hubs and an attacker in the middle of both of their dials: it hands hubA's
/// listener challenge to hubB's dial and carries the answers across. The result is only ever
/// a genuine link between hubA and hubB that the attacker relays: it cannot read keys out of
/// it, and under frame-mac it cannot change or add a single frame.
#[test]
fn a_splice_between_two_hubs_is_only_a_relay_and_cannot_inject() {
    let t0 = crate::kernel::deadline::test_origin();
    let (book_a, book_b) = (NonceBook::new(), NonceBook::new());
    let mut a_listen = acceptor("hubA", "hubB", false, &book_a, 0x22, t0);
    let mut b_dial = dialer("hubB", "hubA", false, &book_b, 0x33, t0);
    b_dial.handle_input(&drain(&mut a_listen), t0);
    a_listen.handle_input(&drain(&mut b_dial), t0);
    b_dial.handle_input(&drain(&mut a_listen), t0);
    let ea = established(&events(&mut a_listen)).expect("a genuine link");
    let eb = established(&events(&mut b_dial)).expect("a genuine link");
    assert_eq!((ea.0.as_str(), eb.0.as_str()), ("hubB", "hubA"));
    assert!(ea.2.contains(&Feature::FrameMac));
    // The attacker injects a message of its own into the relayed stream.
    let forged = encode_frame(
        &RelayMessage::new(
            "f1",
            MsgType::KnowledgeRequest,
            "hubB",
            T0_MS,
            json!({"since_epoch": 0}),
        )
        .encode_json(),
        false,
    )
    .unwrap();
    a_listen.handle_input(&forged, t0);
    let evs = events(&mut a_listen);
    assert!(no_messages(&evs), "{evs:?}");
    assert!(closed(&evs).unwrap().contains("frame-mac"), "{evs:?}");
}

// ----- stripping and downgrades in flight -----

type Tamper = Box<dyn Fn(&mut Value)>;

struct Outcome {
    d: Vec<SessionEvent>,
    a: Vec<SessionEvent>,
    /// What the dialer sent in all (its handshake, if it signed one).
    d_lines: usize,
}

/// One handshake between genuine hubA (dialer) and hubB (acceptor) through an attacker that
/// rewrites the challenge, the handshake and the ack.
fn through(
    d_allow_claudectl: bool,
    a_allow_claudectl: bool,
    ch: Tamper,
    hs: Tamper,
    ack: Tamper,
) -> Outcome {
    let t0 = crate::kernel::deadline::test_origin();
    let mut d = dialer(
        "hubA",
        "hubB",
        d_allow_claudectl,
        &NonceBook::new(),
        0x11,
        t0,
    );
    let mut a = acceptor(
        "hubB",
        "hubA",
        a_allow_claudectl,
        &NonceBook::new(),
        0x22,
        t0,
    );
    let mut c = parse(&drain(&mut a));
    ch(&mut c);
    d.handle_input(&line(&c), t0);
    let mut out = Outcome {
        d: Vec::new(),
        a: Vec::new(),
        d_lines: 0,
    };
    let sent = drain(&mut d);
    if !sent.is_empty() {
        out.d_lines += 1;
        let mut h = parse(&sent);
        hs(&mut h);
        a.handle_input(&line(&h), t0);
        let reply = drain(&mut a);
        if !reply.is_empty() {
            let mut k = parse(&reply);
            ack(&mut k);
            d.handle_input(&line(&k), t0);
        }
    }
    // Time passes: nothing more may leave a dialer that refused.
    d.handle_timeout(t0 + INTERVAL);
    a.handle_timeout(t0 + INTERVAL);
    out.d.extend(events(&mut d));
    out.a.extend(events(&mut a));
    if closed(&out.d).is_some() && established(&out.d).is_none() {
        assert_eq!(
            d.poll_transmit(),
            None,
            "a refusing dialer sends nothing more"
        );
    }
    out
}

fn keep() -> Tamper {
    Box::new(|_| {})
}

fn remove_feature(list: &mut Value, name: &str) {
    if let Some(a) = list.as_array_mut() {
        a.retain(|f| f != name);
    }
}

#[test]
fn the_untouched_handshake_links_with_every_protection() {
    let o = through(false, false, keep(), keep(), keep());
    let (_, proto, f) = established(&o.d).expect("linked");
    assert_eq!(proto, 1);
    for want in [Feature::MutualAuth, Feature::FrameBin, Feature::FrameMac] {
        assert!(f.contains(&want), "{f:?}");
    }
    assert_eq!(established(&o.a).unwrap().2, f);
}

#[test]
fn every_stripping_and_downgrade_attempt_fails() {
    let strip_marker = || -> Tamper {
        Box::new(|c: &mut Value| {
            let n = c["payload"]["nonce"].clone();
            c["payload"] = json!({ "nonce": n });
        })
    };
    type Case = (
        &'static str,
        bool,
        bool,
        Tamper,
        Tamper,
        Tamper,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "marker stripped, allow_claudectl off at the dialer: nothing signed",
            false,
            true,
            strip_marker(),
            keep(),
            keep(),
            "no v1 marker",
        ),
        (
            "marker stripped, allow_claudectl off at the acceptor: the v0 handshake is denied",
            true,
            false,
            strip_marker(),
            keep(),
            keep(),
            "denied",
        ),
        (
            "frame-mac stripped from the offer",
            false,
            false,
            keep(),
            Box::new(|h| remove_feature(&mut h["payload"]["features"], "frame-mac")),
            keep(),
            "denied",
        ),
        (
            "mutual-auth and the nonce stripped from the offer",
            true,
            true,
            keep(),
            Box::new(|h| {
                remove_feature(&mut h["payload"]["features"], "mutual-auth");
                h["payload"].as_object_mut().unwrap().remove("nonce");
            }),
            keep(),
            "denied",
        ),
        (
            "proto stripped from the handshake (a v1 proof read as v0)",
            true,
            true,
            keep(),
            Box::new(|h| {
                h["payload"].as_object_mut().unwrap().remove("proto");
            }),
            keep(),
            "denied",
        ),
        (
            "a proof over the nonce alone inside a v1 handshake, allow_claudectl off",
            false,
            false,
            keep(),
            Box::new(|h| h["payload"]["proof"] = json!(auth::proof(&KEY, &"22".repeat(32)))),
            keep(),
            "allow_claudectl is off",
        ),
        (
            "a proof over another nonce inside a v1 handshake",
            true,
            true,
            keep(),
            Box::new(|h| h["payload"]["proof"] = json!(auth::proof(&KEY, &"23".repeat(32)))),
            keep(),
            "denied",
        ),
        (
            "transient flipped in the handshake",
            false,
            false,
            keep(),
            Box::new(|h| h["payload"]["transient"] = json!(true)),
            keep(),
            "denied",
        ),
        (
            "frame-mac stripped from the ack",
            false,
            false,
            keep(),
            keep(),
            Box::new(|k| remove_feature(&mut k["payload"]["features"], "frame-mac")),
            "failed mutual authentication",
        ),
        (
            "frame-mac stripped from the ack, allow_claudectl on",
            true,
            true,
            keep(),
            keep(),
            Box::new(|k| remove_feature(&mut k["payload"]["features"], "frame-mac")),
            "failed mutual authentication",
        ),
        (
            "mutual-auth, frame-mac and the proof stripped from the ack",
            false,
            false,
            keep(),
            keep(),
            Box::new(|k| {
                remove_feature(&mut k["payload"]["features"], "mutual-auth");
                remove_feature(&mut k["payload"]["features"], "frame-mac");
                k["payload"].as_object_mut().unwrap().remove("proof");
            }),
            "required while allow_claudectl is off",
        ),
        (
            "the ack rewritten as v0",
            true,
            true,
            keep(),
            keep(),
            Box::new(|k| k["payload"] = json!({"status": "ok"})),
            "a downgrade attempt",
        ),
        (
            "the acceptor's proof swapped for the dialer's (reflected)",
            false,
            false,
            keep(),
            keep(),
            Box::new(|k| k["payload"]["proof"] = json!("00".repeat(32))),
            "failed mutual authentication",
        ),
    ];
    for (name, d_v0, a_v0, ch, hs, ack, why) in cases {
        let o = through(d_v0, a_v0, ch, hs, ack);
        assert!(
            established(&o.d).is_none(),
            "{name}: the dialer linked: {:?}",
            o.d
        );
        let reasons = format!("{:?} / {:?}", closed(&o.d), closed(&o.a));
        assert!(reasons.contains(why), "{name}: {reasons}");
        assert!(no_messages(&o.d) && no_messages(&o.a), "{name}");
        if why == "no v1 marker" {
            assert_eq!(o.d_lines, 0, "{name}");
        }
    }
}

/// What `allow_claudectl = true` on both ends admits, stated as a test so a change is noticed: a
/// man in the middle who strips the marker gets a link in claudectl's dialect, which has no
/// mutual-auth and no frame-mac (§12). The features are those both offered, less those two.
#[test]
fn with_allow_claudectl_on_at_both_ends_a_stripped_marker_gives_a_claudectl_link() {
    let strip: Tamper = Box::new(|c: &mut Value| {
        let n = c["payload"]["nonce"].clone();
        c["payload"] = json!({ "nonce": n });
    });
    let o = through(true, true, strip, keep(), keep());
    for (side, evs) in [("dialer", &o.d), ("acceptor", &o.a)] {
        let (_, proto, features) = established(evs).expect(side);
        assert_eq!(proto, 1, "{side}");
        assert!(
            features.contains(&Feature::FrameBin),
            "{side}: {features:?}"
        );
        assert!(
            !features.contains(&Feature::MutualAuth) && !features.contains(&Feature::FrameMac),
            "{side}: {features:?}"
        );
        let dialect = evs.iter().find_map(|e| match e {
            SessionEvent::Established { dialect, .. } => Some(*dialect),
            _ => None,
        });
        assert_eq!(dialect, Some(Dialect::Claudectl), "{side}");
    }
    // The same with the proof left as a v1 dialer makes it: a transcript proof after a
    // stripped challenge is never sent (the dialer answers an unmarked challenge in
    // claudectl's dialect), so nothing here could be an agent-hub link.
}

/// A v1 handshake whose proof is the nonce HMAC (claudectl 0.90+ sends exactly this) links
/// in claudectl's dialect when the peer's entry allows it, whatever it offers: `mutual-auth`
/// and `frame-mac` are never agreed in that dialect, so an offer of them without a nonce is
/// no error there.
#[test]
fn a_nonce_proof_with_proto_1_is_claudectls_dialect_and_agrees_no_hardened_feature() {
    let o = through(
        true,
        true,
        Box::new(|c: &mut Value| {
            let n = c["payload"]["nonce"].clone();
            c["payload"] = json!({ "nonce": n });
        }),
        Box::new(|h: &mut Value| {
            h["payload"]["features"] = json!(["mutual-auth", "frame-mac", "frame-bin", "made-up"]);
        }),
        keep(),
    );
    assert_eq!(
        established(&o.a).map(|e| (e.1, e.2)),
        Some((1, vec![Feature::FrameBin]))
    );
}

// ----- self-issued nonces -----

#[test]
fn a_handshake_carrying_a_nonce_this_hub_issued_is_denied() {
    let t0 = crate::kernel::deadline::test_origin();
    let book = NonceBook::new();
    // hubB has a dial of its own open (its nonce 0x44 is in the book) and a listener.
    let _own_dial = dialer("hubB", "hubA", false, &book, 0x44, t0);
    for (what, nonce) in [
        ("the nonce of one of our dials", "44".repeat(32)),
        ("our own challenge's nonce", "22".repeat(32)),
    ] {
        let mut a = acceptor("hubB", "hubA", false, &book, 0x22, t0);
        let ch = parse(&drain(&mut a));
        // The real hubA answers, but its nonce was swapped in flight; the attacker cannot fix
        // the proof, and the acceptor refuses the nonce whatever the proof.
        let mut d = dialer("hubA", "hubB", false, &NonceBook::new(), 0x11, t0);
        d.handle_input(&line(&ch), t0);
        let mut hs = parse(&drain(&mut d));
        hs["payload"]["nonce"] = json!(nonce);
        a.handle_input(&line(&hs), t0);
        assert_eq!(
            parse(&drain(&mut a))["payload"],
            json!({"status": "denied"}),
            "{what}"
        );
        assert!(established(&events(&mut a)).is_none(), "{what}");
    }
    // The unit that decides: a valid proof over a self-issued nonce is still refused.
    let mut a = acceptor("hubB", "hubA", false, &book, 0x25, t0);
    let ch = parse(&drain(&mut a));
    let mut d = Session::dialer(
        cfg("hubA", &NonceBook::new(), t0),
        "hubB",
        auth(false),
        [0x44; 32],
        1,
        t0,
    );
    d.handle_input(&line(&ch), t0);
    a.handle_input(&drain(&mut d), t0);
    let evs = events(&mut a);
    assert!(closed(&evs).unwrap().contains("issued itself"), "{evs:?}");
    // Once the issuing session's handshake deadline is past, the nonce is forgotten.
    assert!(book.issued(&"44".repeat(32), t0));
    assert!(!book.issued(&"44".repeat(32), t0 + DEFAULT_HANDSHAKE_TIMEOUT));
}

// ----- frames in flight -----

/// A linked frame-mac pair; returns the dialer, the acceptor and now.
fn linked() -> (Session, Session, Instant) {
    let t0 = crate::kernel::deadline::test_origin();
    let mut d = dialer("hubA", "hubB", false, &NonceBook::new(), 0x11, t0);
    let mut a = acceptor("hubB", "hubA", false, &NonceBook::new(), 0x22, t0);
    d.handle_input(&drain(&mut a), t0);
    a.handle_input(&drain(&mut d), t0);
    d.handle_input(&drain(&mut a), t0);
    assert!(established(&events(&mut d))
        .unwrap()
        .2
        .contains(&Feature::FrameMac));
    assert!(established(&events(&mut a)).is_some());
    assert!(d.frame_mac_counts().is_some() && a.frame_mac_counts().is_some());
    (d, a, t0)
}

/// One frame per message from `from`, as it would leave the socket.
fn frames(from: &mut Session, n: u64, now: Instant) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let m = from.message(MsgType::KnowledgeRequest, json!({ "since_epoch": i }), now);
            from.send(m).unwrap();
            let f = drain(from);
            assert_eq!(
                u32::from_be_bytes(f[..4].try_into().unwrap()) as usize,
                f.len() - 4,
                "one frame"
            );
            f
        })
        .collect()
}

fn epochs(evs: &[SessionEvent]) -> Vec<u64> {
    evs.iter()
        .filter_map(|e| match e {
            SessionEvent::Message(m) => m.payload["since_epoch"].as_u64(),
            _ => None,
        })
        .collect()
}

#[test]
fn a_modified_dropped_replayed_reordered_or_injected_frame_closes_the_link() {
    type Attack = fn(Vec<Vec<u8>>) -> Vec<u8>;
    let attacks: [(&str, Attack, Vec<u64>); 6] = [
        (
            "one body byte modified",
            |mut f| {
                f[1][8] ^= 0x20;
                f.concat()
            },
            vec![0],
        ),
        (
            "one frame dropped",
            |f| [f[0].clone(), f[2].clone()].concat(),
            vec![0],
        ),
        (
            "one frame replayed",
            |f| [f[0].clone(), f[1].clone(), f[1].clone(), f[2].clone()].concat(),
            vec![0, 1],
        ),
        (
            "two frames reordered",
            |f| [f[0].clone(), f[2].clone(), f[1].clone()].concat(),
            vec![0],
        ),
        (
            "a forged frame injected",
            |f| {
                let forged = RelayMessage::new(
                    "x",
                    MsgType::KnowledgeRequest,
                    "hubA",
                    T0_MS,
                    json!({"since_epoch": 99}),
                );
                let mut bogus = encode_frame(&forged.encode_json(), false).unwrap();
                // Made to look like a frame-mac frame: the right length, a made-up tag.
                let len = u32::from_be_bytes(bogus[..4].try_into().unwrap()) + 16;
                bogus[..4].copy_from_slice(&len.to_be_bytes());
                bogus.extend_from_slice(&[0xab; 16]);
                [f[0].clone(), bogus, f[1].clone()].concat()
            },
            vec![0],
        ),
        (
            "a frame's tag cut off",
            |f| {
                let mut short = f[1].clone();
                short.truncate(short.len() - 16);
                let len = u32::from_be_bytes(short[..4].try_into().unwrap()) - 16;
                short[..4].copy_from_slice(&len.to_be_bytes());
                [f[0].clone(), short, f[2].clone()].concat()
            },
            vec![0],
        ),
    ];
    for dialer_to_acceptor in [true, false] {
        for (name, attack, delivered) in &attacks {
            let (mut d, mut a, now) = linked();
            let (from, to) = if dialer_to_acceptor {
                (&mut d, &mut a)
            } else {
                (&mut a, &mut d)
            };
            let fs = frames(from, 3, now);
            let wire = attack(fs);
            // Any split of the bytes: feed them in two pieces.
            let (x, y) = wire.split_at(wire.len() / 2 + 3);
            to.handle_input(x, now);
            to.handle_input(y, now);
            let evs = events(to);
            let case = format!(
                "{name} ({})",
                if dialer_to_acceptor { "d→a" } else { "a→d" }
            );
            assert_eq!(
                &epochs(&evs),
                delivered,
                "{case}: only the frames before the attack: {evs:?}"
            );
            let why = closed(&evs).unwrap_or_else(|| panic!("{case}: still open: {evs:?}"));
            assert!(why.starts_with("protocol error from hub"), "{case}: {why}");
            assert!(
                why.contains("frame-mac") || why.contains("frame length"),
                "{case}: {why}"
            );
            assert_eq!(to.state(), SessionState::Closed, "{case}");
            // Nothing read after the close.
            to.handle_input(&frames(from, 1, now)[0], now);
            assert!(epochs(&events(to)).is_empty(), "{case}");
        }
    }
}

#[test]
fn an_untouched_stream_passes_whatever_the_split() {
    let (mut d, mut a, now) = linked();
    let wire = frames(&mut d, 5, now).concat();
    for b in &wire {
        a.handle_input(std::slice::from_ref(b), now);
    }
    assert_eq!(epochs(&events(&mut a)), [0, 1, 2, 3, 4]);
    assert_eq!(a.frame_mac_counts(), Some((0, 5)));
    // Heartbeats and their acks ride the same sequence.
    d.handle_timeout(now);
    a.handle_input(&drain(&mut d), now);
    d.handle_input(&drain(&mut a), now);
    assert!(closed(&events(&mut d)).is_none() && closed(&events(&mut a)).is_none());
}
