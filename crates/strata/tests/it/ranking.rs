//! Ranking: strategies, decay, explain, determinism, access recording.

use strata::{Kind, NewMemory, Recall, Strategy};

use crate::harness::{MakeEngine, scope, view};

backends!(engine: recency_with_a_query_orders_every_match, strategies_order_as_documented, ranking_is_deterministic, recall_records_access_unless_told_not_to, concurrent_recalls_lose_no_access, decay_lowers_old_memories, a_query_keeps_only_what_passes_the_floor, scores_read_as_scores, a_memory_without_a_kind_ranks_neutrally, id_prefixes_name_one_memory, a_turn_beside_a_strong_match_shares_its_relevance, a_turn_of_the_conversation_that_matched_shares_its_relevance, a_memory_written_in_the_named_time_leads, imported_history_that_matches_is_not_buried_by_fresh_notes);

/// A conversation turn in `project/a`, in `session`.
fn turn(e: &strata::Engine, session: &str, text: &str) -> strata::Memory {
    e.remember(
        NewMemory::new(scope("project/a"), text)
            .kind(Kind::Conversation)
            .session(session),
    )
    .unwrap()
}

/// "where did you move this spring" over `project/a` by relevance alone,
/// every match, explained.
fn moved_this_spring(e: &strata::Engine) -> Vec<strata::Recalled> {
    let mut r = Recall::new("where did you move this spring", view(&["project/a"]));
    r.strategy = Some(Strategy::Relevance);
    r.min_relevance = Some(0.0);
    r.explain = true;
    e.recall(&r).unwrap()
}

/// A conversation turn beside the best match in its session rises over an
/// equal match elsewhere (`ranking.neighbour_weight`), and `--explain`
/// says why; at weight 0 the shorter match elsewhere leads. The session's
/// share is off, so only the neighbour shares.
fn a_turn_beside_a_strong_match_shares_its_relevance(make: MakeEngine) {
    let order = |weight: f64| {
        let e = make(&|c| {
            c.ranking.neighbour_weight = weight;
            c.ranking.session_weight = 0.0;
        });
        turn(&e, "s1", "Where did you move this spring?");
        let answer = turn(&e, "s1", "We moved to Lisbon, it is sunny there");
        let other = turn(&e, "s2", "Move the meeting");
        let hits = moved_this_spring(&e);
        let at = |id: &str| hits.iter().position(|h| h.memory.id == id).unwrap();
        let beside = hits[at(&answer.id)].explain.as_ref().unwrap().neighbour;
        (at(&answer.id) < at(&other.id), beside)
    };
    assert_eq!(order(0.0), (false, None));
    let (first, beside) = order(strata::DEFAULT_NEIGHBOUR_WEIGHT);
    assert!(first, "the answer beside the question leads");
    assert_eq!(beside, Some(1.0));
    for bad in [-0.1, 1.5, f64::NAN] {
        let mut cfg = strata::Config::in_memory();
        cfg.ranking.neighbour_weight = bad;
        let err = strata::Engine::open(cfg).unwrap_err().to_string();
        assert!(err.contains("ranking.neighbour_weight"), "{err}");
    }
}

/// A turn of the session whose other turns match the query best rises
/// over a slightly better match in a session that matched nothing else
/// (`ranking.session_weight`), and `--explain` says why; at weight 0 the
/// better match elsewhere leads. Neighbours are off, so only the session
/// shares.
fn a_turn_of_the_conversation_that_matched_shares_its_relevance(make: MakeEngine) {
    let order = |weight: f64| {
        let e = make(&|c| {
            c.ranking.neighbour_weight = 0.0;
            c.ranking.session_weight = weight;
        });
        turn(&e, "s1", "Where did you move this spring?");
        let mine = turn(&e, "s1", "The lease was signed at last and we moved");
        let other = turn(&e, "s2", "We moved");
        let hits = moved_this_spring(&e);
        let at = |id: &str| hits.iter().position(|h| h.memory.id == id).unwrap();
        let parts = |id: &str| hits[at(id)].explain.clone().unwrap();
        assert_eq!(parts(&other.id).session_best, None, "alone in its session");
        (at(&mine.id) < at(&other.id), parts(&mine.id).session_best)
    };
    assert_eq!(order(0.0), (false, None));
    let (first, best) = order(strata::DEFAULT_SESSION_WEIGHT);
    assert!(first, "the turn of the conversation that matched leads");
    assert_eq!(best, Some(1.0));
    for bad in [-0.1, 1.5, f64::NAN] {
        let mut cfg = strata::Config::in_memory();
        cfg.ranking.session_weight = bad;
        let err = strata::Engine::open(cfg).unwrap_err().to_string();
        assert!(err.contains("ranking.session_weight"), "{err}");
    }
}

