//! The relay handshake (docs/relay-protocol.md §2): the dialer's answer to a challenge, the
//! acceptor's check of a handshake and its ack or denial, the dialer's check of the ack, and
//! the negotiated state a link is established with (proto, features, frame-mac keys). The
//! proofs' bytes are `transcript`'s; this file decides which apply. Refuses: IO.

use super::{
    feature_names, Dialect, PeerAuth, Role, Session, SessionConfig, SessionEvent, SessionState,
    PROTO,
};
use crate::kernel::names::valid_peer_id;
use crate::relay::auth::{self, is_nonce_hex};
use crate::relay::framemac::{self, FrameMac};
use crate::relay::heartbeat::{BeatReceiver, BeatSender};
use crate::relay::message::{
    intersect, Feature, Handshake, HandshakeAck, HandshakeStatus, MsgType, Payload, RelayError,
    RelayMessage,
};
use crate::relay::transcript::{AckFields, Transcript};
use std::time::Instant;

impl Session {
    /// Dialer: answer the challenge. A v1 challenge (its marker: `proto` and the acceptor's
    /// `peer` id) gets a v1 handshake whose proof is over the transcript; an unmarked one a
    /// v0 handshake, and only if this peer's `allow_claudectl` is on: otherwise nothing is signed.
    /// A nonce this hub issued itself is never signed (docs/relay-protocol.md §2.3).
    pub(super) fn on_challenge(&mut self, decoded: Result<RelayMessage, RelayError>, now: Instant) {
        let msg = match decoded {
            Ok(m) if m.msg_type == MsgType::Challenge => m,
            Ok(m) => return self.close(format!("expected challenge, got {}", m.msg_type)),
            Err(e) => return self.close(format!("malformed challenge: {e}")),
        };
        let ch = match msg.payload_typed() {
            Ok(Payload::Challenge(c)) if is_nonce_hex(&c.nonce) => c,
            _ => {
                return self.close("malformed challenge: nonce must be 64 lowercase hex characters")
            }
        };
        let peer = self.peer_name().to_owned();
        if self.cfg.nonces.issued(&ch.nonce, now) {
            return self.close(format!(
                "refused the challenge answering our dial to {peer}: its nonce is one this hub issued itself, so someone is reflecting our own challenges back at us (nothing signed)"
            ));
        }
        let v1 = match (ch.proto, &ch.peer) {
            (Some(p), Some(id)) if p >= 1 => {
                if !valid_peer_id(id) {
                    return self.close("malformed challenge: peer is not a valid peer id");
                }
                if *id != peer {
                    return self.close(format!(
                        "the relay answering our dial to {peer} says it is {id:?} (a wrong address?); nothing signed"
                    ));
                }
                true
            }
            (Some(p), None) if p >= 1 => {
                return self.close("malformed challenge: a v1 challenge must name its peer")
            }
            _ => false,
        };
        let Some(auth) = self.auth.clone() else {
            return self.close("internal: a dialer without a key");
        };
        if !v1 && !auth.allow_claudectl {
            return self.close(format!(
                "{peer}'s challenge has no v1 marker (a claudectl relay, an older agent-hub, or a downgrade in flight) and allow_claudectl is off for it: nothing signed"
            ));
        }
        let hs = if v1 {
            let offered: Vec<Feature> = Feature::ALL
                .into_iter()
                .filter(|&f| offers(&self.cfg, &auth, f))
                .collect();
            let mut hs = Handshake {
                proof: String::new(),
                version: self.cfg.software_version.clone(),
                listen_port: self.cfg.listen_port,
                transient: self.cfg.transient.then_some(true),
                proto: Some(PROTO),
                features: Some(feature_names(&offered)),
                nonce: offered
                    .contains(&Feature::MutualAuth)
                    .then(|| self.nonce_hex.clone()),
            };
            let t = Transcript::new(&self.cfg.local_peer, &peer, &ch.nonce, &hs);
            hs.proof = t.dialer_proof(&auth.key);
            self.transcript = Some(t);
            hs
        } else {
            // claudectl's dialect, what its own dialers send since 0.90: v0's proof over the
            // nonce text with `proto` and `features` beside it. A 0.64 acceptor ignores the
            // two keys and acks without `proto` (a v0 link); 0.90+ agrees features from them.
            let offered: Vec<Feature> = Feature::ALL
                .into_iter()
                .filter(|&f| offers_claudectl(&self.cfg, &auth, f))
                .collect();
            let hs = Handshake {
                proof: auth::proof(&auth.key, &ch.nonce),
                version: self.cfg.software_version.clone(),
                listen_port: self.cfg.listen_port,
                transient: self.cfg.transient.then_some(true),
                proto: Some(PROTO),
                features: Some(feature_names(&offered)),
                nonce: None,
            };
            self.dialect_offer = offered;
            hs
        };
        self.v1_challenge = v1;
        let from = self.cfg.local_peer.clone();
        let msg = self.make(
            MsgType::Handshake,
            &from,
            Payload::Handshake(hs).to_value(),
            now,
        );
        self.queue_line(&msg);
        self.state = SessionState::AwaitingAck;
    }

