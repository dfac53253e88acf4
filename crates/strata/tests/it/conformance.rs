//! The store conformance suite: every backend passes the same tests.

use serde_json::json;
use strata::{Access, Embedding, Error, Filter, Provenance, Role};
use strata::{ImportItem, ImportRules, OnConflict, Order, Put, Query, Session, VectorCounts};

use crate::harness::{MakeStore, mem, now, scope, view};

backends!(store:
    put_get_roundtrip_keeps_every_field,
    duplicate_id_is_rejected,
    same_key_supersedes_and_keeps_history,
    update_is_compare_and_swap,
    delete_removes_everywhere,
    delete_moved_takes_only_the_version_moved,
    query_orders_limits_and_offsets,
    search_text_stays_in_view_and_ranks,
    counts_scopes_and_stats,
    archive_and_restore,
    sessions_bound_their_size,
    put_batch_is_all_or_nothing,
    expired_memories_are_hidden,
    touch_records_access,
    restore_checks_keys_and_session_bounds,
    rows_by_signals_ids_and_history,
    sessions_are_removed_only_when_empty,
    import_follows_its_rules,
    vectors_wait_are_kept_and_searched,
    context_log_keeps_the_first_record,
    ids_with_prefix_reads_active_and_archived,
    leases_exclude_other_holders_until_they_run_out,
    counts_by_kind_stay_in_the_view,
    counts_with_expired_follow_every_write,
    learned_memories_stay_out_of_text_statistics,
);

/// A learned memory is found and scored by text search, but the other
/// memories' scores stay what they were before it was learned; a memory
/// an agent wrote with the same words moves them.
fn learned_memories_stay_out_of_text_statistics(make: MakeStore) {
    let b = make();
    for t in [
        "we moved the billing service to berlin",
        "billing runs nightly",
        "the office plant needs water",
    ] {
        b.store.put(&mem("project/a", t)).unwrap();
    }
    let q = Query::view(view(&["project/a"]), now());
    let terms = strata::query_terms("billing berlin");
    let scores = |b: &crate::harness::Backend| {
        b.store
            .search_signals(&q, &terms, 10)
            .unwrap()
            .into_iter()
            .map(|(s, x)| (s.id, x))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let before = scores(&b);
    assert_eq!(before.len(), 2);
    let mut learned = mem("project/a", "billing moved to berlin: billing in berlin");
    learned.source = strata::Source::Learned;
    b.store.put(&learned).unwrap();
    let after = scores(&b);
    assert_eq!(after.len(), 3, "the learned memory is found: {after:?}");
    assert!(after[&learned.id] > 0.0);
    for (id, x) in &before {
        assert_eq!(after[id], *x, "{id} moved when a memory was learned");
    }
    let told = mem("project/a", "billing moved to berlin: billing in berlin");
    b.store.put(&told).unwrap();
    let told_after = scores(&b);
    assert!(
        before.iter().any(|(id, x)| told_after[id] != *x),
        "a memory an agent wrote is in the statistics"
    );
    // A memory out of the view is not in its statistics.
    b.store.put(&mem("project/b", "billing berlin")).unwrap();
    assert_eq!(scores(&b), told_after);
}

fn ids_with_prefix_reads_active_and_archived(make: MakeStore) {
    let b = make();
    let mut ids = Vec::new();
    for (i, id) in ["aaaa-0001", "aaaa-0002", "aaab-0001", "b"]
        .iter()
        .enumerate()
    {
        let mut m = mem(if i == 2 { "project/b" } else { "project/a" }, "x");
        m.id = id.to_string();
        b.store.put(&m).unwrap();
        ids.push(m.id);
    }
    b.store
        .archive(&["aaaa-0002".to_string()], "evicted", now())
        .unwrap();
    let got = |p: &str, n: usize| -> Vec<(String, String)> {
        b.store
            .ids_with_prefix(p, n)
            .unwrap()
            .into_iter()
            .map(|(id, s)| (id, s.to_string()))
            .collect()
    };
    assert_eq!(
        got("aaaa", 10),
        [
            ("aaaa-0001".to_string(), "project/a".to_string()),
            ("aaaa-0002".to_string(), "project/a".to_string())
        ]
    );
    assert_eq!(got("aaa", 10).len(), 3);
    assert_eq!(got("aaa", 2).len(), 2);
    assert_eq!(got("aaab-0001", 10)[0].1, "project/b");
    assert!(got("c", 10).is_empty());
    assert_eq!(got("", 10).len(), 4);
}

fn restore_checks_keys_and_session_bounds(make: MakeStore) {
    let b = make();
    // Two archived memories with the same key cannot both come back.
    let mut k1 = mem("project/a", "k one");
    k1.key = Some("k".into());
    b.store.put(&k1).unwrap();
    b.store
        .archive(std::slice::from_ref(&k1.id), "expired", now())
        .unwrap();
    let mut k2 = mem("project/a", "k two");
    k2.key = Some("k".into());
    b.store.put(&k2).unwrap();
    b.store
        .archive(std::slice::from_ref(&k2.id), "evicted", now())
        .unwrap();
    let err = b
        .store
        .restore(&[k1.id.clone(), k2.id.clone()])
        .unwrap_err();
    assert!(matches!(err, Error::KeyConflict { .. }), "{err}");
    assert_eq!(
        b.store
            .query_archived(&Query::everything(now()))
            .unwrap()
            .len(),
        2,
        "nothing moved"
    );
    // A restore counts against the session bound like a write.
    b.store.create_session(&session("s", 15)).unwrap();
    let mut a = mem("session/s", "0123456789");
    a.session = Some("s".into());
    b.store.put(&a).unwrap();
    b.store
        .archive(std::slice::from_ref(&a.id), "evicted", now())
        .unwrap();
    let mut c = mem("session/s", "0123456789");
    c.session = Some("s".into());
    b.store.put(&c).unwrap();
    assert!(matches!(
        b.store.restore(std::slice::from_ref(&a.id)),
        Err(Error::SessionFull { .. })
    ));
    assert!(b.store.get(&a.id).unwrap().is_none());
}

fn put_get_roundtrip_keeps_every_field(make: MakeStore) {
    let b = make();
    let mut m = mem("project/a/sprint/s1", "full field memory");
    m.role = Some(Role::Assistant);
    m.payload = Some(json!({"a": 1, "b": {"c": [1, 2, "x"]}, "d": true}));
    m.checksum = strata::checksum(&m.content, m.payload.as_ref());
    m.key = Some("k/1".into());
    m.tags = vec!["x".into(), "y z".into()];
    m.importance = 0.123456789;
    m.expires_at = Some(now() + jiff::SignedDuration::from_hours(1));
    m.pinned = true;
    m.sensitive = true;
    m.embedding = Some(Embedding {
        model: "test".into(),
        vector: vec![0.25, -1.5, 3.0e-7],
    });
    m.provenance = Some(Provenance {
        from_id: "old".into(),
        from_scope: scope("task/t"),
        at: m.created_at,
    });
    m.last_accessed_at = Some(m.created_at);
    m.access_count = 7;
    b.store.put(&m).unwrap();
    assert_eq!(b.store.get(&m.id).unwrap(), Some(m.clone()));
    assert_eq!(b.store.get("missing").unwrap(), None);
}

fn duplicate_id_is_rejected(make: MakeStore) {
    let b = make();
    let m = mem("project/a", "one");
    b.store.put(&m).unwrap();
    assert!(matches!(b.store.put(&m), Err(Error::DuplicateId(_))));
    b.store
        .archive(std::slice::from_ref(&m.id), "evicted", now())
        .unwrap();
    assert!(
        matches!(b.store.put(&m), Err(Error::DuplicateId(_))),
        "an archived id is still taken"
    );
}

fn same_key_supersedes_and_keeps_history(make: MakeStore) {
    let b = make();
    let mut a = mem("global", "theme: dark");
    a.key = Some("theme".into());
    let mut c = mem("global", "theme: light");
    c.key = Some("theme".into());
    let mut other_scope = mem("project/x", "theme: blue");
    other_scope.key = Some("theme".into());
    assert!(matches!(b.store.put(&a).unwrap(), Put::Inserted(_)));
    let Put::Superseded(s) = b.store.put(&c).unwrap() else {
        panic!("expected supersession")
    };
    assert_eq!(s.id, a.id, "keeps the id");
    assert_eq!(s.version, 2);
    assert_eq!(s.content, "theme: light");
    assert_eq!(s.created_at, a.created_at);
    assert!(
        matches!(b.store.put(&other_scope).unwrap(), Put::Inserted(_)),
        "keys are per scope"
    );
    let h = b.store.history(&a.id).unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].content, "theme: dark");
    assert_eq!(h[0].version, 1);
    assert_eq!(
        b.store.get(&c.id).unwrap(),
        None,
        "the second id was never stored"
    );
}

