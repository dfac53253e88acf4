//! Concurrent writers of one SQLite store share transactions (group
//! commit). What must hold whatever the grouping: a write is answered only
//! once it is committed (another connection sees it at once), a write that
//! fails is undone alone, and nothing acknowledged is missing afterwards.

use std::sync::Barrier;

use strata::{Put, Rows, SqliteStore};

use crate::harness::mem;

const THREADS: usize = 8;
const WRITES: usize = 150;

fn store(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(dir.path().join("g.db"), Default::default()).unwrap()
}

#[test]
fn every_acknowledged_write_is_visible_to_another_connection_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let writer = store(&dir);
    // A second store on the same file: its own connections, as another
    // process has.
    let reader = store(&dir);
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (writer, reader, start) = (&writer, &reader, &start);
            s.spawn(move || {
                start.wait();
                for i in 0..WRITES {
                    let m = mem("project/a", &format!("thread {t} write {i}"));
                    writer.put(&m).unwrap();
                    let seen = reader.get(&m.id).unwrap();
                    assert_eq!(
                        seen.map(|x| x.content),
                        Some(m.content),
                        "answered before its commit"
                    );
                }
            });
        }
    });
    drop(writer);
    let fresh = store(&dir);
    let n = fresh
        .count(&strata::Query::everything(crate::harness::now()))
        .unwrap();
    assert_eq!(n, (THREADS * WRITES) as u64);
}

#[test]
fn a_failing_write_is_undone_alone_while_others_share_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let st = store(&dir);
    let taken = mem("project/a", "an id every thread tries to reuse");
    st.put(&taken).unwrap();
    let start = Barrier::new(THREADS);
    let kept: Vec<Vec<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (st, start, taken) = (&st, &start, &taken);
                s.spawn(move || {
                    start.wait();
                    let mut kept = Vec::new();
                    for i in 0..WRITES {
                        if i % 3 == 0 {
                            // Refused: the id exists. Nothing of it may stay.
                            let mut dup = mem("project/b", &format!("duplicate {t} {i}"));
                            dup.id = taken.id.clone();
                            assert!(st.put(&dup).is_err());
                        } else if i % 3 == 1 {
                            // Refused: a stale version.
                            let mut stale = taken.clone();
                            stale.content = format!("stale update {t} {i}");
                            assert!(st.update(&stale, 99).is_err());
                        } else {
                            let m = mem("project/a", &format!("kept {t} {i}"));
                            assert!(matches!(st.put(&m).unwrap(), Put::Inserted(_)));
                            kept.push(m.id);
                        }
                    }
                    kept
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(st);
    let fresh = store(&dir);
    let all = fresh
        .query(&strata::Query::everything(crate::harness::now()))
        .unwrap();
    let want: usize = kept.iter().map(Vec::len).sum();
    assert_eq!(all.len(), want + 1, "only the accepted writes are stored");
    let original = fresh.get(&taken.id).unwrap().unwrap();
    assert_eq!((original.version, original.content), (1, taken.content));
    assert!(all.iter().all(|m| m.scope.as_str() == "project/a"));
    for id in kept.iter().flatten() {
        assert!(
            fresh.get(id).unwrap().is_some(),
            "{id} acknowledged but missing"
        );
    }
}

// ---- writes that must not wait (`strata::without_waiting`) ----

/// A connection of "another process" holding SQLite's write lock until
/// it is told to let go.
fn hold_write_lock(path: &std::path::Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).unwrap();
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    c
}

/// Writes `m` with a plain (patient) write while `lock` holds the write
/// lock, which lets go 200 ms later; `m` is there afterwards.
fn put_once_released(st: &SqliteStore, m: &strata::Memory, lock: rusqlite::Connection) {
    std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            lock.execute_batch("COMMIT").unwrap();
        });
        st.put(m).unwrap();
    });
    assert!(st.get(&m.id).unwrap().is_some());
}