    /// Acceptor: check the claimed peer's proof (the transcript proof for `proto` ≥ 1, v0's
    /// otherwise); ack (ok or denied) or close without an ack.
    pub(super) fn on_handshake(&mut self, decoded: Result<RelayMessage, RelayError>, now: Instant) {
        // A malformed handshake gets no ack at all, only a close (docs/relay-protocol.md §2.4).
        let msg = match decoded {
            Ok(m) if m.msg_type == MsgType::Handshake => m,
            Ok(m) => {
                return self.close(format!(
                    "malformed handshake: expected handshake, got {}",
                    m.msg_type
                ))
            }
            Err(e) => return self.close(format!("malformed handshake: {e}")),
        };
        let hs = match msg.payload_typed() {
            Ok(Payload::Handshake(h)) => h,
            Ok(_) => return self.close("malformed handshake"),
            Err(e) => return self.close(format!("malformed handshake: {e}")),
        };
        if !valid_peer_id(&msg.from_peer) {
            return self.close("malformed handshake: from_peer is not a valid peer id");
        }
        let peer = msg.from_peer;
        let v1 = hs.proto.unwrap_or(0) >= 1;
        let theirs: Vec<Feature> = if v1 {
            hs.features
                .iter()
                .flatten()
                .filter_map(|n| Feature::parse(n))
                .collect()
        } else {
            Vec::new()
        };
        // The transcript is bound to our own id and nonce, so a proof made for any other
        // connection (or direction) does not verify here.
        let transcript =
            v1.then(|| Transcript::new(&peer, &self.cfg.local_peer, &self.nonce_hex, &hs));
        // Which proof the handshake carries: this project's transcript proof (only with
        // `proto` ≥ 1), or v0's over the nonce (v0, and claudectl's v1 since 0.90). Both are
        // checked every time, for a known id or not, so timing tells nothing.
        let check = |key: &[u8; 32]| -> Option<Dialect> {
            let transcript_ok = transcript
                .as_ref()
                .is_some_and(|t| t.verify_dialer_proof(key, &hs.proof));
            let nonce_ok = auth::verify(key, &self.nonce_hex, &hs.proof);
            if transcript_ok {
                Some(Dialect::AgentHub)
            } else {
                nonce_ok.then_some(Dialect::Claudectl)
            }
        };
        let auth = self.keys.take().and_then(|k| k.lookup(&peer));
        let proven = match &auth {
            Some(a) => check(&a.key),
            None => {
                let _ = check(&[0u8; 32]);
                None
            }
        };
        let (auth, dialect) = match (auth, proven) {
            (None, _) => {
                return self.deny(format!("handshake denied: unknown peer id {peer:?}"), now)
            }
            (Some(_), None) => {
                let hint = if v1 {
                    " (different key? an agent-hub built before v1 transcript proofs is refused too)"
                } else {
                    " (different key?)"
                };
                return self.deny(
                    format!("handshake denied: wrong proof from {peer}{hint}"),
                    now,
                );
            }
            // The nonce proof is claudectl's dialect: a signing oracle's answer for anyone
            // who relays our challenge to the peer, so only a peer allowed it may use it.
            (Some(a), Some(Dialect::Claudectl)) if !a.allow_claudectl => {
                let what = if v1 {
                    "claudectl's relay v1 (a proof over the nonce alone)"
                } else {
                    "relay v0 (no proto)"
                };
                return self.deny(
                    format!(
                        "handshake denied: {peer} speaks {what} and allow_claudectl is off for it"
                    ),
                    now,
                );
            }
            (Some(a), Some(d)) => (a, d),
        };
        let agreed = if dialect == Dialect::AgentHub {
            // What we offer (`offers` below: our configured set, and `headroom`), in
            // `Feature::ALL`'s order.
            let agreed = intersect(&Feature::ALL, &theirs);
            if agreed.contains(&Feature::MutualAuth) {
                let n = hs.nonce.as_deref().unwrap_or_default();
                if !is_nonce_hex(n) {
                    return self.close(format!(
                        "malformed handshake from {peer}: mutual-auth offered without a 64-hex nonce"
                    ));
                }
                if n == self.nonce_hex || self.cfg.nonces.issued(n, now) {
                    return self.deny(
                        format!("handshake denied: {peer}'s nonce is one this hub issued itself (a reflection attempt)"),
                        now,
                    );
                }
            }
            let agreed: Vec<Feature> = settle(
                agreed
                    .into_iter()
                    .filter(|&f| offers(&self.cfg, &auth, f))
                    .collect(),
            );
            if !auth.allow_claudectl {
                let missing = framemac::missing_without_v0(&agreed);
                if !missing.is_empty() {
                    return self.deny(
                        format!(
                            "handshake denied: the link with {peer} would lack {}, required while allow_claudectl is off for it",
                            feature_names(&missing).join(", ")
                        ),
                        now,
                    );
                }
            }
            agreed
        } else {
            // claudectl's dialect: whatever it offered that we do in that dialect; never
            // `mutual-auth` or `frame-mac` (no transcript to key them), whatever it says.
            theirs
                .iter()
                .copied()
                .filter(|&f| offers_claudectl(&self.cfg, &auth, f))
                .fold(Vec::new(), |mut v, f| {
                    if !v.contains(&f) {
                        v.push(f);
                    }
                    v
                })
        };
        let agreed = intersect(&agreed, &Feature::ALL);
        let ack = match (&transcript, dialect) {
            (Some(t), Dialect::AgentHub) => {
                let mut ack = HandshakeAck {
                    status: HandshakeStatus::Ok,
                    proto: Some(PROTO),
                    features: Some(feature_names(&agreed)),
                    proof: None,
                    version: Some(self.cfg.software_version.clone()),
                };
                if agreed.contains(&Feature::MutualAuth) {
                    let fields = AckFields::of(&ack);
                    ack.proof = Some(t.acceptor_proof(&fields, &auth.key));
                    if agreed.contains(&Feature::FrameMac) {
                        self.mac = Some(FrameMac::for_acceptor(&t.frame_keys(&fields, &auth.key)));
                    }
                }
                ack
            }
            // claudectl's v1 ack (0.92's own acceptor answers the same keys; it reads
            // `proto` and `features`, and ignores `version`).
            _ if v1 => HandshakeAck {
                status: HandshakeStatus::Ok,
                proto: Some(PROTO),
                features: Some(feature_names(&agreed)),
                proof: None,
                version: Some(self.cfg.software_version.clone()),
            },
            // v0 bytes exactly: `{"status":"ok"}` and nothing else.
            _ => HandshakeAck {
                status: HandshakeStatus::Ok,
                proto: None,
                features: None,
                proof: None,
                version: None,
            },
        };
        self.peer = Some(peer);
        self.auth = Some(auth);
        self.dialect = dialect;
        self.proto = if v1 { PROTO } else { 0 };
        self.features = if v1 { agreed } else { Vec::new() };
        self.peer_version = hs.version;
        self.peer_transient = hs.transient == Some(true);
        self.peer_listen_port = hs.listen_port;
        let from = self.cfg.local_peer.clone();
        let msg = self.make(
            MsgType::HandshakeAck,
            &from,
            Payload::HandshakeAck(ack).to_value(),
            now,
        );
        self.queue_line(&msg);
        self.establish(now);
    }

