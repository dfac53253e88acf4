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

/// Runs `f`, whose writes on a SQLite store must not wait long for other
/// writers: `None` when its first write would have (another writer of this
/// process still at it after 10 ms, another connection or process holding
/// the write lock, or an eviction ahead) — that write was refused and
/// changed nothing, and `f`'s result, an error, is dropped: run `f` again
/// where waiting is fine. Otherwise `f`'s result, each of its writes
/// committed (sharing a commit with writers queued behind it for at most
/// 10 ms).
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

/// Why a write inside [`without_waiting`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another writer of this process held the write path too long.
    Writer = 0,
    /// Another connection or process held SQLite's write lock.
    Locked = 1,
    /// The project is at its bound: an eviction would follow the write.
    Bound = 2,
}

static REFUSALS: [std::sync::atomic::AtomicU64; 3] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 3];

/// Writes refused inside [`without_waiting`] since the process started,
/// by [`Refusal`] (writer, locked, bound): what a server's metrics show.
pub fn refusals() -> [u64; 3] {
    REFUSALS
        .each_ref()
        .map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
}

/// The error a refused hurried write returns (never seen by a caller of
/// [`without_waiting`], which answers `None`).
pub(crate) fn refused(why: Refusal) -> Error {
    REFUSALS[why as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