#[test]
fn a_hurried_write_is_refused_while_another_process_holds_the_write_lock_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // A long busy timeout: had the hurried write waited for the lock, it
    // would have waited this long and then failed (`Some(Err)`).
    let opts = strata::SqliteOptions {
        busy_timeout: std::time::Duration::from_secs(120),
        ..Default::default()
    };
    let st = SqliteStore::open(dir.path().join("g.db"), opts).unwrap();
    let m = mem("project/a", "written only once the lock is free");
    let lock = hold_write_lock(&dir.path().join("g.db"));
    let refused = strata::without_waiting(|| {
        // What the write inside sees: an error that says it was refused
        // (a server drops it without logging it).
        let e = st.put(&m).unwrap_err();
        assert!(e.is_write_refusal(), "{e}");
    })
    .unwrap_err();
    assert_eq!(refused.why, strata::Refusal::Locked);
    // Nothing of this process says when another process lets go.
    assert!(refused.turn().is_none());
    assert!(
        st.get(&m.id).unwrap().is_none(),
        "a refused write left a row"
    );
    // The refusal was for that call only: a plain write on this thread
    // waits for the lock as before.
    put_once_released(&st, &m, lock);
    // Free of contention, a hurried write is written and committed.
    let n = mem("project/a", "nothing in the way");
    let put = strata::without_waiting(|| st.put(&n)).expect("not refused");
    assert!(put.is_ok());
    assert!(store(&dir).get(&n.id).unwrap().is_some());
}

#[test]
fn a_hurried_write_gives_up_on_a_long_writer_of_its_own_process_and_its_turn_comes_when_that_ends()
{
    let dir = tempfile::tempdir().unwrap();
    let st = store(&dir);
    let m = mem("project/a", "behind a long batch");
    let started = Barrier::new(2);
    std::thread::scope(|s| {
        let batch = s.spawn(|| {
            // Tens of thousands of rows in one write: far longer than a
            // hurried write waits for it.
            let mut batch =
                (0..30_000).map(|i| Ok(mem("project/b", &format!("batch row {i} of many words"))));
            started.wait();
            st.put_batch(&mut batch).unwrap();
        });
        started.wait();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let refused = strata::without_waiting(|| st.put(&m))
            .expect_err("the hurried write went ahead of or into the batch");
        assert_eq!(refused.why, strata::Refusal::Writer);
        let mut turn = refused.turn().expect("a writer of this process has turns");
        // The batch (seconds) is still at it: the turn has not come.
        assert!(
            poll_once(&mut turn).is_pending(),
            "a turn before the batch ended"
        );
        block_on(turn);
        // It came when the batch let go: committed whole, the path free.
        assert_eq!(
            st.count(&strata::Query::everything(crate::harness::now()))
                .unwrap(),
            30_000,
            "the turn came before the batch's commit"
        );
        batch.join().unwrap();
        // A turn that has passed is ready at once.
        assert!(poll_once(&mut refused.turn().unwrap()).is_ready());
    });
    assert!(
        st.get(&m.id).unwrap().is_none(),
        "the refused write left a row"
    );
    // Tried again, it goes ahead.
    strata::without_waiting(|| st.put(&m))
        .expect("refused with nothing in the way")
        .unwrap();
    assert!(store(&dir).get(&m.id).unwrap().is_some());
}

/// Polls `f` once, with a waker that does nothing.
fn poll_once<F: std::future::Future + Unpin>(f: &mut F) -> std::task::Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::Pin::new(f).poll(&mut cx)
}

/// Runs `f` to its end on this thread, parked between polls (no runtime:
/// the turn's future needs none).
fn block_on<F: std::future::Future + Unpin>(mut f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let std::task::Poll::Ready(v) = std::pin::Pin::new(&mut f).poll(&mut cx) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never woken: a lost wake-up"
        );
        std::thread::park_timeout(std::time::Duration::from_secs(1));
    }
}

#[test]
fn a_panic_inside_without_waiting_leaves_later_writes_patient() {
    let dir = tempfile::tempdir().unwrap();
    let st = store(&dir);
    let r = std::panic::catch_unwind(|| strata::without_waiting(|| panic!("inside")));
    assert!(r.is_err());
    // Were this thread still hurried, the write below would be refused
    // (an error) instead of waiting for the lock.
    let lock = hold_write_lock(&dir.path().join("g.db"));
    let m = mem("project/a", "after the panic");
    put_once_released(&st, &m, lock);
}