    pub(super) fn deny(&mut self, reason: String, now: Instant) {
        let ack = HandshakeAck {
            status: HandshakeStatus::Denied,
            proto: None,
            features: None,
            proof: None,
            version: None,
        };
        let from = self.cfg.local_peer.clone();
        let msg = self.make(
            MsgType::HandshakeAck,
            &from,
            Payload::HandshakeAck(ack).to_value(),
            now,
        );
        self.queue_line(&msg);
        self.close(reason);
    }

    /// Dialer: the acceptor's verdict. Under mutual-auth its transcript proof (which covers
    /// our offer and its answer) is checked before we send anything else, so an impostor
    /// acceptor learns nothing and can inject nothing.
    pub(super) fn on_ack(&mut self, decoded: Result<RelayMessage, RelayError>, now: Instant) {
        let peer = self.peer_name().to_owned();
        let msg = match decoded {
            Ok(m) if m.msg_type == MsgType::HandshakeAck => m,
            Ok(m) => {
                return self.close(format!(
                    "expected handshake_ack from {peer}, got {}",
                    m.msg_type
                ))
            }
            Err(e) => return self.close(format!("malformed handshake_ack from {peer}: {e}")),
        };
        let ack = match msg.payload_typed() {
            Ok(Payload::HandshakeAck(a)) => a,
            Ok(_) => return self.close(format!("malformed handshake_ack from {peer}")),
            Err(e) => return self.close(format!("malformed handshake_ack from {peer}: {e}")),
        };
        if ack.status == HandshakeStatus::Denied {
            return self.close(format!(
                "{peer} denied our handshake (a different key, or it does not know us as {:?})",
                self.cfg.local_peer
            ));
        }
        let Some(auth) = self.auth.clone() else {
            return self.close("internal: a dialer without a key");
        };
        if !self.v1_challenge {
            // We answered an unmarked challenge in claudectl's dialect (`on_challenge`, only
            // with allow_claudectl on). A 0.64 acceptor acks without `proto`: a v0 link, byte
            // for byte. 0.90+ acks `proto` and the features it agreed from our offer.
            match ack.proto {
                None | Some(0) => {
                    self.proto = 0;
                    self.features = Vec::new();
                }
                Some(PROTO) => {
                    let mut agreed = Vec::new();
                    for name in ack.features.iter().flatten() {
                        match Feature::parse(name) {
                            Some(f) if self.dialect_offer.contains(&f) => agreed.push(f),
                            _ => {
                                return self.close(format!(
                                    "{peer} agreed to feature {name:?}, which we did not offer"
                                ))
                            }
                        }
                    }
                    self.proto = PROTO;
                    self.features = intersect(&agreed, &Feature::ALL);
                }
                Some(p) => {
                    return self.close(format!(
                        "{peer} answered proto {p}; this build speaks proto {PROTO}"
                    ));
                }
            }
            self.dialect = Dialect::Claudectl;
            self.peer_version = ack.version.unwrap_or_default();
            self.peer_transient = self.cfg.transient;
            return self.establish(now);
        }
        match ack.proto {
            None | Some(0) => {
                return self.close(format!(
                    "{peer} challenged as relay v1 but answered as a relay v0 (no proto in its handshake_ack): a downgrade attempt"
                ));
            }
            Some(PROTO) => {
                let mut agreed = Vec::new();
                for name in ack.features.iter().flatten() {
                    match Feature::parse(name) {
                        Some(f) if offers(&self.cfg, &auth, f) => agreed.push(f),
                        _ => {
                            return self.close(format!(
                                "{peer} agreed to feature {name:?}, which we did not offer"
                            ))
                        }
                    }
                }
                let agreed = intersect(&agreed, &Feature::ALL);
                if agreed.contains(&Feature::FrameMac) && !framemac::prerequisites_met(&agreed) {
                    return self.close(format!(
                        "{peer} agreed to frame-mac without frame-bin and mutual-auth"
                    ));
                }
                let Some(t) = self.transcript.take() else {
                    return self.close("internal: a v1 handshake without its transcript");
                };
                let fields = AckFields::of(&ack);
                if agreed.contains(&Feature::MutualAuth) {
                    let proven = ack
                        .proof
                        .as_deref()
                        .is_some_and(|p| t.verify_acceptor_proof(&fields, &auth.key, p));
                    if !proven {
                        return self.close(format!(
                            "{peer} failed mutual authentication: its handshake_ack does not prove this handshake with the shared key (an impostor, a tampered ack, or a different key)"
                        ));
                    }
                }
                if !auth.allow_claudectl {
                    let missing = framemac::missing_without_v0(&agreed);
                    if !missing.is_empty() {
                        return self.close(format!(
                            "{peer} did not agree to {}, required while allow_claudectl is off for it",
                            feature_names(&missing).join(", ")
                        ));
                    }
                }
                // Checked after the proof and the required set, so a tampered ack is named
                // as one.
                if agreed.contains(&Feature::TaskApprovals) && !hardened(&agreed) {
                    return self.close(format!(
                        "{peer} agreed to task-approvals without mutual-auth and frame-mac"
                    ));
                }
                if agreed.contains(&Feature::FrameMac) {
                    self.mac = Some(FrameMac::for_dialer(&t.frame_keys(&fields, &auth.key)));
                }
                self.proto = PROTO;
                self.features = agreed;
                self.dialect = Dialect::AgentHub;
            }
            Some(p) => {
                return self.close(format!(
                    "{peer} answered proto {p}; this build speaks proto {PROTO}"
                ));
            }
        }
        self.peer_version = ack.version.unwrap_or_default();
        self.peer_transient = self.cfg.transient;
        self.establish(now);
    }

