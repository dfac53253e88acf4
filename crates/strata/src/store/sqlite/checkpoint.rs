//! Checkpoints, and merges of the text index, on a thread of their own.
//!
//! SQLite checkpoints the write-ahead log inside the commit that takes it
//! past `wal_autocheckpoint` pages (1,000 by default): that commit copies
//! every page back into the database file and syncs it, tens of
//! milliseconds, while it holds this process's write path (`group.rs`), so
//! every write queued behind it waits as long. Here a thread of the store
//! checkpoints instead (`PRAGMA wal_checkpoint(PASSIVE)` on a connection
//! of its own, every [`EVERY`] while there were commits): a passive
//! checkpoint takes no lock a writer needs, so writes go on while it
//! copies. The store's connections keep SQLite's own checkpoint as a
//! backstop at [`BACKSTOP_PAGES`], should the thread fall behind.
//!
//! The text index (FTS5) writes a segment per commit and merges segments
//! as they pile up. Left to itself (`automerge`) it merges inside the
//! commit of every 64th leaf page written, 64 pages a level at a time:
//! 10-15 ms of one remember in ~80 on a 100,000-memory store, every write
//! behind it waiting. The store turns that off (schema version 8) and this
//! thread merges instead, [`MERGE_PAGES`] pages a transaction through the
//! process's write path, so a remember waits at most one small step; it
//! merges what the writes since its last round left, within
//! [`MERGE_BUDGET`] a round (another round follows while some is left,
//! writes or not), and before it stops (the store's drop) within
//! [`MERGE_AT_STOP`]. A process that never gets to it (killed) leaves
//! segments for the next round of any process; FTS5's `crisismerge`
//! (a level of 16 segments merged in the commit that makes it) is the
//! backstop.
//!
//! The thread starts at the store's first write and stops when the store
//! is dropped.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::group::Writer;
use super::{Pool, SqliteOptions};
use crate::Result;

/// How often the thread checkpoints while there are commits.
pub(super) const EVERY: Duration = Duration::from_millis(50);

/// `wal_autocheckpoint` of the store's connections: a commit checkpoints
/// only past this many pages (40 MiB of 4 KiB pages).
pub(super) const BACKSTOP_PAGES: u32 = 10_000;

/// Leaf pages one merge step of the text index writes (one transaction:
/// one to two milliseconds of the write path).
pub(super) const MERGE_PAGES: u32 = 16;

/// How long the thread waits before it looks again, when it finds a
/// writer of the process at the write path: merges go in the gaps.
const MERGE_LOOK: Duration = Duration::from_micros(500);

/// How long the thread merges in one round at most (a round a period).
const MERGE_BUDGET: Duration = Duration::from_millis(25);

/// How long the thread merges before it stops, at most.
const MERGE_AT_STOP: Duration = Duration::from_millis(20);

/// The store's write path, for the merges.
pub(super) struct WritePath {
    pub(super) writer: Arc<Writer>,
    pub(super) pool: Arc<Pool>,
}

#[derive(Debug, Default)]
struct State {
    /// Writes so far (the thread checkpoints when this moved).
    writes: u64,
    /// The thread was started (at the first write).
    started: bool,
    /// The thread waits for a write (and is woken by the next).
    idle: bool,
    stop: bool,
}

#[derive(Debug, Default)]
pub(super) struct Checkpointer {
    shared: Arc<(Mutex<State>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Checkpointer {
    /// Notes a write of the store at `path`; starts the thread at the first.
    pub(super) fn wrote(
        &self,
        path: &std::path::Path,
        opts: &SqliteOptions,
        write_path: impl FnOnce() -> WritePath,
    ) {
        let (state, wake) = &*self.shared;
        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
        s.writes += 1;
        if s.idle {
            wake.notify_all();
        }
        if s.started {
            return;
        }
        s.started = true;
        drop(s);
        let (shared, path, opts) = (self.shared.clone(), path.to_path_buf(), opts.clone());
        let w = write_path();
        *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = std::thread::Builder::new()
            .name("strata-checkpoint".into())
            .spawn(move || run(&shared, path, &opts, &w))
            .ok();
    }
}

fn run(shared: &(Mutex<State>, Condvar), path: PathBuf, opts: &SqliteOptions, w: &WritePath) {
    let (state, wake) = shared;
    // Without a connection of its own the backstop checkpoints.
    let Ok(c) = super::open_conn(&path, opts) else {
        return;
    };
    let mut seen = 0;
    let mut more = false;
    loop {
        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
        // Asleep until a write (or the store's drop) wakes it.
        s.idle = true;
        while !s.stop && s.writes == seen && !more {
            s = wake.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        s.idle = false;
        if s.stop {
            drop(s);
            merge(w, &path, opts, MERGE_AT_STOP, false);
            return;
        }
        seen = s.writes;
        drop(s);
        // Merges left when the round ran out of time: another round
        // follows, writes or not.
        more = merge(w, &path, opts, MERGE_BUDGET, true);
        // Busy (another checkpoint running) or failing: the next round,
        // or the backstop, does it.
        let _ = c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
        // At most one checkpoint per period, however many writes.
        let s = state.lock().unwrap_or_else(PoisonError::into_inner);
        if !s.stop {
            let _ = wake.wait_timeout(s, EVERY);
        }
    }
}

/// Merges the text index's segments, [`MERGE_PAGES`] a transaction
/// through the store's write path, until nothing is left to merge or
/// `budget` is spent; with `in_gaps`, only while no other writer of the
/// process is at the write path. Failures (a busy file, another process's
/// lock) end the round: the next one, or FTS5's backstop, merges.
fn merge(
    w: &WritePath,
    path: &std::path::Path,
    opts: &SqliteOptions,
    budget: Duration,
    in_gaps: bool,
) -> bool {
    let until = Instant::now() + budget;
    while Instant::now() < until {
        if in_gaps && w.writer.busy() {
            std::thread::sleep(MERGE_LOOK);
            continue;
        }
        let merged = w.writer.write(
            || super::take_from(&w.pool, path, opts),
            &|c| super::give_back_to(&w.pool, c),
            merge_step,
        );
        if !matches!(merged, Ok(true)) {
            return false;
        }
    }
    true
}

/// One step of merging the text index: whether it merged anything (FTS5
/// changes a row or more of its own tables when it did; fewer than two
/// when no level holds enough segments to merge).
pub(super) fn merge_step(c: &Connection) -> Result<bool> {
    let before = c.total_changes();
    c.execute(
        "INSERT INTO memories_fts(memories_fts, rank) VALUES('merge', ?1)",
        [MERGE_PAGES],
    )?;
    Ok(c.total_changes() - before >= 2)
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (state, wake) = &*self.shared;
        state.lock().unwrap_or_else(PoisonError::into_inner).stop = true;
        wake.notify_all();
        if let Some(t) = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}
