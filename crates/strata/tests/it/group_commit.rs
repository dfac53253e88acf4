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