/// Ids and their prefixes: `resolve_id` reads a whole id or a prefix that
/// names one memory inside the fence; too short, unknown and ambiguous
/// prefixes are named errors. A prefix of a time-ordered id that names one
/// memory today can name two tomorrow, which is why answers hand out whole
/// ids.
fn id_prefixes_name_one_memory(make: MakeEngine) {
    let e = make(&|_| {});
    let batch = (0..3)
        .map(|i| NewMemory::new(scope("project/a"), format!("batch {i}")))
        .collect();
    let ms = e.remember_batch(batch, strata::Confirm::No).unwrap();
    let all = strata::Fence::everything();
    for m in &ms {
        assert_eq!(e.resolve_id(&m.id, &all).unwrap(), m.id);
        assert_eq!(e.resolve_id(&m.id[..30], &all).unwrap(), m.id);
    }
    let err = e.resolve_id("01", &all).unwrap_err().to_string();
    assert!(err.contains("too short"), "{err}");
    let err = e.resolve_id("ffffffff-ffff", &all).unwrap_err();
    assert!(matches!(err, strata::Error::NotFound(_)), "{err}");
    // Written in one call: they share at least their first 8 characters,
    // and that prefix names all three.
    let err = e.resolve_id(&ms[0].id[..8], &all).unwrap_err().to_string();
    assert!(err.contains("give more of the id"), "{err}");
    // Outside the fence a memory does not exist, and takes no prefix room.
    let b = e
        .remember(NewMemory::new(scope("project/b"), "elsewhere"))
        .unwrap();
    let lone = strata::Fence::within(vec![scope("project/b")]);
    assert!(e.resolve_id(&ms[0].id, &lone).is_err());
    if b.id[..8] == ms[0].id[..8] {
        assert_eq!(e.resolve_id(&b.id[..8], &lone).unwrap(), b.id);
    }
}

/// The relevance floor: a recall with a query answers only with memories
/// whose text match reaches `min_relevance`, and says why each passed.
fn a_query_keeps_only_what_passes_the_floor(make: MakeEngine) {
    let e = make(&|_| {});
    let best = e
        .remember(
            NewMemory::new(
                scope("project/a"),
                "PostgreSQL database for billing invoices",
            )
            .kind(Kind::Decision),
        )
        .unwrap();
    let weak = e
        .remember(NewMemory::new(
            scope("project/a"),
            "The quarterly meeting went long: slides, coffee, a fire drill, roadmap talk, \
             hiring plans, the office move, and at the very end one mention of invoices",
        ))
        .unwrap();
    e.remember(NewMemory::new(
        scope("project/a"),
        "Lunch order: pizza on Fridays",
    ))
    .unwrap();
    let recall = |q: &str, floor: Option<f64>| {
        let mut r = Recall::new(q, view(&["project/a"]));
        r.min_relevance = floor;
        r.explain = true;
        r.touch = false;
        e.recall(&r)
    };
    // Nothing shares a word with the query: nothing relevant.
    assert!(
        recall("how tall is mount everest", None)
            .unwrap()
            .is_empty()
    );
    // The strong match passes, the one-common-word tail does not.
    let hits = recall("which database stores billing invoices?", None).unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.memory.id.as_str()).collect();
    assert_eq!(ids, [best.id.as_str()], "{hits:#?}");
    let p = hits[0].explain.as_ref().unwrap();
    assert_eq!(p.text_match, Some(1.0));
    assert_eq!(
        p.passed.as_deref(),
        Some("text match 1.000 ≥ min_relevance 0.30")
    );
    // A floor of 0 returns every match, as before the floor existed.
    let all = recall("which database stores billing invoices?", Some(0.0)).unwrap();
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[1].memory.id, weak.id);
    assert!(all[1].explain.as_ref().unwrap().passed.is_none());
    let tm = all[1].explain.as_ref().unwrap().text_match.unwrap();
    assert!(tm > 0.0 && tm < 0.3, "{tm}");
    // No query: a listing, no floor.
    assert_eq!(recall("", None).unwrap().len(), 3);
    // Out of range: named, and nothing read.
    for bad in [-0.1, 1.5, f64::NAN] {
        let err = recall("database", Some(bad)).unwrap_err().to_string();
        assert!(err.contains("min_relevance"), "{err}");
    }
    // The configured default, and its bounds.
    let strict = make(&|c| c.ranking.min_relevance = 1.0);
    strict
        .remember(NewMemory::new(scope("project/a"), "database"))
        .unwrap();
    strict
        .remember(NewMemory::new(
            scope("project/a"),
            "database and billing, twice over",
        ))
        .unwrap();
    let mut r = Recall::new("database billing", view(&["project/a"]));
    r.touch = false;
    assert_eq!(strict.recall(&r).unwrap().len(), 1);
    let mut cfg = strata::Config::in_memory();
    cfg.ranking.min_relevance = 2.0;
    let err = strata::Engine::open(cfg).unwrap_err().to_string();
    assert!(err.contains("ranking.min_relevance"), "{err}");
}

