//! Scope isolation: writes to many scopes, random views, and no read ever
//! returns a memory outside the view it named.

use proptest::prelude::*;
use strata::{Filter, List, ListOrder, NewMemory, Recall, Strategy as Rank, View, ViewEntry};

use crate::harness::{TestEngine, scope};

const SCOPES: [&str; 12] = [
    "global",
    "project/acme",
    "project/acme/sprint/s1",
    "project/acme/sprint/s1/stage/design",
    "project/acme2",
    "project/acme-old",
    "project/acme.x",
    "project/beta",
    "task/t-42",
    "task/t-42b",
    "session/s1",
    "agent/planner",
];

const WORDS: [&str; 8] = [
    "alpha", "beta", "gamma", "delta", "acme", "project", "sprint", "task",
];

fn view_strategy() -> impl Strategy<Value = Vec<(usize, bool)>> {
    prop::collection::vec((0..SCOPES.len(), any::<bool>()), 1..4)
}

fn check(
    e: &TestEngine,
    writes: &[(usize, usize, usize)],
    views: &[Vec<(usize, bool)>],
) -> Result<(), TestCaseError> {
    for (s, w1, w2) in writes {
        e.remember(NewMemory::new(
            scope(SCOPES[*s]),
            format!("{} {} note in {}", WORDS[*w1], WORDS[*w2], SCOPES[*s]),
        ))
        .unwrap();
    }
    for v in views {
        let view = View::new(v.iter().map(|(i, sub)| ViewEntry {
            scope: scope(SCOPES[*i]),
            subtree: *sub,
        }));
        let inside = |m: &strata::Memory| view.contains(&m.scope);
        let expected = writes
            .iter()
            .filter(|(s, _, _)| view.contains(&scope(SCOPES[*s])))
            .count();
        for q in ["", "alpha", "acme project sprint", "global note"] {
            for st in [
                Rank::Hybrid,
                Rank::Relevance,
                Rank::Recency,
                Rank::Importance,
            ] {
                let mut r = Recall::new(q, view.clone());
                r.strategy = Some(st);
                r.limit = 100;
                r.include_archived = true;
                for hit in e.recall(&r).unwrap() {
                    prop_assert!(
                        inside(&hit.memory),
                        "recall {q:?} {st} over {view} returned {}",
                        hit.memory.scope
                    );
                }
            }
        }
        for order in [ListOrder::Recency, ListOrder::Importance, ListOrder::Oldest] {
            let mut l = List::new(view.clone());
            l.order = order;
            l.limit = 1000;
            let got = e.list(&l).unwrap();
            prop_assert_eq!(
                got.len(),
                expected,
                "list over {} found the wrong number",
                view
            );
            for m in got {
                prop_assert!(inside(&m), "list over {view} returned {}", m.scope);
            }
        }
        prop_assert_eq!(e.count(&view, &Filter::all()).unwrap() as usize, expected);
        let dry = e
            .forget(
                &strata::Forget::Filter {
                    view: view.clone(),
                    filter: Filter::all(),
                },
                strata::ForgetOptions {
                    dry_run: true,
                    confirm: strata::Confirm::Yes,
                    ..Default::default()
                },
            )
            .unwrap();
        prop_assert_eq!(dry.deleted, expected);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_read_leaves_its_view_memory(
        writes in prop::collection::vec((0..SCOPES.len(), 0..WORDS.len(), 0..WORDS.len()), 1..40),
        views in prop::collection::vec(view_strategy(), 1..5),
    ) {
        let e = TestEngine::memory(|c| c.max_items = 0);
        check(&e, &writes, &views)?;
    }

    #[test]
    fn no_read_leaves_its_view_sqlite(
        writes in prop::collection::vec((0..SCOPES.len(), 0..WORDS.len(), 0..WORDS.len()), 1..40),
        views in prop::collection::vec(view_strategy(), 1..5),
    ) {
        let e = TestEngine::sqlite(|c| c.max_items = 0);
        check(&e, &writes, &views)?;
    }
}

#[cfg(feature = "postgres")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_read_leaves_its_view_postgres(
        writes in prop::collection::vec((0..SCOPES.len(), 0..WORDS.len(), 0..WORDS.len()), 1..40),
        views in prop::collection::vec(view_strategy(), 1..5),
    ) {
        if let Some(e) = TestEngine::postgres(|c| c.max_items = 0) {
            check(&e, &writes, &views)?;
        }
    }
}
