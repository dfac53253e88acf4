//! The audit trail: the store's chain (conformance, every backend), the
//! engine's recording, verification and retention, tampering found in a
//! SQLite file, concurrent appenders on one file, and the upgrade of a
//! version-4 file.

use jiff::{SignedDuration, Timestamp};
use strata::{
    AuditEvent, AuditLog, AuditQuery, Config, Engine, Forget, ForgetOptions, NewMemory, Rows,
};

use crate::harness::{MakeEngine, MakeStore, scope};

backends!(store:
    appends_chain_and_number_without_gaps,
    queries_filter_and_page_newest_first,
    prune_cuts_the_oldest_and_anchors_the_chain,
);

backends!(engine:
    recording_follows_the_config_and_verify_passes,
    retention_prunes_then_verify_still_passes,
);

fn ev(actor: &str, op: &str, scopes: &[&str]) -> AuditEvent {
    AuditEvent::new(actor, op).scopes(scopes.iter().copied())
}

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_750_000_000 + s).unwrap()
}

fn appends_chain_and_number_without_gaps(make: MakeStore) {
    let b = make();
    let s = &b.store;
    let chain = s.audit_chain().unwrap();
    assert_eq!((chain.anchor_seq, chain.head_seq), (1, 0));
    assert_eq!(chain.anchor_hash, strata::GENESIS);
    let ids: Vec<String> = (0..150).map(|i| format!("id-{i:03}")).collect();
    let a = s
        .audit_append(
            &ev("alice", "forget", &["project/a"]).ids(ids.clone()),
            at(1),
        )
        .unwrap();
    let b2 = s
        .audit_append(
            &ev("bob", "recall", &["project/a/**", "global"]).count(3),
            at(2),
        )
        .unwrap();
    assert_eq!((a.seq, b2.seq), (1, 2));
    assert_eq!(a.prev_hash, strata::GENESIS);
    assert_eq!(b2.prev_hash, a.hash);
    assert_eq!(a.ids.len(), strata::AUDIT_MAX_IDS);
    assert_eq!(a.ids_omitted, 50);
    assert_eq!(a.count, 150);
    // What the store reads back is what it sealed, hash included.
    let back = s.audit_range(0, 10).unwrap();
    assert_eq!(back, vec![a.clone(), b2.clone()]);
    assert_eq!(back[0].compute_hash(), back[0].hash);
    let chain = s.audit_chain().unwrap();
    assert_eq!((chain.head_seq, chain.head_hash), (2, b2.hash.clone()));
    assert_eq!(s.audit_range(1, 10).unwrap(), vec![b2]);
}

fn queries_filter_and_page_newest_first(make: MakeStore) {
    let b = make();
    let s = &b.store;
    let rows = [
        ("alice", "recall", vec!["project/a_b"]),
        ("bob", "remember", vec!["project/a_b/x"]),
        ("alice", "list", vec!["project/**"]),
        ("carol", "recall", vec!["project/aXb"]),
        ("alice", "recall", vec!["global"]),
    ];
    for (i, (actor, op, scopes)) in rows.iter().enumerate() {
        s.audit_append(&ev(actor, op, scopes), at(i as i64 * 10))
            .unwrap();
    }
    let seqs = |q: AuditQuery| -> Vec<u64> {
        let got = s.audit_query(&q).unwrap();
        // The store's SQL and the reference agree.
        assert!(got.iter().all(|e| q.matches(e)), "{q:?}");
        got.iter().map(|e| e.seq).collect()
    };
    assert_eq!(seqs(AuditQuery::default()), [5, 4, 3, 2, 1]);
    let q = |f: &dyn Fn(&mut AuditQuery)| {
        let mut q = AuditQuery::default();
        f(&mut q);
        q
    };
    assert_eq!(seqs(q(&|q| q.actor = Some("alice".into()))), [5, 3, 1]);
    assert_eq!(seqs(q(&|q| q.op = Some("recall".into()))), [5, 4, 1]);
    assert_eq!(
        seqs(q(&|q| q.scope = Some(scope("project/a_b")))),
        [3, 2, 1]
    );
    assert_eq!(seqs(q(&|q| q.since = Some(at(10)))), [5, 4, 3, 2]);
    assert_eq!(seqs(q(&|q| q.until = Some(at(10)))), [1]);
    assert_eq!(
        seqs(q(&|q| {
            q.since = Some(at(10));
            q.until = Some(at(40));
            q.actor = Some("alice".into());
        })),
        [3]
    );
    assert_eq!(seqs(q(&|q| q.limit = 2)), [5, 4]);
    assert_eq!(
        seqs(q(&|q| {
            q.limit = 2;
            q.before_seq = Some(4);
        })),
        [3, 2]
    );
    for bad in [0, strata::AUDIT_MAX_QUERY_LIMIT + 1] {
        let e = s.audit_query(&q(&|q| q.limit = bad)).unwrap_err();
        assert!(e.to_string().contains("limit"), "{e}");
    }
}