fn update_is_compare_and_swap(make: MakeStore) {
    let b = make();
    let m = mem("project/a", "draft");
    b.store.put(&m).unwrap();
    let mut n = m.clone();
    n.content = "final".into();
    n.checksum = strata::checksum("final", None);
    let u = b.store.update(&n, 1).unwrap();
    assert_eq!(u.version, 2);
    let stale = b.store.update(&n, 1).unwrap_err();
    assert!(
        matches!(
            stale,
            Error::VersionConflict {
                expected: 1,
                current: 2,
                ..
            }
        ),
        "{stale}"
    );
    assert!(stale.to_string().contains("version conflict"));
    let mut missing = n.clone();
    missing.id = "nope".into();
    assert!(matches!(
        b.store.update(&missing, 1),
        Err(Error::NotFound(_))
    ));
    assert_eq!(b.store.history(&m.id).unwrap()[0].content, "draft");
    let q = Query::view(view(&["project/a"]), now());
    assert_eq!(
        b.store
            .search_text(&q, &["final".into()], 10)
            .unwrap()
            .len(),
        1
    );
    assert!(
        b.store
            .search_text(&q, &["draft".into()], 10)
            .unwrap()
            .is_empty(),
        "old text left the index"
    );
}

/// A move to the cold tier lets go of each memory only at the version it
/// wrote: one updated since stays (the store's copy wins), an archived one
/// goes with its history, an unknown id is no error.
fn delete_moved_takes_only_the_version_moved(make: MakeStore) {
    let b = make();
    let changed = mem("project/a", "read for the move, then changed");
    b.store.put(&changed).unwrap();
    let mut newer = changed.clone();
    newer.content = "changed after the move read it".into();
    newer.checksum = strata::checksum(&newer.content, None);
    assert_eq!(b.store.update(&newer, 1).unwrap().version, 2);
    let active = mem("project/a", "idle and unchanged");
    b.store.put(&active).unwrap();
    let arch = mem("project/a", "archived one");
    b.store.put(&arch).unwrap();
    b.store
        .archive(std::slice::from_ref(&arch.id), "evicted", now())
        .unwrap();
    let gone = b
        .store
        .delete_moved(&[
            (changed.id.clone(), 1),
            (active.id.clone(), 1),
            (arch.id.clone(), 1),
            ("missing".into(), 1),
        ])
        .unwrap();
    assert_eq!(gone, [active.id.clone(), arch.id.clone()]);
    let kept = b.store.get(&changed.id).unwrap().unwrap();
    assert_eq!(
        (kept.version, kept.content.as_str()),
        (2, "changed after the move read it")
    );
    assert_eq!(b.store.history(&changed.id).unwrap().len(), 1);
    assert_eq!(b.store.get(&active.id).unwrap(), None);
    assert!(
        b.store
            .query_archived(&Query::everything(now()))
            .unwrap()
            .is_empty()
    );
    // The text index no longer finds the one that went, still the one kept.
    let q = |t: &str| {
        b.store
            .search_text(&Query::view(view(&["project/a"]), now()), &[t.into()], 10)
            .unwrap()
            .len()
    };
    assert_eq!((q("idle"), q("changed")), (0, 1));
    // Its version now 2: a move that read version 2 takes it.
    assert_eq!(
        b.store.delete_moved(&[(changed.id.clone(), 2)]).unwrap(),
        std::slice::from_ref(&changed.id)
    );
    assert!(b.store.history(&changed.id).unwrap().is_empty());
}

