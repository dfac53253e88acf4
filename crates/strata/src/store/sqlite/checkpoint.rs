//! Checkpoints on a thread of their own.
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
//! The thread starts at the store's first write and stops when the store
//! is dropped.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::SqliteOptions;

/// How often the thread checkpoints while there are commits.
pub(super) const EVERY: Duration = Duration::from_millis(50);

/// `wal_autocheckpoint` of the store's connections: a commit checkpoints
/// only past this many pages (40 MiB of 4 KiB pages).
pub(super) const BACKSTOP_PAGES: u32 = 10_000;

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
    pub(super) fn wrote(&self, path: &std::path::Path, opts: &SqliteOptions) {
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
        *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = std::thread::Builder::new()
            .name("strata-checkpoint".into())
            .spawn(move || run(&shared, path, &opts))
            .ok();
    }
}

fn run(shared: &(Mutex<State>, Condvar), path: PathBuf, opts: &SqliteOptions) {
    let (state, wake) = shared;
    // Without a connection of its own the backstop checkpoints.
    let Ok(c) = super::open_conn(&path, opts) else {
        return;
    };
    let mut seen = 0;
    loop {
        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
        // Asleep until a write (or the store's drop) wakes it.
        s.idle = true;
        while !s.stop && s.writes == seen {
            s = wake.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        s.idle = false;
        if s.stop {
            return;
        }
        seen = s.writes;
        drop(s);
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
