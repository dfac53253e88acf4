//! The shared-map VFS against real SQLite files: connections share one
//! map, and every read matches what a connection without any map reads,
//! across commits, growth past the map, truncation, and a file replaced
//! at its path.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::{Connection, OpenFlags};

fn vfs() -> &'static str {
    strata_vfs::register().expect("the VFS registers on Linux")
}

/// A connection in WAL mode reading through the shared map (`mmap`
/// bytes), or through SQLite's default VFS with no map at all.
fn open(path: &Path, mmap: Option<u64>) -> Connection {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let c = match mmap {
        Some(_) => Connection::open_with_flags_and_vfs(path, flags, vfs()).unwrap(),
        None => Connection::open_with_flags(path, flags).unwrap(),
    };
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    c.execute_batch(&format!(
        "PRAGMA mmap_size={}; CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB NOT NULL, n INTEGER NOT NULL)",
        mmap.unwrap_or(0)
    ))
    .unwrap();
    c
}

/// Deterministic bytes of row `id` in round `round`.
fn blob(id: i64, round: u64, len: usize) -> Vec<u8> {
    let mut x = (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Every row, hashed in order (FNV-1a over id, value and number).
fn digest(c: &Connection) -> (u64, i64) {
    let mut st = c.prepare("SELECT id, v, n FROM t ORDER BY id").unwrap();
    let mut rows = st.query([]).unwrap();
    let (mut h, mut count) = (0xcbf2_9ce4_8422_2325u64, 0i64);
    while let Some(r) = rows.next().unwrap() {
        let id: i64 = r.get(0).unwrap();
        let v: Vec<u8> = r.get(1).unwrap();
        let n: i64 = r.get(2).unwrap();
        for b in id.to_le_bytes().iter().chain(&v).chain(&n.to_le_bytes()) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
        count += 1;
    }
    (h, count)
}

fn fill(c: &Connection, ids: std::ops::Range<i64>, round: u64, len: usize) {
    let tx = c.unchecked_transaction().unwrap();
    {
        let mut st = tx
            .prepare("INSERT OR REPLACE INTO t (id, v, n) VALUES (?1, ?2, ?3)")
            .unwrap();
        for id in ids {
            st.execute(rusqlite::params![id, blob(id, round, len), id])
                .unwrap();
        }
    }
    tx.commit().unwrap();
    // Into the file itself: pages still in the write-ahead log are read
    // from there, never through a map.
    c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        .unwrap();
}

#[test]
fn connections_to_one_file_share_one_map_until_the_last_closes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.db");
    let writer = open(&path, None);
    fill(&writer, 0..2000, 1, 1000);
    let want = digest(&writer);
    assert_eq!(strata_vfs::map_users(&path), 0);

    let readers: Vec<Connection> = (0..6).map(|_| open(&path, Some(1 << 30))).collect();
    for r in &readers {
        assert_eq!(digest(r), want);
    }
    // One map, held by each reader: a second map of the file would have
    // replaced the first in the registry and left fewer holders.
    assert_eq!(strata_vfs::map_users(&path), 6);

    // Another file gets a map of its own.
    let other = dir.path().join("other.db");
    let w2 = open(&other, None);
    fill(&w2, 0..500, 2, 1000);
    let r2 = open(&other, Some(1 << 30));
    assert_eq!(digest(&r2), digest(&w2));
    assert_eq!(strata_vfs::map_users(&other), 1);
    assert_eq!(strata_vfs::map_users(&path), 6);

    drop(readers);
    assert_eq!(strata_vfs::map_users(&path), 0);
    assert_eq!(strata_vfs::map_users(&other), 1);
}

#[test]
fn without_mmap_size_no_map_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nomap.db");
    let writer = open(&path, None);
    fill(&writer, 0..500, 1, 1000);
    let r = open(&path, Some(0));
    assert_eq!(digest(&r), digest(&writer));
    assert_eq!(strata_vfs::map_users(&path), 0);
}