#[test]
fn a_hurried_remember_with_an_eviction_ahead_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = strata::Config::sqlite(dir.path().join("e.db"));
    cfg.max_items = 5;
    let e = strata::Engine::open(cfg).unwrap();
    assert!(e.writes_can_hurry());
    let scope = strata::Scope::parse("project/acme").unwrap();
    for i in 0..5 {
        e.remember(strata::NewMemory::new(scope.clone(), format!("fact {i}")))
            .unwrap();
    }
    let view = strata::View::subtree(scope.clone());
    let count = || e.list(&strata::List::new(view.clone())).unwrap().len();
    let sixth = || e.remember(strata::NewMemory::new(scope.clone(), "the sixth fact"));
    let refused = strata::without_waiting(sixth).unwrap_err();
    assert_eq!(refused.why, strata::Refusal::Bound);
    assert!(refused.turn().is_none());
    assert_eq!(count(), 5, "the refused remember wrote");
    // Where waiting is fine, it is written and the project evicted back
    // under its bound.
    sixth().unwrap();
    assert!(count() <= 5);
    // Below the bound, a hurried remember goes ahead.
    let other = strata::Scope::parse("project/beta").unwrap();
    let r = strata::without_waiting(|| e.remember(strata::NewMemory::new(other, "room here")));
    assert!(matches!(r, Ok(Ok(_))));
}

#[test]
fn stores_that_cannot_hurry_ignore_the_request() {
    let e = strata::Engine::with_store(
        strata::Config::default(),
        Box::new(strata::MemoryStore::new()),
    )
    .unwrap();
    assert!(!e.writes_can_hurry());
    let scope = strata::Scope::parse("project/acme").unwrap();
    let r = strata::without_waiting(|| e.remember(strata::NewMemory::new(scope, "kept")));
    assert!(matches!(r, Ok(Ok(_))));
}

/// Whether a merge step of the text index would merge anything now (some
/// level holds enough segments), asked on a connection of its own and
/// rolled back.
fn merge_pending(path: &std::path::Path) -> bool {
    let c = rusqlite::Connection::open(path).unwrap();
    c.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    c.execute_batch("BEGIN IMMEDIATE").unwrap();
    let before = c.total_changes();
    c.execute_batch("INSERT INTO memories_fts(memories_fts, rank) VALUES('merge', 16)")
        .unwrap();
    let merged = c.total_changes() - before >= 2;
    c.execute_batch("ROLLBACK").unwrap();
    merged
}

#[test]
fn the_text_index_is_merged_off_the_write_path_and_search_sees_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let st = store(&dir);
    // One commit each: a text-index segment each, which FTS5 no longer
    // merges inside the commits (schema version 8).
    let written: Vec<_> = (0..300)
        .map(|i| {
            let m = mem("project/a", &format!("merge check number{i} shared"));
            st.put(&m).unwrap();
            m.id
        })
        .collect();
    // The store's thread merges in the gaps between writes and goes on
    // after the last one until nothing is left to merge.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while merge_pending(&path) {
        assert!(
            std::time::Instant::now() < deadline,
            "the text index still had segments to merge 20 s after the last write"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Merged, every memory is still found by its own term and by the
    // shared one.
    let q = strata::Query::view(crate::harness::view(&["project/a"]), crate::harness::now());
    for (i, id) in written.iter().enumerate().step_by(37) {
        let hits = strata::TextSearch::search_signals(
            &st,
            &q,
            &strata::query_terms(&format!("number{i}")),
            5,
        )
        .unwrap();
        assert_eq!(hits.len(), 1, "number{i}");
        assert_eq!(&hits[0].0.id, id);
    }
    let all =
        strata::TextSearch::search_signals(&st, &q, &strata::query_terms("shared"), 1000).unwrap();
    assert_eq!(all.len(), 300);
}

#[test]
fn checkpoint_merges_what_is_left_to_merge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    drop(store(&dir));
    // Segments no strata thread merges: another program's commits, one
    // entry each (FTS5's own backstop merges a level only at 16).
    let c = rusqlite::Connection::open(&path).unwrap();
    for i in 0..40 {
        c.execute(
            "INSERT INTO memories_fts(rowid, scoped, scopes) VALUES (?1, ?2, 'project/a')",
            rusqlite::params![1_000_000 + i, format!("left behind {i}")],
        )
        .unwrap();
    }
    drop(c);
    assert!(merge_pending(&path));
    SqliteStore::open(&path, Default::default())
        .unwrap()
        .checkpoint()
        .unwrap();
    assert!(!merge_pending(&path));
}

