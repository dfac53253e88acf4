//! Writes: validation, what the engine assigns (id, tokens, checksum,
//! times), sessions a write creates or joins, single and pipelined batch
//! writes, compare-and-swap updates.

use super::*;
use crate::store::hurry;

/// A memory of `scope` may not join session `id`, which covers `covers`.
pub(super) fn beside_session(id: &str, covers: &Scope, scope: &Scope) -> Error {
    Error::field(
        "session",
        format!(
            "session `{id}` holds memories of `{covers}`; `{scope}` is outside it \
             (write the memory without the session, or into a session \
             created with a scope that covers it)"
        ),
    )
}

/// `e` with `at` before the field it names.
fn prefixed(at: &str, e: Error) -> Error {
    match e {
        Error::InvalidField { field, reason } if !at.is_empty() => Error::InvalidField {
            field: format!("{at}{field}"),
            reason,
        },
        e => e,
    }
}

/// A stored memory, and the turns an ephemeral session's ring let go to
/// hold it ([`Engine::remember_reporting`]).
#[derive(Clone, Debug)]
pub struct Remembered {
    /// The memory as held.
    pub memory: Memory,
    /// Ids of the oldest turns its ephemeral session no longer holds
    /// (`hot.turns`); empty for any other write.
    pub dropped: Vec<String>,
}

/// Changes for [`Engine::update`]; unset fields keep their value.
#[derive(Clone, Debug, Default)]
pub struct Patch {
    /// New content.
    pub content: Option<String>,
    /// New payload (`Some(None)` clears it).
    pub payload: Option<Option<serde_json::Value>>,
    /// New tags.
    pub tags: Option<Vec<String>>,
    /// New importance.
    pub importance: Option<f64>,
    /// New kind.
    pub kind: Option<Kind>,
    /// New key (`Some(None)` clears it).
    pub key: Option<Option<String>>,
    /// Pin or unpin.
    pub pinned: Option<bool>,
    /// Mark or unmark sensitive.
    pub sensitive: Option<bool>,
    /// New expiry (`Some(None)` clears it).
    pub expires_at: Option<Option<Timestamp>>,
}

pub(super) fn prefix_item(i: usize, e: Error) -> Error {
    match e {
        Error::InvalidField { field, reason } => Error::InvalidField {
            field: format!("item {i}: {field}"),
            reason,
        },
        Error::ItemTooLarge { size, limit } => Error::InvalidField {
            field: format!("item {i}: content"),
            reason: format!("{size} bytes, over the limit of {limit} bytes (`max_item_bytes`)"),
        },
        Error::Refused {
            field,
            detector,
            start,
            end,
            rule,
        } => Error::Refused {
            field: format!("item {i}: {field}"),
            detector,
            start,
            end,
            rule,
        },
        other => other,
    }
}

impl Engine {
    /// Checks every field of a new memory without building it.
    pub(super) fn check_new(&self, new: &NewMemory) -> Result<()> {
        if new.scope.is_none() {
            return Err(Error::field("scope", "missing"));
        }
        model::validate_content(&new.content)?;
        let size = new.content.len() + new.payload.as_ref().map_or(0, |p| p.to_string().len());
        if size > self.cfg.max_item_bytes {
            return Err(Error::ItemTooLarge {
                size,
                limit: self.cfg.max_item_bytes,
            });
        }
        let kind = new.kind.clone().unwrap_or(Kind::Note);
        model::validate_importance(new.importance.unwrap_or_else(|| kind.default_importance()))?;
        model::validate_tags(&new.tags)?;
        if let Some(k) = &new.key {
            model::validate_key(k)?;
        }
        if let Some(p) = &new.payload {
            model::validate_payload(p)?;
        }
        if let Some(s) = &new.session {
            model::validate_session_id(s)?;
        }
        if new.ttl.is_some_and(|d| !d.is_positive()) {
            return Err(Error::field("ttl", "must be positive"));
        }
        if let Some(at) = new.created_at
            && at > self.now()
        {
            return Err(Error::field("created_at", format!("{at} is in the future")));
        }
        Ok(())
    }

