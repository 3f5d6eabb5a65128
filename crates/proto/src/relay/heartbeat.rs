//! Heartbeats and the hub directory they carry (docs/relay-protocol.md §5).
//!
//! A v0 peer is sent `{worker_id, timestamp, sessions: []}` (the later-v0 full form; 0.64,
//! which sends `{}`, ignores the keys) and never a directory. A v1 peer is sent the directory:
//! the full form adds `version` and `agents` to those keys. Under `hb-delta` each beat has a
//! `seq`; a delta beat is `{seq, base, upsert[], remove[]}` (+ `version` when it changed)
//! relative to the beat `base`, the last one the receiver acknowledged. The receiver acks
//! every beat with `ack {ack_id}` (adding `resync: true` when it could not apply it); a full
//! beat goes every 10th beat (seq 1, 11, 21, …), whenever no beat is acknowledged yet, and
//! after a resync request. A peer's directory is kept only while it fits `DirectoryCaps`
//! (`[relay] max_peer_agents`, `max_peer_directory_bytes`): a beat that would pass a cap is not
//! applied (`Applied::OverCap`), so a peer cannot make this hub hold an unbounded directory,
//! nor sixteen of them in the delta history. Refuses: timers and IO (`session` decides when a
//! beat is due).

// `AgentEntry` lives with the heartbeat payload so this module depends on `message`, never
// the reverse; it is re-exported here, where the directory uses it.
pub use crate::relay::message::AgentEntry;
use crate::relay::message::{AgentState, AgentUpsert, Heartbeat};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};

/// Every this many beats the sender sends a full snapshot even when deltas would do.
pub const FULL_EVERY_BEATS: u64 = 10;
/// Beats remembered on each side: unacknowledged beats (sender) and applied states that a
/// delta may name as its base (receiver). A base older than this forces a resync.
pub const HISTORY_BEATS: usize = 16;

/// Agents a peer's directory may hold when the config says nothing.
pub const DEFAULT_MAX_PEER_AGENTS: usize = 1024;
/// Bytes a peer's directory may hold when the config says nothing (`Directory::size_bytes`):
/// room for `DEFAULT_MAX_PEER_AGENTS` entries with names of up to 128 bytes, so with names
/// of any length a roster allows (64 characters) the agent cap binds first.
pub const DEFAULT_MAX_PEER_DIRECTORY_BYTES: usize = 256 * 1024;
/// What one agent costs this hub's memory beside its name's bytes, as `Directory::size_bytes`
/// counts it: the map entry (the name's `String` and the `AgentEntry` with its counts,
/// liveness `state` and `since_ms`: 24 + 32 bytes), its share of the `BTreeMap` node, and the
/// allocator's header and rounding of the name's heap block. Measured with a counting
/// allocator over maps of 64 to 4,096 entries, names of 8 to 64 bytes: 86-108 bytes requested
/// (sorted insertion, as a peer's map arrives, is the worst), 95-133 as malloc hands them out
/// (docs/relay-protocol.md, "Limits"). Until the liveness fields came it was 8, the counts
/// alone, so a directory of short names could hold over ten times the memory its cap named.
pub const AGENT_ENTRY_BYTES: usize = 128;

/// The most a peer's directory may hold here. A beat that would pass either cap is not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryCaps {
    pub max_agents: usize,
    pub max_bytes: usize,
}

impl Default for DirectoryCaps {
    fn default() -> DirectoryCaps {
        DirectoryCaps {
            max_agents: DEFAULT_MAX_PEER_AGENTS,
            max_bytes: DEFAULT_MAX_PEER_DIRECTORY_BYTES,
        }
    }
}

/// A hub's directory: its software version and its agents by name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Directory {
    pub version: String,
    pub agents: BTreeMap<String, AgentEntry>,
}

impl Directory {
    /// The directory's size as its caps count it: the version's bytes, and per agent its
    /// name's bytes plus `AGENT_ENTRY_BYTES`.
    pub fn size_bytes(&self) -> usize {
        self.agents.keys().fold(self.version.len(), |n, name| {
            n.saturating_add(name.len() + AGENT_ENTRY_BYTES)
        })
    }

