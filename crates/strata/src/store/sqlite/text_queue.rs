//! The text index's changes of an open group, queued and written in row
//! order just before the group commits.
//!
//! FTS5 keeps a transaction's changes to its index in memory and writes
//! them out as a new segment at every `SAVEPOINT`, at every statement that
//! takes a statement journal, and whenever a change names a lower rowid
//! than the one before it. Every write after the first of a group runs
//! under a savepoint of its own (`group.rs`), so a group of N concurrent
//! writes wrote N segments, each merged again later. Inside a group the
//! index writes of `writes.rs` land here instead: a write that fails drops
//! what it queued (its savepoint undoes the rest of its work), and the
//! group writes what is left in row order before its `COMMIT`, one
//! segment a group. Outside a group (opening, migrating) they are written
//! at once.
//!
//! Only the index is late. Rows, scope numbers and scope counts are
//! written at once, and nothing reads the index inside a write: searches
//! run on the pool's connections, which see committed groups only.
//! Commands that need the index complete (`optimize`) call [`write_now`]
//! first.

use std::cell::RefCell;
use std::collections::HashSet;

use rusqlite::{Connection, params};

use crate::Result;

/// One change to `memories_fts`: a row's index entries added, or taken
/// out with the values they were added with.
#[derive(Debug)]
struct Change {
    rowid: i64,
    delete: bool,
    /// A delete that scrubs its terms from the index pages
    /// (`secure-delete`; off inside [`insecure`]).
    secure: bool,
    scopes: String,
    scoped: String,
}

/// The changes of one group, in the order its writes made them.
#[derive(Debug, Default)]
pub(super) struct Queue {
    changes: Vec<Change>,
    /// `changes[..written]` are in the index already ([`write_now`]).
    written: usize,
    /// The write running now is inside [`insecure`].
    insecure: bool,
}

/// Where a write began, to undo what it queued.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    len: usize,
    written: usize,
}

impl Queue {
    pub(super) fn mark(&self) -> Mark {
        Mark {
            len: self.changes.len(),
            written: self.written,
        }
    }

    /// Drops what was queued since `mark`, after the write that queued it
    /// was rolled back to its savepoint (which also undid whatever
    /// [`write_now`] wrote of the queue meanwhile).
    pub(super) fn undo(&mut self, mark: Mark) {
        self.changes.truncate(mark.len);
        self.written = mark.written;
        self.insecure = false;
    }

    pub(super) fn clear(&mut self) {
        *self = Queue::default();
    }
}

thread_local! {
    /// The queue of the group whose write runs on this thread, if any.
    static QUEUE: RefCell<Option<Queue>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's index writes going to `q` (and then to
/// whatever queue they went to before: a write may run another store's).
pub(super) fn queued<T>(q: &mut Queue, f: impl FnOnce() -> T) -> T {
    /// Gives the queue back to the group, and the thread its queue from
    /// before, even when `f` panics.
    struct Back<'a>(&'a mut Queue, Option<Queue>);
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            let before = self.1.take();
            *self.0 = QUEUE
                .with(|t| std::mem::replace(&mut *t.borrow_mut(), before))
                .unwrap_or_default();
        }
    }
    let before = QUEUE.with(|t| t.borrow_mut().replace(std::mem::take(q)));
    let _back = Back(q, before);
    f()
}

/// Adds (`delete` false) or takes out a row's index entries: queued inside
/// a group, written at once outside one.
pub(super) fn change(
    tx: &Connection,
    rowid: i64,
    delete: bool,
    scopes: String,
    scoped: String,
) -> Result<()> {
    let left = QUEUE.with(|t| match t.borrow_mut().as_mut() {
        Some(q) => {
            let secure = !q.insecure;
            q.changes.push(Change {
                rowid,
                delete,
                secure,
                scopes,
                scoped,
            });
            None
        }
        None => Some((scopes, scoped)),
    });
    match left {
        None => Ok(()),
        Some((scopes, scoped)) => write(tx, rowid, delete, &scopes, &scoped),
    }
}