    /// Validates a new memory and fills in everything the engine assigns.
    pub(crate) fn build(&self, new: NewMemory, now: Timestamp) -> Result<Memory> {
        self.check_new(&new)?;
        self.build_checked(new, now)
    }

    /// [`Engine::build`] for a memory `check_new` already accepted.
    pub(super) fn build_checked(&self, new: NewMemory, now: Timestamp) -> Result<Memory> {
        let scope = new.scope.ok_or_else(|| Error::field("scope", "missing"))?;
        let kind = new.kind.unwrap_or(Kind::Note);
        let importance = new.importance.unwrap_or_else(|| kind.default_importance());
        let mut tags: Vec<String> = Vec::with_capacity(new.tags.len());
        for t in new.tags {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        let expires_at = match new.ttl {
            Some(d) => Some(now.checked_add(d).map_err(|e| Error::field("ttl", e))?),
            None => None,
        };
        let source = new.source.unwrap_or(if kind == Kind::Conversation {
            Source::Conversation
        } else {
            Source::External
        });
        let checksum = model::checksum(&new.content, new.payload.as_ref());
        let tokens = self.tokens.count(&new.content);
        let created_at = new.created_at.map_or(now, model::ms);
        let mut m = Memory {
            id: uuid::Uuid::now_v7().to_string(),
            scope,
            kind,
            role: new.role,
            content: new.content,
            payload: new.payload,
            key: new.key,
            tags,
            importance,
            source,
            session: new.session,
            created_at,
            updated_at: created_at,
            last_accessed_at: None,
            access_count: 0,
            expires_at,
            pinned: new.pinned,
            sensitive: new.sensitive,
            tokens,
            checksum,
            version: 1,
            embedding: None,
            provenance: new.provenance,
        };
        self.screen("", &mut m)?;
        Ok(m)
    }

    /// Applies the `[[secrets]]` rule covering `m`'s scope, if any: spans
    /// redacted (token count and checksum follow the new text), the memory
    /// marked sensitive, or [`Error::Refused`] with `at` before the field.
    pub(crate) fn screen(&self, at: &str, m: &mut Memory) -> Result<()> {
        let Some(rule) = crate::secrets::rule_for(&self.cfg.secrets, &m.scope) else {
            return Ok(());
        };
        // Tags, key, payload keys and session, then content and payload
        // values; a refusal of any fails the write, and `m` goes with it.
        let labels = crate::secrets::screen_labels(
            rule,
            at,
            &mut m.tags,
            &mut m.key,
            &mut m.payload,
            m.session.as_deref(),
        )?;
        let s = crate::secrets::screen(rule, at, &mut m.content, &mut m.payload)?;
        if !s.flagged.is_empty() || !labels.flagged.is_empty() {
            m.sensitive = true;
        }
        if labels.changed() {
            // A placeholder may be longer than what it replaced.
            model::validate_tags(&m.tags).map_err(|e| prefixed(at, e))?;
            if let Some(k) = &m.key {
                model::validate_key(k).map_err(|e| prefixed(at, e))?;
            }
        }
        if s.changed() || labels.changed() {
            m.tokens = self.tokens.count(&m.content);
            m.checksum = model::checksum(&m.content, m.payload.as_ref());
        }
        Ok(())
    }

    pub(super) fn check_confirm(&self, m: &NewMemory, confirm: Confirm) -> Result<()> {
        let global = m.scope.as_ref().is_some_and(|s| s.tier() == Tier::Global);
        if global && m.kind == Some(Kind::Preference) && confirm != Confirm::Yes {
            return Err(Error::NeedsConfirmation(format!(
                "adding a preference to global memory (`{}`)",
                m.scope.as_ref().map(|s| s.to_string()).unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// Creates the session with the configured defaults and `scope` unless
    /// it exists; returns whether this call created it, and the scope the
    /// session covers. A write creates its session in its own scope, so the
    /// session covers what it holds.
    pub(super) fn ensure_session(
        &self,
        id: &str,
        scope: &Scope,
        now: Timestamp,
    ) -> Result<(bool, Scope)> {
        if let Some(held) = self.store.get_session(id)? {
            return Ok((false, held.scope));
        }
        let s = Session {
            id: id.into(),
            scope: scope.clone(),
            created_at: now,
            last_activity_at: now,
            archived_at: None,
            max_bytes: self.cfg.session_max_bytes,
            bytes: 0,
            ephemeral: false,
        };
        match self.store.create_session(&s) {
            Ok(()) => Ok((true, s.scope)),
            // Another writer created it first.
            Err(Error::DuplicateSession(_)) => {
                let held = self.store.get_session(id)?.map(|h| h.scope);
                Ok((false, held.unwrap_or(s.scope)))
            }
            Err(e) => Err(e),
        }
    }

    /// Stores a memory. A global preference needs [`Engine::remember_with`]
    /// and `Confirm::Yes`.
    pub fn remember(&self, new: NewMemory) -> Result<Memory> {
        self.remember_with(new, Confirm::No)
    }

    /// Stores a memory, with an explicit confirmation for high-risk writes.
    pub fn remember_with(&self, new: NewMemory, confirm: Confirm) -> Result<Memory> {
        self.remember_reporting(new, confirm).map(|r| r.memory)
    }

    /// [`Engine::remember_with`], saying which turns an ephemeral
    /// session's ring let go to hold the new one (`hot.turns`): a caller
    /// is told, never left to find them gone.
    pub fn remember_reporting(&self, new: NewMemory, confirm: Confirm) -> Result<Remembered> {
        self.check_confirm(&new, confirm)?;
        self.check_new(&new)?;
        let now = self.now();
        let m = self.build(new, now)?;
        if m.session.as_deref().is_some_and(|s| self.is_ephemeral(s)) {
            let (mut held, dropped) = self.hot.put_ephemeral(vec![m])?;
            let memory = held
                .pop()
                .ok_or_else(|| Error::field("session", "not held"))?;
            return Ok(Remembered { memory, dropped });
        }
        self.remember_stored(m, now).map(|memory| Remembered {
            memory,
            dropped: Vec::new(),
        })
    }

    /// The store's side of [`Engine::remember_reporting`]: `m`, built and
    /// checked, for a session that is not ephemeral (or none).
    fn remember_stored(&self, m: Memory, now: Timestamp) -> Result<Memory> {
        // On a thread that must not wait (`without_waiting`), a project at
        // its bound means an eviction after the write: work for a thread
        // that may wait. Refuse before writing anything.
        if self.store.writes_can_hurry()
            && hurry::first_write_ahead()
            && let Some(root) = m.scope.project_root()
            && self.at_bound(&root)?
        {
            return Err(hurry::refused(hurry::Refusal::Bound));
        }
        // A session holds only memories inside its scope: one covering
        // `project/acme` may take a memory of `project/acme/sprint/s1`,
        // never one of `project/beta`. Reading or archiving a session then
        // touches nothing outside the scope it was created for.
        let joins = |covers: &Scope| match &m.session {
            Some(id) if !m.scope.is_within(covers) => Err(beside_session(id, covers, &m.scope)),
            _ => Ok(()),
        };
        let (created, covers) = match &m.session {
            Some(s) => self.ensure_session(s, &m.scope, now)?,
            None => (false, m.scope.clone()),
        };
        let mut put = joins(&covers).and_then(|()| self.store.put(&m));
        if let (Err(Error::SessionNotFound(s)), false) = (&put, created) {
            // Another writer's failed write removed the session it had just
            // created, between our check and our put: create it and retry.
            let s = s.clone();
            let (_, covers) = self.ensure_session(&s, &m.scope, now)?;
            put = joins(&covers).and_then(|()| self.store.put(&m));
        }
        if let Err(Error::SessionFull {
            session,
            adding,
            bound,
            ..
        }) = &put
            && self.compaction_makes_room(*adding, *bound)
        {
            // A full session is compacted, then written to: an agent that
            // runs longer than upkeep's period never meets its bound.
            let s = session.clone();
            // The failed write wrote nothing: on a thread that must not
            // wait, it is refused for a thread that may.
            if self.store.writes_can_hurry() && hurry::hurried() {
                return Err(hurry::refused(hurry::Refusal::Bound));
            }
            if self.compact_session(&s)?.compacted > 0 {
                put = self.store.put(&m);
            }
        }
        let stored = match put {
            Ok(p) => p.into_memory(),
            Err(e) => {
                // A failed write leaves no session behind that it created.
                // Cleanup is best effort: the write's own error is the answer.
                if let (true, Some(s)) = (created, &m.session) {
                    let _ = self.store.remove_empty_session(s);
                }
                return Err(e);
            }
        };
        self.hot.wrote(std::slice::from_ref(&stored));
        if let Some(root) = stored.scope.project_root() {
            self.enforce_bound(&root)?;
        }
        self.wake_embedder();
        Ok(stored)
    }

    /// Whether compacting a session down to `compaction.to` of its `bound`
    /// leaves room for `adding` more bytes (else a write that cannot fit is
    /// refused without compacting anything).
    fn compaction_makes_room(&self, adding: u64, bound: u64) -> bool {
        let c = &self.cfg.compaction;
        c.enabled && adding.saturating_add((c.to * bound as f64) as u64) <= bound
    }

    /// Stores many memories in one transaction: all or none. Token counting
    /// runs on the other cores while earlier memories are written.
    pub fn remember_batch(&self, items: Vec<NewMemory>, confirm: Confirm) -> Result<Vec<Memory>> {
        self.remember_batch_reporting(items, confirm)
            .map(|(ms, _)| ms)
    }

    /// [`Engine::remember_batch`], with the ids of the turns ephemeral
    /// sessions' rings let go to hold the batch (`hot.turns`).
    pub fn remember_batch_reporting(
        &self,
        items: Vec<NewMemory>,
        confirm: Confirm,
    ) -> Result<(Vec<Memory>, Vec<String>)> {
        for (i, n) in items.iter().enumerate() {
            self.check_confirm(n, confirm)
                .map_err(|e| prefix_item(i, e))?;
            self.check_new(n).map_err(|e| prefix_item(i, e))?;
        }
        let now = self.now();
        if items
            .iter()
            .any(|n| n.session.as_deref().is_some_and(|s| self.is_ephemeral(s)))
        {
            return self.remember_batch_split(items, now);
        }
        Ok((self.remember_batch_checked(items, now)?, Vec::new()))
    }

    /// [`Engine::remember_batch`] for items already checked, none of them
    /// for an ephemeral session.
    fn remember_batch_checked(&self, items: Vec<NewMemory>, now: Timestamp) -> Result<Vec<Memory>> {
        // Each session a batch creates takes the scope of its first item.
        let mut sessions = BTreeMap::new();
        for n in &items {
            if let (Some(s), Some(scope)) = (&n.session, &n.scope) {
                sessions.entry(s.clone()).or_insert_with(|| scope.clone());
            }
        }
        let held: BTreeMap<String, Session> = sessions
            .keys()
            .map(|s| Ok((s.clone(), self.store.get_session(s)?)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter_map(|(id, s)| s.map(|s| (id, s)))
            .collect();
        let mut adding: BTreeMap<&str, u64> = BTreeMap::new();
        for (i, n) in items.iter().enumerate() {
            if let (Some(s), Some(scope)) = (&n.session, &n.scope) {
                let covers = held.get(s).map_or(&sessions[s], |h| &h.scope);
                if !scope.is_within(covers) {
                    return Err(prefix_item(i, beside_session(s, covers, scope)));
                }
                let size = n.content.len() + n.payload.as_ref().map_or(0, |p| p.to_string().len());
                *adding.entry(s.as_str()).or_default() += size as u64;
            }
        }
        // A session the batch would overflow is compacted first, when that
        // makes room for it (the store still checks the bound).
        for (id, s) in &held {
            let add = adding.get(id.as_str()).copied().unwrap_or(0);
            if s.archived_at.is_none()
                && s.bytes + add > s.max_bytes
                && self.compaction_makes_room(add, s.max_bytes)
            {
                self.compact_session(id)?;
            }
        }
        let mut created = Vec::new();
        for (s, scope) in &sessions {
            match self.ensure_session(s, scope, now) {
                Ok((true, _)) => created.push(s.clone()),
                Ok((false, _)) => {}
                Err(e) => {
                    for c in &created {
                        let _ = self.store.remove_empty_session(c);
                    }
                    return Err(e);
                }
            }
        }
        let stored = match self.pipelined_put(items, now) {
            Ok(v) => v,
            Err(e) => {
                for s in &created {
                    let _ = self.store.remove_empty_session(s);
                }
                return Err(e);
            }
        };
        self.hot.wrote(&stored);
        let roots: BTreeSet<Scope> = stored
            .iter()
            .filter_map(|m| m.scope.project_root())
            .collect();
        for r in roots {
            self.enforce_bound(&r)?;
        }
        self.wake_embedder();
        Ok(stored)
    }

    /// A batch of which some items go to ephemeral sessions: those are
    /// built (and checked against their sessions) first, the others stored
    /// in one transaction, then the ephemeral ones kept; the answer is in
    /// the items' order. A failure anywhere before the store's commit
    /// changes nothing.
    fn remember_batch_split(
        &self,
        items: Vec<NewMemory>,
        now: Timestamp,
    ) -> Result<(Vec<Memory>, Vec<String>)> {
        let mut hot = Vec::new();
        let mut warm = Vec::new();
        let mut order = Vec::with_capacity(items.len());
        for (i, n) in items.into_iter().enumerate() {
            if n.session.as_deref().is_some_and(|s| self.is_ephemeral(s)) {
                let m = self.build_checked(n, now).map_err(|e| prefix_item(i, e))?;
                let id = m.session.clone().unwrap_or_default();
                let Some(s) = self.hot.ephemeral(&id) else {
                    return Err(prefix_item(i, Error::SessionArchived(id)));
                };
                if !m.scope.is_within(&s.scope) {
                    return Err(prefix_item(i, beside_session(&s.id, &s.scope, &m.scope)));
                }
                order.push(true);
                hot.push(m);
            } else {
                order.push(false);
                warm.push(n);
            }
        }
        // The rings' bounds first: a batch the hot tier refuses stores
        // nothing.
        self.hot.try_ephemeral(&hot)?;
        let stored = if warm.is_empty() {
            Vec::new()
        } else {
            self.remember_batch_checked(warm, now)?
        };
        let (held, dropped) = self.hot.put_ephemeral(hot)?;
        let (mut w, mut h) = (stored.into_iter(), held.into_iter());
        let all = order
            .into_iter()
            .filter_map(|e| if e { h.next() } else { w.next() })
            .collect();
        Ok((all, dropped))
    }

    /// Builds memories in chunks on helper threads and feeds them to one
    /// store transaction as they are ready (PERF-NOTES: token counting costs
    /// about as much as the insert itself, so the two overlap).
    pub(super) fn pipelined_put(
        &self,
        items: Vec<NewMemory>,
        now: Timestamp,
    ) -> Result<Vec<Memory>> {
        const CHUNK: usize = 512;
        if items.len() <= CHUNK {
            let mut it = items
                .into_iter()
                .enumerate()
                .map(|(i, n)| self.build_checked(n, now).map_err(|e| prefix_item(i, e)));
            return Ok(self
                .store
                .put_batch(&mut it)?
                .into_iter()
                .map(Put::into_memory)
                .collect());
        }
        // One core writes; the others prepare.
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .saturating_sub(1)
            .clamp(1, 4);
        let mut chunks: Vec<Vec<(usize, NewMemory)>> = Vec::new();
        for (i, n) in items.into_iter().enumerate() {
            if i % CHUNK == 0 {
                chunks.push(Vec::with_capacity(CHUNK));
            }
            chunks.last_mut().unwrap().push((i, n));
        }
        let n_chunks = chunks.len();
        std::thread::scope(|s| {
            // Chunk k goes to worker k % workers; the writer takes chunks in
            // order, so results keep the input order.
            let mut rxs = Vec::new();
            let mut per_worker: Vec<Vec<Vec<(usize, NewMemory)>>> =
                (0..workers).map(|_| Vec::new()).collect();
            for (k, c) in chunks.into_iter().enumerate() {
                per_worker[k % workers].push(c);
            }
            for work in per_worker {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Result<Memory>>>(2);
                rxs.push(rx);
                s.spawn(move || {
                    for c in work {
                        let built: Vec<Result<Memory>> = c
                            .into_iter()
                            .map(|(i, n)| self.build_checked(n, now).map_err(|e| prefix_item(i, e)))
                            .collect();
                        if tx.send(built).is_err() {
                            return;
                        }
                    }
                });
            }
            let mut feed = (0..n_chunks).flat_map(|k| {
                rxs[k % workers].recv().unwrap_or_else(|_| {
                    vec![Err(Error::field("batch", "a preparing thread stopped"))]
                })
            });
            let out = self.store.put_batch(&mut feed);
            drop(feed);
            drop(rxs);
            out.map(|v| v.into_iter().map(Put::into_memory).collect())
        })
    }

    /// Changes a memory if its version is still `expected_version`.
    pub fn update(&self, id: &str, patch: Patch, expected_version: u64) -> Result<Memory> {
        let ephemeral = self.hot.get(id);
        let in_hot = ephemeral.is_some();
        let mut m = match ephemeral {
            Some(m) => m,
            None => self
                .store
                .get(id)?
                .ok_or_else(|| Error::NotFound(id.into()))?,
        };
        if m.version != expected_version {
            return Err(Error::VersionConflict {
                id: id.into(),
                expected: expected_version,
                current: m.version,
            });
        }
        let now = self.now();
        let old_content = (patch.content.is_some()).then(|| m.content.clone());
        let screen = patch.content.is_some() || patch.payload.is_some();
        if let Some(c) = patch.content {
            model::validate_content(&c)?;
            m.tokens = self.tokens.count(&c);
            m.content = c;
        }
        if let Some(p) = patch.payload {
            if let Some(p) = &p {
                model::validate_payload(p)?;
            }
            m.payload = p;
        }
        let size = m.content.len() + m.payload.as_ref().map_or(0, |p| p.to_string().len());
        if size > self.cfg.max_item_bytes {
            return Err(Error::ItemTooLarge {
                size,
                limit: self.cfg.max_item_bytes,
            });
        }
        if let Some(t) = patch.tags {
            model::validate_tags(&t)?;
            m.tags = t;
        }
        if let Some(x) = patch.importance {
            model::validate_importance(x)?;
            m.importance = x;
        }
        if let Some(k) = patch.kind {
            m.kind = k;
        }
        if let Some(k) = patch.key {
            if let Some(k) = &k {
                model::validate_key(k)?;
            }
            m.key = k;
        }
        if let Some(p) = patch.pinned {
            m.pinned = p;
        }
        if let Some(s) = patch.sensitive {
            m.sensitive = s;
        }
        if let Some(e) = patch.expires_at {
            m.expires_at = e;
        }
        if screen {
            // New text meets the rules as a new memory does; a patch that
            // changes neither content nor payload may clear `sensitive`.
            self.screen("", &mut m)?;
        }
        if old_content.is_some_and(|old| old != m.content) {
            // The old vector describes the old text.
            m.embedding = None;
        }
        m.checksum = model::checksum(&m.content, m.payload.as_ref());
        m.updated_at = now;
        if in_hot {
            m.version += 1;
            return self.hot.replace_ephemeral(m, expected_version);
        }
        let updated = self.store.update(&m, expected_version)?;
        self.hot.wrote(std::slice::from_ref(&updated));
        self.wake_embedder();
        Ok(updated)
    }
}