/// Every strategy's score is a score (0–1), not a timestamp.
fn scores_read_as_scores(make: MakeEngine) {
    let e = make(&|_| {});
    for t in ["first", "second", "third"] {
        e.remember(NewMemory::new(scope("project/a"), t)).unwrap();
    }
    for s in [
        Strategy::Recency,
        Strategy::Importance,
        Strategy::Relevance,
        Strategy::Hybrid,
    ] {
        let mut r = Recall::new("", view(&["project/a"]));
        r.strategy = Some(s);
        r.touch = false;
        let hits = e.recall(&r).unwrap();
        assert_eq!(hits.len(), 3);
        for h in &hits {
            assert!((0.0..=1.0).contains(&h.score), "{s}: {}", h.score);
        }
    }
}

/// A memory saved without a kind is a `note`: importance 0.5 and kind
/// weight 1, so nothing lowers it quietly; explain names the kind.
fn a_memory_without_a_kind_ranks_neutrally(make: MakeEngine) {
    let e = make(&|_| {});
    let m = e
        .remember(NewMemory::new(
            scope("project/a"),
            "Alice prefers short answers",
        ))
        .unwrap();
    assert_eq!(m.kind, Kind::Note);
    assert_eq!(m.importance, 0.5);
    let mut r = Recall::new("short answers", view(&["project/a"]));
    r.explain = true;
    r.touch = false;
    let p = e.recall(&r).unwrap().remove(0).explain.unwrap();
    assert_eq!((p.kind.as_str(), p.kind_weight), ("note", 1.0));
    assert!((p.effective_importance - 0.5).abs() < 1e-6, "{p:?}");
}