fn delete_removes_everywhere(make: MakeStore) {
    let b = make();
    let mut k = mem("project/a", "keyed v1");
    k.key = Some("k".into());
    b.store.put(&k).unwrap();
    let mut k2 = mem("project/a", "keyed v2");
    k2.key = Some("k".into());
    b.store.put(&k2).unwrap();
    let arch = mem("project/a", "archived one");
    b.store.put(&arch).unwrap();
    b.store
        .archive(std::slice::from_ref(&arch.id), "evicted", now())
        .unwrap();
    let n = b
        .store
        .delete(&[k.id.clone(), arch.id.clone(), "missing".into()])
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(b.store.get(&k.id).unwrap(), None);
    assert!(b.store.history(&k.id).unwrap().is_empty());
    assert!(
        b.store
            .query_archived(&Query::everything(now()))
            .unwrap()
            .is_empty()
    );
    let q = Query::view(view(&["project/a"]), now());
    assert!(
        b.store
            .search_text(&q, &["keyed".into()], 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(b.store.stats().unwrap().memories, 0);
}

fn query_orders_limits_and_offsets(make: MakeStore) {
    let b = make();
    let ms: Vec<_> = (0..5)
        .map(|i| mem("project/a", &format!("item {i}")))
        .collect();
    for m in &ms {
        b.store.put(m).unwrap();
    }
    let q = Query::view(view(&["project/a"]), now());
    let ids = |v: Vec<strata::Memory>| v.into_iter().map(|m| m.id).collect::<Vec<_>>();
    let newest = ids(b.store.query(&q.clone().limit(2)).unwrap());
    assert_eq!(newest, [ms[4].id.clone(), ms[3].id.clone()]);
    let mut q2 = q.clone().order(Order::Oldest).limit(2);
    q2.offset = 1;
    assert_eq!(
        ids(b.store.query(&q2).unwrap()),
        [ms[1].id.clone(), ms[2].id.clone()]
    );
    assert_eq!(b.store.count(&q).unwrap(), 5);
}

fn search_text_stays_in_view_and_ranks(make: MakeStore) {
    let b = make();
    let strong = mem(
        "project/a",
        "postgres postgres replication for postgres billing",
    );
    let weak = mem(
        "project/a",
        "we looked at postgres once among many other databases and tools today",
    );
    let other = mem("project/b", "postgres everywhere postgres");
    let sub = mem("project/a/sprint/s1", "postgres in the sprint");
    for m in [&strong, &weak, &other, &sub] {
        b.store.put(m).unwrap();
    }
    let terms = strata::query_terms("Which postgres setup?");
    let q = Query::view(view(&["project/a"]), now());
    let hits = b.store.search_text(&q, &terms, 10).unwrap();
    let ids: Vec<_> = hits.iter().map(|(m, _)| m.id.clone()).collect();
    assert_eq!(
        ids,
        [strong.id.clone(), weak.id.clone()],
        "exact scope only, best first"
    );
    assert!(hits.iter().all(|(_, s)| *s > 0.0));
    let q = Query::view(view(&["project/a/**"]), now());
    assert_eq!(
        b.store.search_text(&q, &terms, 10).unwrap().len(),
        3,
        "subtree includes the sprint"
    );
    let q = Query::view(view(&["project/a/**"]), now())
        .filter(Filter::parse(&json!({"scope": "project/a/sprint/s1"})).unwrap());
    assert_eq!(
        b.store.search_text(&q, &terms, 10).unwrap().len(),
        1,
        "filters apply to text search"
    );
    assert!(
        b.store
            .search_text(&q, &["zzzunknown".into()], 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        b.store
            .search_text(&Query::view(view(&["project/a/**"]), now()), &terms, 1)
            .unwrap()
            .len(),
        1
    );
}

fn counts_scopes_and_stats(make: MakeStore) {
    let b = make();
    for (s, c) in [
        ("global", "g"),
        ("project/a", "a1"),
        ("project/a", "a2"),
        ("task/t1", "t"),
    ] {
        b.store.put(&mem(s, c)).unwrap();
    }
    let a = mem("project/a", "gone");
    b.store.put(&a).unwrap();
    b.store
        .archive(std::slice::from_ref(&a.id), "evicted", now())
        .unwrap();
    let scopes = b.store.list_scopes().unwrap();
    let names: Vec<_> = scopes
        .iter()
        .map(|s| (s.scope.to_string(), s.memories, s.archived))
        .collect();
    assert_eq!(
        names,
        [
            ("global".into(), 1, 0),
            ("project/a".into(), 2, 1),
            ("task/t1".into(), 1, 0)
        ]
    );
    let st = b.store.stats().unwrap();
    assert_eq!((st.memories, st.archived, st.scopes), (4, 1, 3));
    assert_eq!(st.by_tier.get("project"), Some(&2));
    assert_eq!(st.by_tier.get("task"), Some(&1));
    assert_eq!(st.tokens, 4);
}

fn archive_and_restore(make: MakeStore) {
    let b = make();
    let m = mem("project/a", "evictable fact");
    b.store.put(&m).unwrap();
    assert_eq!(
        b.store
            .archive(std::slice::from_ref(&m.id), "evicted", now())
            .unwrap(),
        1
    );
    let q = Query::view(view(&["project/a"]), now());
    assert!(b.store.query(&q).unwrap().is_empty());
    assert!(
        b.store
            .search_text(&q, &["evictable".into()], 10)
            .unwrap()
            .is_empty()
    );
    let a = b.store.query_archived(&q).unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].reason, "evicted");
    assert_eq!(a[0].memory, m);
    assert_eq!(b.store.restore(std::slice::from_ref(&m.id)).unwrap(), 1);
    assert_eq!(
        b.store
            .search_text(&q, &["evictable".into()], 10)
            .unwrap()
            .len(),
        1
    );
    // A restored key that is active again is a conflict, and nothing moves.
    let mut k1 = mem("project/a", "k one");
    k1.key = Some("k".into());
    b.store.put(&k1).unwrap();
    b.store
        .archive(std::slice::from_ref(&k1.id), "evicted", now())
        .unwrap();
    let mut k2 = mem("project/a", "k two");
    k2.key = Some("k".into());
    b.store.put(&k2).unwrap();
    assert!(matches!(
        b.store.restore(std::slice::from_ref(&k1.id)),
        Err(Error::KeyConflict { .. })
    ));
    assert_eq!(b.store.query_archived(&q).unwrap().len(), 1);
}

fn session(id: &str, max: u64) -> Session {
    Session {
        id: id.into(),
        scope: scope(&format!("session/{id}")),
        created_at: now(),
        last_activity_at: now(),
        archived_at: None,
        max_bytes: max,
        bytes: 0,
        ephemeral: false,
    }
}

fn sessions_bound_their_size(make: MakeStore) {
    let b = make();
    b.store.create_session(&session("s1", 20)).unwrap();
    assert!(matches!(
        b.store.create_session(&session("s1", 20)),
        Err(Error::DuplicateSession(_))
    ));
    let mut m1 = mem("session/s1", "0123456789");
    m1.session = Some("s1".into());
    b.store.put(&m1).unwrap();
    let mut m2 = mem("session/s1", "0123456789A");
    m2.session = Some("s1".into());
    let e = b.store.put(&m2).unwrap_err();
    assert!(
        matches!(
            e,
            Error::SessionFull {
                used: 10,
                adding: 11,
                bound: 20,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("bound of 20 bytes"));
    assert_eq!(b.store.get(&m2.id).unwrap(), None);
    let mut orphan = mem("session/x", "hi");
    orphan.session = Some("nope".into());
    assert!(matches!(
        b.store.put(&orphan),
        Err(Error::SessionNotFound(_))
    ));
    // Deleting frees the bytes.
    b.store.delete(std::slice::from_ref(&m1.id)).unwrap();
    assert_eq!(b.store.get_session("s1").unwrap().unwrap().bytes, 0);
    b.store.put(&m2).unwrap();
    let s = b.store.archive_session("s1", now()).unwrap();
    assert!(s.archived_at.is_some());
    assert_eq!(
        b.store.query_archived(&Query::everything(now())).unwrap()[0].reason,
        "session_archived"
    );
    let mut m3 = mem("session/s1", "late");
    m3.session = Some("s1".into());
    assert!(matches!(b.store.put(&m3), Err(Error::SessionArchived(_))));
    assert!(matches!(
        b.store.archive_session("zz", now()),
        Err(Error::SessionNotFound(_))
    ));
    assert_eq!(b.store.list_sessions().unwrap().len(), 1);
}

fn put_batch_is_all_or_nothing(make: MakeStore) {
    let b = make();
    let a = mem("project/a", "first");
    b.store.put(&a).unwrap();
    let fresh = mem("project/a", "fresh");
    let mut it = vec![Ok(fresh.clone()), Ok(a.clone())].into_iter();
    assert!(b.store.put_batch(&mut it).is_err());
    assert_eq!(b.store.get(&fresh.id).unwrap(), None);
    let mut it = vec![Ok(fresh.clone()), Err(Error::NotFound("x".into()))].into_iter();
    assert!(b.store.put_batch(&mut it).is_err());
    assert_eq!(b.store.get(&fresh.id).unwrap(), None);
    let mut it = vec![Ok(fresh.clone())].into_iter();
    assert_eq!(b.store.put_batch(&mut it).unwrap().len(), 1);
    assert!(b.store.get(&fresh.id).unwrap().is_some());
}

fn expired_memories_are_hidden(make: MakeStore) {
    let b = make();
    let mut m = mem("project/a", "short lived");
    m.expires_at = Some(now() - jiff::SignedDuration::from_secs(1));
    b.store.put(&m).unwrap();
    let q = Query::view(view(&["project/a"]), now());
    assert!(b.store.query(&q).unwrap().is_empty());
    assert!(
        b.store
            .search_text(&q, &["short".into()], 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(b.store.query(&q.include_expired(true)).unwrap().len(), 1);
}

fn touch_records_access(make: MakeStore) {
    let b = make();
    let m = mem("project/a", "read me");
    b.store.put(&m).unwrap();
    let t = now();
    let earlier = t - jiff::SignedDuration::from_secs(60);
    b.store
        .touch(&[
            Access::one(m.id.clone(), t),
            Access {
                id: m.id.clone(),
                count: 2,
                at: earlier,
            },
            Access::one("no-such-id", t),
        ])
        .unwrap();
    let g = b.store.get(&m.id).unwrap().unwrap();
    assert_eq!(g.access_count, 3);
    assert_eq!(
        g.last_accessed_at.map(|x| x.as_millisecond()),
        Some(t.as_millisecond()),
        "an earlier access never moves the time back"
    );
    assert_eq!(g.version, 1, "reads do not change the version");
}

#[test]
fn relevance_agrees_across_backends() {
    let model = crate::harness::Backend::memory();
    let sqlite = crate::harness::Backend::sqlite();
    #[cfg(feature = "postgres")]
    let pg = crate::harness::Backend::postgres();
    #[cfg(not(feature = "postgres"))]
    let pg: Option<crate::harness::Backend> = None;
    let mut others = vec![("sqlite", sqlite)];
    others.extend(pg.map(|b| ("postgres", b)));
    let texts = [
        "the billing service moved to postgres last sprint",
        "postgres replication lag alerts fire at night",
        "we chose kafka over sqs for the billing events",
        "lunch order for the team offsite",
        "billing invoices are generated nightly by a cron job",
        "the cron job for invoices failed twice this week",
        "kafka consumers lag behind during billing peaks",
        "news today: the café opened",
        "a dying plant on the generous windowsill",
        "किताबें पढ़ना अच्छा है",
    ];
    for (i, t) in texts.iter().enumerate() {
        let m = mem(
            if i % 2 == 0 {
                "project/a"
            } else {
                "project/a/sprint/s1"
            },
            t,
        );
        model.store.put(&m).unwrap();
        for (_, b) in &others {
            b.store.put(&m).unwrap();
        }
    }
    for q in [
        "billing postgres",
        "kafka lag",
        "cron invoices failed",
        "team lunch",
        "nothing matches zzz",
    ] {
        for v in [view(&["project/a"]), view(&["project/a/**"])] {
            let query = Query::view(v, now());
            let terms = strata::query_terms(q);
            let a = model.store.search_signals(&query, &terms, 10).unwrap();
            let ids = |x: &[(strata::Signals, f64)]| {
                x.iter().map(|(s, _)| s.id.clone()).collect::<Vec<_>>()
            };
            for (name, other) in &others {
                let b = other.store.search_signals(&query, &terms, 10).unwrap();
                assert_eq!(ids(&a), ids(&b), "{name}: {q}");
                for ((_, x), (_, y)) in a.iter().zip(&b) {
                    assert!((x - y).abs() < 1e-9, "{name}: {q}: {x} vs {y}");
                }
            }
        }
    }
}

/// The search pipeline (`store::search::text_search`), as both stores run
/// it, ranks exactly as the brute-force reference of the memory store on
/// random corpora, views and filters small enough that no cap applies.
#[test]
fn text_search_matches_the_brute_force_reference() {
    use strata::{MemoryStore, Query, Rows, SqliteStore, TextSearch};
    let words = [
        "billing", "queue", "retry", "tabs", "deploy", "login", "flaky", "cache", "moved", "berlin",
    ];
    let scopes = ["project/a", "project/a/sprint/s1", "project/b", "global"];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    // `project/w` holds more scopes than SQLite names one by one
    // (`SCOPED_MAX`, 32): a view of it reads the whole store's postings
    // within its scope terms instead.
    let wide: Vec<String> = (0..40).map(|i| format!("project/w/s{i}")).collect();
    for round in 0..18 {
        let reference = MemoryStore::new();
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(dir.path().join("t.db"), Default::default()).unwrap();
        #[cfg(feature = "postgres")]
        let pg = crate::harness::Backend::postgres();
        #[cfg(not(feature = "postgres"))]
        let pg: Option<crate::harness::Backend> = None;
        let n = 20 + next(60);
        for i in 0..n + wide.len() {
            let len = 1 + next(9);
            let text: Vec<&str> = (0..len).map(|_| words[next(words.len())]).collect();
            let scope = match i.checked_sub(n) {
                Some(w) => wide[w].as_str(),
                None if next(4) == 0 => wide[next(wide.len())].as_str(),
                None => scopes[next(scopes.len())],
            };
            let mut m = crate::harness::mem(scope, &format!("{} n{i}", text.join(" ")));
            m.tokens = (len + 1) as u32;
            if next(3) == 0 {
                m.kind = strata::Kind::Decision;
            }
            if next(6) == 0 {
                m.source = strata::Source::Learned;
            }
            reference.put(&m).unwrap();
            sqlite.put(&m).unwrap();
            if let Some(pg) = &pg {
                pg.store.put(&m).unwrap();
            }
        }
        let terms: Vec<String> = (0..1 + next(3))
            .map(|_| words[next(words.len())].to_string())
            .collect();
        // The last covers every scope of the store: SQLite leaves the
        // scope terms out of its lookups then.
        let views: [&[&str]; 6] = [
            &["project/a/**"],
            &["project/b", "global"],
            &["project/a", "project/b/**", "global"],
            &["project/w/**"],
            &["project/w/s1", "project/w/s7", "project/a/**"],
            &["project/**", "global"],
        ];
        let view = crate::harness::view(views[round % views.len()]);
        let mut q = Query::view(view, crate::harness::now());
        if round % 2 == 1 {
            q = q.filter(strata::Filter::parse(&serde_json::json!({"kind": "decision"})).unwrap());
        }
        let want = reference.search_reference(&q, &terms, 50);
        let mut runs = vec![
            ("memory", reference.search_signals(&q, &terms, 50).unwrap()),
            ("sqlite", sqlite.search_signals(&q, &terms, 50).unwrap()),
        ];
        if let Some(pg) = &pg {
            runs.push(("postgres", pg.store.search_signals(&q, &terms, 50).unwrap()));
        }
        for (name, got) in runs {
            assert_eq!(got.len(), want.len(), "{name}, round {round}, {terms:?}");
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.0.id, w.0.id, "{name}, round {round}");
                assert!((g.1 - w.1).abs() < 1e-9, "{name}: {} vs {}", g.1, w.1);
            }
        }
    }
}

fn rows_by_signals_ids_and_history(make: MakeStore) {
    let b = make();
    let ms: Vec<_> = (0..4)
        .map(|i| mem("project/a", &format!("row {i}")))
        .collect();
    for m in &ms {
        b.store.put(m).unwrap();
    }
    b.store
        .archive(std::slice::from_ref(&ms[3].id), "evicted", now())
        .unwrap();
    let q = Query::view(view(&["project/a"]), now()).order(Order::Oldest);
    let rows: Vec<String> = b
        .store
        .query(&q)
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    let sigs: Vec<String> = b
        .store
        .query_signals(&q)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(sigs, rows);
    assert_eq!(rows.len(), 3);
    // get_many: active memories only, unknown and archived ids left out.
    let ids = vec![
        ms[2].id.clone(),
        "nope".into(),
        ms[3].id.clone(),
        ms[0].id.clone(),
    ];
    let mut got: Vec<String> = b
        .store
        .get_many(&ids)
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    got.sort();
    let mut want = vec![ms[0].id.clone(), ms[2].id.clone()];
    want.sort();
    assert_eq!(got, want);
    // put_history: a version kept as history, replaced by the same version.
    let mut old = ms[1].clone();
    old.version = 0;
    old.content = "row 1, before".into();
    b.store.put_history(&old).unwrap();
    old.content = "row 1, before (again)".into();
    b.store.put_history(&old).unwrap();
    let h = b.store.history(&ms[1].id).unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].content, "row 1, before (again)");
}

fn sessions_are_removed_only_when_empty(make: MakeStore) {
    let b = make();
    b.store.create_session(&session("empty", 100)).unwrap();
    b.store.create_session(&session("used", 100)).unwrap();
    let mut m = mem("session/used", "turn");
    m.session = Some("used".into());
    b.store.put(&m).unwrap();
    assert!(b.store.remove_empty_session("empty").unwrap());
    assert!(b.store.get_session("empty").unwrap().is_none());
    assert!(!b.store.remove_empty_session("used").unwrap());
    assert!(b.store.get_session("used").unwrap().is_some());
    assert!(!b.store.remove_empty_session("never").unwrap());
}

fn import_follows_its_rules(make: MakeStore) {
    let b = make();
    let theirs = mem("project/b", "theirs");
    let mine = mem("project/a", "mine");
    b.store.put(&theirs).unwrap();
    b.store.put(&mine).unwrap();
    let item = |m: &strata::Memory, content: &str| {
        let mut m = m.clone();
        m.content = content.into();
        m.checksum = strata::checksum(content, None);
        ImportItem {
            line: 1,
            memory: m,
            archived: None,
            history: vec![],
        }
    };
    let fenced = |on_conflict| ImportRules {
        on_conflict,
        fence: strata::Fence::within(vec![scope("project/a")]),
        session_max_bytes: 1000,
    };
    // Another tenant's id: stored under a fresh id, the other untouched.
    let mut onto = item(&theirs, "onto theirs");
    onto.memory.scope = scope("project/a");
    let n = b
        .store
        .import(&[onto], &fenced(OnConflict::Replace))
        .unwrap();
    assert_eq!((n.imported, n.replaced), (1, 0));
    assert_eq!(b.store.get(&theirs.id).unwrap().unwrap().content, "theirs");
    // The caller's own id follows the mode.
    let err = b
        .store
        .import(&[item(&mine, "again")], &fenced(OnConflict::Error))
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateId(_)), "{err}");
    let n = b
        .store
        .import(&[item(&mine, "again")], &fenced(OnConflict::Skip))
        .unwrap();
    assert_eq!(n.skipped, 1);
    let n = b
        .store
        .import(&[item(&mine, "replaced")], &fenced(OnConflict::Replace))
        .unwrap();
    assert_eq!(n.replaced, 1);
    assert_eq!(b.store.get(&mine.id).unwrap().unwrap().content, "replaced");
    // Unfenced, a missing session is created as `session/<id>`.
    let mut s = item(&mem("project/c", "in a session"), "in a session");
    s.memory.session = Some("imp".into());
    b.store.import(&[s], &ImportRules::default()).unwrap();
    assert_eq!(
        b.store.get_session("imp").unwrap().unwrap().scope,
        scope("session/imp")
    );
}