    /// Whether the directory fits `caps`; Err names what it holds.
    pub fn fits(&self, caps: DirectoryCaps) -> Result<(), OverCap> {
        let (agents, bytes) = (self.agents.len(), self.size_bytes());
        if agents > caps.max_agents || bytes > caps.max_bytes {
            return Err(OverCap { agents, bytes });
        }
        Ok(())
    }

    /// What turns `base` into `self`: entries added or changed, names removed, and the new
    /// version if it changed.
    pub fn diff_from(&self, base: &Directory) -> (Option<String>, Vec<AgentUpsert>, Vec<String>) {
        let version = (self.version != base.version).then(|| self.version.clone());
        let upsert = self
            .agents
            .iter()
            .filter(|(name, e)| base.agents.get(*name) != Some(e))
            .map(|(name, e)| AgentUpsert {
                name: name.clone(),
                parked: e.parked,
                queued: e.queued,
                state: e.state,
                since_ms: e.since_ms,
            })
            .collect();
        let remove = base
            .agents
            .keys()
            .filter(|n| !self.agents.contains_key(*n))
            .cloned()
            .collect();
        (version, upsert, remove)
    }

    /// The same directory with every liveness state unknown: what a link that did not agree
    /// `liveness` sends and keeps (docs/relay-protocol.md §5).
    pub fn without_states(&self) -> Directory {
        let mut d = self.clone();
        for e in d.agents.values_mut() {
            e.state = AgentState::Unknown;
            e.since_ms = None;
        }
        d
    }

    /// Whether `other` states the same liveness for the same names (counts aside): a change
    /// here is what makes an early beat due under `liveness`.
    pub fn same_states(&self, other: &Directory) -> bool {
        self.agents.len() == other.agents.len()
            && self
                .agents
                .iter()
                .zip(other.agents.iter())
                .all(|((n1, e1), (n2, e2))| {
                    n1 == n2 && e1.state == e2.state && e1.since_ms == e2.since_ms
                })
    }

    /// Applies a delta: removes first, then upserts, then the version.
    pub fn apply(&mut self, version: Option<&str>, upsert: &[AgentUpsert], remove: &[String]) {
        for name in remove {
            self.agents.remove(name);
        }
        for u in upsert {
            self.agents.insert(u.name.clone(), u.entry());
        }
        if let Some(v) = version {
            self.version = v.to_owned();
        }
    }
}

/// A heartbeat's meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// No directory: a v0 beat (`{}` or `{worker_id, timestamp, sessions}`).
    Bare,
    /// The whole directory; `seq` under hb-delta.
    Full {
        seq: Option<u64>,
        directory: Directory,
    },
    /// Changes against the beat `base`.
    Delta {
        seq: u64,
        base: u64,
        version: Option<String>,
        upsert: Vec<AgentUpsert>,
        remove: Vec<String>,
    },
}

/// Why a heartbeat carries no usable directory. The session logs it once per link and asks
/// for a full beat; the `Display` text is that log line's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeatError {
    /// A delta (it names a `base`) without the `seq` it brings the directory to.
    DeltaWithoutSeq,
    /// A delta whose `seq` is not after its `base`.
    DeltaNotAfterBase { seq: u64, base: u64 },
    /// The message is not a heartbeat payload at all.
    NotHeartbeat,
    /// A directory key holds a value of the wrong type.
    WrongKeyType,
}

impl std::fmt::Display for BeatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BeatError::DeltaWithoutSeq => f.write_str("a delta heartbeat (with base) needs seq"),
            BeatError::DeltaNotAfterBase { seq, base } => {
                write!(f, "delta heartbeat seq {seq} is not after its base {base}")
            }
            BeatError::NotHeartbeat => f.write_str("not a heartbeat payload"),
            BeatError::WrongKeyType => f.write_str("a directory key has the wrong type"),
        }
    }
}

impl std::error::Error for BeatError {}

