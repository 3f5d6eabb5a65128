//! An established relay link's receiving side and its beats (docs/relay-protocol.md §5, §6):
//! duplicate ids dropped, invalid and unknown types logged once and dropped, heartbeats
//! applied to the peer's directory (with the `hb-delta` acks and resyncs), and the beats this
//! side sends. Refuses: IO and what an application message means (the server's).

use super::{
    Dialect, Session, SessionEvent, DEDUPE_IDS, MAX_UNKNOWN_TYPES, UNKNOWN_TYPE_SHOWN_BYTES,
};
use crate::relay::heartbeat::BeatError;
use crate::relay::heartbeat::{v0_payload, Applied, Beat};
use crate::relay::message::{
    feature_for, Ack, AgentCard, Feature, MsgType, Payload, RelayError, RelayMessage,
};
use crate::relay::worker;
use std::time::{Duration, Instant};

impl Session {
    /// False if the id is among the last `DEDUPE_IDS` received (then the message is dropped).
    pub(super) fn remember_id(&mut self, id: &str) -> bool {
        if self.seen_ids.contains(id) {
            return false;
        }
        if self.seen_order.len() == DEDUPE_IDS {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen_ids.remove(&old);
            }
        }
        self.seen_ids.insert(id.to_owned());
        self.seen_order.push_back(id.to_owned());
        true
    }

    pub(super) fn on_message(&mut self, mut msg: RelayMessage, now: Instant) {
        self.stats.messages_in += 1;
        if !self.remember_id(&msg.id) {
            self.stats.duplicates_dropped += 1;
            return;
        }
        match &msg.msg_type {
            MsgType::Heartbeat => self.on_heartbeat(msg, now),
            MsgType::Ack => match msg.payload_typed() {
                Ok(Payload::Ack(a)) => {
                    if !self.beat_tx.handle_ack(&a.ack_id, a.resync == Some(true)) {
                        self.events.push_back(SessionEvent::Message(msg));
                    }
                }
                Ok(_) => {}
                Err(e) => self.drop_invalid(&msg.msg_type, &e),
            },
            MsgType::Unknown(name) => self.on_unknown_type(name),
            t if feature_for(t).is_some_and(|f| !self.features.contains(&f)) => {
                let f = feature_for(t).expect("checked in the guard");
                let line = format!(
                    "dropped a {t} from {}: this link did not agree feature {f} (logged once per type)",
                    self.peer_name()
                );
                self.log_once(format!("unagreed:{t}"), line);
            }
            t if t.is_handshake() => {
                let line = format!(
                    "dropped a {t} from {} after the handshake (logged once per type)",
                    self.peer_name()
                );
                self.log_once(format!("late:{t}"), line);
            }
            // A session_transfer from a line holds its chunk as base64: the check decodes it
            // once, and the application gets the bytes (from a frame they are raw already).
            _ => match msg.make_chunk_raw().and_then(|()| msg.payload_typed()) {
                Ok(_) => self.events.push_back(SessionEvent::Message(msg)),
                Err(e) => self.drop_invalid(&msg.msg_type, &e),
            },
        }
    }

    pub(super) fn drop_invalid(&mut self, t: &MsgType, e: &RelayError) {
        self.stats.invalid_dropped += 1;
        // serde's texts may quote a value (which could be part of a prompt): only a missing
        // key's name is safe to log.
        let detail = match e {
            RelayError::BadPayload { detail, .. } if detail.starts_with("missing field") => {
                detail.as_str()
            }
            _ => "a key has the wrong type",
        };
        let line = format!(
            "dropped a {t} from {}: payload does not match the catalogue ({detail}; logged once per type)",
            self.peer_name()
        );
        self.log_once(format!("invalid:{t}"), line);
    }

    /// docs/relay-protocol.md §6: an unknown type is logged once per type per link, dropped, never
    /// fatal, never acked. The names remembered for that are capped in number and length, so a peer
    /// inventing a new type per message cannot grow the set or the log.
    pub(super) fn on_unknown_type(&mut self, name: &str) {
        self.stats.unknown_dropped += 1;
        let mut cut = name.len().min(UNKNOWN_TYPE_SHOWN_BYTES);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        let shown = &name[..cut];
        if self.unknown_seen.contains(shown) {
            return;
        }
        if self.unknown_seen.len() >= MAX_UNKNOWN_TYPES {
            let line = format!(
                "{} sent more than {MAX_UNKNOWN_TYPES} distinct unknown message types; later new ones are dropped without a line (logged once)",
                self.peer_name()
            );
            self.log_once("unknown-types-full".into(), line);
            return;
        }
        self.unknown_seen.insert(shown.to_owned());
        self.events.push_back(SessionEvent::UnknownType {
            msg_type: shown.to_owned(),
        });
    }

    /// Whether a heartbeat at `now` comes sooner than the agreed rate allows: half an interval
    /// after the last one applied (a peer on the same interval never does, and one with a
    /// shorter interval is applied every other half interval).
    /// Under `liveness` the floor is half of the smaller of the interval and
    /// `liveness_update` (the peer sends early beats at most that often; half, as for the
    /// interval, so network jitter never costs an update).
    pub(super) fn beat_too_soon(&self, now: Instant) -> bool {
        let gap = self.min_beat_gap();
        self.last_beat_applied
            .is_some_and(|t| now.saturating_duration_since(t) < gap)
    }

    pub(super) fn min_beat_gap(&self) -> Duration {
        if self.features.contains(&Feature::Liveness) {
            self.cfg.heartbeat_interval.min(self.cfg.liveness_update) / 2
        } else {
            self.cfg.heartbeat_interval / 2
        }
    }

    /// When an early beat is due under `liveness`: a state changed, `liveness_update` after
    /// the last beat sent. None when nothing changed (or before the first beat, which is due
    /// at once anyway).
    pub(super) fn early_beat_at(&self) -> Option<Instant> {
        if !self.states_changed {
            return None;
        }
        self.last_beat_sent
            .map(|t| crate::kernel::deadline::after(t, self.cfg.liveness_update))
    }

    pub(super) fn log_once(&mut self, key: String, line: String) {
        if self.logged_once.insert(key) {
            self.events.push_back(SessionEvent::Log(line));
        }
    }

    pub(super) fn on_heartbeat(&mut self, msg: RelayMessage, now: Instant) {
        // Liveness counts heartbeats only, whatever their payload (docs/relay-protocol.md §5).
        self.liveness_from = Some(now);
        self.stats.last_heartbeat_received = Some(now);
        self.stats.beats_received += 1;
        if self.beat_too_soon(now) {
            // Not applied and not acked: under hb-delta the sender's base stays the last beat
            // we acked, which we still hold, so its next delta applies.
            self.stats.beats_over_rate += 1;
            let line = format!(
                "heartbeats from {} come faster than one per {} ms; the extras are dropped (logged once)",
                self.peer_name(),
                self.min_beat_gap().as_millis()
            );
            self.log_once("heartbeat-rate".into(), line);
            return;
        }
        self.last_beat_applied = Some(now);
        // A claudectl peer's beat (any release: 0.64's `{}`, a later v0's sessions, 0.90+'s
        // full form) says what runs on its machine; its sessions are its directory (§5
        // "claudectl's heartbeat"). This project's beats carry a directory of agents.
        let claudectl =
            self.dialect == Dialect::Claudectl && worker::is_claudectl_beat(&msg.payload);
        let mut machine = None;
        let beat = if claudectl {
            let (w, directory) = worker::read_beat(&msg.payload, self.directory_caps);
            if w.sessions_dropped > 0 {
                let line = format!(
                    "heartbeat from {} lists more sessions than the caps of {} agents and {} bytes (max_peer_agents, max_peer_directory_bytes); {} not kept (logged once)",
                    self.peer_name(),
                    self.directory_caps.max_agents,
                    self.directory_caps.max_bytes,
                    w.sessions_dropped
                );
                self.log_once("worker-sessions-cap".into(), line);
            }
            let beat = if w.sessions.is_some() {
                Ok(Beat::Full {
                    seq: None,
                    directory,
                })
            } else {
                Ok(Beat::Bare)
            };
            machine = (!w.is_empty()).then(|| Box::new(w));
            beat
        } else if self.proto == 0 {
            // A v0 peer's beat never carries a directory, whatever keys it has.
            Ok(Beat::Bare)
        } else {
            match msg.payload_typed() {
                Ok(Payload::Heartbeat(mut h)) => {
                    // Only under `agents`: a peer that did not agree it has no say here.
                    if let Some(cards) = h.agent_cards.take() {
                        if self.features.contains(&Feature::Agents) {
                            self.receive_cards(cards);
                        }
                    }
                    let beat = Beat::from_payload(&h);
                    // Only under `liveness`: a peer that did not agree it states nothing.
                    if self.features.contains(&Feature::Liveness) {
                        beat
                    } else {
                        beat.map(Beat::without_states)
                    }
                }
                Ok(_) => Err(BeatError::NotHeartbeat),
                Err(_) => Err(BeatError::WrongKeyType),
            }
        };
        let resync = match beat {
            Ok(b) => match self.beat_rx.apply_within(b, self.directory_caps) {
                Applied::Applied => false,
                Applied::NeedResync => true,
                Applied::OverCap(over) => {
                    let caps = self.directory_caps;
                    let line = format!(
                        "heartbeat from {} describes {} agents in {} bytes, over the caps of {} agents and {} bytes (max_peer_agents, max_peer_directory_bytes); its directory is not applied (logged once)",
                        self.peer_name(),
                        over.agents,
                        over.bytes,
                        caps.max_agents,
                        caps.max_bytes
                    );
                    self.log_once("directory-cap".into(), line);
                    true
                }
            },
            Err(e) => {
                let line = format!(
                    "heartbeat from {} carries no usable directory: {e} (logged once)",
                    self.peer_name()
                );
                self.log_once("heartbeat".into(), line);
                true
            }
        };
        if self.features.contains(&Feature::HbDelta) {
            let ack = Ack {
                ack_id: msg.id,
                resync: resync.then_some(true),
                error: None,
            };
            let from = self.cfg.local_peer.clone();
            let reply = self.make(MsgType::Ack, &from, Payload::Ack(ack).to_value(), now);
            if let Err(e) = self.transmit(&reply) {
                return self.close(format!("cannot acknowledge a heartbeat: {e}"));
            }
        }
        let directory = self.beat_rx.current().clone();
        let room = if !self.features.contains(&Feature::Headroom) {
            // A peer that did not agree it has no say on its room.
            None
        } else if claudectl {
            machine.as_ref().and_then(|w| w.headroom.clone())
        } else {
            worker::read_headroom(&msg.payload)
        };
        self.events.push_back(SessionEvent::Heartbeat {
            directory,
            worker: machine,
            room,
        });
    }

    fn receive_cards(&mut self, cards: Vec<AgentCard>) {
        if let Err(over) = self.cards.receive(cards, self.directory_caps) {
            let line = format!(
                "heartbeat from {} lists {} agent cards in {} bytes, over the caps of {} cards and {} bytes (max_peer_agents, max_peer_directory_bytes); not applied (logged once)",
                self.peer_name(),
                over.agents,
                over.bytes,
                crate::relay::cards::MAX_AGENT_CARDS.min(self.directory_caps.max_agents),
                self.directory_caps.max_bytes
            );
            self.log_once("cards-cap".into(), line);
        }
    }

    pub(super) fn send_beat(&mut self, now: Instant) {
        let ms = self.cfg.wall_clock.unix_ms_at(now);
        let id = self.ids.next_id(ms);
        let local = self.cfg.local_peer.clone();
        let payload = if self.proto == 0 {
            // A v0 peer never gets a directory: only the keys later v0 releases send.
            v0_payload(&local, ms)
        } else {
            // States go only to a peer that agreed `liveness` (docs/relay-protocol.md §5).
            let beat = if self.features.contains(&Feature::Liveness) {
                self.beat_tx.next_beat(&id, &self.directory)
            } else {
                self.beat_tx
                    .next_beat(&id, &self.directory.without_states())
            };
            let mut payload = beat.to_payload(&local, ms);
            if self.features.contains(&Feature::Agents) {
                let full = matches!(beat, Beat::Full { .. });
                if let Some(cards) = self.cards.for_beat(full) {
                    payload["agent_cards"] = serde_json::json!(cards);
                }
            }
            if self.dialect != Dialect::Claudectl && self.features.contains(&Feature::Headroom) {
                // Our hubs' beats carry our room too, every beat (issue 38 design §4): a
                // peer's placement reads the latest one.
                if let Some(h) = &self.headroom {
                    payload["headroom"] = serde_json::json!(h);
                }
            }
            if self.dialect == Dialect::Claudectl {
                // claudectl's full beat (§5 "claudectl's heartbeat"): our manifests as its
                // tools, and our headroom where agreed, so its placement can choose us.
                let caps = worker::capabilities_for(
                    &format!("agent-hub {}", self.cfg.software_version),
                    self.cards.ours(),
                );
                let headroom = self
                    .headroom
                    .as_ref()
                    .filter(|_| self.features.contains(&Feature::Headroom));
                worker::add_to_beat(&mut payload, &caps, headroom);
            }
            payload
        };
        let msg = RelayMessage::new(id, MsgType::Heartbeat, local, ms, payload);
        self.last_beat_sent = Some(now);
        self.states_changed = false;
        match self.transmit(&msg) {
            Ok(()) => self.stats.beats_sent += 1,
            Err(e) => self.close(format!("cannot send a heartbeat: {e}")),
        }
    }
}
