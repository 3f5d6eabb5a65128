//! The loop's side of the relay (part of the IO shell, `event_loop/mod.rs`; SPEC §13, §15;
//! PLAN.md "Relay"): starting it, parking the core's forwards, forward acks and task messages
//! until the exchange of `settle` hands them over, handing the relay's events (links up and
//! down, forwards and acks from peers) to the core, its timers, and its heartbeat directory
//! refreshed from the core. Refuses: moving a relay byte (`relay_io`) and any protocol
//! decision (`relay::session`, the core).

use super::records::Records;
use super::relay_gate;
use super::relay_io::{self, RelayIo, ToHub};
use super::Server;
use agent_hub_proto::hub::{Hub, Output};
use agent_hub_proto::kernel::now::Now;
use mio::{Registry, Token};
use std::time::{Duration, Instant};

/// The relay, when configured, and what the loop keeps for it.
#[derive(Default)]
pub(super) struct Relay {
    /// The relay to other hubs, when configured.
    io: Option<RelayIo>,
    /// The core's forwards and forward acks, for the relay (`exchange`).
    to_relay: Vec<Output>,
    /// When the relay's heartbeat directory is next refreshed from the hub.
    next_directory: Option<Instant>,
}

impl Relay {
    /// Keeps one of the core's outputs for the relay until the next exchange.
    pub(super) fn park(&mut self, out: Output) {
        self.to_relay.push(out);
    }

    /// A readiness event on one of the relay's sockets.
    pub(super) fn handle_event(
        &mut self,
        registry: &Registry,
        token: Token,
        readable: bool,
        writable: bool,
        now: Instant,
    ) {
        if let Some(relay) = &mut self.io {
            relay.handle_event(registry, token, readable, writable, now);
        }
    }

    /// Links whose read budget ran out are read again.
    pub(super) fn read_pending(&mut self, registry: &Registry, now: Instant) {
        if let Some(relay) = &mut self.io {
            relay.read_pending(registry, now);
        }
    }

    /// The relay's next deadline and the directory's next refresh, when there is a relay.
    pub(super) fn timeouts(&self) -> Option<(Option<Instant>, Option<Instant>)> {
        let relay = self.io.as_ref()?;
        Some((relay.poll_timeout(), self.next_directory))
    }

    /// Some link has input left to read this iteration.
    pub(super) fn wants_read(&self) -> bool {
        self.io.as_ref().is_some_and(|r| r.wants_read())
    }

    /// The roster changed: the relay's directory of local names follows at its next tick.
    pub(super) fn directory_changed(&mut self, now: Now) {
        self.next_directory = self.next_directory.map(|_| now.mono);
    }

    /// The manifests were reloaded: the agent cards are computed again.
    pub(super) fn refresh_agent_cards(&self) {
        if let Some(relay) = &self.io {
            relay.refresh_agent_cards();
        }
    }

    /// Closes every link (the stop began).
    pub(super) fn close_all(&mut self, records: &mut Records, registry: &Registry, now: Now) {
        if let Some(relay) = &mut self.io {
            relay.close_all(registry, now.mono);
        }
        self.drain_logs(records);
    }

