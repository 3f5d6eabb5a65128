//! Where the core's random values come from: the ids of the envelopes the hub makes itself
//! (bounces, SPEC §5.3). The core never reads an OS random source or a clock (PLAN.md §1,
//! "sans-IO core"); the caller passes an `IdSource` to `Hub::new`: the server one that draws
//! random UUIDs from the OS (`event_loop::os_ids`), the simulations and fuzz drivers a
//! `SeededIds`, so a run is reproducible from its seed.
//!
//! Owns the seam and the seeded generator. Refuses OS randomness.

/// A source of fresh ids for hub-made envelopes.
pub trait IdSource: std::fmt::Debug + Send {
    /// A new id, never repeated within a run: a UUID in its hyphenated form.
    fn next_id(&mut self) -> String;
}

/// Deterministic ids from a seed: version-4-shaped UUIDs from a splitmix64 sequence. Not for
/// a running hub: ids are predictable from the seed.
#[derive(Debug, Clone)]
pub struct SeededIds {
    state: u64,
}

impl SeededIds {
    pub fn new(seed: u64) -> SeededIds {
        SeededIds { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl IdSource for SeededIds {
    fn next_id(&mut self) -> String {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        bytes[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        uuid::Builder::from_random_bytes(bytes)
            .into_uuid()
            .hyphenated()
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_gives_one_sequence_of_distinct_uuids() {
        let (mut a, mut b, mut c) = (SeededIds::new(7), SeededIds::new(7), SeededIds::new(8));
        let xs: Vec<String> = (0..100).map(|_| a.next_id()).collect();
        let ys: Vec<String> = (0..100).map(|_| b.next_id()).collect();
        assert_eq!(xs, ys, "reproducible from the seed");
        assert_ne!(xs[0], c.next_id(), "another seed, other ids");
        let distinct: std::collections::BTreeSet<&String> = xs.iter().collect();
        assert_eq!(distinct.len(), xs.len());
        for x in &xs {
            let u = uuid::Uuid::parse_str(x).expect("a UUID");
            assert_eq!(u.get_version_num(), 4);
        }
    }
}