fn strategies_order_as_documented(make: MakeEngine) {
    let e = make(&|_| {});
    let a = e
        .remember(
            NewMemory::new(
                scope("project/a"),
                "cache invalidation bug in the cache layer cache",
            )
            .importance(0.2),
        )
        .unwrap();
    let b = e
        .remember(
            NewMemory::new(scope("project/a"), "we decided to drop the cache")
                .kind(Kind::Decision)
                .importance(1.0),
        )
        .unwrap();
    let c = e
        .remember(NewMemory::new(scope("project/a"), "unrelated lunch plans").importance(0.6))
        .unwrap();
    let ids = |s: Strategy, q: &str| {
        let mut r = Recall::new(q, view(&["project/a"]));
        r.strategy = Some(s);
        r.touch = false;
        e.recall(&r)
            .unwrap()
            .into_iter()
            .map(|h| h.memory.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(Strategy::Relevance, "cache invalidation"),
        [a.id.clone(), b.id.clone()],
        "more matched terms first"
    );
    assert_eq!(
        ids(Strategy::Relevance, "cache"),
        [b.id.clone(), a.id.clone()],
        "same terms: the shorter memory first"
    );
    assert_eq!(
        ids(Strategy::Importance, "cache invalidation"),
        [b.id.clone(), a.id.clone()]
    );
    assert_eq!(
        ids(Strategy::Recency, ""),
        [c.id.clone(), b.id.clone(), a.id.clone()]
    );
    assert_eq!(ids(Strategy::Importance, "")[0], b.id);
    let mut r = Recall::new("cache", view(&["project/a"]));
    r.explain = true;
    let hits = e.recall(&r).unwrap();
    let p = hits[0].explain.as_ref().expect("explain parts");
    let w = strata::Weights::default();
    let total =
        w.relevance * p.relevance + w.importance * p.effective_importance + w.recency * p.recency;
    assert!((total - hits[0].score).abs() < 1e-12);
    assert!(
        hits.iter()
            .all(|h| h.explain.as_ref().unwrap().bm25.is_some())
    );
    r.explain = false;
    assert!(e.recall(&r).unwrap().iter().all(|h| h.explain.is_none()));
}

fn ranking_is_deterministic(make: MakeEngine) {
    let e = make(&|c| c.max_items = 0);
    let items = (0..300)
        .map(|i| {
            NewMemory::new(
                scope("project/a"),
                format!("same words every time {}", i % 3),
            )
        })
        .collect();
    e.remember_batch(items, strata::Confirm::No).unwrap();
    let run = || {
        let mut r = Recall::new("same words", view(&["project/a"]));
        r.limit = 50;
        r.touch = false;
        e.recall(&r)
            .unwrap()
            .into_iter()
            .map(|h| h.memory.id)
            .collect::<Vec<_>>()
    };
    let first = run();
    assert_eq!(first.len(), 50);
    for _ in 0..3 {
        assert_eq!(run(), first);
    }
}

fn recall_records_access_unless_told_not_to(make: MakeEngine) {
    let e = make(&|_| {});
    let m = e
        .remember(NewMemory::new(scope("project/a"), "access counted"))
        .unwrap();
    let mut r = Recall::new("access", view(&["project/a"]));
    r.touch = false;
    e.recall(&r).unwrap();
    assert_eq!(e.get(&m.id).unwrap().unwrap().access_count, 0);
    r.touch = true;
    e.recall(&r).unwrap();
    e.recall(&r).unwrap();
    let g = e.get(&m.id).unwrap().unwrap();
    assert_eq!(g.access_count, 2);
    assert!(g.last_accessed_at.is_some());
}

/// Recalls from many threads at once leave their reads to the engine's
/// writer thread; every one of them is counted in the end.
fn concurrent_recalls_lose_no_access(make: MakeEngine) {
    let e = make(&|_| {});
    let ids: Vec<String> = (0..5)
        .map(|i| {
            e.remember(NewMemory::new(
                scope("project/a"),
                format!("shared topic note {i}"),
            ))
            .unwrap()
            .id
        })
        .collect();
    let r = Recall::new("shared topic", view(&["project/a"]));
    let (threads, rounds) = (8, 25);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..rounds {
                    assert_eq!(e.recall(&r).unwrap().len(), 5);
                }
            });
        }
    });
    // `get` writes what the log still holds before it reads.
    for id in &ids {
        let m = e.get(id).unwrap().unwrap();
        assert_eq!(m.access_count, (threads * rounds) as u64, "{id}");
        assert!(m.last_accessed_at.is_some());
        assert_eq!(m.version, 1, "reads do not change the version");
    }
}

/// An engine's config on `dir/t.db`, BM25 only: engines opened from it
/// share the file as processes do.
fn file_config(dir: &std::path::Path) -> strata::Config {
    let mut c = strata::Config::sqlite(dir.join("t.db"));
    c.embedder = strata::EmbedderConfig::none();
    c
}

