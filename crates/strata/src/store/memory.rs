//! The in-memory store: ephemeral task memory, tests, and the model the
//! SQLite (and later PostgreSQL) stores are checked against.
//!
//! One mutex over plain maps; every operation is atomic because it holds the
//! lock throughout. Full-text search is a small BM25 over the selected
//! memories (`text::bm25`), stemmed like FTS5's porter tokenizer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use jiff::Timestamp;

use super::{
    Access, Archived, AuditLog, ContextLog, IdPlan, ImportCounts, ImportItem, ImportRules, Order,
    PendingVector, Put, Query, Rows, ScopeCount, Session, Sessions, Store, StoreStats, TextSearch,
    VectorSearch,
};
use crate::Result;
use crate::audit::{self, AuditChain, AuditEntry, AuditEvent, AuditPrune, AuditQuery};
use crate::error::Error;
use crate::model::Memory;
use crate::rank::Signals;
use crate::scope::Scope;
use crate::text;

#[derive(Clone, Debug, Default)]
struct Inner {
    active: BTreeMap<String, Memory>,
    archive: BTreeMap<String, Archived>,
    history: HashMap<String, Vec<Memory>>,
    sessions: BTreeMap<String, Session>,
    context_log: BTreeMap<String, (Timestamp, String)>,
    vector_dims: BTreeMap<String, usize>,
    /// Lease name → (holder, until).
    leases: HashMap<String, (String, Timestamp)>,
    /// The audit trail, oldest first, and its chain.
    audit: Vec<AuditEntry>,
    audit_chain: AuditChain,
}

/// A store that lives in process memory and is gone when dropped.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Mutations check before they change anything, so a panic cannot
        // leave a half-applied change behind the poisoned lock.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn sort(v: &mut [Memory], order: Order) {
    v.sort_by(|a, b| {
        let o = a
            .created_at
            .cmp(&b.created_at)
            .then_with(|| a.id.cmp(&b.id));
        if order == Order::Newest {
            o.reverse()
        } else {
            o
        }
    });
}

impl Inner {
    /// The active memories of `q`'s view, whatever its filter: the set
    /// text statistics are over (as the SQLite store's index sees it).
    fn in_view(&self, q: &Query) -> Vec<&Memory> {
        self.active
            .values()
            .filter(|m| q.view.as_ref().is_none_or(|v| v.contains(&m.scope)))
            .collect()
    }

    /// A memory entering with a vector fixes its model's length, or must
    /// match it (as SQLite's `vector_models` does).
    fn stamp_dims(&mut self, m: &Memory) -> Result<()> {
        let Some(e) = &m.embedding else {
            return Ok(());
        };
        let dim = *self
            .vector_dims
            .entry(e.model.clone())
            .or_insert(e.vector.len());
        super::search::check_vector(&m.id, e, dim)
    }

    fn put(&mut self, m: &Memory) -> Result<Put> {
        self.stamp_dims(m)?;
        if let Some(key) = &m.key {
            let existing = self
                .active
                .values()
                .find(|x| x.scope == m.scope && x.key.as_deref() == Some(key))
                .cloned();
            if let Some(old) = existing {
                let new = super::superseding(&old, m.clone());
                for (session, delta, at) in super::session_deltas(&old, &new) {
                    self.session_delta(session, delta, at)?;
                }
                self.history.entry(old.id.clone()).or_default().push(old);
                self.active.insert(new.id.clone(), new.clone());
                return Ok(Put::Superseded(new));
            }
        }
        if self.active.contains_key(&m.id) || self.archive.contains_key(&m.id) {
            return Err(Error::DuplicateId(m.id.clone()));
        }
        self.session_delta(
            m.session.as_deref(),
            m.size_bytes() as i64,
            Some(m.updated_at),
        )?;
        self.active.insert(m.id.clone(), m.clone());
        Ok(Put::Inserted(m.clone()))
    }

