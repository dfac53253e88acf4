//! Model-based test: random sequences of store operations (writes, batches,
//! sessions, vectors, imports) applied to the SQLite store and to the
//! in-memory store (the model) leave them in the same state, with the same
//! answers and the same errors.

use proptest::prelude::*;
use strata::{ImportItem, ImportRules, OnConflict, Query, Session, Store};

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
    /// A batch whose item `fail_at` (if any) is an error: all or nothing.
    Batch {
        items: Vec<(usize, usize)>,
        fail_at: Option<usize>,
    },
    /// A write into session `s<session>` (created, 60 bytes, on first use).
    InSession {
        session: usize,
        word: usize,
    },
    ArchiveSession {
        session: usize,
    },
    /// A 2-d vector of model `m2` for a memory (a 3-d one when `bad`).
    SetVector {
        target: usize,
        angle: usize,
        bad: bool,
    },
    /// A held memory (or a fresh one) imported again, under a fence of
    /// `project/a` or none.
    Import {
        target: usize,
        fresh: bool,
        mode: usize,
        fenced: bool,
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
        1 => (prop::collection::vec((0..SCOPES.len(), 0..WORDS.len()), 1..5), prop::option::of(0..5usize))
            .prop_map(|(items, fail_at)| Op::Batch { items, fail_at }),
        1 => (0..2usize, 0..WORDS.len()).prop_map(|(session, word)| Op::InSession { session, word }),
        1 => (0..2usize).prop_map(|session| Op::ArchiveSession { session }),
        1 => (0..40usize, 0..8usize, prop::bool::weighted(0.2)).prop_map(|(target, angle, bad)| Op::SetVector { target, angle, bad }),
        1 => (0..40usize, any::<bool>(), 0..3usize, any::<bool>()).prop_map(|(target, fresh, mode, fenced)| Op::Import { target, fresh, mode, fenced }),
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
    for x in s.list_sessions().unwrap() {
        out.push_str(&format!(
            "SESSION {} {} {} {:?}\n",
            x.id, x.scope, x.bytes, x.archived_at
        ));
    }
    out.push_str(&format!("VM {:?}\n", s.vector_models().unwrap()));
    let vq = Query::view(view(&["project/a/**", "global"]), now());
    let near = s.search_vectors(&vq, "m2", &[1.0, 0.0], 5).unwrap();
    out.push_str(&format!(
        "V {:?}\n",
        near.iter()
            .map(|(x, sim)| format!("{}:{sim:.6}", x.id))
            .collect::<Vec<_>>()
    ));
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

/// Applies `ops` to the in-memory model and to `other`, comparing answers,
/// errors and state after every step.
fn behaves_like_the_model(ops: &[Op], other: &Backend) -> Result<(), TestCaseError> {
    let model = Backend::memory();
    let mut ids: Vec<String> = Vec::new();
    for op in ops {
        let pick = |t: usize| ids.get(t % ids.len().max(1)).cloned().unwrap_or_default();
        let (a, b): (Result<String, String>, Result<String, String>) = match op {
            Op::Put { scope, word, key } => {
                let mut m = mem(SCOPES[*scope], WORDS[*word]);
                m.key = key.map(|k| format!("k{k}"));
                ids.push(m.id.clone());
                let f = |s: &dyn Store| {
                    s.put(&m)
                        .map(|p| p.memory().id.clone())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::Update { target, word } => {
                let id = pick(*target);
                let f = |s: &dyn Store| -> Result<String, String> {
                    let mut m = s.get(&id).map_err(|e| e.to_string())?.ok_or("missing")?;
                    let v = m.version;
                    m.content = WORDS[*word].into();
                    m.checksum = strata::checksum(&m.content, None);
                    s.update(&m, v)
                        .map(|m| m.version.to_string())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::Delete { target } => {
                let id = pick(*target);
                let f = |s: &dyn Store| {
                    s.delete(std::slice::from_ref(&id))
                        .map(|n| n.to_string())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::Archive { target } => {
                let id = pick(*target);
                let at = now();
                let f = |s: &dyn Store| {
                    s.archive(std::slice::from_ref(&id), "evicted", at)
                        .map(|n| n.to_string())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::Restore { target } => {
                let id = pick(*target);
                let f = |s: &dyn Store| {
                    s.restore(std::slice::from_ref(&id))
                        .map(|n| n.to_string())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::Touch { target } => {
                let id = pick(*target);
                let at = now();
                let f = |s: &dyn Store| {
                    s.touch(&[strata::Access::one(id.clone(), at)])
                        .map(|_| String::new())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::Batch { items, fail_at } => {
                let ms: Vec<_> = items
                    .iter()
                    .map(|(sc, w)| mem(SCOPES[*sc], WORDS[*w]))
                    .collect();
                if fail_at.is_none_or(|f| f >= ms.len()) {
                    ids.extend(ms.iter().map(|m| m.id.clone()));
                }
                let f = |s: &dyn Store| {
                    let mut it = ms.iter().enumerate().map(|(i, m)| {
                        if Some(i) == *fail_at {
                            Err(strata::Error::NotFound("made to fail".into()))
                        } else {
                            Ok(m.clone())
                        }
                    });
                    s.put_batch(&mut it)
                        .map(|p| p.len().to_string())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::InSession { session, word } => {
                let sid = format!("s{session}");
                let mut m = mem(&format!("session/{sid}"), WORDS[*word]);
                m.session = Some(sid.clone());
                ids.push(m.id.clone());
                let f = |s: &dyn Store| -> Result<String, String> {
                    if s.get_session(&sid).map_err(|e| e.to_string())?.is_none() {
                        s.create_session(&Session {
                            id: sid.clone(),
                            scope: strata::Scope::parse(&format!("session/{sid}")).unwrap(),
                            created_at: now(),
                            last_activity_at: now(),
                            archived_at: None,
                            max_bytes: 60,
                            bytes: 0,
                            ephemeral: false,
                        })
                        .map_err(|e| e.to_string())?;
                    }
                    s.put(&m)
                        .map(|p| p.memory().id.clone())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::ArchiveSession { session } => {
                let sid = format!("s{session}");
                let at = now();
                let f = |s: &dyn Store| {
                    s.archive_session(&sid, at)
                        .map(|x| x.id)
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::SetVector { target, angle, bad } => {
                let id = pick(*target);
                let t = *angle as f32 * 0.4;
                let v = if *bad {
                    vec![t.cos(), t.sin(), 0.0]
                } else {
                    vec![t.cos(), t.sin()]
                };
                let f = |s: &dyn Store| -> Result<String, String> {
                    let m = s.get(&id).map_err(|e| e.to_string())?.ok_or("missing")?;
                    s.set_vectors("m2", v.len(), &[(id.clone(), m.checksum, v.clone())])
                        .map(|n| n.to_string())
                        .map_err(|e| e.to_string())
                };
                (f(&*model.store), f(&*other.store))
            }
            Op::Import {
                target,
                fresh,
                mode,
                fenced,
            } => {
                let held = model.store.get(&pick(*target)).unwrap();
                let mut m = match (held, fresh) {
                    (Some(m), false) => m,
                    _ => mem(SCOPES[*target % SCOPES.len()], WORDS[*target % WORDS.len()]),
                };
                m.content = format!("{} imported", m.content);
                m.checksum = strata::checksum(&m.content, None);
                m.key = None;
                m.embedding = None;
                if *fresh {
                    ids.push(m.id.clone());
                }
                let rules = ImportRules {
                    on_conflict: [OnConflict::Error, OnConflict::Skip, OnConflict::Replace][*mode],
                    fence: if *fenced {
                        strata::Fence::within(vec![strata::Scope::parse("project/a").unwrap()])
                    } else {
                        strata::Fence::everything()
                    },
                    session_max_bytes: 60,
                };
                let item = ImportItem {
                    line: 1,
                    memory: m,
                    archived: None,
                    history: vec![],
                };
                let f = |s: &dyn Store| {
                    s.import(std::slice::from_ref(&item), &rules)
                        .map(|n| format!("{n:?}"))
                        .map_err(|e| e.to_string())
                };
                let (a, b) = (f(&*model.store), f(&*other.store));
                // A line re-keyed away from a foreign id gets a fresh id in each store:
                // compare the answers, and drop the copies so the states stay comparable.
                if *fenced && a.is_ok() {
                    let content = item.memory.content.clone();
                    for s in [&*model.store, &*other.store] {
                        let copies: Vec<String> = s
                            .query(&Query::everything(now()).include_expired(true))
                            .unwrap()
                            .into_iter()
                            .filter(|x| x.content == content && x.id != item.memory.id)
                            .map(|x| x.id)
                            .collect();
                        s.delete(&copies).unwrap();
                    }
                }
                (a, b)
            }
        };
        prop_assert_eq!(&a, &b, "after {:?}", op);
        prop_assert_eq!(state(&*model.store), state(&*other.store), "after {:?}", op);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn sqlite_behaves_like_the_model(ops in prop::collection::vec(op(), 1..40)) {
        behaves_like_the_model(&ops, &Backend::sqlite())?;
    }
}

#[cfg(feature = "postgres")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn postgres_behaves_like_the_model(ops in prop::collection::vec(op(), 1..40)) {
        if let Some(pg) = Backend::postgres() {
            behaves_like_the_model(&ops, &pg)?;
        }
    }
}
