//! Attacks on the relay session (filled in next commit).
