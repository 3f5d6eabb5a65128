//! Where a `delegate --peer auto` task runs (issue 38 design §4; docs/delegation.md
//! "Placement"): this hub or a linked relay peer that has the agent and the most room.
//!
//! Owns `Rooms`, the sub-machine the task book holds (PLAN.md §14 "Sub-machines"): what the
//! loop last told of each peer (its heartbeat's `headroom`, the beat's instant, whether its
//! lasting link is up, the agents it offers, whether it speaks our v1 or claudectl's dialect)
//! and this machine's own measured figures. And the rule itself, `choose`: a pure function of
//! the places, the floors (`[tasks.placement]`) and the time passed in, with its skip reasons
//! and ranking exactly as the design gives them.
//!
//! A peer chooses every figure it reports: figures are kept as `relay::worker::Headroom`
//! bounds them, and the book keeps an entry only for a peer whose lasting link is up (bounded
//! by the configured peers). Refuses IO and clock reads (the instant is `now`), and deciding
//! anything beyond the choice (queueing and refusing are the book's).

use crate::relay::session::LIVENESS_INTERVALS;
use crate::relay::worker::Headroom;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// `delegate`'s `peer` that asks for a placement (a relay peer cannot be named so).
pub const AUTO: &str = "auto";
/// What the reply's `chose` says of this hub.
pub const LOCAL: &str = "local";
/// Places a reason or a refusal names before `…`.
pub const MAX_NAMED: usize = 8;

/// `tasks.placement.min_mem_free_mb`: default and bound.
pub const DEFAULT_MIN_MEM_FREE_MB: u64 = 512;
pub const MAX_MIN_MEM_FREE_MB: u64 = 1_048_576;
/// `tasks.placement.min_disk_free_mb`: default and bound.
pub const DEFAULT_MIN_DISK_FREE_MB: u64 = 1024;
pub const MAX_MIN_DISK_FREE_MB: u64 = 1_073_741_824;
/// `tasks.placement.max_load_per_core`: default and bounds (0 = no ceiling).
pub const DEFAULT_MAX_LOAD_PER_CORE: f64 = 2.0;
pub const MIN_MAX_LOAD_PER_CORE: f64 = 0.05;
pub const MAX_MAX_LOAD_PER_CORE: f64 = 1024.0;

/// The floors a place must meet (`[tasks.placement]`, validated by the loader). A floor of 0
/// is off: then an unknown figure passes it too (0 asks for nothing).
#[derive(Debug, Clone, Copy)]
pub struct Floors {
    pub min_mem_free_mb: u64,
    pub min_disk_free_mb: u64,
    /// 0: no ceiling.
    pub max_load_per_core: f64,
}

impl Default for Floors {
    fn default() -> Floors {
        Floors {
            min_mem_free_mb: DEFAULT_MIN_MEM_FREE_MB,
            min_disk_free_mb: DEFAULT_MIN_DISK_FREE_MB,
            max_load_per_core: DEFAULT_MAX_LOAD_PER_CORE,
        }
    }
}

// The loader checks the load is finite, so comparing bits is equality (the settings tables
// derive `Eq`).
impl PartialEq for Floors {
    fn eq(&self, o: &Floors) -> bool {
        self.min_mem_free_mb == o.min_mem_free_mb
            && self.min_disk_free_mb == o.min_disk_free_mb
            && self.max_load_per_core.to_bits() == o.max_load_per_core.to_bits()
    }
}
impl Eq for Floors {}

/// What kind of place: this hub, one of our hubs (v1), or a claudectl peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceKind {
    Local,
    AgentHub,
    Claudectl,
}

/// One candidate, as `choose` reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Place {
    pub name: String,
    pub kind: PlaceKind,
    /// It offers the agent asked for (local: the runnable catalogue; an agent-hub: a card
    /// with that name and acp or headless; claudectl: `capabilities.tools[A]` present).
    pub has_agent: bool,
    pub tags: Vec<String>,
    pub room: Option<Headroom>,
    /// When its last heartbeat arrived (None: none on this link yet; local: not read).
    pub last_beat: Option<Instant>,
    /// Its lasting link is up (local: always).
    pub linked: bool,
    /// This hub may delegate to it (`relay.peers`; local: always).
    pub delegable: bool,
}

/// A place left out, and why (the design's reason strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub place: String,
    pub why: String,
}

