//! The cold tier: demotion out of the store into segment files, reading
//! cold memories (recall, list, history), restore, forget, recovery after
//! a crash between the two steps of a move, and damaged segments.

use jiff::{SignedDuration, Timestamp};
use strata::{
    ColdConfig, ColdDir, ColdRecord, Config, Filter, Forget, ForgetOptions, NewMemory, Patch,
    Recall,
};

use crate::harness::{MakeEngine, TestEngine, scope, view};

backends!(engine:
    demotion_moves_to_cold_and_restore_brings_back,
    memories_whose_decayed_importance_fades_under_the_floor_are_demoted,
    demoted_memories_recalled_often_come_back_to_the_store,
    forget_reaches_cold_segments,
    importing_a_cold_id_keeps_one_copy,
    small_segments_are_merged_by_upkeep,
);

fn small_segments_are_merged_by_upkeep(make: MakeEngine) {
    let dir = tempfile::tempdir().unwrap();
    let mut e = make(&cold_on(dir.path()));
    let start = Timestamp::now();
    let mut written = Vec::new();
    for day in 0..9i64 {
        let at = start + SignedDuration::from_hours(24 * 40 * day);
        e.set_clock(move || at);
        for i in 0..3 {
            written.push(
                e.remember(NewMemory::new(
                    scope("project/a"),
                    format!("day {day} note {i} about the deploy"),
                ))
                .unwrap()
                .id,
            );
        }
        let later = at + SignedDuration::from_hours(24 * 35);
        e.set_clock(move || later);
        let r = e.upkeep().unwrap();
        assert_eq!(r.moved_to_cold, 3, "day {day}: {r:?}");
        // The eighth small segment sets off a merge of the eight.
        assert_eq!(
            r.segments_merged,
            if day == 7 { 8 } else { 0 },
            "day {day}: {r:?}"
        );
    }
    let segs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().ends_with(".cold"))
        .collect();
    assert_eq!(segs.len(), 2, "the merged one and the last day's");
    assert_eq!(e.stats().unwrap().storage_tiers["cold"].memories, 27);
    let found = archived_recall(&e, "deploy", &["project/a"]);
    assert_eq!(found.len(), 10, "recall's default limit");
    for id in &written {
        assert!(e.get_archived(id).unwrap().is_some(), "{id}");
    }
}

fn importing_a_cold_id_keeps_one_copy(make: MakeEngine) {
    let dir = tempfile::tempdir().unwrap();
    let mut e = make(&cold_on(dir.path()));
    let m = e
        .remember(NewMemory::new(scope("project/a"), "exported then demoted"))
        .unwrap();
    let mut line = Vec::new();
    e.export(&strata::Export::default(), &mut line, &mut |_| {})
        .unwrap();
    let start = Timestamp::now();
    e.set_clock(move || start + SignedDuration::from_hours(24 * 40));
    assert_eq!(e.upkeep().unwrap().moved_to_cold, 1);
    let text = String::from_utf8(line).unwrap();
    let err = e
        .import(&mut text.as_bytes(), strata::OnConflict::Error, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains(&m.id), "{err}");
    let r = e
        .import(&mut text.as_bytes(), strata::OnConflict::Skip, &mut |_| {})
        .unwrap();
    assert_eq!(r.skipped, 1);
    let st = e.stats().unwrap();
    assert_eq!(
        st.storage_tiers["warm"].memories + st.storage_tiers["cold"].memories,
        1,
        "{st:?}"
    );
}

fn cold_on(dir: &std::path::Path) -> impl Fn(&mut Config) + '_ {
    move |c: &mut Config| {
        c.cold = ColdConfig {
            enabled: true,
            dir: Some(dir.to_path_buf()),
            demote_after_days: 30,
            ..Default::default()
        };
        c.max_items = 0;
        c.learning.enabled = false;
    }
}

fn archived_recall(e: &TestEngine, q: &str, v: &[&str]) -> Vec<String> {
    let mut r = Recall::new(q, view(v));
    r.include_archived = true;
    e.recall(&r)
        .unwrap()
        .into_iter()
        .map(|h| h.memory.id)
        .collect()
}

