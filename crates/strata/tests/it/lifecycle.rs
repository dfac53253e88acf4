//! Lifetime tiers, sessions, the seeds' typed operations, and bad input at
//! the library boundary.

use serde_json::json;
use strata::{Confirm, Error, Filter, Kind, List, NewMemory, Patch, Promotion, Recall, Role, View};

use crate::harness::{MakeEngine, fingerprint, scope, view};

backends!(engine:
    eviction_archives_lowest_value_never_pinned,
    complete_task_promotes_then_clears,
    promote_copies_with_provenance,
    preferences_supersede_and_global_needs_confirmation,
    sessions_have_bounds_manifests_and_archives,
    ttl_hides_then_upkeep_archives,
    typed_operations,
    update_through_the_engine,
    bad_input_is_named_and_changes_nothing,
    batch_is_atomic_and_counts_tokens,
    failed_write_leaves_no_new_session,
    complete_task_can_be_run_again,
    upkeep_and_eviction_leave_what_another_holder_leases,
);

fn failed_write_leaves_no_new_session(make: MakeEngine) {
    let e = make(&|c| c.session_max_bytes = 10);
    let before = fingerprint(&e);
    let err = e
        .remember(NewMemory::new(scope("session/new"), "far more than ten bytes").session("new"))
        .unwrap_err();
    assert!(matches!(err, Error::SessionFull { .. }), "{err}");
    assert!(e.list_sessions().unwrap().is_empty());
    assert_eq!(fingerprint(&e), before);
    let items = vec![NewMemory::new(scope("session/b"), "0123456789abc").session("b")];
    assert!(e.remember_batch(items, Confirm::No).is_err());
    assert!(e.list_sessions().unwrap().is_empty());
    assert!(
        e.create_session(Some("huge"), None, Some(u64::MAX))
            .is_err()
    );
}

fn complete_task_can_be_run_again(make: MakeEngine) {
    let e = make(&|_| {});
    let m = e
        .remember(NewMemory::new(scope("task/t"), "keep this").kind(Kind::Decision))
        .unwrap();
    // As if a first completion copied the memory and stopped before clearing.
    e.promote(&m.id, &scope("project/p"), Confirm::No).unwrap();
    let r = e
        .complete_task(
            "t",
            "p",
            &Promotion {
                ids: vec![m.id.clone()],
                min_importance: None,
            },
        )
        .unwrap();
    assert!(r.promoted.is_empty(), "already copied");
    assert_eq!(r.archived, 1);
    assert_eq!(e.count(&view(&["project/p"]), &Filter::all()).unwrap(), 1);
}

fn eviction_archives_lowest_value_never_pinned(make: MakeEngine) {
    let e = make(&|c| c.max_items = 10);
    let pinned = e
        .remember(
            NewMemory::new(scope("project/p"), "pinned but unimportant")
                .importance(0.0)
                .pinned(true),
        )
        .unwrap();
    let mut low = Vec::new();
    for i in 0..3 {
        low.push(
            e.remember(
                NewMemory::new(scope("project/p/sprint/s"), format!("trivial {i}"))
                    .importance(0.01),
            )
            .unwrap(),
        );
    }
    for i in 0..7 {
        e.remember(
            NewMemory::new(scope("project/p"), format!("decision {i}")).kind(Kind::Decision),
        )
        .unwrap();
    }
    // 11 > 10: the bound evicts max(excess, 10 % of 10) = 1, the lowest.
    assert_eq!(
        e.count(&view(&["project/p/**"]), &Filter::all()).unwrap(),
        10
    );
    let archived = e
        .list_archived(&view(&["project/p/**"]), &Filter::all(), 10)
        .unwrap();
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].reason, "evicted");
    assert_eq!(
        archived[0].memory.id, low[0].id,
        "lowest importance, then oldest"
    );
    assert!(
        e.get(&pinned.id).unwrap().is_some(),
        "pinned is never evicted"
    );
    // Archived memories are not recalled unless asked, and can come back.
    let mut r = Recall::new("trivial", view(&["project/p/**"]));
    assert_eq!(e.recall(&r).unwrap().len(), 2);
    r.include_archived = true;
    let hits = e.recall(&r).unwrap();
    assert_eq!(hits.len(), 3);
    assert!(
        hits.iter()
            .any(|h| h.archived.as_ref().is_some_and(|a| a.reason == "evicted"))
    );
    // Other projects are unaffected.
    e.remember(NewMemory::new(scope("project/q"), "elsewhere"))
        .unwrap();
    assert_eq!(e.count(&view(&["project/q"]), &Filter::all()).unwrap(), 1);
}

