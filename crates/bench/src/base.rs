//! What every module of the bench shares, and nothing else: its result type (an error is
//! the one line the bench prints before it exits 1) and its progress line on stderr. It imports
//! nothing of the bench, so every module can stand on it.

/// A bench step's result: its error is the line printed before exit 1.
pub(crate) type Res<T> = Result<T, String>;

/// One progress line on stderr (stdout is the report's).
pub(crate) fn progress(msg: &str) {
    eprintln!("agent-hub-bench: {msg}");
}
