//! The keyed hasher of the tables a peer can choose keys for (agent names, envelope ids,
//! filters, the roster): a folded 64×64→128-bit multiply per 16 bytes, keyed with two
//! random words drawn when the table is made. Std's SipHash-1-3 cost about 210
//! instructions per lookup, and a connection-per-op send does about 17 lookups: a tenth of
//! the hub's user instructions (docs/performance.md, issue 13, "Design decisions").
//!
//! Why it still resists flooding: a peer who wants many keys in one bucket must predict
//! the hash, and every step of it multiplies by a word that depends on the two secret
//! keys. Nothing the hub sends shows a hash or a table's order, and the keys differ per
//! table and per process. Every byte reaches a multiply through reads that are injective
//! for the input's length (for a given length, different bytes give different words), and
//! the length goes in through a multiply of its own, before any data: so no two inputs
//! collide under every key, the property a seed-independent multicollision attack needs.
//! The tests below try the families such attacks are built from.
//!
//! Owns `FoldState` (the keys) and `FoldHasher`. Tables whose keys the server picks itself
//! (connection ids) use the cheaper `conn_map`.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher, RandomState};

/// A `HashMap` keyed by something a peer may choose. The core's few other tables not keyed
/// by connection id (the bounce reasons and pending store operations, keyed by the hub's own
/// sequence numbers) use it too: it is cheaper than SipHash, and safe for any key.
pub type FoldMap<K, V> = HashMap<K, V, FoldState>;
/// A `HashSet` of things a peer may choose.
pub type FoldSet<K> = HashSet<K, FoldState>;

/// Constants from the fractional digits of pi, one per role (length, data, integers,
/// finish), so a word in one role never meets the same multiplier as a word in another.
const LEN: u64 = 0x243f_6a88_85a3_08d3;
const DATA: u64 = 0x1319_8a2e_0370_7345;
const INT: u64 = 0xa409_3822_299f_31d1;
const FINISH: u64 = 0x082e_fa98_ec4e_6c89;

/// The two secret words one table hashes with.
#[derive(Clone, Copy)]
pub struct FoldState {
    k0: u64,
    k1: u64,
}

impl FoldState {
    /// Fresh keys. They come from std's `RandomState`, which is seeded from the operating
    /// system's random source once per thread and differs for every `RandomState::new()`: so
    /// no new dependency, and two tables never share keys.
    pub fn new() -> FoldState {
        let seed = RandomState::new();
        FoldState {
            k0: seed.hash_one(0x6b30_u64),
            k1: seed.hash_one(0x6b31_u64),
        }
    }
}

impl Default for FoldState {
    fn default() -> FoldState {
        FoldState::new()
    }
}

impl BuildHasher for FoldState {
    type Hasher = FoldHasher;

    #[inline]
    fn build_hasher(&self) -> FoldHasher {
        FoldHasher {
            acc: self.k0,
            key: self.k1,
        }
    }
}

/// One hash in progress: `acc` starts as the table's first key and is replaced by a folded
/// multiply at every write; `key` is the second key, mixed into every multiply.
pub struct FoldHasher {
    acc: u64,
    key: u64,
}

/// The low and the high half of the full product, xored: every input bit reaches the
/// middle bits of both halves, so the result has no weak end for hashbrown's bucket index
/// (low bits) or control byte (top seven bits).
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline(always)]
fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[inline(always)]
fn half(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u64::from(u32::from_le_bytes(w))
}

impl FoldHasher {
    #[inline(always)]
    fn mix(&mut self, a: u64, b: u64) {
        self.acc = fold(self.acc ^ a, self.key ^ DATA ^ b);
    }
}