    /// Adds `delta` bytes to a session, enforcing its bound on growth.
    fn session_delta(
        &mut self,
        session: Option<&str>,
        delta: i64,
        at: Option<Timestamp>,
    ) -> Result<()> {
        let Some(id) = session else { return Ok(()) };
        let s = self
            .sessions
            .get_mut(id)
            .ok_or_else(|| Error::SessionNotFound(id.into()))?;
        super::check_session_delta(id, s.bytes, s.max_bytes, s.archived_at.is_some(), delta)?;
        s.bytes = (s.bytes as i64 + delta).max(0) as u64;
        if let Some(at) = at {
            s.last_activity_at = s.last_activity_at.max(at);
        }
        Ok(())
    }

    fn archive_one(&mut self, id: &str, reason: &str, at: Timestamp) -> Result<bool> {
        let Some(m) = self.active.remove(id) else {
            return Ok(false);
        };
        self.session_delta(m.session.as_deref(), -(m.size_bytes() as i64), None)?;
        self.archive.insert(
            id.to_string(),
            Archived {
                memory: m,
                archived_at: at,
                reason: reason.into(),
            },
        );
        Ok(true)
    }
}

impl MemoryStore {
    /// BM25 by brute force, every matching memory scored (an agent's memory
    /// against the view less its learned memories, a learned memory against
    /// the whole view): the independent reference the stores' shared
    /// search pipeline is tested against (they agree whenever no more than
    /// the pipeline's cap of memories match).
    pub fn search_reference(
        &self,
        q: &Query,
        terms: &[String],
        limit: usize,
    ) -> Vec<(Signals, f64)> {
        let g = self.lock();
        let in_view = g.in_view(q);
        let learned = |m: &Memory| m.source == crate::model::Source::Learned;
        let (matched, df_all) =
            text::match_terms(in_view.iter().map(|m| m.content.as_str()), terms);
        // What agents said against itself; learned memories against all.
        let told: Vec<&Memory> = in_view.iter().copied().filter(|m| !learned(m)).collect();
        let (_, df_told) = text::match_terms(told.iter().map(|m| m.content.as_str()), terms);
        let bm_all = text::Bm25::new(in_view.len(), &df_all);
        let bm_told = text::Bm25::new(told.len(), &df_told);
        let cands: Vec<(&Memory, &Vec<usize>)> = in_view
            .iter()
            .copied()
            .zip(matched.iter())
            .filter(|(m, t)| !t.is_empty() && q.selects(m))
            .collect();
        let mean = |ms: Vec<f64>| ms.iter().sum::<f64>() / (ms.len().max(1) as f64);
        let avg_all = mean(cands.iter().map(|(m, _)| m.tokens as f64).collect());
        let avg_told = mean(
            cands
                .iter()
                .filter(|(m, _)| !learned(m))
                .map(|(m, _)| m.tokens as f64)
                .collect(),
        );
        let mut hits: Vec<(Signals, f64)> = cands
            .into_iter()
            .map(|(m, t)| {
                let (bm, avglen) = if learned(m) {
                    (&bm_all, avg_all)
                } else {
                    (&bm_told, avg_told)
                };
                let score = bm.score(t.iter().copied(), m.tokens as f64, avglen);
                (Signals::of(m), score)
            })
            .collect();
        text::sort_hits(&mut hits, |s| s.id.as_str());
        hits.truncate(limit);
        hits
    }
}

/// The view's memories as postings for [`super::search::text_search`]: a
/// memory holds a term when its stems (FTS5's) include the term's.
struct ViewPostings<'a> {
    in_view: Vec<&'a Memory>,
    stems: Vec<std::collections::HashSet<String>>,
    q: &'a Query,
}

