//! `ConnId`, and the hasher of the per-connection tables (`Hub::conns`,
//! `server::Server::conns`), looked up several times per operation on every path: a
//! multiply-and-rotate of the connection id instead of std's SipHash, which was a few per cent of the hub's user time under connection-per-op sends
//! (docs/performance.md, issue 13, "Design decisions").
//!
//! Why it is safe here and nowhere else: SipHash's keyed randomness is what keeps a peer from
//! choosing keys that all fall in one bucket. A `ConnId` is never chosen by a peer: the server
//! numbers connections itself, one after another (`server::Server::accept`), so a client can
//! neither pick nor repeat one. Tables keyed by anything a peer writes (agent names, envelope
//! ids, peer names) hash with random keys (`fold_hash`, or std's `RandomState`).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A connection as the core knows it: an opaque number the IO layer picks.
pub type ConnId = u64;

/// A `HashMap` keyed by connection id.
pub type ConnMap<V> = HashMap<ConnId, V, BuildHasherDefault<ConnIdHasher>>;

/// Hashes one `u64` (a `ConnId`): Fibonacci multiplication spreads consecutive ids over the
/// high bits hashbrown takes its control byte from, the rotation brings them to the low bits
/// it takes the bucket from.
#[derive(Default, Clone, Copy)]
pub struct ConnIdHasher(u64);

impl Hasher for ConnIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }

    /// Only `u64`s are hashed with it; any other key still hashes whole, byte by byte.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Consecutive ids (what the server hands out) spread over buckets and control bytes: no
    /// two of the first 100,000 share a hash, and their low and high 7 bits take every value.
    #[test]
    fn consecutive_ids_spread() {
        let b = BuildHasherDefault::<ConnIdHasher>::default();
        let hashes: Vec<u64> = (1..=100_000u64).map(|id| b.hash_one(id)).collect();
        let distinct: std::collections::HashSet<u64> = hashes.iter().copied().collect();
        assert_eq!(distinct.len(), hashes.len());
        let low: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 127).collect();
        let high: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert_eq!((low.len(), high.len()), (128, 128));
        let mut m: ConnMap<u64> = ConnMap::default();
        for id in 1..=1000u64 {
            m.insert(id, id * 2);
        }
        assert!((1..=1000u64).all(|id| m.get(&id) == Some(&(id * 2))));
    }
}