    /// Hands the core's forwards and forward acks to the relay, and the relay's events (links
    /// up and down, forwards and acks from peers) to the core. True if the core got input.
    fn exchange(
        &mut self,
        hub: &mut Hub,
        records: &mut Records,
        registry: &Registry,
        now: Now,
    ) -> bool {
        let Some(relay) = &mut self.io else {
            self.to_relay.clear();
            return false;
        };
        for out in std::mem::take(&mut self.to_relay) {
            match out {
                Output::Forward {
                    peer,
                    seq,
                    envelope,
                } => match relay.forward(registry, &peer, seq, &envelope, now.mono) {
                    relay_io::Forwarded::Sent | relay_io::Forwarded::NoLink => {}
                    relay_io::Forwarded::Refused(why) => relay.inbox.push(ToHub::ForwardAcked {
                        peer,
                        seq,
                        error: Some(why),
                    }),
                },
                Output::ForwardAck {
                    peer,
                    ack_id,
                    error,
                } => relay.ack_forward(registry, &peer, ack_id, error, now.mono),
                // No lasting link after all: the book hears it is down and sends what it must
                // again on the next one.
                Output::ToPeer(send) if !relay.send_task(registry, &send, now.mono) => {
                    relay.inbox.push(ToHub::PeerLink {
                        peer: send.peer,
                        up: false,
                        terms: agent_hub_proto::tasks::LinkTerms::default(),
                    });
                }
                _ => {}
            }
        }
        relay.flush_pending(registry, now.mono);
        for (level, line) in relay.logs.drain(..) {
            records.log(level, &line);
        }
        let inbox = std::mem::take(&mut relay.inbox);
        let fed = !inbox.is_empty();
        for ev in inbox {
            match ev {
                ToHub::LinkUp { peer } => hub.handle_link_up(&peer, now),
                ToHub::LinkDown { peer, reason } => hub.handle_link_down(&peer, &reason, now),
                ToHub::Forwarded {
                    peer,
                    ack_id,
                    envelope,
                    hop,
                } => hub.handle_forwarded(&peer, ack_id, &envelope, hop),
                ToHub::ForwardAcked { peer, seq, error } => {
                    hub.handle_forward_ack(&peer, seq, error, now)
                }
                ToHub::PeerLink { peer, up, terms } => hub.handle_peer_link(&peer, up, terms, now),
                ToHub::PeerDirectory { peer, agents } => hub.handle_peer_directory(&peer, agents),
                ToHub::PeerTask {
                    peer,
                    msg_id,
                    payload,
                } => hub.handle_peer_message(&peer, &msg_id, *payload, now),
                ToHub::PeerRoom { peer, beat } => hub.peer_room(&peer, beat),
                ToHub::LocalRoom(machine) => hub.local_room(machine),
                ToHub::PeerTaskAcked { peer, task_id } => {
                    hub.handle_peer_task_acked(&peer, &task_id)
                }
            }
        }
        fed
    }

    /// The relay's timers, and its heartbeat directory refreshed from the hub at most once a
    /// second (the directory is a roster-sized walk; per iteration would tax every send).
    fn tick(
        &mut self,
        hub: &Hub,
        max_tasks: Option<usize>,
        records: &mut Records,
        registry: &Registry,
        now: Now,
    ) {
        let Some(relay) = &mut self.io else { return };
        if self.next_directory.is_some_and(|t| t <= now.mono) {
            relay.set_directory(hub.local_directory());
            relay.set_task_room(hub.active_tasks(), max_tasks);
            self.next_directory = Some(now.mono + Duration::from_secs(1));
        }
        relay.handle_timeout(registry, now.mono);
        self.drain_logs(records);
    }

    fn drain_logs(&mut self, records: &mut Records) {
        if let Some(relay) = &mut self.io {
            for (level, line) in relay.logs.drain(..) {
                records.log(level, &line);
            }
        }
    }
}

impl Server {
    /// Starts the relay (its listener and its dials). Errors name the key file or address.
    pub fn start_relay(
        &mut self,
        cfg: agent_hub_host::config::RelayConfig,
    ) -> Result<Option<std::net::SocketAddr>, relay_io::RelayStartError> {
        let forward_peers: Vec<String> = cfg
            .peers
            .iter()
            .filter(|p| p.forward)
            .map(|p| p.id.clone())
            .collect();
        if !forward_peers.is_empty() {
            self.hub
                .enable_forwarding(&cfg.peer_id, forward_peers, cfg.forward_window);
        }
        // Relay connections and client connections must fit in the descriptors together, or
        // a flood of relay connections could take the ones local clients need.
        if let Some(nofile) = relay_gate::nofile_limit() {
            let dials = cfg.peers.iter().filter(|p| p.address.is_some()).count();
            relay_gate::check_descriptors(self.limits.max_connections, &cfg.limits, dials, nofile)
                .map_err(relay_io::RelayStartError::Descriptors)?;
        }
        let cards = relay_io::cards::CardSource {
            sources: self.tasks.agent_env.sources.clone(),
            path_var: self.tasks.agent_env.path_var.clone(),
        };
        let task_dir = self
            .tasks
            .task_dir
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from("."));
        let relay =
            relay_io::RelayIo::new(cfg, cards, task_dir, self.poll.registry(), Instant::now())?;
        let addr = relay.local_addr();
        self.relay.io = Some(relay);
        self.relay.next_directory = Some(Instant::now());
        Ok(addr)
    }

    /// The exchange of `settle`: the core's outputs to the relay, the relay's events to the
    /// core (`Relay::exchange`). True if the core got input.
    pub(super) fn exchange_with_relay(&mut self, now: Now) -> bool {
        self.relay
            .exchange(&mut self.hub, &mut self.records, self.poll.registry(), now)
    }

    /// The relay's timers and directory (`Relay::tick`).
    pub(super) fn tick_relay(&mut self, now: Now) {
        self.relay.tick(
            &self.hub,
            self.tasks.max_tasks,
            &mut self.records,
            self.poll.registry(),
            now,
        );
    }
}