fn vectors_wait_are_kept_and_searched(make: MakeStore) {
    let b = make();
    let ms: Vec<_> = (0..3)
        .map(|i| mem("project/a", &format!("vec {i}")))
        .collect();
    for m in &ms {
        b.store.put(m).unwrap();
    }
    b.store.put(&mem("project/b", "elsewhere")).unwrap();
    assert_eq!(
        b.store.vector_counts("m2").unwrap(),
        VectorCounts {
            vectors: 0,
            pending: 4
        }
    );
    let waiting = b.store.pending_vectors("m2", None, 10).unwrap();
    assert_eq!(waiting.len(), 4);
    let items: Vec<(String, String, Vec<f32>)> = ms
        .iter()
        .enumerate()
        .map(|(i, m)| {
            (
                m.id.clone(),
                m.checksum.clone(),
                vec![1.0 - i as f32 * 0.4, i as f32 * 0.4],
            )
        })
        .collect();
    // A stale checksum is skipped; a wrong length refused.
    let mut stale = items.clone();
    stale[0].1 = "stale".into();
    assert_eq!(b.store.set_vectors("m2", 2, &stale[..1]).unwrap(), 0);
    assert!(b.store.set_vectors("m2", 3, &items).is_err());
    assert_eq!(b.store.set_vectors("m2", 2, &items).unwrap(), 3);
    assert!(
        b.store.set_vectors("m2", 3, &[]).is_err(),
        "the model holds length 2"
    );
    assert_eq!(
        b.store.vector_counts("m2").unwrap(),
        VectorCounts {
            vectors: 3,
            pending: 1
        }
    );
    assert_eq!(b.store.vector_counts("other").unwrap().pending, 4);
    assert_eq!(
        b.store.vector_models().unwrap(),
        vec![("m2".to_string(), 2, 3)]
    );
    let q = Query::view(view(&["project/a"]), now());
    let hits = b.store.search_vectors(&q, "m2", &[1.0, 0.0], 2).unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.0.id.as_str()).collect();
    assert_eq!(ids, [ms[0].id.as_str(), ms[1].id.as_str()]);
    assert!(
        b.store
            .search_vectors(&q, "other", &[1.0, 0.0], 2)
            .unwrap()
            .is_empty()
    );
    assert_eq!(b.store.clear_vectors(Some("m2")).unwrap(), 0);
    assert_eq!(b.store.clear_vectors(None).unwrap(), 3);
    assert!(b.store.vector_models().unwrap().is_empty());
    assert_eq!(b.store.vector_counts("m2").unwrap().pending, 4);
    // A PostgreSQL read is a round trip to a server: it may wait.
    let remote = b.store.stats().unwrap().backend == "postgres";
    assert_eq!(b.store.reads_never_wait(false), !remote);
}