fn demotion_moves_to_cold_and_restore_brings_back(make: MakeEngine) {
    let dir = tempfile::tempdir().unwrap();
    let mut e = make(&cold_on(dir.path()));
    let old = e
        .remember(NewMemory::new(
            scope("project/a"),
            "the deploy runs on fridays",
        ))
        .unwrap();
    let old = e
        .update(
            &old.id,
            Patch {
                content: Some("the deploy runs on thursdays".into()),
                ..Patch::default()
            },
            1,
        )
        .unwrap();
    let pinned = e
        .remember(NewMemory::new(scope("project/a"), "pinned deploy rule").pinned(true))
        .unwrap();
    let other = e
        .remember(NewMemory::new(scope("project/b"), "deploy of project b"))
        .unwrap();
    let start = Timestamp::now();
    e.set_clock(move || start + SignedDuration::from_hours(24 * 40));
    let r = e.upkeep().unwrap();
    assert_eq!((r.demoted, r.moved_to_cold), (2, 2), "{r:?}");
    let st = e.stats().unwrap();
    assert_eq!(
        (st.memories, st.archived),
        (1, 0),
        "only the pinned stays warm"
    );
    assert_eq!(st.storage_tiers["cold"].memories, 2);
    assert!(st.storage_tiers["cold"].bytes > 0);
    assert_eq!(st.storage_tiers["warm"].memories, 1);
    assert!(e.get(&pinned.id).unwrap().is_some());

    // Cold memories are found by archived recall, within the view only.
    assert!(archived_recall(&e, "thursdays", &["project/a"]).contains(&old.id));
    assert!(!archived_recall(&e, "deploy", &["project/a"]).contains(&other.id));
    assert!(archived_recall(&e, "deploy", &["project/b"]).contains(&other.id));
    let plain = e
        .recall(&Recall::new("thursdays", view(&["project/a"])))
        .unwrap();
    assert!(plain.is_empty(), "cold memories only on request");
    let listed = e
        .list_archived(&view(&["project/a"]), &Filter::all(), 10)
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].reason, "demoted");
    assert_eq!(e.get_archived(&old.id).unwrap().unwrap().memory.version, 2);
    assert_eq!(e.history(&old.id).unwrap().len(), 1, "history goes along");

    // Restore: same id, version and history, back in the store.
    assert_eq!(e.restore(std::slice::from_ref(&old.id)).unwrap(), 1);
    let back = e.get(&old.id).unwrap().unwrap();
    assert_eq!(back.version, 2);
    assert_eq!(back.content, "the deploy runs on thursdays");
    assert_eq!(e.history(&old.id).unwrap().len(), 1);
    let st = e.stats().unwrap();
    assert_eq!(st.storage_tiers["cold"].memories, 1);
    assert_eq!(st.memories, 2);
    // Upkeep again: nothing idle under the new clock is moved twice.
    let r = e.upkeep().unwrap();
    assert_eq!(
        r.moved_to_cold, 1,
        "the restored memory is idle again: {r:?}"
    );
    assert_eq!(e.stats().unwrap().storage_tiers["cold"].memories, 2);
}

