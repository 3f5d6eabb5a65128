//! The running hub's source of ids for the envelopes it makes (bounces): random UUIDs from
//! the OS, given to the core as its `kernel::ids::IdSource` (the core reads no OS randomness).

use agent_hub_proto::kernel::ids::IdSource;

#[derive(Debug, Default)]
pub struct OsIds;

impl IdSource for OsIds {
    fn next_id(&mut self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}