fn context_log_keeps_the_first_record(make: MakeStore) {
    let b = make();
    assert_eq!(b.store.context_log("ctx-1").unwrap(), None);
    b.store
        .log_context("ctx-1", now(), "{\"first\":1}")
        .unwrap();
    b.store
        .log_context("ctx-1", now(), "{\"second\":2}")
        .unwrap();
    assert_eq!(
        b.store.context_log("ctx-1").unwrap().as_deref(),
        Some("{\"first\":1}")
    );
}

fn leases_exclude_other_holders_until_they_run_out(make: MakeStore) {
    let b = make();
    let t = |ms: i64| jiff::Timestamp::from_millisecond(1_750_000_000_000 + ms).unwrap();
    assert!(b.store.take_lease("upkeep", "a", t(0), t(1_000)).unwrap());
    // Another holder waits while the lease runs; the holder extends it.
    assert!(!b.store.take_lease("upkeep", "b", t(500), t(1_500)).unwrap());
    assert!(b.store.take_lease("upkeep", "a", t(900), t(2_000)).unwrap());
    assert!(
        !b.store
            .take_lease("upkeep", "b", t(1_500), t(2_500))
            .unwrap()
    );
    // Other names are other leases.
    assert!(
        b.store
            .take_lease("evict:project/x", "b", t(1_500), t(2_500))
            .unwrap()
    );
    // Only the holder ends a lease.
    b.store.end_lease("upkeep", "b").unwrap();
    assert!(
        !b.store
            .take_lease("upkeep", "b", t(1_600), t(2_600))
            .unwrap()
    );
    b.store.end_lease("upkeep", "a").unwrap();
    assert!(
        b.store
            .take_lease("upkeep", "b", t(1_600), t(2_600))
            .unwrap()
    );
    // A lease that ran out (its holder died) is taken over.
    assert!(
        b.store
            .take_lease("upkeep", "c", t(2_600), t(3_600))
            .unwrap()
    );
    assert!(
        !b.store
            .take_lease("upkeep", "b", t(3_000), t(4_000))
            .unwrap()
    );
}