fn complete_task_promotes_then_clears(make: MakeEngine) {
    let e = make(&|_| {});
    let keep = e
        .remember(
            NewMemory::new(scope("task/t-42"), "root cause: stale cache")
                .kind(Kind::Finding)
                .importance(0.3),
        )
        .unwrap();
    let high = e
        .remember(
            NewMemory::new(scope("task/t-42/step/1"), "use read-through cache")
                .kind(Kind::Decision),
        )
        .unwrap();
    e.remember(NewMemory::new(scope("task/t-42"), "scratch thought").importance(0.2))
        .unwrap();
    e.remember(NewMemory::new(scope("task/t-43"), "another task"))
        .unwrap();
    let before = fingerprint(&e);
    let bad = e
        .complete_task(
            "t-42",
            "acme",
            &Promotion {
                ids: vec!["not-in-task".into()],
                min_importance: None,
            },
        )
        .unwrap_err();
    assert!(bad.to_string().contains("not-in-task"), "{bad}");
    assert!(
        e.complete_task("t 42", "acme", &Promotion::default())
            .is_err()
    );
    assert!(
        e.complete_task(
            "t-42",
            "acme",
            &Promotion {
                ids: vec![],
                min_importance: Some(1.5)
            }
        )
        .is_err()
    );
    assert_eq!(fingerprint(&e), before);
    let r = e
        .complete_task(
            "t-42",
            "acme",
            &Promotion {
                ids: vec![keep.id.clone()],
                min_importance: Some(0.8),
            },
        )
        .unwrap();
    assert_eq!(r.promoted.len(), 2);
    assert_eq!(r.archived, 3);
    assert_eq!(
        e.count(&view(&["task/t-42/**"]), &Filter::all()).unwrap(),
        0
    );
    assert_eq!(e.count(&view(&["task/t-43"]), &Filter::all()).unwrap(), 1);
    let project = e.list(&List::new(view(&["project/acme"]))).unwrap();
    assert_eq!(project.len(), 2);
    for m in &project {
        let p = m.provenance.as_ref().expect("provenance");
        assert!(p.from_id == keep.id || p.from_id == high.id);
        assert_ne!(m.id, p.from_id, "promotion makes a new id");
        assert!(p.from_scope.as_str().starts_with("task/t-42"));
    }
    let archived = e
        .list_archived(&view(&["task/t-42/**"]), &Filter::all(), 10)
        .unwrap();
    assert!(archived.iter().all(|a| a.reason == "task_completed"));
}

fn promote_copies_with_provenance(make: MakeEngine) {
    let e = make(&|_| {});
    let m = e
        .remember(
            NewMemory::new(scope("project/a"), "tabs over spaces")
                .kind(Kind::Preference)
                .key("indent"),
        )
        .unwrap();
    let c = e.promote(&m.id, &scope("project/b"), Confirm::No).unwrap();
    assert_ne!(c.id, m.id);
    assert_eq!(c.content, m.content);
    assert_eq!(c.provenance.as_ref().unwrap().from_id, m.id);
    assert!(e.get(&m.id).unwrap().is_some(), "the original stays");
    assert!(matches!(
        e.promote(&m.id, &scope("global"), Confirm::No),
        Err(Error::NeedsConfirmation(_))
    ));
    assert!(e.promote(&m.id, &scope("global"), Confirm::Yes).is_ok());
    assert!(matches!(
        e.promote("missing", &scope("global"), Confirm::Yes),
        Err(Error::NotFound(_))
    ));
}

