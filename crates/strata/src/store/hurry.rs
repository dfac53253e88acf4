//! Writes that must not wait ([`without_waiting`]): a thread-local
//! request the stores that honour it read at their first write
//! ([`crate::Store::writes_can_hurry`]; SQLite's group commit, `group.rs`).

use std::cell::Cell;

use crate::error::Error;

/// What [`without_waiting`] asked of this thread's writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hurry {
    /// Write as usual.
    No,
    /// Inside `without_waiting`, before the first write.
    First,
    /// Inside `without_waiting`, after the first write.
    Later,
    /// The first write was refused.
    Refused,
}

thread_local! {
    static HURRY: Cell<Hurry> = const { Cell::new(Hurry::No) };
}

/// Runs `f`, whose writes on a SQLite store must not wait for other
/// writers: `None` when its first write would have (another writer of this
/// process is writing, or another connection or process holds the write
/// lock) — that write was refused at once and changed nothing, and `f`'s
/// result, an error, is dropped: run `f` again where waiting is fine.
/// Otherwise `f`'s result; each of its writes commits before it returns,
/// without keeping the transaction open for writers queued behind it.
///
/// For callers that must not block, such as a server's event loop: a
/// remember there answers without the two thread hand-offs of the blocking
/// pool when no other write is in the way. Other stores ignore it
/// ([`crate::Engine::writes_can_hurry`]).
pub fn without_waiting<T>(f: impl FnOnce() -> T) -> Option<T> {
    struct Restore(Hurry);
    impl Drop for Restore {
        fn drop(&mut self) {
            HURRY.set(self.0);
        }
    }
    let outer = Restore(HURRY.replace(Hurry::First));
    let out = f();
    let refused = HURRY.get() == Hurry::Refused;
    drop(outer);
    (!refused).then_some(out)
}

/// This thread's hurry for the write about to start: `(hurried, first)`.
pub(crate) fn hurry() -> (bool, bool) {
    match HURRY.get() {
        Hurry::No => (false, false),
        Hurry::First => {
            HURRY.set(Hurry::Later);
            (true, true)
        }
        Hurry::Later | Hurry::Refused => (true, false),
    }
}

/// The error a refused hurried write returns (never seen by a caller of
/// [`without_waiting`], which answers `None`).
pub(crate) fn refused() -> Error {
    HURRY.set(Hurry::Refused);
    Error::Unavailable {
        backend: "store",
        source: "another write is in progress and this one was asked not to wait".into(),
    }
}

/// Whether this thread is inside [`without_waiting`] before its first
/// write: an engine operation that knows it would wait (an eviction ahead)
/// refuses then with [`refused`], before writing anything.
pub(crate) fn first_write_ahead() -> bool {
    HURRY.get() == Hurry::First
}