    pub(super) fn establish(&mut self, now: Instant) {
        self.state = SessionState::Established;
        self.handshake_deadline = None;
        self.transcript = None;
        self.framed = self.features.contains(&Feature::FrameBin);
        // claudectl has no `lz4` feature: LZ4 comes with its `frame-bin` (§4).
        self.lz4 = self.framed
            && (self.features.contains(&Feature::Lz4) || self.dialect == Dialect::Claudectl);
        let delta = self.features.contains(&Feature::HbDelta);
        self.beat_tx = BeatSender::new(delta);
        self.beat_rx = BeatReceiver::new(delta, &self.peer_version);
        self.liveness_from = Some(now);
        // The first beat is due at once, but goes out from `handle_timeout`, so the layer above
        // can `set_directory` on `Established` and have even the first beat carry it. A
        // one-shot the peer opened (`transient`) gets none: its sender writes, waits and
        // closes, reading nothing (claudectl 0.92's one-shots; relay-compat-0.92.md §1).
        self.next_beat_at = (!(self.peer_transient && self.role == Role::Acceptor)).then_some(now);
        self.events.push_back(SessionEvent::Established {
            peer: self.peer_name().to_owned(),
            proto: self.proto,
            features: self.features.clone(),
            transient: self.peer_transient,
            peer_version: self.peer_version.clone(),
            dialect: self.dialect,
        });
    }
}