/// Segments of the text index, counted on a connection of its own.
fn segments(path: &std::path::Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT count(DISTINCT segid) FROM memories_fts_idx",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// FTS5 writes its pending changes out as a segment whenever a change
/// names a lower rowid than the one before: a batch of deletes in the
/// caller's order (by age, by importance) would write a segment per
/// memory. The store takes a batch in row order, so each batch of
/// archives or moves to the cold tier adds one segment, and every row it
/// touched is out of the index.
#[test]
fn a_batch_of_deletes_in_any_order_writes_one_text_index_segment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let st = store(&dir);
    let ms: Vec<_> = (0..360)
        .map(|i| mem("project/a", &format!("batch member{i} common")))
        .collect();
    st.put_batch(&mut ms.iter().cloned().map(Ok)).unwrap();
    st.checkpoint().unwrap();
    // FTS5 merges a level of 16 segments in the commit that makes it:
    // not here, so the count shows every segment written.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("INSERT INTO memories_fts(memories_fts, rank) VALUES('crisismerge', 1000)")
        .unwrap();
    // Newest first, and then every third: far from row order.
    let mut order: Vec<usize> = (0..360).rev().collect();
    order.sort_by_key(|i| i % 3);
    let archived: Vec<String> = order[..120].iter().map(|&i| ms[i].id.clone()).collect();
    let moved: Vec<(String, u64)> = order[120..240]
        .iter()
        .map(|&i| (ms[i].id.clone(), ms[i].version))
        .chain([("no-such-id".to_string(), 1)])
        .collect();

    let before = segments(&path);
    let n = st
        .archive(&archived, "test", crate::harness::now())
        .unwrap();
    assert_eq!(n, 120);
    assert!(
        segments(&path) <= before + 1,
        "archiving 120 memories out of row order wrote {} segments",
        segments(&path) - before
    );
    let before = segments(&path);
    let gone = st.delete_moved(&moved).unwrap();
    // The ids deleted come back in the order given.
    let expected: Vec<String> = moved[..120].iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(gone, expected);
    assert!(
        segments(&path) <= before + 1,
        "moving 120 memories out of row order wrote {} segments",
        segments(&path) - before
    );
    let q = strata::Query::view(crate::harness::view(&["project/a"]), crate::harness::now());
    let hits =
        strata::TextSearch::search_signals(&st, &q, &strata::query_terms("common"), 1000).unwrap();
    let mut left: Vec<&str> = hits.iter().map(|h| h.0.id.as_str()).collect();
    let mut kept: Vec<&str> = order[240..].iter().map(|&i| ms[i].id.as_str()).collect();
    left.sort_unstable();
    kept.sort_unstable();
    assert_eq!(left, kept);
}

