//! The nonces this hub issued and that may still be answered (docs/relay-protocol.md §2,
//! "Reflection"): every challenge nonce an acceptor sends and every nonce a dialer asks the
//! acceptor to prove, shared by all sessions of one hub. A dialer refuses a challenge whose
//! nonce is in the book, and an acceptor a handshake whose nonce is: that nonce can only have
//! come back from one of our own connections, so someone is reflecting our challenges at us
//! (the attack that, under v0's proof, lets a keyless stranger authenticate as a peer).
//!
//! A nonce is needed only while the session that issued it waits for its answer, so each
//! entry carries that session's handshake deadline and is forgotten after it. The book is also
//! bounded (`NONCE_BOOK_CAP`): past it the oldest entry goes first. Evicting a live entry needs
//! that many handshakes opened within one handshake timeout (a cap on unauthenticated relay
//! connections keeps that out of reach). For a v1 peer the transcript proof (`transcript`)
//! refuses a reflection even without the book, so the book is defence in depth there; for a
//! v0 peer (`allow_claudectl = true`) it is the only defence.
//!
//! Sans-IO: time is passed in. It is a shared handle (`Arc<Mutex<…>>`) only so that sessions
//! stay `Send`; the server is single-threaded and the lock is never contended. The relay IO
//! layer owns the one book (inside its `SessionConfig`); sessions consult it, the IO layer
//! decides nothing with it. Refuses: randomness (nonces are made by the caller).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Issued nonces remembered at most. An entry is about 100 bytes, so the book stays under
/// half a megabyte however many connections come and go.
pub const NONCE_BOOK_CAP: usize = 4096;

#[derive(Debug, Default)]
struct Book {
    live: HashSet<String>,
    /// Insertion order with each entry's expiry. Every session of one hub has the same
    /// handshake timeout, so this is also expiry order (and where it is not, an entry that
    /// outlives its expiry only refuses a nonce nobody will ever send again).
    order: VecDeque<(String, Instant)>,
    evicted: u64,
}

impl Book {
    fn prune(&mut self, now: Instant) {
        while let Some((_, until)) = self.order.front() {
            if *until > now {
                break;
            }
            if let Some((n, _)) = self.order.pop_front() {
                self.live.remove(&n);
            }
        }
    }
}

/// One hub's issued nonces. Clones share the same book.
#[derive(Clone, Default)]
pub struct NonceBook(Arc<Mutex<Book>>);

impl NonceBook {
    pub fn new() -> NonceBook {
        NonceBook::default()
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // A panic while holding the lock cannot leave the book inconsistent in a way that
        // matters (at worst one entry is missing), so a poisoned lock is used as it is.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a nonce this hub just sent, answerable until `until` (the issuing session's
    /// handshake deadline).
    pub fn issue(&self, nonce_hex: &str, until: Instant, now: Instant) {
        let mut b = self.book();
        b.prune(now);
        if b.live.contains(nonce_hex) {
            return;
        }
        while b.order.len() >= NONCE_BOOK_CAP {
            if let Some((n, _)) = b.order.pop_front() {
                b.live.remove(&n);
                b.evicted += 1;
            }
        }
        b.live.insert(nonce_hex.to_owned());
        b.order.push_back((nonce_hex.to_owned(), until));
    }

    /// Whether `nonce_hex` is one this hub issued and may still be answered.
    pub fn issued(&self, nonce_hex: &str, now: Instant) -> bool {
        let mut b = self.book();
        b.prune(now);
        b.live.contains(nonce_hex)
    }

    /// Entries held now (expired ones are dropped first).
    pub fn len(&self, now: Instant) -> usize {
        let mut b = self.book();
        b.prune(now);
        b.order.len()
    }

    /// Live entries pushed out by the cap so far.
    pub fn evicted(&self) -> u64 {
        self.book().evicted
    }
}

impl PartialEq for NonceBook {
    /// Two handles are equal when they share one book (a config compares equal to its clone).
    fn eq(&self, other: &NonceBook) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for NonceBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.book();
        f.debug_struct("NonceBook")
            .field("entries", &b.order.len())
            .field("evicted", &b.evicted)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_nonce_is_known_until_its_deadline_and_clones_share_the_book() {
        let t0 = crate::kernel::deadline::test_origin();
        let book = NonceBook::new();
        let other_session = book.clone();
        book.issue(&"ab".repeat(32), t0 + Duration::from_secs(10), t0);
        assert!(other_session.issued(&"ab".repeat(32), t0));
        assert!(other_session.issued(&"ab".repeat(32), t0 + Duration::from_millis(9_999)));
        assert!(!other_session.issued(&"cd".repeat(32), t0));
        assert!(!book.issued(&"ab".repeat(32), t0 + Duration::from_secs(10)));
        assert_eq!(book.len(t0 + Duration::from_secs(10)), 0);
        assert_eq!(book, other_session);
        assert_ne!(book, NonceBook::new());
    }

    #[test]
    fn the_book_is_bounded_and_evicts_the_oldest_first() {
        let t0 = crate::kernel::deadline::test_origin();
        let until = t0 + Duration::from_secs(10);
        let book = NonceBook::new();
        for i in 0..NONCE_BOOK_CAP + 10 {
            book.issue(&format!("{i:064x}"), until, t0);
        }
        assert_eq!(book.len(t0), NONCE_BOOK_CAP);
        assert_eq!(book.evicted(), 10);
        assert!(!book.issued(&format!("{:064x}", 9), t0));
        assert!(book.issued(&format!("{:064x}", 10), t0));
        assert!(book.issued(&format!("{:064x}", NONCE_BOOK_CAP + 9), t0));
        // Issuing the same nonce twice keeps one entry.
        book.issue(&format!("{:064x}", 10), until, t0);
        assert_eq!(book.len(t0), NONCE_BOOK_CAP);
        assert!(format!("{book:?}").contains("entries: 4096"));
    }
}