impl Beat {
    /// Reads a parsed heartbeat payload. `base` makes it a delta (which then needs `seq`);
    /// `agents` makes it full (`version` defaults to empty); neither is a bare v0 beat.
    pub fn from_payload(p: &Heartbeat) -> Result<Beat, BeatError> {
        if let Some(base) = p.base {
            let seq = p.seq.ok_or(BeatError::DeltaWithoutSeq)?;
            if base >= seq {
                return Err(BeatError::DeltaNotAfterBase { seq, base });
            }
            return Ok(Beat::Delta {
                seq,
                base,
                version: p.version.clone(),
                upsert: p.upsert.clone().unwrap_or_default(),
                remove: p.remove.clone().unwrap_or_default(),
            });
        }
        match &p.agents {
            Some(agents) => Ok(Beat::Full {
                seq: p.seq,
                directory: Directory {
                    version: p.version.clone().unwrap_or_default(),
                    agents: agents.clone(),
                },
            }),
            None => Ok(Beat::Bare),
        }
    }

    /// The payload for a v1 peer. `worker_id` and `timestamp_ms` go into full beats (they keep
    /// the v0 keys, so a full beat is a superset of the v0 form); deltas stay minimal.
    pub fn to_payload(&self, worker_id: &str, timestamp_ms: i64) -> Value {
        match self {
            Beat::Bare => v0_payload(worker_id, timestamp_ms),
            Beat::Full { seq, directory } => {
                let mut v = json!({
                    "worker_id": worker_id,
                    "timestamp": timestamp_ms,
                    "sessions": [],
                    "version": directory.version,
                    "agents": directory.agents,
                });
                if let Some(s) = seq {
                    v["seq"] = json!(s);
                }
                v
            }
            Beat::Delta {
                seq,
                base,
                version,
                upsert,
                remove,
            } => {
                let mut v = json!({ "seq": seq, "base": base, "upsert": upsert, "remove": remove });
                if let Some(ver) = version {
                    v["version"] = json!(ver);
                }
                v
            }
        }
    }

    /// The same beat with every liveness state unknown (from a link without `liveness`).
    pub fn without_states(self) -> Beat {
        match self {
            Beat::Bare => Beat::Bare,
            Beat::Full { seq, directory } => Beat::Full {
                seq,
                directory: directory.without_states(),
            },
            Beat::Delta {
                seq,
                base,
                version,
                mut upsert,
                remove,
            } => {
                for u in &mut upsert {
                    u.state = AgentState::Unknown;
                    u.since_ms = None;
                }
                Beat::Delta {
                    seq,
                    base,
                    version,
                    upsert,
                    remove,
                }
            }
        }
    }

    pub fn seq(&self) -> Option<u64> {
        match self {
            Beat::Bare => None,
            Beat::Full { seq, .. } => *seq,
            Beat::Delta { seq, .. } => Some(*seq),
        }
    }
}

/// The heartbeat payload sent to a v0 peer: `{worker_id, timestamp, sessions: []}`.
pub fn v0_payload(worker_id: &str, timestamp_ms: i64) -> Value {
    json!({ "worker_id": worker_id, "timestamp": timestamp_ms, "sessions": [] })
}

#[derive(Debug, Clone)]
struct InFlight {
    id: String,
    seq: u64,
    directory: Directory,
}

/// The sending side: numbers beats, picks full or delta, and learns from acks.
#[derive(Debug, Clone)]
pub struct BeatSender {
    delta: bool,
    next_seq: u64,
    /// The last beat the peer acknowledged (and could apply), with what it carried.
    acked: Option<(u64, Directory)>,
    in_flight: VecDeque<InFlight>,
}

impl BeatSender {
    /// `delta`: hb-delta was agreed.
    pub fn new(delta: bool) -> BeatSender {
        BeatSender {
            delta,
            next_seq: 1,
            acked: None,
            in_flight: VecDeque::new(),
        }
    }

