//! Filters: the SQL compilation agrees with the in-memory evaluator (the
//! model) on random filters over varied memories; bad filters are named.

use proptest::prelude::*;
use serde_json::{Value, json};
use strata::{Filter, Role};
use strata::{MemoryStore, Query, Rows, SqliteStore};

use crate::harness::{mem, now, view};

fn corpus() -> Vec<strata::Memory> {
    let kinds = ["decision", "finding", "context", "conversation"];
    let tags = [vec![], vec!["a"], vec!["b"], vec!["a", "b"], vec!["c", "a"]];
    let payloads = [
        None,
        Some(json!({"n": 1, "s": "x"})),
        Some(json!({"n": 2.5, "s": "y", "flag": true})),
        Some(json!({"n": "2", "nested": {"deep": 3}})),
        Some(json!({"flag": false, "s": null})),
        Some(json!({"list": [1, 2], "n": 3, "obj": {"0": "x"}})),
    ];
    (0..60)
        .map(|i| {
            let mut m = mem(
                if i % 3 == 0 { "global" } else { "project/f" },
                &format!("memory number {i}"),
            );
            m.kind = kinds[i % kinds.len()].parse().unwrap();
            m.role = [None, Some(Role::User), Some(Role::Assistant)][i % 3];
            m.importance = [0.1, 0.5, 0.9, 0.7, 0.6][i % 5];
            m.tags = tags[i % tags.len()].iter().map(|t| t.to_string()).collect();
            m.payload = payloads[i % payloads.len()].clone();
            m.checksum = strata::checksum(&m.content, m.payload.as_ref());
            m.pinned = i % 5 == 0;
            m.key = (i % 4 == 1).then(|| format!("key{i}"));
            m.access_count = (i % 7) as u64;
            m
        })
        .collect()
}

fn leaf() -> impl Strategy<Value = Value> {
    let num_op = prop_oneof![
        Just("$eq"),
        Just("$ne"),
        Just("$gt"),
        Just("$gte"),
        Just("$lt"),
        Just("$lte")
    ];
    prop_oneof![
        prop::sample::select(vec!["decision", "finding", "context", "nope"])
            .prop_map(|k| json!({"kind": k})),
        prop::sample::select(vec!["user", "assistant"]).prop_map(|r| json!({"role": r})),
        Just(json!({"role": null})),
        Just(json!({"role": {"$ne": null}})),
        Just(json!({"role": {"$ne": "user"}})),
        (
            num_op.clone(),
            prop::sample::select(vec![0.1, 0.5, 0.6, 0.9])
        )
            .prop_map(|(op, x)| json!({"importance": {op: x}})),
        (num_op.clone(), 0i64..8).prop_map(|(op, x)| json!({"access_count": {op: x}})),
        prop::sample::select(vec!["a", "b", "c", "z"]).prop_map(|t| json!({"tags": [t]})),
        Just(json!({"tags": {"$all": ["a", "b"]}})),
        Just(json!({"tags": {"$nin": ["a"]}})),
        Just(json!({"tags": {"$ne": "b"}})),
        (
            num_op.clone(),
            prop::sample::select(vec![json!(1), json!(2.5), json!(3), json!("2"), json!("x")])
        )
            .prop_map(|(op, v)| json!({"payload.n": {op: v}})),
        prop::sample::select(vec![json!("x"), json!("y"), json!(null)])
            .prop_map(|v| json!({"payload.s": v})),
        prop::sample::select(vec![json!(true), json!(false)])
            .prop_map(|v| json!({"payload.flag": v})),
        Just(json!({"payload.flag": {"$ne": true}})),
        Just(json!({"payload.nested.deep": {"$gte": 3}})),
        Just(json!({"payload.list.1": 2})),
        Just(json!({"payload.obj.0": "x"})),
        Just(json!({"payload.n": {"$in": [1, "2", 3]}})),
        Just(json!({"payload.n": {"$nin": [1, 3]}})),
        prop::sample::select(vec![true, false]).prop_map(|b| json!({"pinned": b})),
        Just(json!({"key": null})),
        Just(json!({"key": {"$gt": "key5"}})),
        Just(json!({"kind": {"$in": ["decision", "finding"]}})),
        Just(json!({"kind": {"$nin": ["decision", "finding"]}})),
        Just(json!({"scope": "global"})),
        Just(json!({"created_at": {"$gte": 1_750_000_000_030i64}})),
    ]
}

fn filter_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"$and": v})),
            prop::collection::vec(inner, 1..3).prop_map(|v| json!({"$or": v})),
        ]
    })
}

struct Pair {
    model: MemoryStore,
    sqlite: SqliteStore,
    _dir: tempfile::TempDir,
    /// The same corpus on the test PostgreSQL server, when there is one.
    /// (Statics are never dropped: its schema stays until the server goes.)
    postgres: Option<crate::harness::Backend>,
}

