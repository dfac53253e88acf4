//! Group commit: the writers of one process share transactions.
//!
//! Every write of a [`super::SqliteStore`] runs here, one at a time. A
//! group takes a connection from the store's pool when it begins and gives
//! it back when it ends (so the connection that wrote also serves the next
//! reads with a warm cache). A writer that finds the transaction already
//! open (an earlier writer left it open because more were queued) runs its
//! work inside it, under a savepoint of its own, so a write that fails is
//! undone alone; the first writer of a group needs none (its failure rolls
//! the whole transaction back). The transaction commits when nobody else is waiting to
//! write, or when it holds [`MAX_WRITES`] writes or has been open for
//! [`MAX_OPEN`]; each writer returns only once the commit that holds its
//! work has returned, so an acknowledged write is as durable as before
//! (`synchronous=FULL`: the commit's fsync covers every write in it).
//!
//! A write inside [`crate::without_waiting`] (a server answering on its event
//! loop) must not wait long: its first write is refused, changing nothing,
//! when another writer of this process holds the write path for more than
//! [`HURRY_LOOK`] (committing, say) or another connection holds SQLite's
//! write lock, and the caller runs it again once the writer ahead lets go
//! (every let-go is a turn, [`crate::Refused::turn`], which an async caller
//! awaits without holding its thread) or where waiting is fine; and it
//! waits for writers queued behind it at most [`HURRY_WAIT`] before it
//! commits the group itself.
//!
//! Changes to the text index wait in the group's queue and go in just
//! before the commit, in rowid order (`text_queue.rs`): FTS5 would write a
//! segment at each write's savepoint.
//!
//! What this saves is commits: one fsync and one round of every other
//! connection dropping its page cache and memory map per group instead of
//! per write. Under concurrent writers the groups form by themselves (the
//! writers that queue while one commits make the next group); a writer
//! alone commits at once, as before.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::text_queue;
use crate::Result;
use crate::error::Error;
use crate::store::hurry::{Refusal, Turns, hurry, refused, refused_since};

/// A group commits once it holds this many writes, waiting or not.
pub(super) const MAX_WRITES: usize = 256;
/// A group commits once it has been open this long, waiting or not.
pub(super) const MAX_OPEN: Duration = Duration::from_millis(20);

/// How long a write inside [`crate::without_waiting`] looks for a turn
/// while another writer of this process holds the write path, and how long
/// it sleeps between looks: long enough for a remember ahead to finish
/// (a fraction of a millisecond), short of a commit's fsync. Refused, its
/// caller waits for the next turn without holding a thread
/// ([`crate::Refused::turn`]).
const HURRY_LOOK: Duration = Duration::from_millis(1);
const HURRY_NAP: Duration = Duration::from_micros(50);
/// How long a write inside [`crate::without_waiting`] keeps its group open
/// for writers queued behind it before it commits the group itself.
const HURRY_WAIT: Duration = Duration::from_millis(10);

/// The write side of a store: its connection and the open group.
#[derive(Debug, Default)]
pub(super) struct Writer {
    /// The store's busy timeout, restored after a hurried first write
    /// tried SQLite's write lock without waiting.
    busy_timeout: Duration,
    state: Mutex<State>,
    /// Signalled whenever a group ends (committed or rolled back).
    ended: Condvar,
    /// Writers blocked on `state`: while there are any, a writer leaves the
    /// group open for them.
    waiting: AtomicUsize,
    /// Counted whenever a writer lets go of `state`: what a refused
    /// hurried write waits for ([`crate::Refused::turn`]).
    turns: std::sync::Arc<Turns>,
}

#[derive(Debug, Default)]
struct State {
    /// The open group's connection.
    conn: Option<Connection>,
    /// The group's transaction is open on `conn`.
    open: Option<Instant>,
    /// Writes done in the open group.
    writes: usize,
    /// Number of the open (or next) group.
    group: u64,
    /// Every group below this one has ended.
    ended: u64,
    /// The open group's changes to the text index, written just before
    /// it commits.
    text: text_queue::Queue,
    /// Groups whose commit failed: why, and how many of their writers
    /// have yet to read it (kept until each has, so a later failure cannot
    /// hide an earlier one from a writer still waking up).
    failed: std::collections::HashMap<u64, (Failure, usize)>,
}

