//! Recording what recalls returned (`access_count`, `last_accessed_at`)
//! without a write transaction per recall.
//!
//! A recall appends its memories to an in-memory log and returns. A writer
//! thread, started by the first recall, writes the log every few seconds
//! (see [`AccessLog::run`]): one transaction then carries the reads of
//! thousands of recalls, and each commit (which makes every other
//! connection drop its page cache and memory map, and dirties pages a
//! checkpoint copies back) is paid for once a pause instead of once per
//! recall. Writing them from the recall itself cost more than half of a
//! recall's time under load. Nor does a recall count its reads: it
//! appends them to a list that the writer thread folds into the counts
//! (by id) when it grows long or before a write. Counting them in a map
//! of every memory read since the last write cost a cache miss or two per
//! id under the process's one lock; on 16 cores the 90/10 mix's remember
//! p95 fell from 11.2–11.6 to 9.6–10.4 ms without it.
//!
//! [`Engine::flush_accesses`] writes the log at once; `get`, `list` and
//! exports call it first, so a caller always reads its own recalls'
//! statistics, and dropping the engine writes what is left. Other
//! processes see them within [`MAX_INTERVAL`]. Access statistics steer
//! ranking; they are not acknowledged writes, so a crash may drop the
//! reads since the last write.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::Engine;
use crate::Result;
use crate::store::{Access, Store};

/// The shortest pause between the writer thread's writes of the log.
const INTERVAL: Duration = Duration::from_secs(2);

/// The longest pause: how stale other processes may find the statistics.
const MAX_INTERVAL: Duration = Duration::from_secs(30);

/// Pause after a write, in multiples of the write's own time.
const DUTY: u32 = 20;

/// Memories one transaction of the log's write updates: the write lock is
/// released between transactions, so acknowledged writes wait at most one.
const CHUNK: usize = 2048;

/// The writer thread rests this many times as long as each transaction
/// took before the next, so a large log is written at no more than a
/// quarter of a core: a burst of a whole core for most of a second slowed
/// the requests running beside it.
const REST: u32 = 3;

/// Reads appended (`recent`) before the writer thread folds them into the
/// counts (`pending`): 64 Ki, about 5 MB, a quarter of a second of 16
/// cores' recalls (25,000 a second of 10 memories each).
const FOLD_AT: usize = 64 * 1024;

/// Appended reads at which a recall folds them itself, the writer thread
/// being behind (writing a long log): the bound on the list's memory.
const FOLD_BACKSTOP: usize = 4 * FOLD_AT;

#[derive(Debug, Default)]
pub(crate) struct AccessLog {
    /// Reads recalls appended since the last fold into `pending`, in
    /// arrival order; its length is in `recent_len`.
    recent: Mutex<Vec<(String, Timestamp)>>,
    recent_len: AtomicUsize,
    /// Reads folded from `recent`, not yet written: id → (count, latest
    /// time). Locked before `recent` where both are.
    pending: Mutex<HashMap<String, (u64, Timestamp)>>,
    /// Reads taken from `pending` and not yet written, in id order; held
    /// while a transaction writes a chunk of them.
    writing: Mutex<Vec<Access>>,
    /// Set when the engine closes; `wake` tells the writer (and asks it to
    /// fold a long `recent`).
    stop: AtomicBool,
    /// Whether the writer thread runs: read by each recall instead of
    /// `writer`'s lock.
    running: AtomicBool,
    wake: Condvar,
    /// The writer thread, started by the first recall (`None` inside when
    /// it could not be started, or after the engine closed: recalls then
    /// write the log themselves).
    writer: OnceLock<Mutex<Option<JoinHandle<()>>>>,
}

impl AccessLog {
    /// Appends one read of each of `ids` at `at`; returns how many reads
    /// are appended and not yet folded.
    fn add(&self, ids: &[String], at: Timestamp) -> usize {
        // Copied before the lock, so it is held for a move only.
        let mut reads: Vec<(String, Timestamp)> = ids.iter().map(|id| (id.clone(), at)).collect();
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.is_empty() {
            std::mem::swap(&mut *recent, &mut reads);
        } else {
            recent.append(&mut reads);
        }
        let n = recent.len();
        self.recent_len.store(n, Ordering::Relaxed);
        n
    }

