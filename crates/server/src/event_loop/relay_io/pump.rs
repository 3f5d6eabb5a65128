//! A relay link's session pumped (docs/relay-protocol.md; SPEC §15): after any input or
//! timeout, the session's bytes queued for the socket and its events carried out (the
//! handshake's end registering the connection with `relay::links`, heartbeats and their
//! directories for the hub, forwards and acks, task messages, closes), and the changes of who
//! is a peer's link (`make_link`, `apply_link_changes`). Refuses: deciding anything the
//! session or `relay::links` decides, and the socket itself (`link`).

use super::super::relay_gate::throttled;
use super::link::direction_name;
use super::{RelayIo, ToHub, MAX_PEER_BACKLOG_BYTES};
use agent_hub_proto::relay::links::{Change, Opened, Verdict, STANDBY_GRACE};
use agent_hub_proto::relay::message::{Ack, BusForward};
use agent_hub_proto::relay::session::{Dialect, SessionEvent};
use agent_hub_proto::relay::{Feature, MsgType, Payload};
use mio::{Registry, Token};
use std::time::Instant;

impl RelayIo {
    /// Drains a session's events and bytes after any input or timeout.
    pub(super) fn pump(&mut self, registry: &Registry, token: Token, now: Instant) {
        loop {
            let Some(link) = self.links.get_mut(&token) else {
                return;
            };
            if let Some(t) = link.session.stats().last_heartbeat_received {
                // Every beat counts for the link's liveness, those over the rate too (§5).
                self.registry_links.heartbeat(token.0 as u64, t);
            }
            let Some(ev) = link.session.poll_event() else {
                break;
            };
            match ev {
                SessionEvent::Established {
                    peer,
                    proto,
                    features,
                    transient,
                    peer_version,
                    dialect,
                } => {
                    let names: Vec<String> =
                        features.iter().map(|f| f.as_str().to_owned()).collect();
                    let direction = link.direction;
                    // claudectl's v1 says so; v0 is claudectl's anyway, and our v1 is the
                    // default reading (the line's shape is what operators grep).
                    let whose = if proto >= 1 && dialect == Dialect::Claudectl {
                        ", claudectl's dialect"
                    } else {
                        ""
                    };
                    let how = format!(
                        "{}, proto {proto}, features [{}], peer version {peer_version}{whose}",
                        direction_name(direction),
                        names.join(","),
                    );
                    link.peer = Some(peer.clone());
                    link.session.set_directory(self.directory.clone());
                    link.session.set_agent_cards(self.agent_cards.clone());
                    link.session.set_headroom(self.headroom.clone());
                    if link.admitted.is_some() && !link.authenticated {
                        link.authenticated = true;
                        self.gate.authenticated();
                    }
                    // A v1 peer marks its one-shots `transient`; a v0 peer (claudectl 0.64's
                    // `relay delegate`) does not, so its second connection must prove it lasts
                    // (relay::links, docs/relay-protocol.md §2.6).
                    let opened = if transient {
                        Opened::Transient
                    } else if proto >= 1 {
                        Opened::Lasting
                    } else {
                        Opened::Unproven
                    };
                    match self.registry_links.established(
                        &peer,
                        token.0 as u64,
                        direction,
                        opened,
                        now,
                    ) {
                        Verdict::Register { replaces } => {
                            self.logs
                                .push(("INFO", format!("relay: link with {peer} up ({how})")));
                            if let Some(old) = replaces {
                                // Logged here: the replaced connection is no longer the link, so
                                // closing it logs nothing.
                                self.logs.push((
                                    "INFO",
                                    format!(
                                        "relay: link with {peer} replaced by a newer link ({})",
                                        direction_name(direction)
                                    ),
                                ));
                                self.drop_link(
                                    registry,
                                    Token(old as usize),
                                    "replaced by a newer link",
                                    now,
                                );
                            }
                            self.make_link(&peer, token, now);
                        }
                        Verdict::Transient => self.logs.push((
                            "INFO",
                            format!("relay: link with {peer} up ({how}, transient)"),
                        )),
                        Verdict::Standby => throttled(
                            &mut self.logs,
                            &mut self.second_conn_log,
                            "INFO",
                            format!(
                                "relay: second connection from {peer} ({how}) served beside the live link, which stays the link (it replaces it only if it outlasts {} ms or the link goes down)",
                                STANDBY_GRACE.as_millis()
                            ),
                            now,
                        ),
                        Verdict::Reject(why) => {
                            self.logs.push((
                                "INFO",
                                format!("relay: second link with {peer} ({how}) closed: {why}"),
                            ));
                            self.drop_link(registry, token, &why, now);
                            return;
                        }
                    }
                }
                SessionEvent::Heartbeat {
                    directory,
                    worker,
                    room,
                } => {
                    let is_link = link
                        .peer
                        .as_deref()
                        .is_some_and(|p| self.registry_links.link_of(p) == Some(token.0 as u64));
                    if let Some(peer) = link.peer.clone().filter(|_| is_link) {
                        // Placement (issue 38 design §4): every beat of the lasting link, its
                        // room, its instant and the agents the peer offers now.
                        let agents = offered_agents(link.session.peer_agent_cards(), &worker);
                        if let Some(b) = self.books.get_mut(&peer) {
                            b.status.headroom = room.clone();
                        }
                        self.inbox.push(ToHub::PeerRoom {
                            peer: peer.clone(),
                            beat: agent_hub_proto::tasks::placement::Beat {
                                room,
                                agents: Some(agents),
                                at: now,
                            },
                        });
                        if let Some(b) = self.books.get_mut(&peer) {
                            b.last_heartbeat = Some(now);
                            b.status.last_heartbeat = Some(
                                chrono::Utc::now()
                                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                            );
                            b.status.agents = directory.agents.keys().cloned().collect();
                            if let Some(w) = worker {
                                // A claudectl acceptor's ack says no version; its beat does.
                                let said = b.status.peer_version.as_deref().unwrap_or("");
                                if let (true, Some(c)) = (said.is_empty(), &w.capabilities) {
                                    b.status.peer_version = Some(c.claudectl_version.clone());
                                }
                                b.status.worker = Some(*w);
                            }
                            self.status_dirty = true;
                            // Handed over only when it changed: a beat every interval with the
                            // same directory costs the hub nothing.
                            if b.directory_handed.as_ref() != Some(&directory.agents) {
                                b.directory_handed = Some(directory.agents.clone());
                                self.inbox.push(ToHub::PeerDirectory {
                                    peer,
                                    agents: directory.agents,
                                });
                            }
                        }
                    }
                }
                SessionEvent::Message(msg) if is_task_message(&msg.msg_type) => {
                    // From any authenticated connection of the peer: claudectl's one-shots
                    // carry `delegate_task` and `task_interrupt` (docs/relay-protocol.md §2.6).
                    let peer = link.peer.clone().unwrap_or_default();
                    match msg.payload_typed() {
                        Ok(payload) => self.inbox.push(ToHub::PeerTask {
                            peer,
                            msg_id: msg.id,
                            payload: Box::new(payload),
                        }),
                        Err(_) => throttled(
                            &mut self.logs,
                            &mut link.log_throttle,
                            "WARN",
                            format!(
                                "relay: {peer} sent a {} whose payload does not parse; dropped",
                                msg.msg_type.as_str()
                            ),
                            now,
                        ),
                    }
                }
                SessionEvent::Message(msg)
                    if msg.msg_type == MsgType::Ack
                        && handoff_ack_id(&msg)
                            .is_some_and(|id| link.handoffs.contains_key(&id)) =>
                {
                    // The ack of one of our final handoffs on this link (a v1 peer answers
                    // on the link the handoff came on; one acked elsewhere is sent again on
                    // the next link and acked then).
                    let peer = link.peer.clone().unwrap_or_default();
                    let id = handoff_ack_id(&msg).unwrap_or_default();
                    if let Some(task_id) = link.handoffs.remove(&id) {
                        self.inbox.push(ToHub::PeerTaskAcked { peer, task_id });
                    }
                }
                SessionEvent::Message(msg)
                    if link.session.features().contains(&Feature::BusForward) =>
                {
                    let peer = link.peer.clone().unwrap_or_default();
                    match msg.payload_typed() {
                        Ok(Payload::BusForward(BusForward { envelope, hop })) => {
                            self.inbox.push(ToHub::Forwarded {
                                peer,
                                ack_id: msg.id,
                                envelope,
                                hop,
                            });
                        }
                        Ok(Payload::Ack(Ack { ack_id, error, .. })) => {
                            // The ack may come back on another of the peer's connections than
                            // the forward left on (a link replaced meanwhile, §2.6).
                            let seq = link.forwards.remove(&ack_id).or_else(|| {
                                let peer_ = Some(peer.as_str());
                                self.links
                                    .values_mut()
                                    .filter(|l| l.peer.as_deref() == peer_)
                                    .find_map(|l| l.forwards.remove(&ack_id))
                            });
                            let link = self.links.get_mut(&token).expect("still open");
                            match seq {
                                Some(seq) => self.inbox.push(ToHub::ForwardAcked {
                                    peer,
                                    seq,
                                    error,
                                }),
                                None => throttled(
                                    &mut self.logs,
                                    &mut link.log_throttle,
                                    "INFO",
                                    format!("relay: {peer} acked {ack_id:?}, which is no forward of this link; ignored"),
                                    now,
                                ),
                            }
                        }
                        _ => throttled(
                            &mut self.logs,
                            &mut link.log_throttle,
                            "INFO",
                            format!(
                                "relay: {peer} sent {}; not acted on by this hub",
                                msg.msg_type.as_str()
                            ),
                            now,
                        ),
                    }
                }
                SessionEvent::Message(msg) => {
                    // Delegation is a later extension; until then a message is logged by type
                    // and dropped (never its payload: it may carry a prompt).
                    let peer = link.peer.clone().unwrap_or_default();
                    throttled(
                        &mut self.logs,
                        &mut link.log_throttle,
                        "INFO",
                        format!(
                            "relay: {peer} sent {}; not acted on by this hub",
                            msg.msg_type.as_str()
                        ),
                        now,
                    );
                }
                SessionEvent::UnknownType { msg_type } => {
                    let peer = link.peer.clone().unwrap_or_default();
                    throttled(
                        &mut self.logs,
                        &mut link.log_throttle,
                        "WARN",
                        format!("relay: {peer} sent unknown message type {msg_type:?}; dropped"),
                        now,
                    );
                }
                SessionEvent::Log(line) => throttled(
                    &mut self.logs,
                    &mut link.log_throttle,
                    "INFO",
                    format!("relay: {line}"),
                    now,
                ),
                SessionEvent::Closed { reason } => {
                    link.closed = true;
                    // Write what the session queued (a denial) before closing.
                    while let Some(bytes) = link.session.poll_transmit() {
                        link.out.extend_from_slice(&bytes);
                    }
                    self.flush(registry, token, now);
                    self.drop_link(registry, token, &reason, now);
                    return;
                }
            }
        }
        let Some(link) = self.links.get_mut(&token) else {
            return;
        };
        let mut queued = false;
        while let Some(bytes) = link.session.poll_transmit() {
            link.out.extend_from_slice(&bytes);
            queued = true;
        }
        if link.out.len() - link.out_pos > MAX_PEER_BACKLOG_BYTES {
            let msg =
                format!("more than {MAX_PEER_BACKLOG_BYTES} bytes waiting for the peer to read");
            self.drop_link(registry, token, &msg, now);
            return;
        }
        if queued {
            self.flush(registry, token, now);
        }
    }