fn prune_cuts_the_oldest_and_anchors_the_chain(make: MakeStore) {
    let b = make();
    let s = &b.store;
    let mut hashes = vec![];
    for i in 0..10 {
        hashes.push(
            s.audit_append(&ev("a", "list", &["global"]), at(i * 100))
                .unwrap()
                .hash,
        );
    }
    // Nothing to cut.
    assert_eq!(s.audit_prune(None, Some(10)).unwrap().removed, 0);
    assert_eq!(s.audit_prune(Some(at(0)), None).unwrap().removed, 0);
    // By count: the newest 7 stay.
    let p = s.audit_prune(None, Some(7)).unwrap();
    assert_eq!((p.removed, p.anchor_seq), (3, 4));
    let chain = s.audit_chain().unwrap();
    assert_eq!(
        (chain.anchor_seq, chain.anchor_hash),
        (4, hashes[2].clone())
    );
    // By age: entries before 550 go (4, 5 and 6).
    let p = s.audit_prune(Some(at(550)), None).unwrap();
    assert_eq!((p.removed, p.anchor_seq), (3, 7));
    let kept: Vec<u64> = s
        .audit_range(0, 100)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(kept, [7, 8, 9, 10]);
    let kept = s.audit_range(0, 100).unwrap();
    let v = strata::verify_audit(&s.audit_chain().unwrap(), &mut kept.into_iter().map(Ok)).unwrap();
    assert!(v.ok, "{v:?}");
    // Appends go on from the head.
    let e = s
        .audit_append(&ev("a", "list", &["global"]), at(2000))
        .unwrap();
    assert_eq!((e.seq, e.prev_hash), (11, hashes[9].clone()));
}

fn recording_follows_the_config_and_verify_passes(make: MakeEngine) {
    let off = make(&|_| {});
    assert!(
        off.audit_record(&ev("a", "list", &["global"]))
            .unwrap()
            .is_none()
    );
    assert!(off.audit_query(&AuditQuery::default()).unwrap().is_empty());

    let e = make(&|c: &mut Config| c.audit.enabled = true);
    let m = e
        .remember(NewMemory::new(
            scope("project/a"),
            "the deploy key is in the vault",
        ))
        .unwrap();
    e.audit_record(&ev("local:me", "remember", &["project/a"]).ids([m.id.clone()]))
        .unwrap()
        .unwrap();
    e.audit_record(&ev("tok", "recall", &["project/a"]).count(1))
        .unwrap();
    let v = e.audit_verify().unwrap();
    assert!(v.ok, "{v:?}");
    assert_eq!((v.entries, v.first_seq, v.last_seq), (2, 1, 2));
    let got = e.audit_query(&AuditQuery::default()).unwrap();
    assert_eq!(got[1].ids, vec![m.id.clone()]);
    assert_eq!(got[0].actor, "tok");
    // An empty log verifies too.
    let empty = make(&|c: &mut Config| c.audit.enabled = true);
    assert!(empty.audit_verify().unwrap().ok);
}