/// Runs `f` with `secure-delete` off for the deletes it makes: their
/// entries leave a marker instead of a rewrite of every index page holding
/// one of their terms (36 µs a memory instead of 300). For memories whose
/// text lives on (in the archive table, in the cold tier); the caller marks
/// the index stale (`text_index_state`), so the next scrub (a forget's)
/// drops what is left of them.
pub(super) fn insecure<T>(tx: &Connection, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let was = QUEUE.with(|t| {
        t.borrow_mut()
            .as_mut()
            .map(|q| std::mem::replace(&mut q.insecure, true))
    });
    match was {
        Some(was) => {
            let out = f();
            QUEUE.with(|t| {
                if let Some(q) = t.borrow_mut().as_mut() {
                    q.insecure = was;
                }
            });
            out
        }
        None => {
            secure_delete(tx, false)?;
            let out = f();
            secure_delete(tx, true)?;
            out
        }
    }
}

/// Writes what this thread's group has queued so far into the index (for
/// a command that needs it complete). Outside a group there is nothing
/// queued.
pub(super) fn write_now(tx: &Connection) -> Result<()> {
    QUEUE.with(|t| match t.borrow_mut().as_mut() {
        Some(q) => write_out(tx, q),
        None => Ok(()),
    })
}

/// Writes the queue's unwritten changes into the index, in row order (a
/// row's own changes in the order made), as one segment: two when some
/// rows had their entries taken out with `secure-delete` off, which is
/// FTS5's setting when it writes the segment, not when the delete is made.
pub(super) fn write_out(tx: &Connection, q: &mut Queue) -> Result<()> {
    let todo = &q.changes[q.written..];
    if todo.is_empty() {
        return Ok(());
    }
    let mut scrubbed = HashSet::new();
    let mut marked = HashSet::new();
    for c in todo.iter().filter(|c| c.delete) {
        if c.secure {
            scrubbed.insert(c.rowid);
        } else {
            marked.insert(c.rowid);
        }
    }
    // A row with any scrubbing delete goes with the scrubbed ones.
    let first = |c: &Change| marked.contains(&c.rowid) && !scrubbed.contains(&c.rowid);
    let mut sorted: Vec<(bool, i64, &Change)> =
        todo.iter().map(|c| (!first(c), c.rowid, c)).collect();
    // Stable: a row's own changes keep the order they were made in.
    sorted.sort_by_key(|&(later, rowid, _)| (later, rowid));
    // A delete that takes out what an insert of this queue added (a key
    // superseded twice in one batch, a memory updated after it was
    // written) cancels it: FTS5 would write a segment at a delete of the
    // rowid it has just added.
    let mut order: Vec<&Change> = Vec::with_capacity(sorted.len());
    for (_, _, c) in sorted {
        match order.last() {
            Some(l)
                if c.delete
                    && !l.delete
                    && l.rowid == c.rowid
                    && l.scopes == c.scopes
                    && l.scoped == c.scoped =>
            {
                order.pop();
            }
            _ => order.push(c),
        }
    }
    let split = order.iter().take_while(|c| first(c)).count();
    if split > 0 {
        secure_delete(tx, false)?;
        for c in &order[..split] {
            write(tx, c.rowid, c.delete, &c.scopes, &c.scoped)?;
        }
        secure_delete(tx, true)?;
    }
    for c in &order[split..] {
        write(tx, c.rowid, c.delete, &c.scopes, &c.scoped)?;
    }
    q.written = q.changes.len();
    Ok(())
}

fn write(tx: &Connection, rowid: i64, delete: bool, scopes: &str, scoped: &str) -> Result<()> {
    let sql = if delete {
        "INSERT INTO memories_fts(memories_fts, rowid, scopes, scoped) VALUES ('delete', ?, ?, ?)"
    } else {
        "INSERT INTO memories_fts(rowid, scopes, scoped) VALUES (?, ?, ?)"
    };
    tx.prepare_cached(sql)?
        .execute(params![rowid, scopes, scoped])?;
    Ok(())
}