/// What `choose` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Run at `place` (`LOCAL` or a peer's name).
    Chosen {
        place: String,
        local: bool,
        eligible: usize,
        skipped: Vec<Skip>,
        reason: String,
    },
    /// Nothing eligible, but this hub has the agent: the task waits in its queue.
    QueuedHere { skipped: Vec<Skip>, reason: String },
    /// Nothing eligible and this hub lacks the agent: the `delegate` is refused with `refusal`.
    NoRoom { skipped: Vec<Skip>, refusal: String },
}

impl Placement {
    /// The place named in the reply's `chose` (`LOCAL` when queued here); None when refused.
    pub fn chose(&self) -> Option<&str> {
        match self {
            Placement::Chosen { place, .. } => Some(place),
            Placement::QueuedHere { .. } => Some(LOCAL),
            Placement::NoRoom { .. } => None,
        }
    }

    pub fn skipped(&self) -> &[Skip] {
        match self {
            Placement::Chosen { skipped, .. }
            | Placement::QueuedHere { skipped, .. }
            | Placement::NoRoom { skipped, .. } => skipped,
        }
    }
}

/// Why `place` cannot take a task of `agent` needing `requires` now, or None when it can.
fn skip_reason(
    place: &Place,
    agent: &str,
    requires: &[String],
    floors: &Floors,
    stale_after: Duration,
    now: Instant,
) -> Option<String> {
    let local = place.kind == PlaceKind::Local;
    if !place.delegable {
        return Some("not a peer this hub delegates to".into());
    }
    if !place.linked {
        return Some("no lasting link".into());
    }
    if !local {
        match place.last_beat {
            None => return Some("stale: no heartbeat yet".into()),
            Some(at) => {
                let quiet = now.saturating_duration_since(at);
                if quiet >= stale_after {
                    return Some(format!("stale: no heartbeat for {} s", quiet.as_secs()));
                }
            }
        }
    }
    if !place.has_agent {
        return Some(format!("no agent {agent}"));
    }
    let Some(room) = &place.room else {
        return Some("no headroom reported".into());
    };
    if let Some(t) = requires.iter().find(|t| !place.tags.contains(t)) {
        return Some(format!("no tag {t}"));
    }
    if let Some(m) = room.max_tasks {
        if m == 0 || room.running_tasks >= m {
            return Some(format!("at its cap {}/{m}", room.running_tasks));
        }
    }
    if floors.min_mem_free_mb > 0 {
        match room.mem_free_mb {
            Some(mb) if mb >= floors.min_mem_free_mb => {}
            Some(mb) => return Some(format!("low memory {mb} MB")),
            None => return Some("low memory: not reported".into()),
        }
    }
    if floors.min_disk_free_mb > 0 {
        match room.disk_free_mb {
            Some(mb) if mb >= floors.min_disk_free_mb => {}
            Some(mb) => return Some(format!("low disk {mb} MB")),
            None => return Some("low disk: not reported".into()),
        }
    }
    if floors.max_load_per_core > 0.0 {
        match room.load_per_core {
            Some(l) if l <= floors.max_load_per_core => {}
            Some(l) => return Some(format!("load {l:.2} per core")),
            None => return Some("load: not reported".into()),
        }
    }
    None
}

/// The ranking key, smaller first: free-slot ratio in eighths (descending; no ceiling is
/// 8/8), load per core in tenths (ascending; unknown last), free memory (descending; unknown
/// last), local before peers, then the name.
fn rank(
    place: &Place,
) -> (
    std::cmp::Reverse<u64>,
    u64,
    std::cmp::Reverse<u64>,
    bool,
    String,
) {
    let room = place.room.clone().unwrap_or_default();
    let eighths = match room.max_tasks {
        None => 8,
        Some(0) => 0,
        Some(m) => {
            let free = u64::from(m.saturating_sub(room.running_tasks));
            free * 8 / u64::from(m)
        }
    };
    // Bounded already (finite, ≥ 0); `as` saturates a huge load at u64::MAX.
    let tenths = room
        .load_per_core
        .map_or(u64::MAX, |l| (l * 10.0).floor() as u64);
    let mem = room.mem_free_mb.unwrap_or(0);
    (
        std::cmp::Reverse(eighths),
        tenths,
        std::cmp::Reverse(mem),
        place.kind != PlaceKind::Local,
        place.name.clone(),
    )
}