impl super::search::Postings for ViewPostings<'_> {
    type Doc = usize;

    fn docs_with(&mut self, term: &str) -> Result<Vec<usize>> {
        let t = text::stem(term);
        Ok((0..self.in_view.len())
            .filter(|&i| self.stems[i].contains(&t))
            .collect())
    }

    fn doc_count(&mut self) -> Result<usize> {
        Ok(self.in_view.len())
    }

    fn learned(&mut self) -> Result<std::collections::HashSet<usize>> {
        Ok((0..self.in_view.len())
            .filter(|&i| self.in_view[i].source == crate::model::Source::Learned)
            .collect())
    }

    fn signals(&mut self, docs: &[usize]) -> Result<Vec<(usize, Signals)>> {
        Ok(docs
            .iter()
            .filter(|&&i| self.q.selects(self.in_view[i]))
            .map(|&i| (i, Signals::of(self.in_view[i])))
            .collect())
    }
}

impl Rows for MemoryStore {
    fn put(&self, m: &Memory) -> Result<Put> {
        self.lock().put(m)
    }

    fn put_batch(&self, ms: &mut dyn Iterator<Item = Result<Memory>>) -> Result<Vec<Put>> {
        let mut g = self.lock();
        // Apply in place and undo on failure: cloning the whole store per
        // batch would make batches O(store size).
        let sessions = g.sessions.clone();
        let dims = g.vector_dims.clone();
        let mut out: Vec<Put> = Vec::new();
        let mut failed = None;
        for m in ms {
            match m.and_then(|m| g.put(&m)) {
                Ok(p) => out.push(p),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let Some(e) = failed else { return Ok(out) };
        for p in out.into_iter().rev() {
            match p {
                Put::Inserted(m) => {
                    g.active.remove(&m.id);
                }
                Put::Superseded(m) => {
                    let old = g.history.get_mut(&m.id).and_then(|h| h.pop());
                    if let Some(old) = old {
                        g.active.insert(old.id.clone(), old);
                    }
                }
            }
        }
        g.sessions = sessions;
        g.vector_dims = dims;
        Err(e)
    }

    fn import(&self, items: &[ImportItem], rules: &ImportRules) -> Result<ImportCounts> {
        let fenced = !rules.fence.is_everything();
        let mut g = self.lock();
        let mut st = g.clone();
        let mut n = ImportCounts::default();
        for it in items {
            let held = st
                .active
                .get(&it.memory.id)
                .or_else(|| st.archive.get(&it.memory.id).map(|a| &a.memory))
                .map(|m| m.scope.clone());
            let rekeyed;
            let it =
                match super::plan_import_id(it, held.as_ref(), rules.on_conflict, &rules.fence)? {
                    IdPlan::New => it,
                    IdPlan::Skip => {
                        n.skipped += 1;
                        continue;
                    }
                    IdPlan::Replace => {
                        let id = &it.memory.id;
                        if let Some(old) = st.active.remove(id) {
                            st.session_delta(
                                old.session.as_deref(),
                                -(old.size_bytes() as i64),
                                None,
                            )
                            .ok();
                        }
                        st.archive.remove(id);
                        st.history.remove(id);
                        n.replaced += 1;
                        it
                    }
                    IdPlan::Rekey => {
                        rekeyed = super::rekeyed(it);
                        &rekeyed
                    }
                };
            let m = &it.memory;
            let held_session = m.session.as_deref().and_then(|s| st.sessions.get(s));
            if let Some(sess) = super::import_session(it, held_session, rules)? {
                st.sessions.insert(sess.id.clone(), sess);
            }
            match &it.archived {
                Some((at, reason)) => {
                    st.archive.insert(
                        m.id.clone(),
                        Archived {
                            memory: m.clone(),
                            archived_at: *at,
                            reason: reason.clone(),
                        },
                    );
                    n.archived += 1;
                }
                None => {
                    if let Some(k) = &m.key
                        && st
                            .active
                            .values()
                            .any(|x| x.scope == m.scope && x.key.as_deref() == Some(k))
                    {
                        return Err(Error::KeyConflict {
                            scope: m.scope.to_string(),
                            key: k.clone(),
                        });
                    }
                    if fenced {
                        st.session_delta(
                            m.session.as_deref(),
                            m.size_bytes() as i64,
                            Some(m.updated_at),
                        )?;
                    } else if let Some(s) =
                        m.session.as_deref().and_then(|s| st.sessions.get_mut(s))
                    {
                        s.bytes += m.size_bytes();
                        s.last_activity_at = s.last_activity_at.max(m.updated_at);
                    }
                    st.stamp_dims(m)?;
                    st.active.insert(m.id.clone(), m.clone());
                }
            }
            n.imported += 1;
            for h in &it.history {
                let e = st.history.entry(m.id.clone()).or_default();
                e.retain(|x| x.version != h.version);
                e.push(h.clone());
                n.history += 1;
            }
        }
        *g = st;
        Ok(n)
    }

    fn get(&self, id: &str) -> Result<Option<Memory>> {
        Ok(self.lock().active.get(id).cloned())
    }

    fn ids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<(String, Scope)>> {
        let g = self.lock();
        let active = g
            .active
            .range(prefix.to_string()..)
            .take_while(|(id, _)| id.starts_with(prefix))
            .map(|(id, m)| (id.clone(), m.scope.clone()));
        let archived = g
            .archive
            .range(prefix.to_string()..)
            .take_while(|(id, _)| id.starts_with(prefix))
            .map(|(id, a)| (id.clone(), a.memory.scope.clone()));
        let mut out: Vec<(String, Scope)> = active.chain(archived).collect();
        out.sort();
        out.truncate(limit);
        Ok(out)
    }

    fn update(&self, m: &Memory, expected_version: u64) -> Result<Memory> {
        let mut g = self.lock();
        let old = g
            .active
            .get(&m.id)
            .cloned()
            .ok_or_else(|| Error::NotFound(m.id.clone()))?;
        if old.version != expected_version {
            return Err(Error::VersionConflict {
                id: m.id.clone(),
                expected: expected_version,
                current: old.version,
            });
        }
        if let Some(k) = &m.key
            && g.active
                .values()
                .any(|x| x.id != m.id && x.scope == m.scope && x.key.as_deref() == Some(k))
        {
            return Err(Error::KeyConflict {
                scope: m.scope.to_string(),
                key: k.clone(),
            });
        }
        let mut new = m.clone();
        new.version = expected_version + 1;
        new.created_at = old.created_at;
        new.session = old.session.clone();
        let delta = new.size_bytes() as i64 - old.size_bytes() as i64;
        g.session_delta(old.session.as_deref(), delta, Some(new.updated_at))?;
        g.history.entry(old.id.clone()).or_default().push(old);
        g.active.insert(new.id.clone(), new.clone());
        Ok(new)
    }

    fn delete(&self, ids: &[String]) -> Result<usize> {
        let mut g = self.lock();
        let mut n = 0;
        for id in ids {
            let mut found = false;
            if let Some(m) = g.active.remove(id) {
                g.session_delta(m.session.as_deref(), -(m.size_bytes() as i64), None)
                    .ok();
                found = true;
            }
            found |= g.archive.remove(id).is_some();
            g.history.remove(id);
            n += found as usize;
        }
        Ok(n)
    }

    fn delete_moved(&self, moved: &[(String, u64)]) -> Result<Vec<String>> {
        let mut g = self.lock();
        let mut out = Vec::new();
        for (id, version) in moved {
            let held = g
                .active
                .get(id)
                .or_else(|| g.archive.get(id).map(|a| &a.memory))
                .map(|m| m.version);
            if held != Some(*version) {
                continue;
            }
            if let Some(m) = g.active.remove(id) {
                g.session_delta(m.session.as_deref(), -(m.size_bytes() as i64), None)
                    .ok();
            }
            g.archive.remove(id);
            g.history.remove(id);
            out.push(id.clone());
        }
        Ok(out)
    }

    fn query(&self, q: &Query) -> Result<Vec<Memory>> {
        let g = self.lock();
        let mut v: Vec<Memory> = g
            .active
            .values()
            .filter(|m| q.selects(m))
            .cloned()
            .collect();
        sort(&mut v, q.order);
        Ok(v.into_iter()
            .skip(q.offset)
            .take(q.limit.unwrap_or(usize::MAX))
            .collect())
    }

    fn query_signals(&self, q: &Query) -> Result<Vec<Signals>> {
        Ok(self.query(q)?.iter().map(Signals::of).collect())
    }

    fn get_many(&self, ids: &[String]) -> Result<Vec<Memory>> {
        let g = self.lock();
        Ok(ids
            .iter()
            .filter_map(|id| g.active.get(id).cloned())
            .collect())
    }

    fn count(&self, q: &Query) -> Result<u64> {
        Ok(self.lock().active.values().filter(|m| q.selects(m)).count() as u64)
    }

    fn count_by_kind(&self, q: &Query) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for m in self.lock().active.values().filter(|m| q.selects(m)) {
            *out.entry(m.kind.as_str().to_string()).or_default() += 1;
        }
        Ok(out)
    }

    fn list_scopes(&self) -> Result<Vec<ScopeCount>> {
        let g = self.lock();
        let mut map: BTreeMap<String, ScopeCount> = BTreeMap::new();
        for m in g.active.values() {
            map.entry(m.scope.to_string())
                .or_insert_with(|| ScopeCount {
                    scope: m.scope.clone(),
                    memories: 0,
                    archived: 0,
                })
                .memories += 1;
        }
        for a in g.archive.values() {
            map.entry(a.memory.scope.to_string())
                .or_insert_with(|| ScopeCount {
                    scope: a.memory.scope.clone(),
                    memories: 0,
                    archived: 0,
                })
                .archived += 1;
        }
        Ok(map.into_values().collect())
    }

    fn stats(&self) -> Result<StoreStats> {
        let g = self.lock();
        let mut s = StoreStats {
            backend: "memory".into(),
            ..StoreStats::default()
        };
        s.memories = g.active.len() as u64;
        s.archived = g.archive.len() as u64;
        s.history = g.history.values().map(|v| v.len() as u64).sum();
        s.sessions = g.sessions.len() as u64;
        let mut scopes = std::collections::BTreeSet::new();
        for m in g.active.values() {
            scopes.insert(m.scope.as_str());
            s.tokens += m.tokens as u64;
            *s.by_tier.entry(m.scope.tier().as_str().into()).or_default() += 1;
            *s.by_kind.entry(m.kind.to_string()).or_default() += 1;
        }
        s.scopes = scopes.len() as u64;
        Ok(s)
    }

    fn touch(&self, accesses: &[Access]) -> Result<()> {
        let mut g = self.lock();
        for a in accesses {
            if let Some(m) = g.active.get_mut(&a.id) {
                m.access_count += a.count;
                m.last_accessed_at = Some(m.last_accessed_at.map_or(a.at, |t| t.max(a.at)));
            }
        }
        Ok(())
    }

    fn archive(&self, ids: &[String], reason: &str, at: Timestamp) -> Result<usize> {
        let mut g = self.lock();
        let mut n = 0;
        for id in ids {
            n += g.archive_one(id, reason, at)? as usize;
        }
        Ok(n)
    }

    fn query_archived(&self, q: &Query) -> Result<Vec<Archived>> {
        let g = self.lock();
        let q = Query {
            include_expired: true,
            ..q.clone()
        };
        let mut v: Vec<Archived> = g
            .archive
            .values()
            .filter(|a| q.selects(&a.memory))
            .cloned()
            .collect();
        v.sort_by(|a, b| {
            let o = a
                .memory
                .created_at
                .cmp(&b.memory.created_at)
                .then_with(|| a.memory.id.cmp(&b.memory.id));
            if q.order == Order::Newest {
                o.reverse()
            } else {
                o
            }
        });
        Ok(v.into_iter()
            .skip(q.offset)
            .take(q.limit.unwrap_or(usize::MAX))
            .collect())
    }

    fn restore(&self, ids: &[String]) -> Result<usize> {
        let mut g = self.lock();
        let before = g.clone();
        let mut n = 0;
        for id in ids {
            let Some(a) = g.archive.get(id).cloned() else {
                continue;
            };
            let m = a.memory;
            if let Some(k) = &m.key
                && g.active
                    .values()
                    .any(|x| x.scope == m.scope && x.key.as_deref() == Some(k))
            {
                *g = before;
                return Err(Error::KeyConflict {
                    scope: m.scope.to_string(),
                    key: k.clone(),
                });
            }
            if let Err(e) = g.session_delta(m.session.as_deref(), m.size_bytes() as i64, None) {
                *g = before;
                return Err(e);
            }
            g.archive.remove(id);
            g.active.insert(m.id.clone(), m);
            n += 1;
        }
        Ok(n)
    }

    fn history(&self, id: &str) -> Result<Vec<Memory>> {
        let mut v = self.lock().history.get(id).cloned().unwrap_or_default();
        v.sort_by_key(|m| m.version);
        Ok(v)
    }

    fn put_history(&self, m: &Memory) -> Result<()> {
        let mut g = self.lock();
        let h = g.history.entry(m.id.clone()).or_default();
        h.retain(|x| x.version != m.version);
        h.push(m.clone());
        Ok(())
    }
}

impl Sessions for MemoryStore {
    fn create_session(&self, s: &Session) -> Result<()> {
        let mut g = self.lock();
        if g.sessions.contains_key(&s.id) {
            return Err(Error::DuplicateSession(s.id.clone()));
        }
        g.sessions.insert(s.id.clone(), s.clone());
        Ok(())
    }