impl Hasher for FoldHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        // The length first, through a multiply of its own: overlapping reads below then
        // cannot trade a byte of data for a unit of length.
        self.acc = fold(self.acc ^ n as u64, self.key ^ LEN);
        if n <= 16 {
            // For each length, the reads cover every byte: different bytes, different words.
            let (a, b) = if n >= 8 {
                (word(bytes, 0), word(bytes, n - 8))
            } else if n >= 4 {
                (half(bytes, 0), half(bytes, n - 4))
            } else if n > 0 {
                let a = u64::from(bytes[0]) << 16
                    | u64::from(bytes[n / 2]) << 8
                    | u64::from(bytes[n - 1]);
                (a, 0)
            } else {
                (0, 0)
            };
            self.mix(a, b);
            return;
        }
        let mut at = 0;
        while n - at > 16 {
            self.mix(word(bytes, at), word(bytes, at + 8));
            at += 16;
        }
        // The last 16 bytes, overlapping the chunk before when `n` is not a multiple of 16.
        self.mix(word(bytes, n - 16), word(bytes, n - 8));
    }

    /// `str`'s `Hash` ends every string with one `0xff` byte; like every integer, a byte
    /// gets a multiply of its own, so a run of small writes cannot add up to another run.
    #[inline]
    fn write_u8(&mut self, b: u8) {
        self.write_u64(u64::from(b));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.acc = fold(self.acc ^ n, self.key ^ INT);
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fold(self.acc, self.key ^ FINISH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::Hash;

    fn all_distinct<T: Hash>(state: &FoldState, keys: &[T]) -> bool {
        let hashes: HashSet<u64> = keys.iter().map(|k| state.hash_one(k)).collect();
        hashes.len() == keys.len()
    }

    /// Two tables never share keys: the same text hashes differently in each.
    #[test]
    fn each_table_has_its_own_keys() {
        let a = FoldState::new();
        let b = FoldState::new();
        let same = (0..1000)
            .filter(|i| {
                let k = format!("agent-{i}");
                a.hash_one(&k) == b.hash_one(&k)
            })
            .count();
        assert_eq!(same, 0);
    }

    /// The families seed-independent collisions are built from: zero extension, one byte
    /// repeated at every length, every string of two bytes, one bit flipped anywhere in a
    /// 40-byte id. Under any key a collision among them would be an accident of 2^-64 per
    /// pair; a construction flaw shows as many.
    #[test]
    fn structured_families_do_not_collide() {
        let s = FoldState::new();
        let zero_ext: Vec<Vec<u8>> = (0..64).map(|n| vec![0u8; n]).collect();
        assert!(all_distinct(&s, &zero_ext));
        let prefix_ext: Vec<String> = (0..64).map(|n| format!("a{}", "\0".repeat(n))).collect();
        assert!(all_distinct(&s, &prefix_ext));
        let repeated: Vec<Vec<u8>> = (0..=255u8)
            .flat_map(|b| (1..40).map(move |n| vec![b; n]))
            .collect();
        assert!(all_distinct(&s, &repeated));
        let pairs: Vec<[u8; 2]> = (0..=u16::MAX).map(u16::to_le_bytes).collect();
        assert!(all_distinct(&s, &pairs));
        let base = *b"0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d6e7f";
        let mut flips = vec![base];
        for i in 0..base.len() {
            for bit in 0..8 {
                let mut k = base;
                k[i] ^= 1 << bit;
                flips.push(k);
            }
        }
        assert!(all_distinct(&s, &flips));
    }

    /// The overlap trap: with the length xored into a data word, a 9-byte text whose two
    /// overlapping reads equal an 8-byte text's (its bytes shifted by one, one bit flipped)
    /// collides under every key. The length's own multiply keeps such pairs apart; this
    /// tries every pair of that shape over a byte alphabet, and across the 16-byte boundary.
    #[test]
    fn overlapping_reads_cannot_trade_data_for_length() {
        let s = FoldState::new();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for b in 0..=255u8 {
            for n in [4usize, 7, 8, 9, 15, 16, 17, 31, 32, 33] {
                let mut k = vec![b; n];
                keys.push(k.clone());
                k[n / 2] ^= 1;
                keys.push(k);
            }
        }
        keys.sort();
        keys.dedup();
        assert!(all_distinct(&s, &keys));
    }

    /// A string and the same bytes split across two writes, or followed by another field,
    /// are different keys: `(a, b)` pairs whose concatenations agree do not collide.
    #[test]
    fn field_boundaries_count() {
        let s = FoldState::new();
        let whole = "abcdefghijklmnopqrst";
        let keys: Vec<(&str, &str)> = (0..=whole.len()).map(|i| whole.split_at(i)).collect();
        assert!(all_distinct(&s, &keys));
    }

    /// The names a real hub holds (a prefix and a counter) spread over hashbrown's bucket
    /// bits and its control byte: no bucket of 4,096 gets more than 3× its share from
    /// 200,000 names, and the top seven bits take all 128 values evenly.
    #[test]
    fn sequential_names_spread_over_buckets_and_control_bytes() {
        let s = FoldState::new();
        let n = 200_000usize;
        let mut low = vec![0usize; 4096];
        let mut top = vec![0usize; 128];
        for i in 0..n {
            let h = s.hash_one(format!("agent-{i:06}"));
            low[(h & 4095) as usize] += 1;
            top[(h >> 57) as usize] += 1;
        }
        let worst_low = *low.iter().max().unwrap();
        assert!(worst_low <= 3 * n / 4096, "worst bucket {worst_low}");
        let (lo, hi) = (*top.iter().min().unwrap(), *top.iter().max().unwrap());
        assert!(
            lo * 10 >= (n / 128) * 8 && hi * 10 <= (n / 128) * 12,
            "{lo}..{hi}"
        );
    }

    /// Integer keys (the pending table's sequence numbers) spread as well as text does.
    #[test]
    fn sequential_integers_spread() {
        let s = FoldState::new();
        let keys: Vec<u64> = (0..100_000).collect();
        assert!(all_distinct(&s, &keys));
        let low: HashSet<u64> = keys.iter().map(|k| s.hash_one(k) & 1023).collect();
        assert_eq!(low.len(), 1024);
    }

    /// The maps work as maps with these keys (lookups by borrowed text).
    #[test]
    fn a_fold_map_finds_what_it_holds() {
        let mut m: FoldMap<String, usize> = FoldMap::default();
        for i in 0..10_000 {
            m.insert(format!("k{i}"), i);
        }
        assert!((0..10_000).all(|i| m.get(format!("k{i}").as_str()) == Some(&i)));
        assert_eq!(m.get("k10000"), None);
    }
}