/// A count of every row of a view, expired ones too (what a project's
/// bound reads on every write), agrees with the rows themselves after each
/// kind of write: puts, a batch that fails, a move to another scope, a
/// same-key supersede, archive and restore, a move to the cold tier, delete.
fn counts_with_expired_follow_every_write(make: MakeStore) {
    let b = make();
    let queries: Vec<Query> = [
        Some(&["project/a/**"][..]),
        Some(&["project/a"][..]),
        Some(&["project/a/sprint/s", "project/b/**"][..]),
        Some(&["project/ab"][..]),
        None,
    ]
    .into_iter()
    .map(|v| match v {
        Some(v) => Query::view(view(v), now()),
        None => Query::everything(now()),
    })
    .map(|q| q.include_expired(true))
    .collect();
    let counts = |b: &crate::harness::Backend, step: &str| -> Vec<u64> {
        queries
            .iter()
            .map(|q| {
                let rows = b.store.query(q).unwrap().len() as u64;
                assert_eq!(
                    b.store.count(q).unwrap(),
                    rows,
                    "after {step}: {:?}",
                    q.view
                );
                rows
            })
            .collect()
    };
    let put = |s: &str, text: &str| {
        let m = mem(s, text);
        b.store.put(&m).unwrap();
        m
    };
    let a1 = put("project/a", "one");
    let a2 = put("project/a", "two");
    put("project/a", "three");
    let s1 = put("project/a/sprint/s", "sprint one");
    put("project/a/sprint/s", "sprint two");
    put("project/b", "beside");
    put("project/ab", "a sibling whose name starts the same");
    let mut expired = mem("project/a", "expired, still counted");
    expired.expires_at = Some(jiff::Timestamp::from_millisecond(1).unwrap());
    b.store.put(&expired).unwrap();
    assert_eq!(counts(&b, "puts"), [6, 4, 3, 1, 8]);

    let fresh = mem("project/a", "never stored");
    let mut it = vec![Ok(fresh), Ok(a1.clone())].into_iter();
    assert!(b.store.put_batch(&mut it).is_err());
    assert_eq!(counts(&b, "a failed batch"), [6, 4, 3, 1, 8]);

    let mut moved = a2.clone();
    moved.scope = scope("project/b/deep");
    b.store.update(&moved, 1).unwrap();
    assert_eq!(counts(&b, "a move"), [5, 3, 4, 1, 8]);

    let mut k1 = mem("project/a", "theme: dark");
    k1.key = Some("theme".into());
    let mut k2 = mem("project/a", "theme: light");
    k2.key = Some("theme".into());
    b.store.put(&k1).unwrap();
    assert!(matches!(b.store.put(&k2).unwrap(), Put::Superseded(_)));
    assert_eq!(counts(&b, "a supersede"), [6, 4, 4, 1, 9]);

    let archived = [a1.id.clone(), s1.id.clone()];
    assert_eq!(b.store.archive(&archived, "evicted", now()).unwrap(), 2);
    assert_eq!(counts(&b, "archive"), [4, 3, 3, 1, 7]);
    assert_eq!(b.store.restore(&archived[1..]).unwrap(), 1);
    assert_eq!(counts(&b, "restore"), [5, 3, 4, 1, 8]);

    assert_eq!(
        b.store.delete_moved(&[(k1.id.clone(), 2)]).unwrap(),
        [k1.id.clone()]
    );
    assert_eq!(counts(&b, "a move to the cold tier"), [4, 2, 4, 1, 7]);
    assert_eq!(
        b.store.delete(std::slice::from_ref(&expired.id)).unwrap(),
        1
    );
    assert_eq!(counts(&b, "delete"), [3, 1, 4, 1, 6]);
}