    /// The next beat carrying `current`, sent as message `msg_id` (remembered for its ack).
    pub fn next_beat(&mut self, msg_id: &str, current: &Directory) -> Beat {
        if !self.delta {
            return Beat::Full {
                seq: None,
                directory: current.clone(),
            };
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let beat = match &self.acked {
            Some((base, base_dir)) if (seq - 1) % FULL_EVERY_BEATS != 0 => {
                let (version, upsert, remove) = current.diff_from(base_dir);
                Beat::Delta {
                    seq,
                    base: *base,
                    version,
                    upsert,
                    remove,
                }
            }
            _ => Beat::Full {
                seq: Some(seq),
                directory: current.clone(),
            },
        };
        if self.in_flight.len() == HISTORY_BEATS {
            self.in_flight.pop_front();
        }
        self.in_flight.push_back(InFlight {
            id: msg_id.to_owned(),
            seq,
            directory: current.clone(),
        });
        beat
    }

    /// An `ack` arrived. Returns false when `ack_id` is not one of our last `HISTORY_BEATS`
    /// beats (the ack is then someone else's business). `resync`: the peer could not apply
    /// that beat. Acks of beats older than the acknowledged one change nothing.
    pub fn handle_ack(&mut self, ack_id: &str, resync: bool) -> bool {
        let Some(beat) = self.in_flight.iter().find(|b| b.id == ack_id) else {
            return false;
        };
        let newer_than_acked = self.acked.as_ref().map_or(true, |(a, _)| beat.seq > *a);
        if newer_than_acked {
            self.acked = if resync {
                None
            } else {
                Some((beat.seq, beat.directory.clone()))
            };
        }
        true
    }

    /// The seq of the last acknowledged beat.
    pub fn acked_seq(&self) -> Option<u64> {
        self.acked.as_ref().map(|(s, _)| *s)
    }

    /// Sends a full snapshot next (as if the peer asked).
    pub fn request_full(&mut self) {
        self.acked = None;
    }
}

/// What a directory that passed a cap holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverCap {
    pub agents: usize,
    pub bytes: usize,
}

/// What applying a beat did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The directory is current.
    Applied,
    /// A delta against a base we no longer (or never) had: ask for a full beat.
    NeedResync,
    /// The directory the beat describes passes a cap: not applied, the last one that fit is
    /// kept. Answered like a resync (a delta against it could not be applied either).
    OverCap(OverCap),
}

/// The receiving side: the peer's directory as of its last applied beat, and the recent
/// states deltas may be based on.
#[derive(Debug, Clone)]
pub struct BeatReceiver {
    delta: bool,
    current: Directory,
    history: VecDeque<(u64, Directory)>,
}

impl BeatReceiver {
    /// `delta`: hb-delta was agreed. `peer_version` fills the directory of bare beats.
    pub fn new(delta: bool, peer_version: &str) -> BeatReceiver {
        BeatReceiver {
            delta,
            current: Directory {
                version: peer_version.to_owned(),
                agents: BTreeMap::new(),
            },
            history: VecDeque::new(),
        }
    }

    pub fn current(&self) -> &Directory {
        &self.current
    }

    fn remember(&mut self, seq: u64, d: &Directory) {
        if self.history.len() == HISTORY_BEATS {
            self.history.pop_front();
        }
        self.history.push_back((seq, d.clone()));
    }

    /// Applies a beat within the default caps.
    pub fn apply(&mut self, beat: Beat) -> Applied {
        self.apply_within(beat, DirectoryCaps::default())
    }