/// Every write after the first of a group runs under a savepoint, and
/// FTS5 writes its pending changes out as a segment at every savepoint:
/// the group queues its index changes and writes them just before it
/// commits (`text_queue.rs`), one segment a group. A write of the group
/// that fails takes its queued changes with it: its rowids are free
/// again, and entries left for them would name the next memories.
#[test]
fn a_group_of_concurrent_writes_writes_one_text_index_segment() {
    const WRITERS: usize = 24;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let st = store(&dir);
    st.put(&mem("project/a", "seed common")).unwrap();
    st.checkpoint().unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("INSERT INTO memories_fts(memories_fts, rank) VALUES('crisismerge', 1000)")
        .unwrap();
    let taken = mem("project/a", "an id the failing batch reuses");
    st.put(&taken).unwrap();
    let before = segments(&path);

    // A batch that holds the write path until the writers behind it have
    // queued: they then share its group.
    let (inside_tx, inside) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel::<()>();
    let first: Vec<_> = (0..4)
        .map(|i| mem("project/a", &format!("first batch {i} common")))
        .collect();
    let mut ids: Vec<String> = first.iter().map(|m| m.id.clone()).collect();
    let later: Vec<_> = (0..WRITERS)
        .map(|i| mem("project/b", &format!("writer {i} common")))
        .collect();
    ids.extend(later.iter().map(|m| m.id.clone()));
    std::thread::scope(|s| {
        let (st, first) = (&st, &first);
        s.spawn(move || {
            let mut it = first.iter().cloned().enumerate().map(|(i, m)| {
                if i == 1 {
                    inside_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                }
                Ok(m)
            });
            st.put_batch(&mut it).unwrap();
        });
        inside.recv().unwrap();
        for (i, m) in later.iter().enumerate() {
            let taken = &taken;
            s.spawn(move || {
                if i % 6 == 5 {
                    // Refused at its second memory, after its first was
                    // written and indexed: nothing of it may stay.
                    let mut dup = mem("project/b", "refused batch");
                    dup.id = taken.id.clone();
                    let lost = mem("project/b", &format!("uniqueword{i} refused"));
                    let mut it = [lost, dup].into_iter().map(Ok);
                    assert!(st.put_batch(&mut it).is_err());
                }
                st.put(m).unwrap();
            });
        }
        // Long enough for the writers to queue behind the batch.
        std::thread::sleep(std::time::Duration::from_millis(500));
        go.send(()).unwrap();
    });

    let written = segments(&path) - before;
    assert!(
        written <= 3,
        "{} concurrent writes wrote {written} segments",
        WRITERS + WRITERS / 6 + 1
    );
    let q = strata::Query::view(
        crate::harness::view(&["project/a", "project/b"]),
        crate::harness::now(),
    );
    let hits =
        strata::TextSearch::search_signals(&st, &q, &strata::query_terms("common"), 1000).unwrap();
    let mut found: Vec<&str> = hits.iter().map(|h| h.0.id.as_str()).collect();
    found.retain(|id| ids.iter().any(|i| i == id));
    assert_eq!(found.len(), ids.len(), "every write is found");
    for i in (0..WRITERS).filter(|i| i % 6 == 5) {
        let word = format!("uniqueword{i}");
        let hits =
            strata::TextSearch::search_signals(&st, &q, &strata::query_terms(&word), 10).unwrap();
        assert!(
            hits.is_empty(),
            "a refused write left index entries: {word} finds {:?}",
            hits.iter().map(|h| &h.0.id).collect::<Vec<_>>()
        );
    }
}

/// A keyed memory that supersedes another writes history with a statement
/// that takes a statement journal, where FTS5 writes out what it holds: a
/// batch of 100 over 10 keys wrote a segment for each superseding one.
/// Queued, the batch's index changes make one segment, and only the
/// latest version of each key is found.
#[test]
fn a_batch_that_supersedes_keys_writes_one_text_index_segment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.db");
    let st = store(&dir);
    st.put(&mem("project/a", "seed")).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("INSERT INTO memories_fts(memories_fts, rank) VALUES('crisismerge', 1000)")
        .unwrap();
    let before = segments(&path);
    let ms: Vec<_> = (0..100)
        .map(|i| {
            let mut m = mem("project/a", &format!("keyed version{i} common"));
            m.key = Some(format!("k{}", i % 10));
            m
        })
        .collect();
    st.put_batch(&mut ms.iter().cloned().map(Ok)).unwrap();
    let written = segments(&path) - before;
    assert!(written <= 1, "100 keyed memories wrote {written} segments");
    let q = strata::Query::view(crate::harness::view(&["project/a"]), crate::harness::now());
    let hits =
        strata::TextSearch::search_signals(&st, &q, &strata::query_terms("common"), 1000).unwrap();
    // A superseding memory keeps the id of the key's first one.
    let mut found: Vec<String> = hits
        .iter()
        .map(|h| st.get(&h.0.id).unwrap().unwrap().content)
        .collect();
    let mut latest: Vec<String> = ms[90..].iter().map(|m| m.content.clone()).collect();
    found.sort_unstable();
    latest.sort_unstable();
    assert_eq!(found, latest);
    for old in ["version0 ", "version45 ", "version89 "] {
        let word = old.trim();
        let hits =
            strata::TextSearch::search_signals(&st, &q, &strata::query_terms(word), 10).unwrap();
        assert!(hits.is_empty(), "{word}, superseded, is still found");
    }
}