fn memories_whose_decayed_importance_fades_under_the_floor_are_demoted(make: MakeEngine) {
    let dir = tempfile::tempdir().unwrap();
    let mut e = make(&|c: &mut Config| {
        cold_on(dir.path())(c);
        // Importance alone: never by age.
        c.cold.demote_after_days = 0;
        c.cold.demote_below_importance = 0.1;
    });
    let at = |e: &mut TestEngine, days: i64| {
        let start = Timestamp::now();
        e.set_clock(move || start + SignedDuration::from_hours(24 * days));
    };
    let new = |text: &str, importance: f64| {
        NewMemory::new(scope("project/a"), text).importance(importance)
    };
    let ids = |e: &TestEngine| -> Vec<String> {
        let mut v: Vec<String> = e
            .list(&strata::List::new(view(&["project/a"])))
            .unwrap()
            .into_iter()
            .map(|m| m.id)
            .collect();
        v.sort();
        v
    };
    // 0.15 halves every 30 days (the default half-life): under 0.1 after
    // 18 days; 0.9 stays far above.
    let faded = e.remember(new("a faint hint about caching", 0.15)).unwrap();
    let strong = e.remember(new("the release checklist", 0.9)).unwrap();
    let pinned = e
        .remember(new("a faint but pinned rule", 0.15).pinned(true))
        .unwrap();
    let read = e.remember(new("a faint note about retries", 0.12)).unwrap();

    at(&mut e, 2);
    let r = e.upkeep().unwrap();
    assert_eq!(
        (r.demoted, r.moved_to_cold),
        (0, 0),
        "nothing faded yet: {r:?}"
    );

    at(&mut e, 20);
    // Read on day 20: in use, however faint (0.12 × 0.63 × the read's
    // 1.14 is under the floor).
    let hits = e
        .recall(&Recall::new("retries", view(&["project/a"])))
        .unwrap();
    assert_eq!(hits[0].memory.id, read.id);
    // Written on day 20 under the floor: in use too.
    let fresh = e.remember(new("a faint fresh remark", 0.05)).unwrap();
    let r = e.upkeep().unwrap();
    assert_eq!(
        (r.demoted, r.demoted_by_importance, r.moved_to_cold),
        (1, 1, 1),
        "{r:?}"
    );
    let mut warm = vec![
        strong.id.clone(),
        pinned.id.clone(),
        read.id.clone(),
        fresh.id.clone(),
    ];
    warm.sort();
    assert_eq!(ids(&e), warm);
    let cold = e
        .get_archived(&faded.id)
        .unwrap()
        .expect("in the cold tier");
    assert_eq!(cold.reason, "demoted");
    assert_eq!(e.stats().unwrap().storage_tiers["cold"].memories, 1);

    // Two days on, the read and the fresh one are no longer in use.
    at(&mut e, 22);
    let r = e.upkeep().unwrap();
    assert_eq!((r.demoted_by_importance, r.moved_to_cold), (2, 2), "{r:?}");
    let mut warm = vec![strong.id.clone(), pinned.id.clone()];
    warm.sort();
    assert_eq!(ids(&e), warm, "the pinned and the strong one stay warm");
    assert_eq!(e.stats().unwrap().storage_tiers["cold"].memories, 3);
}

fn demoted_memories_recalled_often_come_back_to_the_store(make: MakeEngine) {
    let dir = tempfile::tempdir().unwrap();
    let mut e = make(&|c: &mut Config| {
        cold_on(dir.path())(c);
        c.cold.promote_after_reads = 2;
    });
    let a = e
        .remember(NewMemory::new(
            scope("project/a"),
            "the deploy runs on fridays",
        ))
        .unwrap();
    let b = e
        .remember(NewMemory::new(
            scope("project/a"),
            "the backup runs nightly",
        ))
        .unwrap();
    let t = e
        .remember(NewMemory::new(
            scope("task/t1"),
            "the fridays checklist of the task",
        ))
        .unwrap();
    let none = strata::Promotion {
        ids: Vec::new(),
        min_importance: Some(1.0),
    };
    e.complete_task("t1", "a", &none).unwrap();
    let start = Timestamp::now();
    e.set_clock(move || start + SignedDuration::from_hours(24 * 40));
    let r = e.upkeep().unwrap();
    assert_eq!((r.demoted, r.moved_to_cold), (2, 3), "{r:?}");
    let cold = |e: &TestEngine| e.stats().unwrap().storage_tiers["cold"].memories;
    assert_eq!(cold(&e), 3);

    // `a` twice, `b` once; the completed task's memory twice (it was
    // meant to leave: never promoted).
    for _ in 0..2 {
        assert!(archived_recall(&e, "fridays", &["project/a"]).contains(&a.id));
        assert!(archived_recall(&e, "fridays", &["task/t1"]).contains(&t.id));
    }
    assert!(archived_recall(&e, "backup", &["project/a"]).contains(&b.id));
    // A recall that records no access counts nothing.
    let mut quiet = Recall::new("backup", view(&["project/a"]));
    quiet.include_archived = true;
    quiet.touch = false;
    assert_eq!(e.recall(&quiet).unwrap().len(), 1);

    let r = e.upkeep().unwrap();
    assert_eq!(
        (r.promoted_from_cold, r.moved_to_cold, r.demoted),
        (1, 0, 0),
        "{r:?}"
    );
    let back = e.get(&a.id).unwrap().expect("a is back in the store");
    assert!(back.access_count >= 2, "its cold reads count: {back:?}");
    assert!(
        e.get_archived(&a.id).unwrap().is_none(),
        "active, not archived"
    );
    let plain = e
        .recall(&Recall::new("fridays", view(&["project/a"])))
        .unwrap();
    assert_eq!(plain[0].memory.id, a.id, "found without --archived");
    assert_eq!(cold(&e), 2);

    // `b`'s one read was kept for the next upkeep: one more brings it back.
    assert!(archived_recall(&e, "backup", &["project/a"]).contains(&b.id));
    let r = e.upkeep().unwrap();
    assert_eq!((r.promoted_from_cold, r.demoted), (1, 0), "{r:?}");
    assert!(e.get(&b.id).unwrap().is_some());
    assert_eq!(cold(&e), 1);
    assert!(
        e.get_archived(&t.id).unwrap().is_some(),
        "the task's stays cold"
    );
    // Nothing left to count.
    assert_eq!(e.upkeep().unwrap().promoted_from_cold, 0);
}