    /// `token` is `peer`'s link now (`relay::links` said so): the peer's book says up, a
    /// pending redial is moot, and the hub hears `LinkUp` if the link forwards mail.
    pub(super) fn make_link(&mut self, peer: &str, token: Token, now: Instant) {
        let Some(link) = self.links.get_mut(&token) else {
            return;
        };
        let book = self.books.entry(peer.to_owned()).or_default();
        book.status.id = peer.to_owned();
        book.status.state = "up".into();
        book.status.direction = Some(direction_name(link.direction).into());
        book.status.proto = link.session.proto();
        book.status.features = link
            .session
            .features()
            .iter()
            .map(|f| f.as_str().to_owned())
            .collect();
        book.status.peer_version = Some(link.session.peer_version().to_owned());
        book.status.dialect = Some(link.session.dialect().as_str().to_owned());
        book.status.worker = None;
        book.status.headroom = None;
        book.status.last_error = None;
        book.backoff_step = 0;
        book.dialling = None;
        // A redial scheduled before the peer dialled us is moot now; left set, its instant
        // would stay in the past and spin the loop.
        book.next_dial = None;
        book.last_heartbeat = Some(now);
        book.directory_handed = None;
        self.status_dirty = true;
        let agent_hub = link.session.proto().is_some_and(|p| p >= 1)
            && link.session.dialect() == Dialect::AgentHub;
        self.inbox.push(ToHub::PeerLink {
            peer: peer.to_owned(),
            up: true,
            terms: agent_hub_proto::tasks::LinkTerms {
                agent_hub,
                // The session agrees it only on a hardened link of our dialect.
                approvals: agent_hub && link.session.features().contains(&Feature::TaskApprovals),
            },
        });
        if link.session.features().contains(&Feature::BusForward) {
            if !link.forwarding {
                link.forwarding = true;
                self.inbox.push(ToHub::LinkUp {
                    peer: peer.to_owned(),
                });
            }
        } else if self.keys.get(peer).is_some_and(|k| k.forward) {
            // The link is up, yet mail to name@peer would wait here without a word: the one
            // setup mistake `relay peers` alone does not name (docs/relay-setup.md, "When it
            // does not link").
            self.logs.push((
                "WARN",
                format!(
                    "relay: link with {peer} up without bus-forward, though this hub sets forward = true for it: {peer}'s config must set forward = true for {:?} and list \"bus-forward\" in relay.features (a claudectl peer never forwards); until then mail to NAME@{peer} waits here",
                    self.cfg.peer_id
                ),
            ));
        }
    }