fn preferences_supersede_and_global_needs_confirmation(make: MakeEngine) {
    let e = make(&|_| {});
    let before = fingerprint(&e);
    let err = e
        .store_preference(scope("global"), "editor", "vim", Confirm::No)
        .unwrap_err();
    assert!(err.to_string().contains("needs confirmation"), "{err}");
    assert_eq!(fingerprint(&e), before);
    let a = e
        .store_preference(scope("global"), "editor", "vim", Confirm::Yes)
        .unwrap();
    let b = e
        .store_preference(scope("global"), "editor", "helix", Confirm::Yes)
        .unwrap();
    assert_eq!(a.id, b.id);
    assert_eq!(b.version, 2);
    assert_eq!(b.payload.as_ref().unwrap()["value"], "helix");
    assert_eq!(
        e.history(&a.id).unwrap()[0].payload.as_ref().unwrap()["value"],
        "vim"
    );
    assert_eq!(e.count(&view(&["global"]), &Filter::all()).unwrap(), 1);
    // Project preferences need no confirmation.
    e.store_preference(scope("project/a"), "editor", "emacs", Confirm::No)
        .unwrap();
}

fn sessions_have_bounds_manifests_and_archives(make: MakeEngine) {
    // Compaction off: a write past the bound fails (with it on, the
    // session is compacted first: compact.rs).
    let e = make(&|c| {
        c.session_max_bytes = 64;
        c.compaction.enabled = false;
    });
    let s = e.create_session(Some("s-1"), None, None).unwrap();
    assert_eq!(s.scope.as_str(), "session/s-1");
    assert_eq!(s.max_bytes, 64);
    assert!(matches!(
        e.create_session(Some("s-1"), None, None),
        Err(Error::DuplicateSession(_))
    ));
    assert!(e.create_session(Some("bad id"), None, None).is_err());
    e.store_conversation("s-1", Role::User, "What database do we use?")
        .unwrap();
    e.store_conversation("s-1", Role::Assistant, "PostgreSQL.")
        .unwrap();
    let before = fingerprint(&e);
    let err = e
        .store_conversation("s-1", Role::User, &"x".repeat(40))
        .unwrap_err();
    assert!(matches!(err, Error::SessionFull { bound: 64, .. }), "{err}");
    assert!(
        err.to_string().contains("strata session archive s-1"),
        "the error says what to do: {err}"
    );
    assert_eq!(fingerprint(&e), before);
    let hist = e.conversation_history("s-1").unwrap();
    assert_eq!(
        hist.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(),
        ["What database do we use?", "PostgreSQL."]
    );
    let m = e.session_manifest("s-1").unwrap();
    assert_eq!(m.memories, 2);
    assert_eq!(m.by_role.get("user"), Some(&1));
    assert_eq!(m.session.bytes, 35);
    assert!(
        m.first_activity_at
            .is_some_and(|f| m.session.last_activity_at >= f)
    );
    // One `last_activity_at` in the object (the session record's).
    let text = serde_json::to_string(&m).unwrap();
    assert_eq!(text.matches("\"last_activity_at\"").count(), 1, "{text}");
    let a = e.archive_session("s-1").unwrap();
    assert!(a.archived_at.is_some());
    assert!(matches!(
        e.store_conversation("s-1", Role::User, "hi"),
        Err(Error::SessionArchived(_))
    ));
    assert_eq!(e.session_manifest("s-1").unwrap().archived, 2);
    assert!(matches!(
        e.session_manifest("nope"),
        Err(Error::SessionNotFound(_))
    ));
    // A session with its own scope and bound.
    let s2 = e
        .create_session(Some("s-2"), Some(scope("project/a")), Some(1000))
        .unwrap();
    assert_eq!(s2.max_bytes, 1000);
    let t = e
        .store_conversation("s-2", Role::User, "in the project")
        .unwrap();
    assert_eq!(t.scope.as_str(), "project/a");
    assert_eq!(e.list_sessions().unwrap().len(), 2);
}