fn retention_prunes_then_verify_still_passes(make: MakeEngine) {
    let mut e = make(&|c: &mut Config| {
        c.audit.enabled = true;
        c.audit.retention_days = 30;
        c.audit.max_entries = 5;
    });
    let start = at(0);
    let clock = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(start.as_second()));
    let c2 = clock.clone();
    e.set_clock(move || {
        Timestamp::from_second(c2.load(std::sync::atomic::Ordering::SeqCst)).unwrap()
    });
    for _ in 0..8 {
        e.audit_record(&ev("a", "list", &["global"])).unwrap();
    }
    // Over max_entries: the oldest 3 go, and the prune is recorded.
    let p = e.audit_prune("admin").unwrap();
    assert_eq!(p.removed, 3);
    let v = e.audit_verify().unwrap();
    assert!(v.ok, "{v:?}");
    assert_eq!((v.first_seq, v.last_seq, v.entries), (4, 9, 6));
    let newest = &e.audit_query(&AuditQuery::default()).unwrap()[0];
    assert_eq!(
        (newest.op.as_str(), newest.count, newest.actor.as_str()),
        ("audit_prune", 3, "admin")
    );
    // Forty days on, everything recorded before the cutoff goes; upkeep
    // runs retention too.
    clock.store(
        (start + SignedDuration::from_hours(40 * 24)).as_second(),
        std::sync::atomic::Ordering::SeqCst,
    );
    e.audit_record(&ev("a", "list", &["global"])).unwrap();
    let r = e.upkeep().unwrap();
    assert_eq!(r.audit_pruned, 6);
    let v = e.audit_verify().unwrap();
    assert!(v.ok, "{v:?}");
    assert_eq!((v.first_seq, v.last_seq, v.entries), (10, 11, 2));
}

fn sqlite_engine(dir: &std::path::Path) -> Engine {
    let mut c = Config::sqlite(dir.join("t.db"));
    c.embedder = strata::EmbedderConfig::none();
    c.audit.enabled = true;
    Engine::open(c).unwrap()
}

fn sql(dir: &std::path::Path, stmt: &str) {
    rusqlite::Connection::open(dir.join("t.db"))
        .unwrap()
        .execute_batch(stmt)
        .unwrap();
}

#[test]
fn a_changed_or_removed_row_is_named_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let e = sqlite_engine(dir.path());
    for i in 0..6 {
        e.audit_record(&ev("tok", "recall", &["project/a"]).count(i))
            .unwrap();
    }
    assert!(e.audit_verify().unwrap().ok);

    sql(
        dir.path(),
        "UPDATE audit SET actor = 'someone-else' WHERE seq = 3",
    );
    let v = e.audit_verify().unwrap();
    assert_eq!((v.ok, v.first_bad), (false, Some(3)), "{v:?}");
    assert!(v.problem.unwrap().contains("entry 3 was changed"));
    sql(dir.path(), "UPDATE audit SET actor = 'tok' WHERE seq = 3");
    assert!(e.audit_verify().unwrap().ok);

    // A list column that is not JSON any more is an entry changed, not a
    // failed read.
    sql(dir.path(), "UPDATE audit SET scopes = 'oops' WHERE seq = 2");
    assert_eq!(e.audit_verify().unwrap().first_bad, Some(2));
    sql(
        dir.path(),
        "UPDATE audit SET scopes = '[\"project/a\"]' WHERE seq = 2",
    );
    assert!(e.audit_verify().unwrap().ok);

    sql(dir.path(), "DELETE FROM audit WHERE seq = 4");
    let v = e.audit_verify().unwrap();
    assert_eq!(v.first_bad, Some(4), "{v:?}");
    assert!(v.problem.unwrap().contains("entry 4 is missing"));

    // The newest entry removed is found through the chain's head.
    let dir2 = tempfile::tempdir().unwrap();
    let e2 = sqlite_engine(dir2.path());
    for _ in 0..3 {
        e2.audit_record(&ev("tok", "list", &["global"])).unwrap();
    }
    sql(dir2.path(), "DELETE FROM audit WHERE seq = 3");
    assert_eq!(e2.audit_verify().unwrap().first_bad, Some(3));
    // So is the oldest, through the anchor.
    let dir3 = tempfile::tempdir().unwrap();
    let e3 = sqlite_engine(dir3.path());
    for _ in 0..3 {
        e3.audit_record(&ev("tok", "list", &["global"])).unwrap();
    }
    sql(dir3.path(), "DELETE FROM audit WHERE seq = 1");
    assert_eq!(e3.audit_verify().unwrap().first_bad, Some(1));
}