impl Writer {
    pub(super) fn new(busy_timeout: Duration) -> Writer {
        Writer {
            busy_timeout,
            ..Writer::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        s
    }

    /// Runs `f` inside the process's write transaction and returns once
    /// that transaction has committed (or `f`'s error, its work undone).
    /// `take` gives a connection from the store's pool when a group
    /// begins, `give_back` returns it when the group ends.
    pub(super) fn write<T>(
        &self,
        take: impl FnOnce() -> Result<Connection>,
        give_back: &dyn Fn(Connection),
        f: impl FnOnce(&Connection) -> Result<T>,
    ) -> Result<T> {
        let (hurried, first) = hurry();
        let mut s = if first {
            // Another writer of this process is usually a remember like
            // this one, done in a fraction of a millisecond: worth a short
            // wait, not a trip through the blocking pool. A long one (a
            // batch, an import, a group still filling) is not.
            // Counted while it looks, so the writer ahead keeps its group
            // open for it (one commit for both).
            let since = Instant::now();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let got = loop {
                let turn = self.turns.now();
                match self.state.try_lock() {
                    Ok(s) => break Ok(s),
                    Err(TryLockError::Poisoned(p)) => break Ok(p.into_inner()),
                    Err(TryLockError::WouldBlock) if since.elapsed() < HURRY_LOOK => {
                        std::thread::sleep(HURRY_NAP);
                    }
                    Err(TryLockError::WouldBlock) => break Err(turn),
                }
            };
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            match got {
                Ok(s) => s,
                Err(turn) => return Err(refused_since(Refusal::Writer, &self.turns, turn)),
            }
        } else {
            self.lock()
        };
        if s.open.is_none() {
            let c = take()?;
            let begun = if first {
                // SQLite's write lock, without its busy handler's waits.
                c.busy_timeout(Duration::ZERO)?;
                let begun = c.execute_batch("BEGIN IMMEDIATE");
                c.busy_timeout(self.busy_timeout)?;
                begun
            } else {
                c.execute_batch("BEGIN IMMEDIATE")
            };
            if let Err(e) = begun {
                give_back(c);
                if first && e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) {
                    return Err(refused(Refusal::Locked));
                }
                return Err(e.into());
            }
            s.conn = Some(c);
            s.open = Some(Instant::now());
        }
        // The first write of a group is undone with the whole transaction;
        // later ones under a savepoint, keeping the others' work.
        let alone = s.writes == 0;
        let mark = s.text.mark();
        let out = match if alone {
            Ok(())
        } else {
            conn(&s).execute_batch("SAVEPOINT write")
        } {
            Ok(()) => {
                let st = &mut *s;
                let c = st.conn.as_ref().expect("the write connection is open");
                catch_unwind(AssertUnwindSafe(|| {
                    text_queue::queued(&mut st.text, || f(c))
                }))
            }
            Err(e) => Ok(Err(e.into())),
        };
        let done = match (&out, alone) {
            (_, true) => Ok(()),
            (Ok(Ok(_)), false) => conn(&s).execute_batch("RELEASE write"),
            (_, false) => conn(&s).execute_batch("ROLLBACK TO write; RELEASE write"),
        };
        let out = match (out, done) {
            (Ok(Ok(v)), Ok(())) => Ok(v),
            // The work succeeded but could not be kept: undo it as a failure.
            (Ok(Ok(_)), Err(e)) => {
                let _ = conn(&s).execute_batch("ROLLBACK TO write; RELEASE write");
                Err(e.into())
            }
            (Ok(Err(e)), _) => Err(e),
            (Err(panic), _) => {
                s.text.undo(mark);
                self.undo_or_end(&mut s, alone, give_back);
                drop(s);
                resume_unwind(panic);
            }
        };
        let Ok(v) = out else {
            // Nothing of this write is in the group; others may be.
            s.text.undo(mark);
            self.undo_or_end(&mut s, alone, give_back);
            return out;
        };
        s.writes += 1;
        let mine = s.group;
        if self.should_wait(&s) {
            // Left open for the writers queued behind; whoever finishes
            // with none behind commits. Nobody waits past the group's
            // age limit (a hurried writer past its own, shorter one): the
            // writer queued behind may have given up (a hurried one
            // refused), so past it the waiter commits the group itself.
            let opened = s.open.unwrap_or_else(Instant::now);
            let mut deadline = opened + MAX_OPEN;
            // The path is free for the next writer to join: a turn.
            self.turns.next();
            if hurried {
                deadline = deadline.min(Instant::now() + HURRY_WAIT);
            }
            while s.ended <= mine {
                let now = Instant::now();
                if now >= deadline {
                    self.end(&mut s, give_back);
                    break;
                }
                s = self
                    .ended
                    .wait_timeout(s, deadline - now)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        } else {
            self.end(&mut s, give_back);
        }
        match s.failed.get_mut(&mine) {
            Some((why, unread)) => {
                let e = commit_failed(why);
                *unread -= 1;
                if *unread == 0 {
                    s.failed.remove(&mine);
                }
                Err(e)
            }
            None => Ok(v),
        }
    }

    /// Whether a writer of this process is at the write path (a group
    /// open, the path held, or a writer waiting for it): background work
    /// that can wait (`checkpoint.rs`'s merges) waits then.
    pub(super) fn busy(&self) -> bool {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            return true;
        }
        match self.state.try_lock() {
            Ok(s) => s.open.is_some(),
            Err(TryLockError::Poisoned(p)) => p.into_inner().open.is_some(),
            Err(TryLockError::WouldBlock) => true,
        }
    }