#[test]
fn a_damaged_reads_log_is_reported_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config {
        store: strata::StoreConfig::Memory,
        ..Default::default()
    };
    cold_on(dir.path())(&mut c);
    let e = strata::Engine::open(c).unwrap();
    std::fs::write(dir.path().join("reads.log"), "some-id\tmany\n").unwrap();
    let err = e.upkeep().unwrap_err().to_string();
    assert!(err.contains("reads.log"), "{err}");
    assert!(err.contains("line 1"), "{err}");
}

#[test]
fn a_demotion_importance_outside_0_to_1_is_refused_by_name() {
    for bad in [-0.1, 1.5, f64::NAN] {
        let mut c = Config::default();
        c.cold.demote_below_importance = bad;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("cold.demote_below_importance"), "{e}");
    }
}

fn forget_reaches_cold_segments(make: MakeEngine) {
    let dir = tempfile::tempdir().unwrap();
    let mut e = make(&cold_on(dir.path()));
    let m = e
        .remember(NewMemory::new(
            scope("project/a"),
            "the zorbulax-cold code is 7",
        ))
        .unwrap();
    let keep = e
        .remember(NewMemory::new(scope("project/a"), "kept in cold"))
        .unwrap();
    let start = Timestamp::now();
    e.set_clock(move || start + SignedDuration::from_hours(24 * 40));
    assert_eq!(e.upkeep().unwrap().moved_to_cold, 2);
    // A dry run reports the cold memory and deletes nothing.
    let dry = e
        .forget(
            &Forget::Scope(scope("project/a")),
            ForgetOptions {
                dry_run: true,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(dry.deleted, 2);
    let r = e
        .forget(&Forget::Id(m.id.clone()), ForgetOptions::default())
        .unwrap();
    assert_eq!(r.deleted, 1);
    assert!(e.get_archived(&m.id).unwrap().is_none());
    assert!(e.get_archived(&keep.id).unwrap().is_some());
    for f in walk(dir.path()) {
        let plain = zstd_all(&f);
        assert!(
            !String::from_utf8_lossy(&plain).contains("zorbulax"),
            "{} holds the forgotten text",
            f.display()
        );
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A file's bytes, a cold segment's decompressed (index and blocks), so a
/// scan sees the plain text.
fn zstd_all(path: &std::path::Path) -> Vec<u8> {
    if path
        .extension()
        .is_some_and(|x| x == "cold" || x == "pending")
    {
        let c = ColdDir::open(path.parent().unwrap()).unwrap();
        return c.plain_bytes(path).unwrap();
    }
    std::fs::read(path).unwrap()
}

/// A SQLite engine with the cold tier on and no bound, holding `planted`
/// and a neighbour, both demoted to cold 40 days on (each planted word is
/// one the stemmer keeps whole, so a stale text-index entry would show).
fn planted_and_demoted(planted: &str) -> (TestEngine, strata::Memory) {
    let mut e = TestEngine::sqlite(|c| {
        c.cold.enabled = true;
        c.max_items = 0;
    });
    let m = e
        .remember(NewMemory::new(scope("project/a"), planted))
        .unwrap();
    e.remember(NewMemory::new(scope("project/a"), "neighbour"))
        .unwrap();
    let start = Timestamp::now();
    e.set_clock(move || start + SignedDuration::from_hours(24 * 40));
    let r = e.upkeep().unwrap();
    assert_eq!((r.demoted, r.moved_to_cold), (2, 2));
    (e, m)
}

/// No file of the engine's directory (segments opened) holds `word`, the
/// WAL checkpointed first (as in
/// `forget::forgotten_text_leaves_the_database_file`).
fn no_file_holds(e: &TestEngine, word: &str) {
    strata::SqliteStore::open(e.db_path(), Default::default())
        .unwrap()
        .checkpoint()
        .unwrap();
    for f in walk(e.db_path().parent().unwrap()) {
        assert!(
            !String::from_utf8_lossy(&zstd_all(&f)).contains(word),
            "{} holds the forgotten text",
            f.display()
        );
    }
}

#[test]
fn forgotten_text_is_in_no_file_of_the_database_or_cold_dir() {
    let (e, m) = planted_and_demoted("the qwxzorbix unique string");
    let cold = e.db_path().parent().unwrap().join("t.db.cold");
    assert!(
        walk(&cold)
            .iter()
            .any(|f| String::from_utf8_lossy(&zstd_all(f)).contains("qwxzorbix")),
        "the planted text is in a segment before forget"
    );
    e.forget(&Forget::Id(m.id.clone()), ForgetOptions::default())
        .unwrap();
    no_file_holds(&e, "qwxzorbix");
}

/// Demotion deletes index entries without FTS5's `secure-delete` (the
/// text lives on in the segment); a memory demoted, brought back, then
/// forgotten from the store leaves no term of it in the file either.
#[test]
fn a_demoted_memory_brought_back_then_forgotten_leaves_no_term() {
    let (e, m) = planted_and_demoted("the qwxvelbor unique string");
    assert_eq!(e.restore(std::slice::from_ref(&m.id)).unwrap(), 1);
    assert_eq!(e.get(&m.id).unwrap().unwrap().id, m.id);
    e.forget(&Forget::Id(m.id.clone()), ForgetOptions::default())
        .unwrap();
    no_file_holds(&e, "qwxvelbor");
}

/// Demotion reads its memories, then waits for the `cold` lease: one
/// updated meanwhile stays in the store at its new version (the segment
/// written for the move leaves it out), the others move.
#[test]
fn a_memory_changed_while_its_demotion_waits_stays_warm() {
    let mut e = TestEngine::sqlite(|c| {
        c.cold.enabled = true;
        // Promotion would wait for the lease before demotion reads.
        c.cold.promote_after_reads = 0;
        c.max_items = 0;
        c.learning.enabled = false;
    });
    let changed = e
        .remember(NewMemory::new(scope("project/a"), "the old runbook step"))
        .unwrap();
    let moved = e
        .remember(NewMemory::new(scope("project/a"), "an idle note"))
        .unwrap();
    let later = Timestamp::now() + SignedDuration::from_hours(24 * 40);
    e.set_clock(move || later);
    assert!(
        e.store()
            .take_lease(
                "cold",
                "the test",
                later,
                later + SignedDuration::from_hours(1)
            )
            .unwrap()
    );
    let report = std::thread::scope(|s| {
        let upkeep = s.spawn(|| e.upkeep().unwrap());
        // Upkeep has read both by now and waits for the lease.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let v2 = e
            .update(
                &changed.id,
                Patch {
                    content: Some("the new runbook step".into()),
                    ..Patch::default()
                },
                1,
            )
            .unwrap();
        assert_eq!(v2.version, 2);
        e.store().end_lease("cold", "the test").unwrap();
        upkeep.join().unwrap()
    });
    assert_eq!((report.demoted, report.moved_to_cold), (1, 1), "{report:?}");
    let kept = e.get(&changed.id).unwrap().unwrap();
    assert_eq!(
        (kept.version, kept.content.as_str()),
        (2, "the new runbook step")
    );
    assert_eq!(e.get(&moved.id).unwrap(), None);
    assert_eq!(
        e.get_archived(&moved.id).unwrap().unwrap().reason,
        "demoted"
    );
    assert_eq!(e.stats().unwrap().storage_tiers["cold"].memories, 1);
}

/// Archiving (here: a session archived, a memory evicted) deletes index
/// entries without FTS5's `secure-delete` (the text lives on in the
/// archive table); forgetting them later leaves no term in the file.
#[test]
fn archived_then_forgotten_text_leaves_no_term() {
    let e = TestEngine::sqlite(|c| c.max_items = 0);
    let s = e
        .create_session(None, Some(scope("project/a")), None)
        .unwrap();
    let turn = e
        .remember(NewMemory::new(scope("project/a"), "the qwxbrindle turn").session(s.id.clone()))
        .unwrap();
    let evicted = e
        .remember(NewMemory::new(scope("project/a"), "the qwxfarrow note"))
        .unwrap();
    e.archive_session(&s.id).unwrap();
    e.store()
        .archive(
            std::slice::from_ref(&evicted.id),
            "evicted",
            Timestamp::now(),
        )
        .unwrap();
    assert!(e.get_archived(&turn.id).unwrap().is_some());
    e.forget(
        &Forget::Ids(vec![turn.id.clone(), evicted.id.clone()]),
        ForgetOptions::default(),
    )
    .unwrap();
    no_file_holds(&e, "qwxbrindle");
    no_file_holds(&e, "qwxfarrow");
}

fn record(m: strata::Memory) -> ColdRecord {
    ColdRecord {
        memory: m,
        archived_at: Timestamp::now(),
        reason: "demoted".into(),
        history: vec![],
    }
}

#[test]
fn recovery_keeps_warm_and_finishes_the_move() {
    // A crash after the segment was written and before the rows were
    // deleted leaves a `.pending` segment whose memories are also warm;
    // one after the delete leaves memories only in it. Reopening settles
    // both: each memory in exactly one tier.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let cfg = || {
        let mut c = Config::sqlite(&db);
        c.embedder = strata::EmbedderConfig::none();
        c.cold.enabled = true;
        c
    };
    let e = strata::Engine::open(cfg()).unwrap();
    let warm = e
        .remember(NewMemory::new(scope("project/a"), "still warm"))
        .unwrap();
    let mut gone = warm.clone();
    gone.scope = scope("project/a");
    gone.id = uuid_like("0190aaaa");
    gone.content = "only in the segment".into();
    drop(e);
    let cold = ColdDir::open(dir.path().join("t.db.cold")).unwrap();
    cold.write_pending(&[record(warm.clone()), record(gone.clone())])
        .unwrap();
    std::fs::write(dir.path().join("t.db.cold/seg-x.tmp"), b"half written").unwrap();

    let e = strata::Engine::open(cfg()).unwrap();
    assert!(e.get(&warm.id).unwrap().is_some());
    let st = e.stats().unwrap();
    assert_eq!(st.storage_tiers["cold"].memories, 1, "{st:?}");
    assert!(e.get_archived(&gone.id).unwrap().is_some());
    assert!(e.get_archived(&warm.id).unwrap().is_none());
    let names: Vec<String> = std::fs::read_dir(dir.path().join("t.db.cold"))
        .unwrap()
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| n.ends_with(".cold")), "{names:?}");
}

fn uuid_like(prefix: &str) -> String {
    format!("{prefix}-0000-7000-8000-000000000001")
}

#[test]
fn a_damaged_segment_is_named_not_skipped() {
    let mut e = TestEngine::sqlite(|c| {
        c.cold.enabled = true;
        c.max_items = 0;
    });
    e.remember(NewMemory::new(scope("project/a"), "cold text"))
        .unwrap();
    let start = Timestamp::now();
    e.set_clock(move || start + SignedDuration::from_hours(24 * 40));
    assert_eq!(e.upkeep().unwrap().moved_to_cold, 1);
    let seg = walk(&e.db_path().with_extension("db.cold"))[0].clone();
    let bytes = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &bytes[..bytes.len() - 10]).unwrap();
    let mut r = Recall::new("cold", view(&["project/a"]));
    r.include_archived = true;
    let err = e.recall(&r).unwrap_err().to_string();
    let name = seg.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.contains(&name) && err.contains("truncated"), "{err}");
    // Warm recall keeps working.
    assert!(e.recall(&Recall::new("cold", view(&["project/a"]))).is_ok());
}

#[test]
fn cold_needs_a_dir_without_a_sqlite_file() {
    let mut c = Config::in_memory();
    c.cold.enabled = true;
    let err = strata::Engine::open(c).unwrap_err().to_string();
    assert!(err.contains("cold.dir"), "{err}");
}