/// Two engines on one file are two writers as two processes are: each
/// its own connections, SQLite's lock between them. Their appends
/// interleave and the chain stays one.
#[test]
fn concurrent_engines_on_one_file_keep_one_chain() {
    let dir = tempfile::tempdir().unwrap();
    drop(sqlite_engine(dir.path()));
    let handles: Vec<_> = (0..4)
        .map(|w| {
            let p = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let e = sqlite_engine(&p);
                for i in 0..50 {
                    e.audit_record(
                        &ev(&format!("writer-{w}"), "remember", &["project/a"]).count(i),
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let e = sqlite_engine(dir.path());
    let v = e.audit_verify().unwrap();
    assert!(v.ok, "{v:?}");
    assert_eq!((v.entries, v.last_seq), (200, 200));
    for w in 0..4 {
        let q = AuditQuery {
            actor: Some(format!("writer-{w}")),
            limit: 1000,
            ..AuditQuery::default()
        };
        assert_eq!(e.audit_query(&q).unwrap().len(), 50);
    }
}

/// `forget` keeps its entry, and the file keeps nothing of the text.
#[test]
fn forget_leaves_its_entry_and_no_text_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = sqlite_engine(dir.path());
    let secret = "zebra-quokka-7731 is the staging password";
    let m = e
        .remember(NewMemory::new(scope("project/a"), secret))
        .unwrap();
    e.audit_record(&ev("local:me", "remember", &["project/a"]).ids([m.id.clone()]))
        .unwrap();
    let r = e
        .forget(&Forget::Ids(vec![m.id.clone()]), ForgetOptions::default())
        .unwrap();
    e.audit_record(&ev("local:me", "forget", &["project/a"]).ids(r.ids.clone()))
        .unwrap();
    drop(e);
    let e = sqlite_engine(dir.path());
    let got = e.audit_query(&AuditQuery::default()).unwrap();
    assert_eq!(got[0].op, "forget");
    assert_eq!(got[0].ids, vec![m.id.clone()]);
    assert!(e.audit_verify().unwrap().ok);
    drop(e);
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let p = entry.unwrap().path();
        if p.is_file() {
            bytes.extend(std::fs::read(&p).unwrap());
        }
    }
    let needle = b"zebra-quokka";
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "forgotten text found in the store's files"
    );
}

#[test]
fn a_version_4_file_gains_an_empty_chain() {
    let dir = tempfile::tempdir().unwrap();
    let m = crate::harness::mem("project/a", "written by version 4");
    {
        let s = strata::SqliteStore::open(dir.path().join("t.db"), Default::default()).unwrap();
        s.put(&m).unwrap();
    }
    sql(
        dir.path(),
        "DROP TABLE audit; DROP TABLE audit_chain; DROP INDEX memories_learned;
         DROP TABLE text_index_state; DROP TABLE scope_ids;
         DELETE FROM schema_version WHERE version > 4;",
    );
    let e = sqlite_engine(dir.path());
    assert_eq!(e.get(&m.id).unwrap().unwrap().content, m.content);
    assert_eq!(e.stats().unwrap().schema_version, strata::SCHEMA_VERSION);
    assert!(e.audit_verify().unwrap().ok);
    let first = e
        .audit_record(&ev("local:me", "list", &["global"]))
        .unwrap()
        .unwrap();
    assert_eq!((first.seq, first.prev_hash.as_str()), (1, strata::GENESIS));
}

/// `strata migrate` carries the trail as it is: entries, hashes, anchor and
/// head, so the copy verifies as the source does, and the copy's digest
/// covers it.
#[test]
fn copying_a_store_carries_its_trail() {
    let dir = tempfile::tempdir().unwrap();
    let a = strata::SqliteStore::open(dir.path().join("a.db"), Default::default()).unwrap();
    for i in 0..9 {
        a.audit_append(&ev("tok", "list", &["global"]).count(i), at(i as i64))
            .unwrap();
    }
    a.audit_prune(None, Some(6)).unwrap();
    let m = strata::MemoryStore::new();
    let want = strata::copy_store(&a, &m, &mut |_, _| {}).unwrap();
    assert_eq!(want.audit_entries, 6);
    let b = strata::SqliteStore::open(dir.path().join("b.db"), Default::default()).unwrap();
    assert_eq!(strata::copy_store(&m, &b, &mut |_, _| {}).unwrap(), want);
    let chain = b.audit_chain().unwrap();
    assert_eq!(chain, a.audit_chain().unwrap());
    let kept = b.audit_range(0, 100).unwrap();
    assert_eq!(kept, a.audit_range(0, 100).unwrap());
    let v = strata::verify_audit(&chain, &mut kept.into_iter().map(Ok)).unwrap();
    assert!(v.ok, "{v:?}");
    // A destination with a trail is not empty.
    let e = strata::copy_store(&a, &b, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("not empty"), "{e}");
}