/// `a (why), b (why)` for at most `MAX_NAMED` places, `…` after.
fn list_skips(skipped: &[Skip], sep: &str, paren: bool) -> String {
    let mut s = String::new();
    for (i, k) in skipped.iter().enumerate() {
        if i == MAX_NAMED {
            s.push_str(sep);
            s.push('…');
            break;
        }
        if i > 0 {
            s.push_str(sep);
        }
        if paren {
            let _ = write!(s, "{} ({})", k.place, k.why);
        } else {
            let _ = write!(s, "{}: {}", k.place, k.why);
        }
    }
    s
}

/// `3 of 4 task slots free, load 0.20 per core, 12034 MB free`.
fn describe(room: &Headroom) -> String {
    let slots = match room.max_tasks {
        Some(m) => format!(
            "{} of {m} task slots free",
            m.saturating_sub(room.running_tasks)
        ),
        None => format!("{} running, no task cap", room.running_tasks),
    };
    let load = match room.load_per_core {
        Some(l) => format!("load {l:.2} per core"),
        None => "load not reported".to_owned(),
    };
    let mem = match room.mem_free_mb {
        Some(mb) => format!("{mb} MB free"),
        None => "free memory not reported".to_owned(),
    };
    format!("{slots}, {load}, {mem}")
}

/// The rule (design §4): every place checked in order (local first, then the peers as
/// given), the eligible ones ranked, the best chosen. With none eligible the task is queued
/// here when this hub has the agent, else refused naming each place. `stale_after` is
/// `LIVENESS_INTERVALS` heartbeat intervals (`Rooms::stale_after`).
pub fn choose(
    agent: &str,
    requires: &[String],
    local: Option<&Place>,
    peers: &[Place],
    floors: &Floors,
    stale_after: Duration,
    now: Instant,
) -> Placement {
    let mut skipped = Vec::new();
    let mut eligible: Vec<&Place> = Vec::new();
    for p in local.into_iter().chain(peers) {
        match skip_reason(p, agent, requires, floors, stale_after, now) {
            Some(why) => skipped.push(Skip {
                place: p.name.clone(),
                why,
            }),
            None => eligible.push(p),
        }
    }
    eligible.sort_by_key(|p| rank(p));
    if let Some(best) = eligible.first() {
        let mut reason = format!(
            "chose {}: {}; {} eligible",
            best.name,
            describe(&best.room.clone().unwrap_or_default()),
            eligible.len()
        );
        if !skipped.is_empty() {
            let _ = write!(reason, "; skipped: {}", list_skips(&skipped, ", ", true));
        }
        let is_local = best.kind == PlaceKind::Local;
        return Placement::Chosen {
            place: if is_local {
                LOCAL.to_owned()
            } else {
                best.name.clone()
            },
            local: is_local,
            eligible: eligible.len(),
            skipped,
            reason,
        };
    }
    if local.is_some_and(|l| l.has_agent) {
        let mut reason = "every place is full or stale; queued here".to_owned();
        if !skipped.is_empty() {
            let _ = write!(reason, "; skipped: {}", list_skips(&skipped, ", ", true));
        }
        return Placement::QueuedHere { skipped, reason };
    }
    let refusal = format!(
        "invalid delegate: no hub has room for {agent} ({})",
        list_skips(&skipped, "; ", false)
    );
    Placement::NoRoom { skipped, refusal }
}

/// What the book keeps of one linked peer.
#[derive(Debug, Clone, PartialEq)]
struct PeerRoom {
    kind: PlaceKind,
    room: Option<Headroom>,
    last_beat: Option<Instant>,
    /// The agents it offers (cards with acp or headless; claudectl's present tools).
    agents: BTreeSet<String>,
}

/// This machine's measured figures (each None when it could not be read).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Machine {
    pub mem_free_mb: Option<u64>,
    pub load_per_core: Option<f64>,
    pub disk_free_mb: Option<u64>,
}

/// What the book knows of the places (design §4 "Our hubs' headroom"): one entry per peer
/// whose lasting link is up, and this machine's figures and tags.
#[derive(Debug, Clone, PartialEq)]
pub struct Rooms {
    peers: BTreeMap<String, PeerRoom>,
    machine: Machine,
    /// `relay.tags`: what `requires` matches this hub against.
    tags: Vec<String>,
    heartbeat_interval: Duration,
}

impl Default for Rooms {
    fn default() -> Rooms {
        Rooms {
            peers: BTreeMap::new(),
            machine: Machine::default(),
            tags: Vec::new(),
            heartbeat_interval: crate::relay::session::DEFAULT_HEARTBEAT_INTERVAL,
        }
    }
}