    /// Applies a beat unless the directory it describes passes `caps`.
    pub fn apply_within(&mut self, beat: Beat, caps: DirectoryCaps) -> Applied {
        match beat {
            Beat::Bare => {
                self.current.agents.clear();
                Applied::Applied
            }
            Beat::Full { seq, directory } => {
                if let Err(over) = directory.fits(caps) {
                    return Applied::OverCap(over);
                }
                if let (Some(s), true) = (seq, self.delta) {
                    self.remember(s, &directory);
                }
                self.current = directory;
                Applied::Applied
            }
            Beat::Delta {
                seq,
                base,
                version,
                upsert,
                remove,
            } => {
                if !self.delta {
                    return Applied::NeedResync;
                }
                let Some((_, base_dir)) = self.history.iter().rev().find(|(s, _)| *s == base)
                else {
                    return Applied::NeedResync;
                };
                let mut d = base_dir.clone();
                d.apply(version.as_deref(), &upsert, &remove);
                if let Err(over) = d.fits(caps) {
                    return Applied::OverCap(over);
                }
                self.remember(seq, &d);
                self.current = d;
                Applied::Applied
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(version: &str, agents: &[(&str, u32, u32)]) -> Directory {
        Directory {
            version: version.into(),
            agents: agents
                .iter()
                .map(|(n, p, q)| {
                    (
                        n.to_string(),
                        AgentEntry {
                            parked: *p,
                            queued: *q,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
        }
    }

    /// Sends a beat through JSON and back, as the wire does.
    fn wire(b: &Beat) -> Beat {
        let v = b.to_payload("w", 5);
        let p: Heartbeat = serde_json::from_value(v).unwrap();
        Beat::from_payload(&p).unwrap()
    }

    #[test]
    fn diff_then_apply_gives_the_new_directory() {
        let a = dir("1", &[("x", 0, 1), ("y", 1, 0), ("z", 0, 0)]);
        let b = dir("2", &[("x", 0, 2), ("z", 0, 0), ("new", 3, 3)]);
        let (v, up, rm) = b.diff_from(&a);
        assert_eq!(v.as_deref(), Some("2"));
        assert_eq!(
            up.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
            ["new", "x"]
        );
        assert_eq!(rm, ["y"]);
        let mut c = a.clone();
        c.apply(v.as_deref(), &up, &rm);
        assert_eq!(c, b);
        assert_eq!(a.diff_from(&a), (None, vec![], vec![]));
    }

    #[test]
    fn full_every_tenth_beat_and_deltas_between() {
        let mut tx = BeatSender::new(true);
        let mut rx = BeatReceiver::new(true, "");
        let mut d = dir("1", &[("a", 0, 0)]);
        let mut fulls = Vec::new();
        for i in 1..=30u32 {
            d.agents.insert(
                "a".into(),
                AgentEntry {
                    parked: i % 3,
                    queued: i,
                    ..Default::default()
                },
            );
            let id = format!("m{i}");
            let beat = wire(&tx.next_beat(&id, &d));
            if matches!(beat, Beat::Full { .. }) {
                fulls.push(beat.seq().unwrap());
            }
            assert_eq!(rx.apply(beat), Applied::Applied);
            assert_eq!(rx.current(), &d);
            assert!(tx.handle_ack(&id, false));
        }
        assert_eq!(fulls, [1, 11, 21]);
    }

    #[test]
    fn no_delta_before_an_ack_and_deltas_from_the_last_acked_beat() {
        let mut tx = BeatSender::new(true);
        let mut rx = BeatReceiver::new(true, "");
        let d1 = dir("1", &[("a", 0, 1)]);
        let d2 = dir("1", &[("a", 0, 2)]);
        let d3 = dir("1", &[("a", 0, 3), ("b", 0, 0)]);
        let b1 = tx.next_beat("1", &d1);
        let b2 = tx.next_beat("2", &d2);
        assert!(
            matches!(b2, Beat::Full { seq: Some(2), .. }),
            "nothing acked yet: full"
        );
        rx.apply(wire(&b1));
        rx.apply(wire(&b2));
        assert!(tx.handle_ack("1", false));
        // Beat 2's ack is still in flight: beat 3 is based on 1, which the receiver still has.
        let b3 = tx.next_beat("3", &d3);
        assert!(
            matches!(
                &b3,
                Beat::Delta {
                    seq: 3,
                    base: 1,
                    ..
                }
            ),
            "{b3:?}"
        );
        assert_eq!(rx.apply(wire(&b3)), Applied::Applied);
        assert_eq!(rx.current(), &d3);
        assert!(tx.handle_ack("2", false));
        assert!(tx.handle_ack("3", false));
        assert_eq!(tx.acked_seq(), Some(3));
        assert!(!tx.handle_ack("not-a-beat", false));
        // A late ack of an older beat does not move the base back.
        assert!(tx.handle_ack("1", false));
        assert_eq!(tx.acked_seq(), Some(3));
    }

    #[test]
    fn a_missing_base_asks_for_resync_and_the_next_beat_is_full() {
        let mut tx = BeatSender::new(true);
        let mut rx = BeatReceiver::new(true, "");
        let d = dir("1", &[("a", 0, 1)]);
        rx.apply(wire(&tx.next_beat("1", &d)));
        tx.handle_ack("1", false);
        // The receiver restarts its state (e.g. a bug, or history overflow): base 1 is gone.
        let mut rx2 = BeatReceiver::new(true, "");
        let d2 = dir("1", &[("a", 5, 1)]);
        let b2 = tx.next_beat("2", &d2);
        assert!(matches!(b2, Beat::Delta { .. }));
        assert_eq!(rx2.apply(wire(&b2)), Applied::NeedResync);
        assert_eq!(rx2.current(), &dir("", &[]), "unchanged");
        assert!(tx.handle_ack("2", true));
        let b3 = tx.next_beat("3", &d2);
        assert!(matches!(b3, Beat::Full { seq: Some(3), .. }), "{b3:?}");
        assert_eq!(rx2.apply(wire(&b3)), Applied::Applied);
        assert_eq!(rx2.current(), &d2);
        // Until that full beat is acked, beats stay full; then deltas resume.
        assert!(matches!(tx.next_beat("4", &d2), Beat::Full { .. }));
        tx.handle_ack("3", false);
        assert!(matches!(
            tx.next_beat("5", &d2),
            Beat::Delta { base: 3, .. }
        ));
        // A resync for a beat older than the acked one is stale: ignored.
        tx.handle_ack("4", false);
        assert!(tx.handle_ack("2", true));
        assert_eq!(tx.acked_seq(), Some(4));
        let _ = rx;
    }

    #[test]
    fn without_hb_delta_every_beat_is_full_and_unnumbered() {
        let mut tx = BeatSender::new(false);
        let d = dir("1", &[("a", 0, 1)]);
        for i in 0..12 {
            assert_eq!(
                tx.next_beat(&i.to_string(), &d),
                Beat::Full {
                    seq: None,
                    directory: d.clone()
                }
            );
        }
        let mut rx = BeatReceiver::new(false, "0.64.0");
        let delta = Beat::Delta {
            seq: 2,
            base: 1,
            version: None,
            upsert: vec![],
            remove: vec![],
        };
        assert_eq!(
            rx.apply(delta),
            Applied::NeedResync,
            "a delta without hb-delta is never applied"
        );
        assert_eq!(rx.apply(Beat::Bare), Applied::Applied);
        assert_eq!(rx.current(), &dir("0.64.0", &[]));
    }

    /// The per-entry estimate covers at least what an entry holds inline in the map (the
    /// name's `String` and the `AgentEntry`, liveness fields included) plus one pointer of
    /// node share; a field added to `AgentEntry` that outgrows it fails here, so the cap
    /// never again counts less than an entry really holds (the measured figures are in the
    /// doc of `AGENT_ENTRY_BYTES`).
    #[test]
    fn an_entry_is_counted_at_no_less_than_it_holds_inline() {
        let inline = std::mem::size_of::<String>() + std::mem::size_of::<AgentEntry>();
        assert!(
            AGENT_ENTRY_BYTES >= inline + std::mem::size_of::<usize>(),
            "AGENT_ENTRY_BYTES {AGENT_ENTRY_BYTES} < {inline} inline + a pointer"
        );
        // The name's own bytes come on top, and a state or a timestamp costs nothing extra.
        let mut d = dir("1.0", &[("alpha", 0, 0)]);
        let plain = d.size_bytes();
        assert_eq!(plain, 3 + 5 + AGENT_ENTRY_BYTES);
        if let Some(e) = d.agents.get_mut("alpha") {
            e.state = AgentState::Busy;
            e.since_ms = Some(1);
        }
        assert_eq!(d.size_bytes(), plain);
    }

    #[test]
    fn a_directory_over_a_cap_is_never_applied_and_the_last_that_fit_stays() {
        // Room for exactly three one-letter agents beside the version "1".
        let caps = DirectoryCaps {
            max_agents: 3,
            max_bytes: 1 + 3 * (1 + AGENT_ENTRY_BYTES),
        };
        let mut rx = BeatReceiver::new(true, "");
        let fits = dir("1", &[("a", 0, 0), ("b", 0, 0), ("c", 0, 0)]);
        assert_eq!(fits.size_bytes(), caps.max_bytes);
        let full = |seq, d: &Directory| Beat::Full {
            seq: Some(seq),
            directory: d.clone(),
        };
        assert_eq!(rx.apply_within(full(1, &fits), caps), Applied::Applied);
        // One agent too many, in a full beat: refused, the directory unchanged.
        let four = dir("1", &[("a", 0, 0), ("b", 0, 0), ("c", 0, 0), ("d", 0, 0)]);
        assert_eq!(
            rx.apply_within(full(2, &four), caps),
            Applied::OverCap(OverCap {
                agents: 4,
                bytes: 1 + 4 * (1 + AGENT_ENTRY_BYTES)
            })
        );
        assert_eq!(rx.current(), &fits);
        // Too many bytes in one long name: one byte more than the cap.
        let name_len = caps.max_bytes - 1 - AGENT_ENTRY_BYTES + 1;
        let long = dir("1", &[(&"x".repeat(name_len), 0, 0)]);
        assert_eq!(
            rx.apply_within(full(3, &long), caps),
            Applied::OverCap(OverCap {
                agents: 1,
                bytes: caps.max_bytes + 1
            })
        );
        // A delta that would add a fourth agent to beat 1: refused, and not remembered, so a
        // later delta against it needs a resync.
        let grow = Beat::Delta {
            seq: 4,
            base: 1,
            version: None,
            upsert: vec![AgentUpsert {
                name: "d".into(),
                parked: 0,
                queued: 0,
                state: AgentState::Unknown,
                since_ms: None,
            }],
            remove: vec![],
        };
        assert!(matches!(
            rx.apply_within(grow, caps),
            Applied::OverCap(OverCap { agents: 4, .. })
        ));
        assert_eq!(rx.current(), &fits);
        let on_refused = Beat::Delta {
            seq: 5,
            base: 4,
            version: None,
            upsert: vec![],
            remove: vec![],
        };
        assert_eq!(rx.apply_within(on_refused, caps), Applied::NeedResync);
        // A delta that swaps an agent stays within the caps and applies.
        let swap = Beat::Delta {
            seq: 6,
            base: 1,
            version: None,
            upsert: vec![AgentUpsert {
                name: "d".into(),
                parked: 1,
                queued: 2,
                state: AgentState::Unknown,
                since_ms: None,
            }],
            remove: vec!["a".into()],
        };
        assert_eq!(rx.apply_within(swap, caps), Applied::Applied);
        assert_eq!(
            rx.current(),
            &dir("1", &[("b", 0, 0), ("c", 0, 0), ("d", 1, 2)])
        );
        // The defaults hold a thousand agents with ordinary names.
        let many = directory_of(DEFAULT_MAX_PEER_AGENTS);
        assert_eq!(many.fits(DirectoryCaps::default()), Ok(()));
        assert!(directory_of(DEFAULT_MAX_PEER_AGENTS + 1)
            .fits(DirectoryCaps::default())
            .is_err());
    }

    fn directory_of(n: usize) -> Directory {
        Directory {
            version: "0.1.0".into(),
            agents: (0..n)
                .map(|i| (format!("agent-{i:05}"), AgentEntry::default()))
                .collect(),
        }
    }

    #[test]
    fn payload_shapes() {
        let d = dir("0.1.0", &[("a", 1, 2)]);
        let full = Beat::Full {
            seq: Some(1),
            directory: d.clone(),
        }
        .to_payload("hubA", 7);
        assert_eq!(
            serde_json::to_string(&full).unwrap(),
            r#"{"agents":{"a":{"parked":1,"queued":2}},"seq":1,"sessions":[],"timestamp":7,"version":"0.1.0","worker_id":"hubA"}"#
        );
        let delta = Beat::Delta {
            seq: 2,
            base: 1,
            version: None,
            upsert: vec![AgentUpsert {
                name: "a".into(),
                parked: 0,
                queued: 0,
                state: AgentState::Unknown,
                since_ms: None,
            }],
            remove: vec!["b".into()],
        }
        .to_payload("hubA", 7);
        assert_eq!(
            serde_json::to_string(&delta).unwrap(),
            r#"{"base":1,"remove":["b"],"seq":2,"upsert":[{"name":"a","parked":0,"queued":0}]}"#
        );
        assert_eq!(
            serde_json::to_string(&v0_payload("hubA", 7)).unwrap(),
            r#"{"sessions":[],"timestamp":7,"worker_id":"hubA"}"#
        );
        for bad in [r#"{"base":1}"#, r#"{"base":3,"seq":3}"#] {
            let p: Heartbeat = serde_json::from_str(bad).unwrap();
            assert!(Beat::from_payload(&p).is_err(), "{bad}");
        }
        let p: Heartbeat = serde_json::from_str("{}").unwrap();
        assert_eq!(Beat::from_payload(&p), Ok(Beat::Bare));
    }
}
