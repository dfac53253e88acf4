//! Model-based test: random sequences of store operations applied to the
//! SQLite store and to the in-memory store (the model) leave them in the
//! same state, with the same answers and the same errors.

use proptest::prelude::*;
use strata::store::{Query, Store};

use crate::harness::{Backend, mem, now, view};

#[derive(Clone, Debug)]
enum Op {
    Put {
        scope: usize,
        word: usize,
        key: Option<usize>,
    },
    Update {
        target: usize,
        word: usize,
    },
    Delete {
        target: usize,
    },
    Archive {
        target: usize,
    },
    Restore {
        target: usize,
    },
    Touch {
        target: usize,
    },
}

const SCOPES: [&str; 4] = ["project/a", "project/a/s1", "project/b", "global"];
const WORDS: [&str; 5] = [
    "alpha beta",
    "beta gamma",
    "gamma delta epsilon",
    "alpha",
    "delta",
];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..SCOPES.len(), 0..WORDS.len(), prop::option::of(0..3usize)).prop_map(|(scope, word, key)| Op::Put { scope, word, key }),
        1 => (0..40usize, 0..WORDS.len()).prop_map(|(target, word)| Op::Update { target, word }),
        1 => (0..40usize).prop_map(|target| Op::Delete { target }),
        1 => (0..40usize).prop_map(|target| Op::Archive { target }),
        1 => (0..40usize).prop_map(|target| Op::Restore { target }),
        1 => (0..40usize).prop_map(|target| Op::Touch { target }),
    ]
}

fn state(s: &dyn Store) -> String {
    let q = Query::everything(now()).include_expired(true);
    let mut out = String::new();
    for m in s.query(&q).unwrap() {
        out.push_str(&format!(
            "A {} {} v{} {} {:?} {}\n",
            m.id, m.scope, m.version, m.content, m.key, m.access_count
        ));
        for h in s.history(&m.id).unwrap() {
            out.push_str(&format!("  H v{} {}\n", h.version, h.content));
        }
    }
    for a in s.query_archived(&q).unwrap() {
        out.push_str(&format!(
            "R {} {} {}\n",
            a.memory.id, a.memory.version, a.reason
        ));
    }
    let st = s.stats().unwrap();
    out.push_str(&format!(
        "stats {} {} {} {}\n",
        st.memories, st.archived, st.history, st.scopes
    ));
    for terms in [
        vec!["alpha".to_string()],
        vec!["gamma".to_string(), "delta".to_string()],
    ] {
        for v in [view(&["project/a/**"]), view(&["global", "project/b"])] {
            let hits = s
                .search_signals(&Query::view(v, now()), &terms, 50)
                .unwrap();
            out.push_str(&format!(
                "S {:?}\n",
                hits.iter()
                    .map(|(x, sc)| format!("{}:{:.9}", x.id, sc))
                    .collect::<Vec<_>>()
            ));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_behaves_like_the_model(ops in prop::collection::vec(op(), 1..40)) {
        let model = Backend::memory();
        let sqlite = Backend::sqlite();
        let mut ids: Vec<String> = Vec::new();
        for op in &ops {
            let pick = |t: usize| ids.get(t % ids.len().max(1)).cloned().unwrap_or_default();
            let (a, b): (Result<String, String>, Result<String, String>) = match op {
                Op::Put { scope, word, key } => {
                    let mut m = mem(SCOPES[*scope], WORDS[*word]);
                    m.key = key.map(|k| format!("k{k}"));
                    ids.push(m.id.clone());
                    let f = |s: &dyn Store| s.put(&m).map(|p| p.memory().id.clone()).map_err(|e| e.to_string());
                    (f(&*model.store), f(&*sqlite.store))
                }
                Op::Update { target, word } => {
                    let id = pick(*target);
                    let f = |s: &dyn Store| -> Result<String, String> {
                        let mut m = s.get(&id).map_err(|e| e.to_string())?.ok_or("missing")?;
                        let v = m.version;
                        m.content = WORDS[*word].into();
                        m.checksum = strata::checksum(&m.content, None);
                        s.update(&m, v).map(|m| m.version.to_string()).map_err(|e| e.to_string())
                    };
                    (f(&*model.store), f(&*sqlite.store))
                }
                Op::Delete { target } => {
                    let id = pick(*target);
                    let f = |s: &dyn Store| s.delete(std::slice::from_ref(&id)).map(|n| n.to_string()).map_err(|e| e.to_string());
                    (f(&*model.store), f(&*sqlite.store))
                }
                Op::Archive { target } => {
                    let id = pick(*target);
                    let at = now();
                    let f = |s: &dyn Store| s.archive(std::slice::from_ref(&id), "evicted", at).map(|n| n.to_string()).map_err(|e| e.to_string());
                    (f(&*model.store), f(&*sqlite.store))
                }
                Op::Restore { target } => {
                    let id = pick(*target);
                    let f = |s: &dyn Store| s.restore(std::slice::from_ref(&id)).map(|n| n.to_string()).map_err(|e| e.to_string());
                    (f(&*model.store), f(&*sqlite.store))
                }
                Op::Touch { target } => {
                    let id = pick(*target);
                    let at = now();
                    let f = |s: &dyn Store| s.touch(&[strata::Access::one(id.clone(), at)]).map(|_| String::new()).map_err(|e| e.to_string());
                    (f(&*model.store), f(&*sqlite.store))
                }
            };
            prop_assert_eq!(&a, &b, "after {:?}", op);
            prop_assert_eq!(state(&*model.store), state(&*sqlite.store), "after {:?}", op);
        }
    }
}