#[test]
fn access_reaches_the_file_when_the_engine_closes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || file_config(dir.path());
    let first = strata::Engine::open(cfg()).unwrap();
    let m = first
        .remember(NewMemory::new(
            scope("project/a"),
            "counted across processes",
        ))
        .unwrap();
    let r = Recall::new("counted", view(&["project/a"]));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| first.recall(&r).unwrap());
        }
    });
    first.flush_accesses().unwrap();
    let other = strata::Engine::open(cfg()).unwrap();
    assert_eq!(other.get(&m.id).unwrap().unwrap().access_count, 4);
    first.recall(&r).unwrap();
    first.recall(&r).unwrap();
    drop(first);
    assert_eq!(
        other.get(&m.id).unwrap().unwrap().access_count,
        6,
        "dropping the engine writes what its log held"
    );
}

#[test]
fn a_log_larger_than_one_transaction_is_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || file_config(dir.path());
    let e = strata::Engine::open(cfg()).unwrap();
    // More memories than the log writes in one transaction (2,048), in
    // scopes of 1,000 (a recall's most results).
    let (scopes, per) = (5, 1_000);
    let items: Vec<NewMemory> = (0..scopes * per)
        .map(|i| {
            NewMemory::new(
                scope(&format!("project/p{}", i % scopes)),
                format!("note {i}"),
            )
        })
        .collect();
    e.remember_batch(items, strata::Confirm::No).unwrap();
    for _ in 0..2 {
        for p in 0..scopes {
            let mut r = Recall::new("", view(&[&format!("project/p{p}")]));
            r.strategy = Some(Strategy::Recency);
            r.limit = per;
            assert_eq!(e.recall(&r).unwrap().len(), per);
        }
    }
    e.flush_accesses().unwrap();
    let other = strata::Engine::open(cfg()).unwrap();
    let mut l = strata::List::new(view(&["project/**"]));
    l.limit = scopes * per;
    let all = other.list(&l).unwrap();
    assert_eq!(all.len(), scopes * per);
    assert!(
        all.iter().all(|m| m.access_count == 2),
        "every memory read twice: {:?}",
        all.iter().find(|m| m.access_count != 2)
    );
}

fn decay_lowers_old_memories(make: MakeEngine) {
    let mut e = make(&|_| {});
    let t0 = jiff::Timestamp::now();
    e.set_clock(move || t0 - jiff::SignedDuration::from_hours(24 * 60));
    let old = e
        .remember(
            NewMemory::new(scope("project/a"), "old decision")
                .kind(Kind::Decision)
                .importance(0.9),
        )
        .unwrap();
    e.set_clock(move || t0);
    let new = e
        .remember(
            NewMemory::new(scope("project/a"), "new decision")
                .kind(Kind::Decision)
                .importance(0.9),
        )
        .unwrap();
    let mut r = Recall::new("decision", view(&["project/a"]));
    r.strategy = Some(Strategy::Importance);
    r.explain = true;
    let hits = e.recall(&r).unwrap();
    assert_eq!(hits[0].memory.id, new.id);
    let old_parts = hits
        .iter()
        .find(|h| h.memory.id == old.id)
        .unwrap()
        .explain
        .clone()
        .unwrap();
    assert!(
        (old_parts.decay - 0.25).abs() < 1e-6,
        "two half-lives: {}",
        old_parts.decay
    );
}

fn recency_with_a_query_orders_every_match(make: MakeEngine) {
    let mut e = make(&|c| c.max_items = 0);
    let t0 = jiff::Timestamp::now();
    // 300 matches: long ones written last, so a relevance cut would drop them.
    for i in 0..300 {
        e.set_clock(move || t0 + jiff::SignedDuration::from_secs(i));
        let text = if i >= 295 {
            format!("deploy {i} with a much longer text than the others have")
        } else {
            format!("deploy {i}")
        };
        e.remember(NewMemory::new(scope("project/a"), text))
            .unwrap();
    }
    let mut r = Recall::new("deploy", view(&["project/a"]));
    r.strategy = Some(Strategy::Recency);
    r.limit = 3;
    r.touch = false;
    let got: Vec<String> = e
        .recall(&r)
        .unwrap()
        .into_iter()
        .map(|h| h.memory.content)
        .collect();
    assert!(
        got[0].starts_with("deploy 299") && got[2].starts_with("deploy 297"),
        "{got:?}"
    );
}