#[test]
fn reads_match_an_unmapped_connection_across_commits_growth_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grow.db");
    // The writer reads through the map too; readers' maps are 1 MiB, so
    // the file soon grows past them.
    let writer = open(&path, Some(1 << 30));
    let readers: Vec<Connection> = (0..4).map(|_| open(&path, Some(1 << 20))).collect();
    let plain = open(&path, None);
    let mut shrank = false;
    let mut next = 0i64;
    for round in 0..40u64 {
        match round % 5 {
            // Grow.
            0 | 1 => {
                fill(&writer, next..next + 400, round, 900 + round as usize);
                next += 400;
            }
            // Rewrite rows in place.
            2 => fill(&writer, 0..next / 2, round, 700),
            // Delete most rows and give the space back: VACUUM, then a
            // checkpoint that truncates the file under the readers.
            3 => {
                let before = std::fs::metadata(&path).unwrap().len();
                writer
                    .execute("DELETE FROM t WHERE id % 4 != 0", [])
                    .unwrap();
                writer.execute_batch("VACUUM").unwrap();
                writer
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                    .unwrap();
                shrank |= std::fs::metadata(&path).unwrap().len() < before;
            }
            // A reader holds a snapshot across a commit and still sees it.
            _ => {
                let r = &readers[round as usize % readers.len()];
                r.execute_batch("BEGIN").unwrap();
                let before = digest(r);
                fill(&writer, 0..50, round, 1200);
                assert_eq!(digest(r), before, "a snapshot changed under its reader");
                r.execute_batch("COMMIT").unwrap();
            }
        }
        let want = digest(&plain);
        assert_eq!(digest(&writer), want, "the writer, round {round}");
        for (i, r) in readers.iter().enumerate() {
            assert_eq!(digest(r), want, "reader {i}, round {round}");
        }
    }
    assert!(shrank, "no round truncated the file");
    assert!(
        std::fs::metadata(&path).unwrap().len() > 1 << 20,
        "the file never outgrew the readers' maps"
    );
}

#[test]
fn a_file_replaced_at_its_path_is_mapped_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replaced.db");
    let old_w = open(&path, None);
    fill(&old_w, 0..800, 1, 1000);
    let old_r = open(&path, Some(1 << 30));
    let old = digest(&old_r);
    assert_eq!(strata_vfs::map_users(&path), 1);

    // The old file stays open (unlinked) under its connections.
    for suffix in ["", "-wal", "-shm"] {
        std::fs::remove_file(format!("{}{suffix}", path.display())).unwrap();
    }
    let new_w = open(&path, None);
    fill(&new_w, 0..300, 2, 1500);
    let new_r = open(&path, Some(1 << 30));
    assert_eq!(digest(&new_r), digest(&new_w));
    assert_ne!(digest(&new_r), old);
    assert_eq!(strata_vfs::map_users(&path), 1, "the new file's own map");
    assert_eq!(digest(&old_r), old, "the old file's reader still reads it");
}

#[test]
fn readers_on_many_threads_never_see_a_torn_state() {
    // Transfers between rows keep the total of `n` constant; readers on
    // other threads check it on every read while a writer commits,
    // rewrites, vacuums and truncates.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bank.db");
    let writer = open(&path, Some(1 << 30));
    fill(&writer, 0..3000, 1, 300);
    let total: i64 = writer
        .query_row("SELECT sum(n), count(*) FROM t", [], |r| r.get(0))
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    let c = open(&path, Some(1 << 30));
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let (sum, rows): (i64, i64) = c
                            .query_row("SELECT sum(n), count(*) FROM t", [], |r| {
                                Ok((r.get(0)?, r.get(1)?))
                            })
                            .unwrap();
                        assert_eq!(sum, total);
                        assert_eq!(rows, 3000);
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for i in 0..300i64 {
            let tx = writer.unchecked_transaction().unwrap();
            let (a, b) = ((i * 7919) % 3000, (i * 104_729 + 1) % 3000);
            tx.execute(
                "UPDATE t SET n = n - 5, v = ?2 WHERE id = ?1",
                rusqlite::params![a, blob(a, i as u64, 300 + (i as usize % 900))],
            )
            .unwrap();
            tx.execute("UPDATE t SET n = n + 5 WHERE id = ?1", [b])
                .unwrap();
            tx.commit().unwrap();
            if i % 60 == 59 {
                writer.execute_batch("VACUUM").unwrap();
                writer
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                    .unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    });
}
