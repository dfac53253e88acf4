//! Writes that must not wait ([`without_waiting`]): a thread-local
//! request the stores that honour it read at their first write
//! ([`crate::Store::writes_can_hurry`]; SQLite's group commit, `group.rs`).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

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
    Refused(Refusal),
}

thread_local! {
    static HURRY: Cell<Hurry> = const { Cell::new(Hurry::No) };
    /// The turn a refused write waits for, where its store has turns.
    static TURN: RefCell<Option<WriteTurn>> = const { RefCell::new(None) };
}

/// Runs `f`, whose writes on a SQLite store must not wait long for other
/// writers: [`Refused`] when its first write would have (another writer of
/// this process still at it after a millisecond, e.g. committing; another
/// connection or process holding the write lock; an eviction ahead) — that
/// write was refused and changed nothing, and `f`'s result, an error, is
/// dropped: run `f` again once [`Refused::turn`] says the writer ahead has
/// moved on, or where waiting is fine. Otherwise `f`'s result, each of its
/// writes committed (sharing a commit with writers queued behind it for at
/// most 10 ms).
///
/// For callers that must not block, such as a server's event loop: a
/// remember there answers without the two thread hand-offs of the blocking
/// pool when no other write is in the way, and waits out one in the way
/// without holding its thread. Other stores ignore it
/// ([`crate::Engine::writes_can_hurry`]).
pub fn without_waiting<T>(f: impl FnOnce() -> T) -> Result<T, Refused> {
    struct Restore(Hurry);
    impl Drop for Restore {
        fn drop(&mut self) {
            HURRY.set(self.0);
        }
    }
    let outer = Restore(HURRY.replace(Hurry::First));
    TURN.take();
    let out = f();
    let hurry = HURRY.get();
    drop(outer);
    match hurry {
        Hurry::Refused(why) => Err(Refused {
            why,
            turn: TURN.take(),
        }),
        _ => Ok(out),
    }
}

/// A write refused inside [`without_waiting`], nothing of it written.
#[derive(Clone, Debug)]
pub struct Refused {
    /// Why it was refused.
    pub why: Refusal,
    turn: Option<WriteTurn>,
}

impl Refused {
    /// For a write refused because another writer of this process was at
    /// it ([`Refusal::Writer`]): a future that resolves once that writer
    /// has let go of the store's write path (its group of writes
    /// committed, or its write done and the group left open for more),
    /// at once if it has already. Trying again then is likely to go
    /// ahead, though another writer may have come first. `None` for the
    /// other refusals: nothing in this process says when they end
    /// (another process's lock, an eviction).
    pub fn turn(&self) -> Option<WriteTurn> {
        self.turn.clone()
    }
}

/// Resolves once a store's write path has moved on since a refusal
/// ([`Refused::turn`]). Needs no particular runtime.
#[derive(Clone, Debug)]
#[must_use = "a future does nothing unless polled"]
pub struct WriteTurn {
    turns: Arc<Turns>,
    after: u64,
}

impl Future for WriteTurn {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let t = &self.turns;
        if t.now() != self.after {
            return Poll::Ready(());
        }
        t.wakers().push(cx.waker().clone());
        // A turn between the look above and the push found no waker to
        // wake: look again now that it is registered.
        if t.now() != self.after {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// The turns of one store's write path: counted whenever a writer lets
/// go of it, waking whoever waits for the next.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    n: AtomicU64,
    wakers: Mutex<Vec<Waker>>,
}

impl Turns {
    /// The turn now: read before looking whether the path is free, so that
    /// a refusal waits for a turn after that look ([`refused_since`]).
    pub(crate) fn now(&self) -> u64 {
        self.n.load(Ordering::SeqCst)
    }

    /// The path moved on (a group ended, or a writer left it open for
    /// others): wakes whoever waits.
    pub(crate) fn next(&self) {
        self.n.fetch_add(1, Ordering::SeqCst);
        let woken = std::mem::take(&mut *self.wakers());
        for w in woken {
            w.wake();
        }
    }

    fn wakers(&self) -> MutexGuard<'_, Vec<Waker>> {
        self.wakers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// This thread's hurry for the write about to start: `(hurried, first)`.
pub(crate) fn hurry() -> (bool, bool) {
    match HURRY.get() {
        Hurry::No => (false, false),
        Hurry::First => {
            HURRY.set(Hurry::Later);
            (true, true)
        }
        Hurry::Later | Hurry::Refused(_) => (true, false),
    }
}

/// Why a write inside [`without_waiting`] was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another writer of this process held the write path too long.
    Writer = 0,
    /// Another connection or process held SQLite's write lock.
    Locked = 1,
    /// The project is at its bound (an eviction would follow the write),
    /// or the session is (a compaction would come first).
    Bound = 2,
}

static REFUSALS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// Writes refused inside [`without_waiting`] since the process started,
/// by [`Refusal`] (writer, locked, bound): what a server's metrics show.
pub fn refusals() -> [u64; 3] {
    REFUSALS.each_ref().map(|n| n.load(Ordering::Relaxed))
}

/// The error a refused hurried write returns (never seen by a caller of
/// [`without_waiting`], which answers [`Refused`]).
pub(crate) fn refused(why: Refusal) -> Error {
    REFUSALS[why as usize].fetch_add(1, Ordering::Relaxed);
    HURRY.set(Hurry::Refused(why));
    Error::Unavailable {
        backend: "store",
        source: Box::new(WriteRefused),
    }
}

/// The source of the error a refused hurried write returns inside
/// [`without_waiting`] ([`Error::is_write_refusal`]).
#[derive(Debug)]
pub(crate) struct WriteRefused;

impl std::fmt::Display for WriteRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("another write is in progress and this one was asked not to wait")
    }
}

impl std::error::Error for WriteRefused {}

/// [`refused`], for a write path found held at turn `after` of `turns`
/// ([`Turns::now`]): the refusal's [`Refused::turn`] resolves at the next.
pub(crate) fn refused_since(why: Refusal, turns: &Arc<Turns>, after: u64) -> Error {
    TURN.set(Some(WriteTurn {
        turns: turns.clone(),
        after,
    }));
    refused(why)
}

/// Whether this thread is inside [`without_waiting`] (before or after its
/// first write): work that would wait (a compaction) is refused there.
pub(crate) fn hurried() -> bool {
    HURRY.get() != Hurry::No
}

/// Whether this thread is inside [`without_waiting`] before its first
/// write: an engine operation that knows it would wait (an eviction ahead)
/// refuses then with [`refused`], before writing anything.
pub(crate) fn first_write_ahead() -> bool {
    HURRY.get() == Hurry::First
}