    /// Later changes of who is a peer's link: standbys that outlived the grace (§2.6).
    pub(super) fn apply_link_changes(&mut self, registry: &Registry, now: Instant) {
        for change in self.registry_links.handle_timeout(now) {
            match change {
                Change::Promote {
                    peer,
                    conn,
                    replaces,
                } => {
                    let next = Token(conn as usize);
                    let how = self
                        .links
                        .get(&next)
                        .map_or("", |l| direction_name(l.direction));
                    self.logs.push((
                        "INFO",
                        format!(
                            "relay: link with {peer} replaced by its second connection ({how}), open for {} ms",
                            STANDBY_GRACE.as_millis()
                        ),
                    ));
                    if let Some(old) = replaces {
                        self.drop_link(
                            registry,
                            Token(old as usize),
                            "replaced by a newer link",
                            now,
                        );
                    }
                    self.make_link(&peer, next, now);
                }
                Change::Reject { peer, conn, why } => {
                    self.logs.push((
                        "INFO",
                        format!("relay: second link with {peer} closed: {why}"),
                    ));
                    self.drop_link(registry, Token(conn as usize), &why, now);
                }
            }
        }
    }
}

/// The four task messages (docs/delegation.md "Across hubs"), which the hub core takes from
/// any authenticated connection of a peer, and the three of `task-approvals` (issue 37 design
/// §7), which the session delivers only from a connection that agreed that feature.
fn is_task_message(t: &MsgType) -> bool {
    matches!(
        t,
        MsgType::DelegateTask
            | MsgType::TaskStatus
            | MsgType::TaskHandoff
            | MsgType::TaskInterrupt
            | MsgType::TaskRequest
            | MsgType::TaskAnswer
            | MsgType::TaskRequestClosed
    )
}

/// The `ack_id` of an `ack` message, when its payload parses.
fn handoff_ack_id(msg: &agent_hub_proto::relay::message::RelayMessage) -> Option<String> {
    match msg.payload_typed() {
        Ok(Payload::Ack(a)) => Some(a.ack_id),
        _ => None,
    }
}

/// The agents a peer offers for placement: one of our hubs' cards whose ACP or headless
/// program is on its PATH, or the tools a claudectl beat lists as present.
fn offered_agents(
    cards: &[agent_hub_proto::relay::message::AgentCard],
    worker: &Option<Box<agent_hub_proto::relay::worker::PeerWorker>>,
) -> Vec<String> {
    use agent_hub_proto::relay::worker::ToolState;
    let mut agents: Vec<String> = cards
        .iter()
        .filter(|c| c.acp || c.headless)
        .map(|c| c.name.clone())
        .collect();
    if let Some(caps) = worker.as_ref().and_then(|w| w.capabilities.as_ref()) {
        agents.extend(
            caps.tools
                .iter()
                .filter(|(_, t)| matches!(t, ToolState::Present { .. }))
                .map(|(name, _)| name.clone()),
        );
    }
    agents
}