/// Of two equal matches, the one written in the time the question names
/// leads (`ranking.time_weight`), and `--explain` says so; at weight 0
/// the newer memory wins the tie.
fn a_memory_written_in_the_named_time_leads(make: MakeEngine) {
    let first = |weight: f64, question: &str| {
        let e = make(&|c| c.ranking.time_weight = weight);
        let at = |t: &str| t.parse::<jiff::Timestamp>().unwrap();
        let then = e
            .remember(
                NewMemory::new(scope("project/a"), "we chose postgres for billing")
                    .created_at(at("2025-10-25T15:00:00Z")),
            )
            .unwrap();
        let later = e
            .remember(
                NewMemory::new(scope("project/a"), "we chose sqlite for billing")
                    .created_at(at("2026-02-03T09:00:00Z")),
            )
            .unwrap();
        let mut r = Recall::new(question, view(&["project/a"]));
        r.strategy = Some(Strategy::Relevance);
        r.explain = true;
        let hits = e.recall(&r).unwrap();
        assert_eq!(hits.len(), 2);
        let named = hits[0].explain.as_ref().unwrap().in_named_time;
        assert!(!hits[1].explain.as_ref().unwrap().in_named_time);
        assert_ne!(hits[0].memory.id, hits[1].memory.id);
        let led = if hits[0].memory.id == then.id {
            "then"
        } else {
            assert_eq!(hits[0].memory.id, later.id);
            "later"
        };
        (led, named)
    };
    for q in [
        "what did we choose for billing on October 25, 2025?",
        "what did we choose for billing in October 2025",
        "what did we choose for billing in 2025",
    ] {
        assert_eq!(first(strata::DEFAULT_TIME_WEIGHT, q), ("then", true), "{q}");
        assert_eq!(first(0.0, q), ("later", false), "{q}");
    }
    // No time named: the newer wins the tie, with or without the weight.
    assert_eq!(
        first(
            strata::DEFAULT_TIME_WEIGHT,
            "what did we choose for billing"
        ),
        ("later", false)
    );
    for bad in [-0.1, 1.5, f64::NAN] {
        let mut cfg = strata::Config::in_memory();
        cfg.ranking.time_weight = bad;
        let err = strata::Engine::open(cfg).unwrap_err().to_string();
        assert!(err.contains("ranking.time_weight"), "{err}");
    }
}

/// Issue 56: a year-old imported turn that matches the question almost
/// exactly ranks over today's notes that match it barely, under the
/// default strategy; among equal matches the fresh one leads.
fn imported_history_that_matches_is_not_buried_by_fresh_notes(make: MakeEngine) {
    let e = make(&|_| {});
    let then: jiff::Timestamp = "2024-03-05T10:00:00Z".parse().unwrap();
    let old = e
        .remember(
            NewMemory::new(
                scope("project/a"),
                "We picked Postgres as the database for the billing ledger",
            )
            .kind(Kind::Conversation)
            .session("chat-2024")
            .created_at(then),
        )
        .unwrap();
    for text in [
        "The ledger export runs nightly",
        "Billing emails go out on the first",
        "Standup moved to 9:30",
    ] {
        e.remember(
            NewMemory::new(scope("project/a"), text)
                .kind(Kind::Note)
                .importance(0.8),
        )
        .unwrap();
    }
    let mut r = Recall::new(
        "which database for the billing ledger?",
        view(&["project/a"]),
    );
    r.explain = true;
    let hits = e.recall(&r).unwrap();
    assert_eq!(
        hits[0].memory.id,
        old.id,
        "{:#?}",
        hits.iter().map(|h| &h.memory.content).collect::<Vec<_>>()
    );
    // The same words written today lead the old turn.
    let fresh = e
        .remember(
            NewMemory::new(
                scope("project/a"),
                "We picked Postgres as the database for the billing ledger",
            )
            .kind(Kind::Conversation),
        )
        .unwrap();
    let hits = e.recall(&r).unwrap();
    assert_eq!(hits[0].memory.id, fresh.id);
    assert_eq!(hits[1].memory.id, old.id);
}