    /// Counts the appended reads into `pending` (held by the caller).
    fn fold(&self, pending: &mut HashMap<String, (u64, Timestamp)>) {
        let recent = {
            let mut r = self.recent.lock().unwrap_or_else(|e| e.into_inner());
            self.recent_len.store(0, Ordering::Relaxed);
            std::mem::take(&mut *r)
        };
        for (id, at) in recent {
            match pending.get_mut(&id) {
                Some(e) => {
                    e.0 += 1;
                    e.1 = e.1.max(at);
                }
                None => {
                    pending.insert(id, (1, at));
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.is_empty() && self.recent_len.load(Ordering::Relaxed) == 0
    }

    /// Moves every read recorded (appended or folded) behind what
    /// `writing` holds, in id order: ids are time-ordered like rowids, so
    /// the updates walk the table instead of jumping about it, and each
    /// page is written once.
    fn take(&self, writing: &mut Vec<Access>) {
        let taken = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            self.fold(&mut pending);
            std::mem::take(&mut *pending)
        };
        let start = writing.len();
        writing.extend(
            taken
                .into_iter()
                .map(|(id, (count, at))| Access { id, count, at }),
        );
        writing[start..].sort_unstable_by(|a, b| a.id.cmp(&b.id));
    }

    /// Writes the first [`CHUNK`] reads of `writing` in one transaction;
    /// they stay there when it fails.
    fn write_chunk(store: &dyn Store, writing: &mut Vec<Access>) -> Result<()> {
        let n = writing.len().min(CHUNK);
        store.touch(&writing[..n])?;
        writing.drain(..n);
        Ok(())
    }

    /// Writes the log now: what a write under way has left, then
    /// everything recorded so far. On failure the reads not yet written
    /// stay for the next attempt.
    fn flush(&self, store: &dyn Store) -> Result<()> {
        let mut writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        if writing.is_empty() && self.is_empty() {
            return Ok(());
        }
        self.take(&mut writing);
        while !writing.is_empty() {
            Self::write_chunk(store, &mut writing)?;
        }
        Ok(())
    }

    /// The writer thread's loop until `stop`: a write, then a pause of
    /// [`DUTY`] times as long as the write's transactions took, at least
    /// [`INTERVAL`] and at most [`MAX_INTERVAL`]. A write costs about the
    /// same per memory whether it carries one read of it or many, so under
    /// heavy load the pauses grow and the log keeps the writing to about
    /// 1/DUTY of a core. Within a write, each transaction is followed by a
    /// rest ([`REST`]); `writing` is free meanwhile, so a `flush` finishes
    /// the write at once instead of waiting for it.
    fn run(&self, store: &dyn Store) {
        let mut pause = INTERVAL;
        loop {
            if !self.rest(pause) {
                return;
            }
            {
                let mut writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
                if writing.is_empty() && self.is_empty() {
                    pause = INTERVAL;
                    continue;
                }
                self.take(&mut writing);
            }
            let mut busy = Duration::ZERO;
            loop {
                let started = Instant::now();
                let more = {
                    let mut writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
                    // A failed write keeps its reads for the next round.
                    Self::write_chunk(store, &mut writing).is_ok() && !writing.is_empty()
                };
                let took = started.elapsed();
                busy += took;
                if !more {
                    break;
                }
                if !self.rest(took * REST) {
                    return;
                }
            }
            pause = (busy * DUTY).clamp(INTERVAL, MAX_INTERVAL);
        }
    }

    /// Waits `d`, or until the engine closes: false then. Meanwhile it
    /// counts the appended reads whenever they pass [`FOLD_AT`] (a recall
    /// that passes it wakes the thread).
    fn rest(&self, d: Duration) -> bool {
        let due = Instant::now() + d;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        while !self.stop.load(Ordering::Acquire) {
            if self.recent_len.load(Ordering::Relaxed) >= FOLD_AT {
                self.fold(&mut pending);
            }
            let Some(left) = due.checked_duration_since(Instant::now()) else {
                return true;
            };
            pending = self
                .wake
                .wait_timeout(pending, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        false
    }
}

impl Engine {
    /// Records that a recall returned `ids` at `at`, for the writer thread
    /// to write (see the module comment).
    pub(crate) fn record_access(&self, ids: &[String], at: Timestamp) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let appended = self.access.add(ids, at);
        if self.access_writer() {
            if appended >= FOLD_BACKSTOP {
                let mut pending = self
                    .access
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                self.access.fold(&mut pending);
            } else if appended >= FOLD_AT {
                self.access.wake.notify_one();
            }
            return Ok(());
        }
        // No thread to write it: the recall writes the log itself.
        self.flush_accesses()
    }

    /// Writes every read recalls have recorded but not yet written.
    pub fn flush_accesses(&self) -> Result<()> {
        self.access.flush(&*self.store)
    }

    /// [`Engine::flush_accesses`] before a read that shows access
    /// statistics. A failure leaves the reads in the log for a later
    /// write: statistics never fail the read itself.
    pub(crate) fn settle_accesses(&self) {
        let _ = self.flush_accesses();
    }

    /// Starts now, from the calling thread, the threads the engine would
    /// otherwise start on first use: the access log's writer (started by
    /// the first recall that records access). A thread takes its creator's
    /// scheduling priority; a server that runs recalls on threads of lower
    /// priority calls this first, so the writer, which holds the store's
    /// write path while it writes, never runs at theirs.
    pub fn start_threads(&self) {
        self.access_writer();
    }

    /// Starts the writer thread if it is not running; false if it cannot
    /// be started.
    fn access_writer(&self) -> bool {
        if self.access.running.load(Ordering::Acquire) {
            return true;
        }
        let slot = self.access.writer.get_or_init(|| {
            let (log, store) = (self.access.clone(), self.store.clone());
            let thread = std::thread::Builder::new()
                .name("strata-access".into())
                .spawn(move || log.run(&*store))
                .ok();
            self.access
                .running
                .store(thread.is_some(), Ordering::Release);
            Mutex::new(thread)
        });
        slot.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Stops the writer thread and writes what is left (engine drop).
    pub(crate) fn close_access_log(&self) {
        self.access.stop.store(true, Ordering::Release);
        self.access.running.store(false, Ordering::Release);
        {
            // Taking the lock orders the store before the writer's wait.
            let _p = self
                .access
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.access.wake.notify_all();
        }
        if let Some(slot) = self.access.writer.get()
            && let Some(t) = slot.lock().unwrap_or_else(|e| e.into_inner()).take()
        {
            let _ = t.join();
        }
        self.settle_accesses();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn appended_reads_are_counted_by_id_with_their_latest_time() {
        let log = AccessLog::default();
        assert!(log.is_empty());
        assert_eq!(log.add(&ids(&["b", "a"]), at(10)), 2);
        log.fold(&mut log.pending.lock().unwrap());
        assert_eq!(log.recent_len.load(Ordering::Relaxed), 0);
        // Folded and appended reads of one id add up; an older read does
        // not move its time back.
        assert_eq!(log.add(&ids(&["a"]), at(5)), 1);
        assert_eq!(log.add(&ids(&["c", "a"]), at(20)), 3);
        assert!(!log.is_empty());
        let mut writing = vec![Access::one("0", at(1))];
        log.take(&mut writing);
        assert!(log.is_empty());
        let got: Vec<_> = writing
            .iter()
            .map(|a| (a.id.as_str(), a.count, a.at))
            .collect();
        assert_eq!(
            got,
            [
                ("0", 1, at(1)),
                ("a", 3, at(20)),
                ("b", 1, at(10)),
                ("c", 1, at(20)),
            ]
        );
    }

    #[test]
    fn the_writer_folds_a_long_list_while_it_rests() {
        let log = AccessLog::default();
        let batch = ids(&["x", "y"]);
        for i in 0..FOLD_AT / 2 {
            log.add(&batch, at(i as i64));
        }
        log.add(&ids(&["x"]), at(0));
        // FOLD_AT + 1 appended: the resting writer counts them.
        assert!(log.rest(Duration::from_millis(1)));
        assert_eq!(log.recent_len.load(Ordering::Relaxed), 0);
        let pending = log.pending.lock().unwrap();
        assert_eq!(
            pending["x"],
            (FOLD_AT as u64 / 2 + 1, at(FOLD_AT as i64 / 2 - 1))
        );
        assert_eq!(
            pending["y"],
            (FOLD_AT as u64 / 2, at(FOLD_AT as i64 / 2 - 1))
        );
        drop(pending);
        // Fewer: they wait for the write.
        let short = AccessLog::default();
        short.add(&batch, at(0));
        assert!(short.rest(Duration::from_millis(1)));
        assert_eq!(short.recent_len.load(Ordering::Relaxed), 2);
    }
}