fn counts_by_kind_stay_in_the_view(make: MakeStore) {
    let b = make();
    let kinded = |scope: &str, kind: strata::Kind| {
        let mut m = mem(scope, "counted");
        m.kind = kind;
        b.store.put(&m).unwrap();
    };
    kinded("project/a", strata::Kind::Decision);
    kinded("project/a/sprint/s", strata::Kind::Decision);
    kinded("project/a", strata::Kind::Custom("fact".into()));
    kinded("project/b", strata::Kind::Decision);
    let mut expired = mem("project/a", "gone");
    expired.expires_at = Some(jiff::Timestamp::from_millisecond(1).unwrap());
    b.store.put(&expired).unwrap();
    let q = Query::view(view(&["project/a/**"]), now());
    let got = b.store.count_by_kind(&q).unwrap();
    let want: std::collections::BTreeMap<String, u64> =
        [("decision".to_string(), 2), ("fact".to_string(), 1)].into();
    assert_eq!(got, want);
    assert_eq!(got.values().sum::<u64>(), b.store.count(&q).unwrap());
    let f = Filter::parse(&json!({"kind": "fact"})).unwrap();
    assert_eq!(
        b.store.count_by_kind(&q.clone().filter(f)).unwrap().len(),
        1
    );
    assert!(
        b.store
            .count_by_kind(&Query::view(view(&["project/z"]), now()))
            .unwrap()
            .is_empty()
    );
}
