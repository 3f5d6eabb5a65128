//! SIGHUP: the roster file read again and handed to the core (docs/operations.md, "Changing
//! the roster"). Owns only the IO: reading the file with the same checks as startup
//! (`private_file::read_roster`: mode, readable, valid), and the service-log line when it is
//! refused. What a new roster means for connections and queues is the core's decision
//! (`hub::roster_reload`). Refuses to apply a roster that fails any check: the old one stays.

use super::private_file::read_roster;
use super::Server;
use agent_hub_proto::kernel::now::Now;
use std::path::PathBuf;

impl Server {
    /// The roster file SIGHUP reads again.
    pub fn set_roster_path(&mut self, path: PathBuf) {
        self.lifecycle.roster_path = Some(path);
    }

    /// Reads the roster file again and hands it to the core; an invalid one is logged and
    /// the roster in force stays. The file is replaced by rename when edited with
    /// `agent-hub-server roster`, so the read sees the old text or the new, never a part.
    pub(super) fn reload_roster(&mut self, now: Now) {
        if self.lifecycle.shutting_down {
            self.records
                .log("INFO", "SIGHUP during shutdown: the roster is not reloaded");
            return;
        }
        let Some(path) = self.lifecycle.roster_path.clone() else {
            self.records
                .log("WARN", "SIGHUP: this server has no roster file to reload");
            return;
        };
        match read_roster(&path) {
            Err(why) => {
                let kept = self.hub.roster().names().len();
                self.records.log(
                    "ERROR",
                    &format!(
                        "roster reload refused, keeping the roster in force ({kept} agents): {why}"
                    ),
                );
            }
            Ok(roster) => {
                self.hub.replace_roster(roster, now);
                self.drain_outputs();
                // The relay's directory of local names follows at its next tick.
                self.relay.directory_changed(now);
            }
        }
        self.records.flush_service();
    }
}