/// What the loop tells of one heartbeat (`Hub::peer_room`).
#[derive(Debug, Clone, PartialEq)]
pub struct Beat {
    /// The beat's `headroom` (None: it said none; an older agent-hub, claudectl 0.64).
    pub room: Option<Headroom>,
    /// The agents the peer offers as of this beat (its cards, claudectl's present tools);
    /// None: unchanged.
    pub agents: Option<Vec<String>>,
    pub at: Instant,
}

impl Rooms {
    /// The relay's heartbeat interval (a peer is stale after `LIVENESS_INTERVALS` of them)
    /// and this hub's `relay.tags`.
    pub fn set_relay(&mut self, heartbeat_interval: Duration, tags: Vec<String>) {
        self.heartbeat_interval = heartbeat_interval;
        self.tags = tags;
    }

    /// How long without a beat makes a peer stale.
    pub fn stale_after(&self) -> Duration {
        self.heartbeat_interval.saturating_mul(LIVENESS_INTERVALS)
    }

    /// `peer`'s lasting link came up (an agent-hub or a claudectl) or went down: down forgets
    /// what it said, so a later link starts from its own beats.
    pub fn link(&mut self, peer: &str, up: bool, agent_hub: bool) {
        if !up {
            self.peers.remove(peer);
            return;
        }
        let kind = if agent_hub {
            PlaceKind::AgentHub
        } else {
            PlaceKind::Claudectl
        };
        self.peers.insert(
            peer.to_owned(),
            PeerRoom {
                kind,
                room: None,
                last_beat: None,
                agents: BTreeSet::new(),
            },
        );
    }

    /// A heartbeat of `peer`'s lasting link. Ignored for a peer with no link up (a beat
    /// racing its link's end), so entries stay bounded by the links.
    pub fn beat(&mut self, peer: &str, beat: Beat) {
        let Some(p) = self.peers.get_mut(peer) else {
            return;
        };
        p.room = beat.room.map(Headroom::bounded);
        p.last_beat = Some(beat.at);
        if let Some(agents) = beat.agents {
            p.agents = agents
                .into_iter()
                .take(crate::relay::worker::MAX_TOOLS)
                .collect();
        }
    }

    /// This machine's latest measured figures.
    pub fn set_machine(&mut self, machine: Machine) {
        self.machine = machine;
    }

    /// This hub as a place: running vs `max_concurrent` and the machine's figures.
    pub fn local_place(&self, has_agent: bool, running: usize, max: usize) -> Place {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Place {
            name: LOCAL.to_owned(),
            kind: PlaceKind::Local,
            has_agent,
            tags: self.tags.clone(),
            room: Some(Headroom {
                mem_free_mb: self.machine.mem_free_mb,
                load_per_core: self.machine.load_per_core,
                disk_free_mb: self.machine.disk_free_mb,
                running_tasks: clamp(running),
                max_tasks: Some(clamp(max)),
                tags: self.tags.clone(),
            }),
            last_beat: None,
            linked: true,
            delegable: true,
        }
    }

    /// Every peer as a place for `agent`: those this hub delegates to (`delegable`, linked
    /// or not) and those linked that it does not, in name order.
    pub fn peer_places(&self, agent: &str, delegable: &BTreeSet<String>) -> Vec<Place> {
        let names: BTreeSet<&String> = delegable.iter().chain(self.peers.keys()).collect();
        names
            .into_iter()
            .map(|name| match self.peers.get(name) {
                Some(p) => Place {
                    name: name.clone(),
                    kind: p.kind,
                    // claudectl runs `claude` only, and says so among its tools.
                    has_agent: p.agents.contains(agent)
                        && (p.kind != PlaceKind::Claudectl || agent == "claude"),
                    tags: p.room.as_ref().map(|r| r.tags.clone()).unwrap_or_default(),
                    room: p.room.clone(),
                    last_beat: p.last_beat,
                    linked: true,
                    delegable: delegable.contains(name),
                },
                None => Place {
                    name: name.clone(),
                    kind: PlaceKind::AgentHub,
                    has_agent: false,
                    tags: Vec::new(),
                    room: None,
                    last_beat: None,
                    linked: false,
                    delegable: delegable.contains(name),
                },
            })
            .collect()
    }

    /// Whether `peer` speaks claudectl's dialect (its link is up).
    pub fn kind_of(&self, peer: &str) -> Option<PlaceKind> {
        self.peers.get(peer).map(|p| p.kind)
    }
}

#[cfg(test)]
mod tests;
