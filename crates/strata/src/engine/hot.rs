//! The hot tier: each session's last turns in this process's memory.
//!
//! A ring per session holds its newest memories (`[hot] turns`), oldest
//! first. Two kinds:
//!
//! - **write-through** (every session of the store): a cache. It is
//!   filled from the store on the first read and kept by this engine's
//!   writes; it is current while the session's record in the store
//!   (its bytes, last activity and archive mark, which every store
//!   changes in the transaction that adds, changes or removes one of the
//!   session's memories) is what the ring expects. Any other change —
//!   another process's write or forget, an update, an eviction — makes a
//!   read load the ring again. One read of the session's record by its
//!   key is all a current ring costs.
//! - **ephemeral** (`Engine::open_ephemeral_session`): the only copy. Its
//!   memories never reach the store; the oldest leave when the ring is
//!   full (and the write that pushed them out says so); `forget`,
//!   archiving the session and the end of the process remove them. A
//!   write that would take a session over its `max_bytes`, or all of them
//!   over `hot.ephemeral_bytes`, is refused, as the store refuses a
//!   stored session's.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::Timestamp;

use crate::Result;
use crate::config::HotConfig;
use crate::error::Error;
use crate::model::Memory;
use crate::store::{Query, Session};

/// What a write-through ring knows of its session's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    bytes: u64,
    last: Timestamp,
    archived: bool,
}

impl Token {
    /// The figures of a session record as the store holds it.
    pub(crate) fn of(s: &Session) -> Token {
        Token {
            bytes: s.bytes,
            last: s.last_activity_at,
            archived: s.archived_at.is_some(),
        }
    }
}

/// One session's ring.
#[derive(Debug)]
struct Ring {
    /// The session record (kept for ephemeral sessions, whose only record
    /// it is).
    session: Option<Session>,
    items: VecDeque<Arc<Memory>>,
    /// Write-through: the record the ring is current with; `None` until
    /// loaded again.
    token: Option<Token>,
    /// When it was last read (for the least recently read to leave first).
    used: u64,
}

impl Ring {
    fn ephemeral(&self) -> bool {
        self.session.is_some()
    }

    /// Puts `m` in creation order, replacing the copy of the same id, and
    /// drops the oldest beyond `turns` into `dropped`. Whether it replaced
    /// one.
    fn put(&mut self, m: Arc<Memory>, turns: usize, dropped: &mut Vec<Arc<Memory>>) -> bool {
        if let Some(i) = self.items.iter().position(|x| x.id == m.id) {
            self.items[i] = m;
            return true;
        }
        let at = self
            .items
            .iter()
            .rposition(|x| (x.created_at, &x.id) <= (m.created_at, &m.id))
            .map_or(0, |i| i + 1);
        self.items.insert(at, m);
        while self.items.len() > turns {
            dropped.extend(self.items.pop_front());
        }
        false
    }

    fn bytes(&self) -> u64 {
        self.items.iter().map(|m| m.size_bytes()).sum()
    }
}

#[derive(Debug, Default)]
struct Inner {
    rings: HashMap<String, Ring>,
    /// Ephemeral sessions that ended: a write naming one is refused, never
    /// sent to the store as a new session's.
    ended: HashSet<String>,
    clock: u64,
}

/// The hot tier of one engine.
#[derive(Debug)]
pub(crate) struct Hot {
    turns: usize,
    sessions: usize,
    /// `hot.ephemeral_bytes`.
    ephemeral_bytes: u64,
    inner: Mutex<Inner>,
    /// Set by the first ephemeral session: until then reads need not look
    /// (no lock on the recall path of a process that has none).
    any_ephemeral: AtomicBool,
}

/// The hot tier's figures: memories held, and their content and payload
/// bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HotFigures {
    pub memories: u64,
    pub bytes: u64,
}