/// Whether we offer feature `f` on a link with the peer `auth` belongs to: `bus-forward` only
/// to peers configured to forward, `frame-mac` only with its prerequisites, `task-approvals`
/// only with `frame-mac`'s and `frame-mac` itself, `headroom` always (issue 38 design §4: our
/// hubs place work by each other's room as claudectl does; `relay.features` does not list it,
/// as it never did, and an older agent-hub simply does not agree it).
pub(super) fn offers(cfg: &SessionConfig, auth: &PeerAuth, f: Feature) -> bool {
    if f == Feature::Headroom {
        return true;
    }
    cfg.features.contains(&f)
        && (f != Feature::BusForward || auth.forward)
        && (f != Feature::FrameMac || framemac::prerequisites_met(&cfg.features))
        && (f != Feature::TaskApprovals
            || (framemac::prerequisites_met(&cfg.features)
                && cfg.features.contains(&Feature::FrameMac)))
}

/// Whether an agreed set makes the hardened link `task-approvals` needs: `mutual-auth` and
/// `frame-mac` (which brings `frame-bin`), so every frame that carries an answer is
/// authenticated (issue 37 design §7).
pub(super) fn hardened(agreed: &[Feature]) -> bool {
    agreed.contains(&Feature::MutualAuth)
        && agreed.contains(&Feature::FrameMac)
        && framemac::prerequisites_met(agreed)
}

/// An acceptor's agreed set made coherent: `frame-mac` dropped without its prerequisites
/// (`framemac::settle`), then `task-approvals` dropped unless the link is hardened.
pub(super) fn settle(agreed: Vec<Feature>) -> Vec<Feature> {
    let mut agreed = framemac::settle(agreed);
    if !hardened(&agreed) {
        agreed.retain(|&f| f != Feature::TaskApprovals);
    }
    agreed
}

/// Whether we offer (or, accepting, agree) feature `f` in claudectl's dialect: `headroom`
/// always (claudectl's placement reads it), the rest as to our own hubs, less `mutual-auth`
/// and `frame-mac`, which need the transcript this dialect has not, and `task-approvals`,
/// which needs them (docs/relay-protocol.md §2.1, §3).
pub(super) fn offers_claudectl(cfg: &SessionConfig, auth: &PeerAuth, f: Feature) -> bool {
    match f {
        Feature::Headroom => true,
        // No transcript to key `mutual-auth` or `frame-mac`, so nothing that needs them: an
        // answer crossing a claudectl link could be injected (issue 37 design §7).
        Feature::MutualAuth | Feature::FrameMac | Feature::TaskApprovals => false,
        _ => offers(cfg, auth, f),
    }
}