fn secure_delete(tx: &Connection, on: bool) -> Result<()> {
    tx.prepare_cached("INSERT INTO memories_fts(memories_fts, rank) VALUES('secure-delete', ?)")?
        .execute([on as i64])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use rusqlite::Connection;

    use super::super::group::Writer;
    use super::super::writes::fts_add;
    use super::super::{SqliteStore, fts};
    use crate::error::Error;
    use crate::scope::Scope;

    fn segments(c: &Connection) -> i64 {
        c.query_row(
            "SELECT count(DISTINCT segid) FROM memories_fts_idx",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    fn rows_with(c: &Connection, scope: &Scope, word: &str) -> Vec<i64> {
        let id = fts::known_scope_id(c, scope).unwrap().unwrap();
        let term = fts::scoped_term(&crate::text::stem(word), id);
        c.prepare("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rowid")
            .unwrap()
            .query_map([format!("scoped : \"{term}\"")], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// A write that runs another store's write keeps its own queue.
    #[test]
    fn a_queue_inside_another_leaves_the_outer_one_whole() {
        let c = Connection::open_in_memory().unwrap();
        let (mut outer, mut inner) = (super::Queue::default(), super::Queue::default());
        let add = |rowid| super::change(&c, rowid, false, "s".into(), "t".into()).unwrap();
        super::queued(&mut outer, || {
            add(1);
            super::queued(&mut inner, || add(2));
            add(3);
        });
        let rows = |q: &super::Queue| q.changes.iter().map(|c| c.rowid).collect::<Vec<_>>();
        assert_eq!(rows(&outer), [1, 3]);
        assert_eq!(rows(&inner), [2]);
        // Outside any queue a change is written at once: here, with no
        // text index, that fails.
        assert!(super::change(&c, 4, false, "s".into(), "t".into()).is_err());
    }

    /// Writers queued behind a long first write share its group, each
    /// under a savepoint (where FTS5 writes out what it holds): the index
    /// changes of the whole group make one segment, and those of a write
    /// that failed are not among them. No checkpoint thread here, so the
    /// count is every segment written.
    #[test]
    fn a_group_writes_one_segment_without_the_changes_of_its_failed_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        drop(SqliteStore::open(&path, Default::default()).unwrap());
        let c = Connection::open(&path).unwrap();
        c.execute_batch("INSERT INTO memories_fts(memories_fts, rank) VALUES('crisismerge', 1000)")
            .unwrap();
        let before = segments(&c);
        let open = || Ok(Connection::open(&path)?);
        let give_back = |c: Connection| drop(c);
        let w = Writer::new(Duration::from_secs(5));
        let scope = Scope::parse("project/a").unwrap();
        let (inside_tx, inside) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        std::thread::scope(|s| {
            let (w, scope, give_back) = (&w, &scope, &give_back);
            s.spawn(move || {
                w.write(open, give_back, |tx| {
                    fts_add(tx, 1, "first common", scope)?;
                    inside_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    Ok(())
                })
                .unwrap()
            });
            inside.recv().unwrap();
            for i in 2..=25i64 {
                s.spawn(move || {
                    let r = w.write(open, give_back, |tx| {
                        fts_add(tx, i, &format!("word{i} common"), scope)?;
                        if i % 6 == 0 {
                            return Err(Error::NotFound(format!("write {i}")));
                        }
                        Ok(())
                    });
                    assert_eq!(r.is_ok(), i % 6 != 0, "write {i}: {r:?}");
                });
            }
            // Long enough for the writers to queue behind the first.
            std::thread::sleep(Duration::from_millis(500));
            go.send(()).unwrap();
        });
        let written = segments(&c) - before;
        assert!(
            written <= 2,
            "25 writes in a group wrote {written} segments"
        );
        for i in 2..=25i64 {
            let want = if i % 6 == 0 { vec![] } else { vec![i] };
            assert_eq!(
                rows_with(&c, &scope, &format!("word{i}")),
                want,
                "write {i}"
            );
        }
        assert_eq!(rows_with(&c, &scope, "common").len(), 25 - 4);
    }
}