    fn remove_empty_session(&self, id: &str) -> Result<bool> {
        let mut g = self.lock();
        let used = g.active.values().any(|m| m.session.as_deref() == Some(id))
            || g.archive
                .values()
                .any(|a| a.memory.session.as_deref() == Some(id));
        let empty = g
            .sessions
            .get(id)
            .is_some_and(|s| s.archived_at.is_none() && s.bytes == 0);
        if empty && !used {
            g.sessions.remove(id);
            return Ok(true);
        }
        Ok(false)
    }

    fn get_session(&self, id: &str) -> Result<Option<Session>> {
        Ok(self.lock().sessions.get(id).cloned())
    }

    fn list_sessions(&self) -> Result<Vec<Session>> {
        let mut v: Vec<Session> = self.lock().sessions.values().cloned().collect();
        v.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(v)
    }

    fn archive_session(&self, id: &str, at: Timestamp) -> Result<Session> {
        let mut g = self.lock();
        if !g.sessions.contains_key(id) {
            return Err(Error::SessionNotFound(id.into()));
        }
        let ids: Vec<String> = g
            .active
            .values()
            .filter(|m| m.session.as_deref() == Some(id))
            .map(|m| m.id.clone())
            .collect();
        for mid in ids {
            g.archive_one(&mid, "session_archived", at)?;
        }
        let s = g.sessions.get_mut(id).unwrap();
        s.archived_at.get_or_insert(at);
        Ok(s.clone())
    }
}

impl TextSearch for MemoryStore {
    fn search_signals(
        &self,
        q: &Query,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(Signals, f64)>> {
        let g = self.lock();
        let in_view = g.in_view(q);
        let stems = in_view.iter().map(|m| text::stems(&m.content)).collect();
        super::search::text_search(&mut ViewPostings { in_view, stems, q }, terms, limit)
    }
}

impl VectorSearch for MemoryStore {
    fn pending_vectors(
        &self,
        model: &str,
        ids: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<PendingVector>> {
        let g = self.lock();
        let mut waiting: Vec<&Memory> = g
            .active
            .values()
            .filter(|m| ids.is_none_or(|ids| ids.contains(&m.id)))
            .filter(|m| m.embedding.as_ref().is_none_or(|e| e.model != model))
            .collect();
        waiting.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(waiting
            .into_iter()
            .take(limit)
            .map(|m| PendingVector {
                id: m.id.clone(),
                checksum: m.checksum.clone(),
                content: m.content.clone(),
                before: (m.kind.as_str() == "conversation")
                    .then(|| {
                        g.active
                            .values()
                            .filter(|x| {
                                x.scope == m.scope
                                    && x.kind.as_str() == "conversation"
                                    && x.session == m.session
                                    && (x.created_at, &x.id) < (m.created_at, &m.id)
                            })
                            .max_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
                            .map(|x| x.content.clone())
                    })
                    .flatten(),
            })
            .collect())
    }

    fn vector_counts(&self, model: &str) -> Result<super::VectorCounts> {
        let g = self.lock();
        let vectors = g
            .active
            .values()
            .filter(|m| m.embedding.as_ref().is_some_and(|e| e.model == model))
            .count() as u64;
        Ok(super::VectorCounts {
            vectors,
            pending: g.active.len() as u64 - vectors,
        })
    }

    fn set_vectors(
        &self,
        model: &str,
        dim: usize,
        items: &[(String, String, Vec<f32>)],
    ) -> Result<usize> {
        let mut g = self.lock();
        super::search::check_vectors(model, dim, g.vector_dims.get(model).copied(), items)?;
        g.vector_dims.entry(model.to_string()).or_insert(dim);
        let mut n = 0;
        for (id, checksum, v) in items {
            if let Some(m) = g.active.get_mut(id)
                && &m.checksum == checksum
            {
                m.embedding = Some(crate::model::Embedding {
                    model: model.to_string(),
                    vector: v.clone(),
                });
                n += 1;
            }
        }
        Ok(n)
    }

    fn search_vectors(
        &self,
        q: &Query,
        model: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(Signals, f32)>> {
        let g = self.lock();
        let mut best = super::search::TopK::new(limit);
        for m in g.active.values().filter(|m| q.selects(m)) {
            if let Some(e) = m.embedding.as_ref().filter(|e| e.model == model)
                && e.vector.len() == query.len()
            {
                best.push(&m.id, crate::embed::dot(query, &e.vector));
            }
        }
        let mut hits: Vec<(Signals, f32)> = best
            .into_vec()
            .into_iter()
            .map(|(id, sim)| (Signals::of(&g.active[id]), sim))
            .collect();
        super::sort_similar(&mut hits);
        Ok(hits)
    }

    fn clear_vectors(&self, keep: Option<&str>) -> Result<u64> {
        let mut g = self.lock();
        let inner = &mut *g;
        let drop = |e: &Option<crate::model::Embedding>| {
            e.as_ref().is_some_and(|e| Some(e.model.as_str()) != keep)
        };
        let mut n = 0;
        for m in inner.active.values_mut() {
            if drop(&m.embedding) {
                m.embedding = None;
                n += 1;
            }
        }
        for a in inner.archive.values_mut() {
            if drop(&a.memory.embedding) {
                a.memory.embedding = None;
            }
        }
        inner.vector_dims.retain(|k, _| Some(k.as_str()) == keep);
        Ok(n)
    }

    fn vector_models(&self) -> Result<Vec<(String, usize, u64)>> {
        let g = self.lock();
        Ok(g.vector_dims
            .iter()
            .map(|(model, dim)| {
                let n = g
                    .active
                    .values()
                    .filter(|m| m.embedding.as_ref().is_some_and(|e| &e.model == model))
                    .count() as u64;
                (model.clone(), *dim, n)
            })
            .collect())
    }
}

impl ContextLog for MemoryStore {
    fn log_context(&self, id: &str, at: Timestamp, doc: &str) -> Result<()> {
        self.lock()
            .context_log
            .entry(id.to_string())
            .or_insert_with(|| (at, doc.to_string()));
        Ok(())
    }

    fn context_log(&self, id: &str) -> Result<Option<String>> {
        Ok(self.lock().context_log.get(id).map(|(_, d)| d.clone()))
    }

    fn context_logs(&self) -> Result<Vec<(String, Timestamp, String)>> {
        Ok(self
            .lock()
            .context_log
            .iter()
            .map(|(id, (at, d))| (id.clone(), *at, d.clone()))
            .collect())
    }
}

impl AuditLog for MemoryStore {
    fn audit_append(&self, ev: &AuditEvent, at: Timestamp) -> Result<AuditEntry> {
        let mut g = self.lock();
        let e = AuditEntry::seal(ev, g.audit_chain.head_seq + 1, at, &g.audit_chain.head_hash);
        g.audit_chain.head_seq = e.seq;
        g.audit_chain.head_hash.clone_from(&e.hash);
        g.audit.push(e.clone());
        Ok(e)
    }

    fn audit_query(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>> {
        q.validate()?;
        Ok(self
            .lock()
            .audit
            .iter()
            .rev()
            .filter(|e| q.matches(e))
            .take(q.limit)
            .cloned()
            .collect())
    }

    fn audit_range(&self, after: u64, limit: usize) -> Result<Vec<AuditEntry>> {
        Ok(self
            .lock()
            .audit
            .iter()
            .filter(|e| e.seq > after)
            .take(limit)
            .cloned()
            .collect())
    }

    fn audit_chain(&self) -> Result<AuditChain> {
        Ok(self.lock().audit_chain.clone())
    }

    fn audit_prune(
        &self,
        cutoff: Option<Timestamp>,
        max_entries: Option<u64>,
    ) -> Result<AuditPrune> {
        let mut g = self.lock();
        let old = cutoff.and_then(|c| g.audit.iter().filter(|e| e.at < c).map(|e| e.seq).max());
        let Some(through) = audit::prune_through(&g.audit_chain, max_entries, old) else {
            return Ok(AuditPrune {
                removed: 0,
                anchor_seq: g.audit_chain.anchor_seq,
            });
        };
        let hash = g
            .audit
            .iter()
            .find(|e| e.seq == through)
            .map(|e| e.hash.clone())
            .ok_or_else(|| missing_entry(through))?;
        let before = g.audit.len();
        g.audit.retain(|e| e.seq > through);
        g.audit_chain.anchor_seq = through + 1;
        g.audit_chain.anchor_hash = hash;
        Ok(AuditPrune {
            removed: (before - g.audit.len()) as u64,
            anchor_seq: through + 1,
        })
    }

    fn audit_restore(&self, chain: &AuditChain, entries: &[AuditEntry]) -> Result<()> {
        self.restore_audit(chain, entries);
        Ok(())
    }
}

impl MemoryStore {
    fn restore_audit(&self, chain: &AuditChain, entries: &[AuditEntry]) {
        let mut g = self.lock();
        g.audit.extend(entries.iter().cloned());
        g.audit.sort_by_key(|e| e.seq);
        g.audit_chain = chain.clone();
    }
}

/// The error of a prune that would cut the chain at an entry that is not
/// there (the log was tampered with: `strata audit verify` says where).
pub(crate) fn missing_entry(seq: u64) -> Error {
    Error::Corrupt {
        what: format!("audit entry {seq}"),
        source:
            "it is missing, so retention cannot anchor the chain there; run `strata audit verify`"
                .into(),
    }
}

impl Store for MemoryStore {
    fn reads_never_wait(&self, _with_vectors: bool) -> bool {
        true
    }

    fn take_lease(
        &self,
        name: &str,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool> {
        let mut g = self.lock();
        match g.leases.get(name) {
            Some((h, u)) if h != holder && *u > now => Ok(false),
            _ => {
                g.leases
                    .insert(name.to_string(), (holder.to_string(), until));
                Ok(true)
            }
        }
    }

    fn end_lease(&self, name: &str, holder: &str) -> Result<()> {
        let mut g = self.lock();
        if g.leases.get(name).is_some_and(|(h, _)| h == holder) {
            g.leases.remove(name);
        }
        Ok(())
    }
}