    /// Whether the open group should stay open for writers queued behind
    /// this one.
    fn should_wait(&self, s: &State) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
            && s.writes < MAX_WRITES
            && s.open.is_some_and(|t| t.elapsed() < MAX_OPEN)
    }

    /// After a failed write: a group that held nothing else is rolled
    /// back whole; otherwise it ends unless a queued writer will end it.
    fn undo_or_end(&self, s: &mut State, alone: bool, give_back: &dyn Fn(Connection)) {
        if s.open.is_some() && (alone || !self.should_wait(s)) {
            self.end(s, give_back);
        }
    }

    /// Commits the open group (rolls it back when it holds no write), gives
    /// its connection back and wakes its writers.
    fn end(&self, s: &mut State, give_back: &dyn Fn(Connection)) {
        let st = &mut *s;
        let c = st.conn.as_ref().expect("the write connection is open");
        // The group's index changes go in last, in row order (one segment;
        // `text_queue.rs`); if they cannot, no write of the group is kept.
        let r = if st.writes > 0 {
            text_queue::write_out(c, &mut st.text)
                .map_err(|e| Failure::of(&e))
                .and_then(|()| {
                    c.execute_batch("COMMIT")
                        .map_err(|e| Failure::of(&Error::from(e)))
                })
        } else {
            c.execute_batch("ROLLBACK")
                .map_err(|e| Failure::of(&Error::from(e)))
        };
        st.text.clear();
        if let Err(e) = r {
            // A failed COMMIT may leave the transaction open: end it, so
            // the next group starts clean.
            if !c.is_autocommit() {
                let _ = c.execute_batch("ROLLBACK");
            }
            if st.writes > 0 {
                st.failed.insert(st.group, (e, st.writes));
            }
        }
        if let Some(c) = s.conn.take() {
            give_back(c);
        }
        s.open = None;
        s.writes = 0;
        s.group += 1;
        s.ended = s.group;
        self.ended.notify_all();
        self.turns.next();
    }
}

fn conn(s: &State) -> &Connection {
    s.conn.as_ref().expect("the write connection is open")
}

/// Why a group's commit failed, for each of its writers.
#[derive(Clone, Debug)]
struct Failure {
    why: String,
    /// SQLITE_FULL: the disk is full, which each writer is told as such.
    full: bool,
}

impl Failure {
    fn of(e: &Error) -> Failure {
        Failure {
            why: e.to_string(),
            full: matches!(e, Error::DiskFull { .. }),
        }
    }
}

fn commit_failed(f: &Failure) -> Error {
    let source = format!("commit failed: {}", f.why).into();
    if f.full {
        Error::DiskFull {
            backend: "sqlite",
            source,
        }
    } else {
        Error::Storage {
            backend: "sqlite",
            source,
        }
    }
}