impl Hot {
    pub(crate) fn new(cfg: &HotConfig) -> Hot {
        Hot {
            turns: cfg.turns,
            sessions: cfg.sessions,
            ephemeral_bytes: cfg.ephemeral_bytes,
            inner: Mutex::new(Inner::default()),
            any_ephemeral: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding it leaves rings that are at worst stale;
        // a write-through ring is checked on every read anyway.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns a ring holds (0: no hot tier).
    pub(crate) fn turns(&self) -> usize {
        self.turns
    }

    /// Opens an ephemeral session.
    pub(crate) fn open_ephemeral(&self, session: Session) -> Result<()> {
        if self.turns == 0 {
            return Err(Error::field(
                "ephemeral",
                "ephemeral sessions live in the hot tier, and `hot.turns` is 0 here",
            ));
        }
        let mut g = self.lock();
        if g.rings.get(&session.id).is_some_and(Ring::ephemeral) || g.ended.contains(&session.id) {
            return Err(Error::DuplicateSession(session.id));
        }
        let held = g.rings.values().filter(|r| r.ephemeral()).count();
        if held >= self.sessions {
            return Err(Error::field(
                "ephemeral",
                format!("this process holds {held} ephemeral sessions, its bound (`hot.sessions`)"),
            ));
        }
        self.any_ephemeral.store(true, Ordering::Release);
        g.clock += 1;
        let used = g.clock;
        g.rings.insert(
            session.id.clone(),
            Ring {
                session: Some(session),
                items: VecDeque::new(),
                token: None,
                used,
            },
        );
        self.evict(&mut g);
        Ok(())
    }

    /// The record of ephemeral session `id`, with its current figures.
    pub(crate) fn ephemeral(&self, id: &str) -> Option<Session> {
        let g = self.lock();
        let r = g.rings.get(id)?;
        let mut s = r.session.clone()?;
        s.bytes = r.bytes();
        Some(s)
    }

    /// Every ephemeral session, oldest first.
    pub(crate) fn ephemeral_sessions(&self) -> Vec<Session> {
        let g = self.lock();
        let mut v: Vec<Session> = g
            .rings
            .values()
            .filter_map(|r| {
                let mut s = r.session.clone()?;
                s.bytes = r.bytes();
                Some(s)
            })
            .collect();
        v.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        v
    }

    /// Whether an ephemeral session is open here (most calls need not
    /// look further).
    pub(crate) fn has_ephemeral(&self) -> bool {
        self.any_ephemeral.load(Ordering::Acquire)
            && self.lock().rings.values().any(Ring::ephemeral)
    }

    /// Whether session `id` is ephemeral here, open or ended (a write to
    /// an ended one is refused, never sent to the store).
    pub(crate) fn is_ephemeral(&self, id: &str) -> bool {
        if !self.any_ephemeral.load(Ordering::Acquire) {
            return false;
        }
        let g = self.lock();
        g.ended.contains(id) || g.rings.get(id).is_some_and(Ring::ephemeral)
    }

    /// Adds memories of ephemeral sessions (each names an open one, its
    /// scope within the session's). A keyed memory supersedes the one of
    /// its scope and key the session holds, as in the store. Answers them
    /// as held, and the ids of the oldest turns their rings let go
    /// (`hot.turns`). A memory that would take its session over
    /// `max_bytes`, or the ephemeral sessions together over
    /// `hot.ephemeral_bytes`, fails the call and nothing changes.
    pub(crate) fn put_ephemeral(&self, ms: Vec<Memory>) -> Result<(Vec<Memory>, Vec<String>)> {
        self.put_or_try(ms, false)
    }

    /// Whether [`Hot::put_ephemeral`] of `ms` would pass now; nothing
    /// changes.
    pub(crate) fn try_ephemeral(&self, ms: &[Memory]) -> Result<()> {
        self.put_or_try(ms.to_vec(), true).map(|_| ())
    }

    fn put_or_try(&self, ms: Vec<Memory>, dry: bool) -> Result<(Vec<Memory>, Vec<String>)> {
        let mut g = self.lock();
        for m in &ms {
            let id = m.session.as_deref().unwrap_or_default();
            let Some(s) = g.rings.get(id).and_then(|r| r.session.as_ref()) else {
                if g.ended.contains(id) {
                    return Err(Error::SessionArchived(id.into()));
                }
                return Err(Error::SessionNotFound(id.into()));
            };
            if !m.scope.is_within(&s.scope) {
                return Err(super::write::beside_session(id, &s.scope, &m.scope));
            }
        }
        // What the rings held, to put back when a later memory fails.
        let before: Vec<(String, Option<Session>, VecDeque<Arc<Memory>>)> = {
            let mut ids: Vec<&str> = ms.iter().filter_map(|m| m.session.as_deref()).collect();
            ids.sort_unstable();
            ids.dedup();
            ids.into_iter()
                .filter_map(|id| {
                    let r = g.rings.get(id)?;
                    Some((id.to_string(), r.session.clone(), r.items.clone()))
                })
                .collect()
        };
        let mut held: u64 = g
            .rings
            .values()
            .filter(|r| r.ephemeral())
            .map(Ring::bytes)
            .sum();
        let mut out = Vec::with_capacity(ms.len());
        let mut dropped = Vec::new();
        let mut failed = None;
        for mut m in ms {
            let id = m.session.clone().unwrap_or_default();
            let Some(r) = g.rings.get_mut(&id) else {
                continue;
            };
            if let Some(k) = &m.key
                && let Some(old) = r
                    .items
                    .iter()
                    .find(|x| x.key.as_ref() == Some(k) && x.scope == m.scope)
            {
                m = crate::store::superseding(old, m);
            }
            let used = r.bytes();
            let mut gone = Vec::new();
            r.put(Arc::new(m.clone()), self.turns, &mut gone);
            let now = r.bytes();
            let bound = r.session.as_ref().map_or(u64::MAX, |s| s.max_bytes);
            let next = (held + now).saturating_sub(used);
            if now > used && now > bound {
                failed = Some(Error::SessionFull {
                    session: id,
                    used,
                    adding: m.size_bytes(),
                    bound,
                });
                break;
            }
            if now > used && next > self.ephemeral_bytes {
                failed = Some(Error::EphemeralFull {
                    held,
                    adding: m.size_bytes(),
                    bound: self.ephemeral_bytes,
                });
                break;
            }
            held = next;
            if let Some(s) = &mut r.session {
                s.last_activity_at = s.last_activity_at.max(m.updated_at);
            }
            dropped.extend(gone.iter().map(|x| x.id.clone()));
            out.push(m);
        }
        if failed.is_some() || dry {
            for (id, session, items) in before {
                if let Some(r) = g.rings.get_mut(&id) {
                    r.session = session;
                    r.items = items;
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok((out, dropped))
    }

    /// Replaces an ephemeral memory by its new version, if its version is
    /// still `expected`.
    pub(crate) fn replace_ephemeral(&self, m: Memory, expected: u64) -> Result<Memory> {
        let mut g = self.lock();
        let held: u64 = g
            .rings
            .values()
            .filter(|r| r.ephemeral())
            .map(Ring::bytes)
            .sum();
        for r in g.rings.values_mut().filter(|r| r.ephemeral()) {
            if let Some(i) = r.items.iter().position(|x| x.id == m.id) {
                if r.items[i].version != expected {
                    return Err(Error::VersionConflict {
                        id: m.id.clone(),
                        expected,
                        current: r.items[i].version,
                    });
                }
                let (old, new) = (r.items[i].size_bytes(), m.size_bytes());
                if new > old {
                    let used = r.bytes();
                    let bound = r.session.as_ref().map_or(u64::MAX, |s| s.max_bytes);
                    if used - old + new > bound {
                        return Err(Error::SessionFull {
                            session: m.session.clone().unwrap_or_default(),
                            used,
                            adding: new - old,
                            bound,
                        });
                    }
                    if held - old + new > self.ephemeral_bytes {
                        return Err(Error::EphemeralFull {
                            held,
                            adding: new - old,
                            bound: self.ephemeral_bytes,
                        });
                    }
                }
                r.items[i] = Arc::new(m.clone());
                return Ok(m);
            }
        }
        Err(Error::NotFound(m.id))
    }

    /// This engine stored `ms`: each goes into its session's write-through
    /// ring when that ring is current, and the ring then expects the
    /// session's record to have grown by it, as the store's write did. A
    /// memory that replaced one of the ring's (a keyed write superseding)
    /// changes the record by what the ring cannot tell: it loads again.
    pub(crate) fn wrote(&self, ms: &[Memory]) {
        if self.turns == 0 {
            return;
        }
        let mut g = self.lock();
        if g.rings.is_empty() {
            return;
        }
        for m in ms {
            let Some(id) = m.session.as_deref() else {
                continue;
            };
            let Some(r) = g.rings.get_mut(id) else {
                continue;
            };
            if r.ephemeral() {
                continue;
            }
            let Some(mut t) = r.token else {
                continue;
            };
            if r.put(Arc::new(m.clone()), self.turns, &mut Vec::new()) {
                r.token = None;
                continue;
            }
            t.bytes += m.size_bytes();
            t.last = t.last.max(m.updated_at);
            r.token = Some(t);
        }
    }

    /// The ring of session `id` when it is ephemeral, or write-through and
    /// current with `token`.
    pub(crate) fn read(&self, id: &str, token: Option<Token>) -> Option<Vec<Arc<Memory>>> {
        let mut g = self.lock();
        g.clock += 1;
        let now = g.clock;
        let r = g.rings.get_mut(id)?;
        if !r.ephemeral() && (token.is_none() || r.token != token) {
            return None;
        }
        r.used = now;
        Some(r.items.iter().cloned().collect())
    }

    /// Keeps `items` (oldest first, the session's newest) as the
    /// write-through ring of session `id`, current with `token`.
    pub(crate) fn load(&self, id: &str, token: Token, items: Vec<Memory>) {
        if self.turns == 0 {
            return;
        }
        let mut g = self.lock();
        g.clock += 1;
        let used = g.clock;
        if g.rings.get(id).is_some_and(Ring::ephemeral) {
            return;
        }
        let skip = items.len().saturating_sub(self.turns);
        g.rings.insert(
            id.to_string(),
            Ring {
                session: None,
                items: items.into_iter().skip(skip).map(Arc::new).collect(),
                token: Some(token),
                used,
            },
        );
        self.evict(&mut g);
    }

    /// Drops the least recently read write-through rings beyond the bound.
    fn evict(&self, g: &mut Inner) {
        let over = g.rings.len().saturating_sub(self.sessions);
        if over == 0 {
            return;
        }
        let mut cached: Vec<(u64, String)> = g
            .rings
            .iter()
            .filter(|(_, r)| !r.ephemeral())
            .map(|(id, r)| (r.used, id.clone()))
            .collect();
        cached.sort();
        for (_, id) in cached.into_iter().take(over) {
            g.rings.remove(&id);
        }
    }

    /// An ephemeral memory by id.
    pub(crate) fn get(&self, id: &str) -> Option<Memory> {
        let g = self.lock();
        g.rings
            .values()
            .filter(|r| r.ephemeral())
            .flat_map(|r| r.items.iter())
            .find(|m| m.id == id)
            .map(|m| Memory::clone(m))
    }

    /// The ephemeral memories `q` selects (view, filter, expiry).
    pub(crate) fn select(&self, q: &Query) -> Vec<Memory> {
        let g = self.lock();
        g.rings
            .values()
            .filter(|r| r.ephemeral())
            .flat_map(|r| r.items.iter())
            .filter(|m| q.selects(m))
            .map(|m| Memory::clone(m))
            .collect()
    }

    /// Removes the memories with these ids from every ring (ephemeral and
    /// write-through, so their text leaves this process's memory at once),
    /// and answers how many left ephemeral rings.
    pub(crate) fn remove_ids(&self, ids: &[String]) -> usize {
        if ids.is_empty() {
            return 0;
        }
        let gone: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let mut g = self.lock();
        let mut ephemeral = 0;
        for r in g.rings.values_mut() {
            let before = r.items.len();
            r.items.retain(|m| !gone.contains(m.id.as_str()));
            if r.ephemeral() {
                ephemeral += before - r.items.len();
            }
        }
        ephemeral
    }

    /// Ends ephemeral session `id`: its memories are gone. The record, as
    /// archived at `at`.
    pub(crate) fn end_ephemeral(&self, id: &str, at: Timestamp) -> Option<Session> {
        let mut g = self.lock();
        if !g.rings.get(id).is_some_and(Ring::ephemeral) {
            return None;
        }
        let r = g.rings.remove(id)?;
        g.ended.insert(id.to_string());
        let mut s = r.session?;
        s.archived_at = Some(at);
        s.bytes = 0;
        Some(s)
    }

    /// Memories and bytes held (both kinds).
    pub(crate) fn figures(&self) -> HotFigures {
        let g = self.lock();
        let mut f = HotFigures::default();
        for r in g.rings.values() {
            f.memories += r.items.len() as u64;
            f.bytes += r.bytes();
        }
        f
    }
}

impl super::Engine {
    /// Opens a session whose memories live only in this engine's hot tier
    /// (the seeds' `session` depth for privacy-sensitive work): nothing of
    /// it touches the store or any file, recall and context see its last
    /// `hot.turns` memories, and they vanish with `forget`, with
    /// [`Engine::archive_session`](super::Engine::archive_session) and
    /// with the process. `id` defaults to a fresh UUIDv7, `scope` to
    /// `session/<id>`; an id the store already holds is refused.
    pub fn open_ephemeral_session(
        &self,
        id: Option<&str>,
        scope: Option<crate::scope::Scope>,
    ) -> Result<Session> {
        self.open_ephemeral_session_bounded(id, scope, None)
    }

    /// [`crate::Engine::open_ephemeral_session`] with a byte bound of its own
    /// (the configured `session_max_bytes` without one): a write that would
    /// take its turns over it is refused ([`Error::SessionFull`]), as for a
    /// stored session.
    pub fn open_ephemeral_session_bounded(
        &self,
        id: Option<&str>,
        scope: Option<crate::scope::Scope>,
        max_bytes: Option<u64>,
    ) -> Result<Session> {
        let s = self.new_session(id, scope, max_bytes, true)?;
        if self.store.get_session(&s.id)?.is_some() {
            return Err(Error::DuplicateSession(s.id));
        }
        self.hot.open_ephemeral(s.clone())?;
        Ok(s)
    }

    /// The last `limit` memories of a session, oldest first (expired ones
    /// left out): from the hot tier when its ring is current (one read of
    /// the session's record), else from the store, which then fills the
    /// ring. An ephemeral session's come from its ring alone.
    pub fn last_turns(&self, session: &str, limit: usize) -> Result<Vec<Memory>> {
        crate::model::validate_session_id(session)?;
        let now = self.now();
        let last = |items: Vec<Arc<Memory>>| -> Vec<Memory> {
            let live: Vec<Arc<Memory>> = items.into_iter().filter(|m| !m.is_expired(now)).collect();
            let skip = live.len().saturating_sub(limit);
            live.into_iter()
                .skip(skip)
                .map(|m| Memory::clone(&m))
                .collect()
        };
        if let Some(items) = self.hot.read(session, None) {
            return Ok(last(items));
        }
        let Some(s) = self.store.get_session(session)? else {
            return Err(Error::SessionNotFound(session.into()));
        };
        let token = Token::of(&s);
        if limit <= self.hot.turns()
            && let Some(items) = self.hot.read(session, Some(token))
        {
            return Ok(last(items));
        }
        let filter = crate::filter::Filter::parse(&serde_json::json!({ "session": session }))?;
        let fill = limit <= self.hot.turns();
        let want = if fill { self.hot.turns() } else { limit };
        // Expired memories stay in the ring (they are still the session's
        // and a read leaves them out), so the ring is what the store holds.
        let mut rows = self.store.query(
            &Query::everything(now)
                .filter(filter)
                .include_expired(true)
                .order(crate::store::Order::Newest)
                .limit(want),
        )?;
        rows.reverse();
        for m in &mut rows {
            m.embedding = None;
        }
        if fill {
            self.hot.load(session, token, rows.clone());
        }
        Ok(last(rows.into_iter().map(Arc::new).collect()))
    }

    /// The ephemeral memories a query selects, each with its BM25 over
    /// them (normalised by the best, as the archive's own statistics are
    /// its own) when there are query terms: only those that match then.
    pub(crate) fn hot_candidates(
        &self,
        q: &Query,
        terms: &[String],
    ) -> Vec<(Memory, crate::rank::Relevance)> {
        if !self.hot.has_ephemeral() {
            return Vec::new();
        }
        let found = self.hot.select(q);
        if terms.is_empty() {
            return found
                .into_iter()
                .map(|m| (m, crate::rank::Relevance::default()))
                .collect();
        }
        let docs: Vec<(&str, f64)> = found
            .iter()
            .map(|m| (m.content.as_str(), m.tokens as f64))
            .collect();
        let scores = crate::text::bm25_docs(&docs, terms);
        let best = scores.iter().fold(0.0f64, |a, b| a.max(*b));
        found
            .into_iter()
            .zip(scores)
            .filter(|(_, s)| *s > 0.0)
            .map(|(m, s)| {
                let mut rel = crate::rank::Relevance::text(Some(s));
                rel.text_match = (best > 0.0).then(|| s / best);
                (m, rel)
            })
            .collect()
    }

    /// Ephemeral memories by id (those of `ids` the hot tier holds).
    pub(crate) fn hot_get_many(&self, ids: &[String]) -> Vec<Memory> {
        if !self.hot.has_ephemeral() {
            return Vec::new();
        }
        ids.iter().filter_map(|id| self.hot.get(id)).collect()
    }

    /// Whether session `id` is ephemeral here, open or ended.
    pub(crate) fn is_ephemeral(&self, id: &str) -> bool {
        self.hot.is_ephemeral(id)
    }
}