fn ttl_hides_then_upkeep_archives(make: MakeEngine) {
    let mut e = make(&|_| {});
    let start = jiff::Timestamp::now();
    let m = e
        .remember(
            NewMemory::new(scope("project/a"), "temporary note")
                .ttl(jiff::SignedDuration::from_hours(1)),
        )
        .unwrap();
    assert!(m.expires_at.is_some());
    assert_eq!(
        e.recall(&Recall::new("temporary", view(&["project/a"])))
            .unwrap()
            .len(),
        1
    );
    e.set_clock(move || start + jiff::SignedDuration::from_hours(2));
    assert!(
        e.recall(&Recall::new("temporary", view(&["project/a"])))
            .unwrap()
            .is_empty()
    );
    let r = e.upkeep().unwrap();
    assert_eq!(r.expired, 1);
    assert_eq!(
        e.list_archived(&view(&["project/a"]), &Filter::all(), 5)
            .unwrap()[0]
            .reason,
        "expired"
    );
}

fn typed_operations(make: MakeEngine) {
    let e = make(&|_| {});
    let d = e
        .store_decision(
            scope("project/a"),
            "Which queue?",
            &["SQS".into(), "Kafka".into()],
            "Kafka",
            "replay",
        )
        .unwrap();
    assert_eq!(d.kind, Kind::Decision);
    assert_eq!(d.importance, 0.9);
    assert_eq!(
        d.payload.as_ref().unwrap()["options"],
        json!(["SQS", "Kafka"])
    );
    e.store_finding(
        scope("project/a"),
        "latency",
        "p95 doubled after deploy",
        "GC pauses",
        &["grafana".into()],
    )
    .unwrap();
    e.remember(NewMemory::new(scope("project/a"), "a plain note"))
        .unwrap();
    let v = view(&["project/a"]);
    assert_eq!(
        e.find_decisions(&v, Some("queue"), None, None, 10)
            .unwrap()
            .len(),
        1
    );
    assert_eq!(e.find_decisions(&v, None, None, None, 10).unwrap().len(), 1);
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
    assert!(
        e.find_decisions(&v, None, Some(later), None, 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(e.find_findings(&v, "latency", 10).unwrap().len(), 1);
    assert!(e.find_findings(&v, "queue", 10).unwrap().is_empty());
    assert_eq!(e.recent(&v, 2, None).unwrap().len(), 2);
    assert_eq!(e.recent(&v, 10, Some(&Kind::Finding)).unwrap().len(), 1);
    assert!(
        e.store_decision(scope("project/a"), " ", &[], "x", "")
            .is_err()
    );
}

fn update_through_the_engine(make: MakeEngine) {
    let e = make(&|_| {});
    let m = e
        .remember(NewMemory::new(scope("project/a"), "first draft"))
        .unwrap();
    let u = e
        .update(
            &m.id,
            Patch {
                content: Some("second draft, longer".into()),
                ..Default::default()
            },
            1,
        )
        .unwrap();
    assert_eq!(u.version, 2);
    assert_ne!(u.checksum, m.checksum);
    assert!(u.tokens > m.tokens);
    let before = fingerprint(&e);
    assert!(matches!(
        e.update(&m.id, Patch::default(), 1),
        Err(Error::VersionConflict { .. })
    ));
    assert!(
        e.update(
            &m.id,
            Patch {
                importance: Some(2.0),
                ..Default::default()
            },
            2
        )
        .is_err()
    );
    assert!(
        e.update(
            &m.id,
            Patch {
                content: Some("  ".into()),
                ..Default::default()
            },
            2
        )
        .is_err()
    );
    assert_eq!(fingerprint(&e), before);
}

fn bad_input_is_named_and_changes_nothing(make: MakeEngine) {
    let e = make(&|c| c.max_item_bytes = 1000);
    e.remember(NewMemory::new(scope("project/a"), "existing"))
        .unwrap();
    let before = fingerprint(&e);
    let base = || NewMemory::new(scope("project/a"), "text");
    let cases: Vec<(NewMemory, &str)> = vec![
        (base().importance(2.0), "importance"),
        (base().importance(f64::NAN), "importance"),
        (NewMemory::new(scope("project/a"), "   "), "content"),
        (
            NewMemory::new(scope("project/a"), "x".repeat(1001)),
            "over the limit of 1000",
        ),
        (
            base().payload(json!({"big": "y".repeat(1000)})),
            "over the limit",
        ),
        (base().payload(json!([1, 2])), "payload"),
        (base().tag(""), "tags"),
        (base().key(""), "key"),
        (base().session("bad session"), "session"),
        (base().ttl(jiff::SignedDuration::from_secs(-5)), "ttl"),
        (
            NewMemory {
                scope: None,
                content: "x".into(),
                ..Default::default()
            },
            "scope",
        ),
    ];
    for (n, want) in cases {
        let err = e.remember(n).unwrap_err().to_string();
        assert!(err.contains(want), "expected `{want}` in: {err}");
        assert_eq!(
            fingerprint(&e),
            before,
            "failed write `{want}` changed the store"
        );
    }
    assert!(strata::Scope::parse("project/../etc").is_err());
    assert!(View::parse(&["project/a/***"]).is_err());
    let r = Recall {
        limit: 0,
        ..Recall::new("x", view(&["project/a"]))
    };
    assert!(e.recall(&r).unwrap().is_empty());
}

fn batch_is_atomic_and_counts_tokens(make: MakeEngine) {
    let e = make(&|c| c.max_items = 0);
    let before = fingerprint(&e);
    let mut items: Vec<NewMemory> = (0..1500)
        .map(|i| NewMemory::new(scope("project/b"), format!("batch item number {i}")))
        .collect();
    items[1200].importance = Some(7.0);
    let err = e
        .remember_batch(items.clone(), Confirm::No)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("item 1200") && err.contains("importance"),
        "{err}"
    );
    assert_eq!(fingerprint(&e), before);
    items[1200].importance = None;
    let stored = e.remember_batch(items, Confirm::No).unwrap();
    assert_eq!(stored.len(), 1500);
    assert_eq!(
        stored[1499].content, "batch item number 1499",
        "order is kept"
    );
    assert!(stored.iter().all(|m| m.tokens >= 4));
    assert_eq!(
        e.count(&view(&["project/b"]), &Filter::all()).unwrap(),
        1500
    );
}

/// Another process (a holder this engine is not) holding the lease: upkeep
/// says it skipped, eviction waits; once the lease ends both run.
fn upkeep_and_eviction_leave_what_another_holder_leases(make: MakeEngine) {
    let mut e = make(&|c| c.max_items = 5);
    let start = jiff::Timestamp::now();
    e.remember(
        NewMemory::new(scope("project/a"), "temporary note")
            .ttl(jiff::SignedDuration::from_hours(1)),
    )
    .unwrap();
    let later = start + jiff::SignedDuration::from_hours(2);
    e.set_clock(move || later);
    let until = later + jiff::SignedDuration::from_hours(1);
    assert!(
        e.store()
            .take_lease("upkeep", "other", later, until)
            .unwrap()
    );
    let r = e.upkeep().unwrap();
    assert!(r.skipped && r.expired == 0, "{r:?}");
    assert_eq!(
        e.list_archived(&view(&["project/a"]), &Filter::all(), 5)
            .unwrap()
            .len(),
        0
    );
    e.store().end_lease("upkeep", "other").unwrap();
    let r = e.upkeep().unwrap();
    assert!(!r.skipped && r.expired == 1, "{r:?}");

    assert!(
        e.store()
            .take_lease("evict:project/p", "other", later, until)
            .unwrap()
    );
    for i in 0..7 {
        e.remember(NewMemory::new(scope("project/p"), format!("note {i}")))
            .unwrap();
    }
    assert_eq!(
        e.count(&view(&["project/p/**"]), &Filter::all()).unwrap(),
        7
    );
    e.store().end_lease("evict:project/p", "other").unwrap();
    e.remember(NewMemory::new(scope("project/p"), "one more"))
        .unwrap();
    assert_eq!(
        e.count(&view(&["project/p/**"]), &Filter::all()).unwrap(),
        5
    );
    // The engine ended its own leases: another holder takes them at once.
    assert!(
        e.store()
            .take_lease("upkeep", "other", later, until)
            .unwrap()
    );
    assert!(
        e.store()
            .take_lease("evict:project/p", "other", later, until)
            .unwrap()
    );
}