fn pair() -> &'static Pair {
    static PAIR: std::sync::OnceLock<Pair> = std::sync::OnceLock::new();
    PAIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let sqlite = SqliteStore::open(dir.path().join("f.db"), Default::default()).unwrap();
        let model = MemoryStore::new();
        #[cfg(feature = "postgres")]
        let postgres = crate::harness::Backend::postgres();
        #[cfg(not(feature = "postgres"))]
        let postgres: Option<crate::harness::Backend> = None;
        for m in corpus() {
            model.put(&m).unwrap();
            sqlite.put(&m).unwrap();
            if let Some(pg) = &postgres {
                pg.store.put(&m).unwrap();
            }
        }
        Pair {
            model,
            sqlite,
            _dir: dir,
            postgres,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn sql_agrees_with_the_model(f in filter_value()) {
        let p = pair();
        let filter = Filter::parse(&f).unwrap();
        let q = Query::view(view(&["project/**", "global"]), now()).filter(filter);
        let a: Vec<String> = p.model.query(&q).unwrap().into_iter().map(|m| m.id).collect();
        let b: Vec<String> = p.sqlite.query(&q).unwrap().into_iter().map(|m| m.id).collect();
        prop_assert_eq!(&a, &b, "filter {}", f);
        prop_assert_eq!(p.sqlite.count(&q).unwrap() as usize, a.len());
        if let Some(pg) = &p.postgres {
            let c: Vec<String> = pg.store.query(&q).unwrap().into_iter().map(|m| m.id).collect();
            prop_assert_eq!(&a, &c, "postgres: filter {}", f);
            prop_assert_eq!(pg.store.count(&q).unwrap() as usize, a.len());
        }
    }
}

#[test]
fn the_seed_example_selects_what_it_says() {
    let p = pair();
    let f = Filter::parse(&json!({"kind": "decision", "tags": ["a"], "importance": {"$gte": 0.5}}))
        .unwrap();
    let q = Query::view(view(&["project/**", "global"]), now()).filter(f);
    let got = p.sqlite.query(&q).unwrap();
    assert!(!got.is_empty());
    for m in got {
        assert_eq!(m.kind.as_str(), "decision");
        assert!(m.tags.contains(&"a".to_string()));
        assert!(m.importance >= 0.5);
    }
}

/// Found by the `filter` fuzz target: SQLite compared payload integers
/// exactly, the in-memory evaluator and PostgreSQL as doubles, so
/// `2^53 + 1 > 2^53` matched on SQLite alone.
#[test]
fn payload_numbers_past_2_pow_53_compare_as_doubles_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("f.db"), Default::default()).unwrap();
    let model = MemoryStore::new();
    let mut m = mem("global", "a big number");
    m.payload = Some(json!({"n": 9_007_199_254_740_993_i64}));
    m.checksum = strata::checksum(&m.content, m.payload.as_ref());
    model.put(&m).unwrap();
    sqlite.put(&m).unwrap();
    for (f, hit) in [
        (
            json!({"payload.n": {"$gt": 9_007_199_254_740_992_i64}}),
            false,
        ),
        (json!({"payload.n": 9_007_199_254_740_992_i64}), true),
        (
            json!({"payload.n": {"$in": [9_007_199_254_740_992.0]}}),
            true,
        ),
        (
            json!({"payload.n": {"$gte": 9_007_199_254_740_993_i64}}),
            true,
        ),
    ] {
        let q = Query::view(view(&["global"]), now()).filter(Filter::parse(&f).unwrap());
        let a = model.query(&q).unwrap().len();
        let b = sqlite.query(&q).unwrap().len();
        assert_eq!((a, b), (hit as usize, hit as usize), "{f}");
    }
}

#[test]
fn bad_filters_name_the_problem() {
    for (f, want) in [
        (json!({"colour": "red"}), "unknown field `colour`"),
        (
            json!({"importance": {"$gte2": 0.5}}),
            "unknown operator `$gte2` on `importance`",
        ),
        (json!({"importance": {"$gte": "high"}}), "expects a number"),
        (json!({"tags": {"$gt": "a"}}), "tags take"),
        (json!({"pinned": {"$lt": true}}), "booleans take"),
        (json!({"$or": []}), "at least one"),
        (json!({"$and": {}}), "expects a list"),
        (json!({"kind": {"$in": "decision"}}), "expects a list"),
        (json!({"created_at": {"$gt": "last tuesday"}}), "created_at"),
        (json!({"payload.": 1}), "payload path"),
        (json!({"payload.x": {"deep": 1}}), "expected operators"),
        (json!({"source": "internet"}), "internet"),
        (json!("kind"), "expected a JSON object"),
    ] {
        let e = Filter::parse(&f).unwrap_err().to_string();
        assert!(e.starts_with("filter: ") || e.contains(want), "{f}: {e}");
        assert!(e.contains(want), "{f}: {e}");
    }
}
