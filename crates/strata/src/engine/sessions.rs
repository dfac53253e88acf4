//! Sessions: creation, manifests and archiving, whole or behind a fence.

use super::*;

/// A session's manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Manifest {
    /// The session record.
    #[serde(flatten)]
    pub session: Session,
    /// Active memories.
    pub memories: u64,
    /// Archived memories.
    pub archived: u64,
    /// Active memories per kind.
    pub by_kind: BTreeMap<String, u64>,
    /// Active memories per role.
    pub by_role: BTreeMap<String, u64>,
    /// Sum of tokens of active memories.
    pub tokens: u64,
    /// Earliest memory.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub first_activity_at: Option<Timestamp>,
}

impl Engine {
    /// Creates a session. `id` defaults to a fresh UUIDv7, `scope` to
    /// `session/<id>`, `max_bytes` to the configured bound.
    pub fn create_session(
        &self,
        id: Option<&str>,
        scope: Option<Scope>,
        max_bytes: Option<u64>,
    ) -> Result<Session> {
        let s = self.new_session(id, scope, max_bytes, false)?;
        if self.is_ephemeral(&s.id) {
            return Err(Error::DuplicateSession(s.id));
        }
        self.store.create_session(&s)?;
        Ok(s)
    }

    /// A new session's record: `id` checked (a fresh UUIDv7 when `None`),
    /// `scope` defaulting to `session/<id>`, `max_bytes` to the configured
    /// bound.
    pub(super) fn new_session(
        &self,
        id: Option<&str>,
        scope: Option<Scope>,
        max_bytes: Option<u64>,
        ephemeral: bool,
    ) -> Result<Session> {
        if let Some(m) = max_bytes
            && (m == 0 || m > i64::MAX as u64)
        {
            return Err(Error::field(
                "max_bytes",
                format!("{m} must be between 1 and {}", i64::MAX),
            ));
        }
        let id = match id {
            Some(i) => {
                model::validate_session_id(i)?;
                i.to_string()
            }
            None => uuid::Uuid::now_v7().simple().to_string(),
        };
        let now = self.now();
        let scope = match scope {
            Some(s) => s,
            None => Scope::parse(&format!("session/{id}"))?,
        };
        // A name a secret would be stored under is refused (or flagged
        // nowhere: a session has no `sensitive` mark), as in a write.
        if let Some(rule) = crate::secrets::rule_for(&self.cfg.secrets, &scope) {
            crate::secrets::screen_labels(rule, "", &mut [], &mut None, &mut None, Some(&id))?;
        }
        Ok(Session {
            scope,
            id,
            created_at: now,
            last_activity_at: now,
            archived_at: None,
            max_bytes: max_bytes.unwrap_or(self.cfg.session_max_bytes),
            bytes: 0,
            ephemeral,
        })
    }

    /// Every session, oldest first: the store's, then this process's
    /// ephemeral ones.
    pub fn list_sessions(&self) -> Result<Vec<Session>> {
        let mut all = self.store.list_sessions()?;
        all.extend(self.hot.ephemeral_sessions());
        Ok(all)
    }

    /// A session's record: an ephemeral one of this process, else the
    /// store's.
    pub fn get_session(&self, id: &str) -> Result<Option<Session>> {
        model::validate_session_id(id)?;
        if let Some(s) = self.hot.ephemeral(id) {
            return Ok(Some(s));
        }
        self.store.get_session(id)
    }

    /// A session's manifest: counts, size, first and last activity.
    pub fn session_manifest(&self, id: &str) -> Result<Manifest> {
        self.session_manifest_within(id, &Fence::everything())
    }

    /// A session's manifest as a caller limited to `fence` sees it: a
    /// session outside is not found, and memories outside are not counted.
    pub fn session_manifest_within(&self, id: &str, fence: &Fence) -> Result<Manifest> {
        model::validate_session_id(id)?;
        let ephemeral = self.hot.ephemeral(id);
        let in_hot = ephemeral.is_some();
        let session = match ephemeral {
            Some(s) => Some(s),
            None => self.store.get_session(id)?,
        }
        .filter(|s| fence.contains(&s.scope))
        .ok_or_else(|| Error::SessionNotFound(id.into()))?;
        let now = self.now();
        let q = Query::everything(now)
            .filter(Filter::parse(&json!({"session": id}))?)
            .include_expired(true);
        let (mut active, mut archived) = if in_hot {
            let held = self.hot_candidates(&q, &[]).into_iter().map(|(m, _)| m);
            (held.collect(), Vec::new())
        } else {
            (self.store.query(&q)?, self.archived_everywhere(&q)?)
        };
        active.retain(|m| fence.contains(&m.scope));
        archived.retain(|a| fence.contains(&a.memory.scope));
        let mut by_kind = BTreeMap::new();
        let mut by_role = BTreeMap::new();
        for m in &active {
            *by_kind.entry(m.kind.to_string()).or_insert(0) += 1;
            if let Some(r) = m.role {
                *by_role.entry(r.to_string()).or_insert(0) += 1;
            }
        }
        let first = active
            .iter()
            .chain(archived.iter().map(|a| &a.memory))
            .map(|m| m.created_at)
            .min();
        Ok(Manifest {
            memories: active.len() as u64,
            archived: archived.len() as u64,
            by_kind,
            by_role,
            tokens: active.iter().map(|m| m.tokens as u64).sum(),
            first_activity_at: first,
            // The latest write is the session record's `last_activity_at`
            // (one field in the flattened object, not two).
            session,
        })
    }

    /// Archives a session: no more writes; its memories move to the archive.
    pub fn archive_session(&self, id: &str) -> Result<Session> {
        self.archive_session_within(id, &Fence::everything())
    }

    /// Archives a session for a caller limited to `fence`: a session outside
    /// is not found. Should the session hold memories outside the fence
    /// (written before sessions were bound to their scope), only the
    /// caller's move to the archive and the session stays open for the
    /// others.
    ///
    /// An ephemeral session ends: its memories are gone (they were never
    /// anywhere else), and its record is answered as archived.
    pub fn archive_session_within(&self, id: &str, fence: &Fence) -> Result<Session> {
        model::validate_session_id(id)?;
        let now = self.now();
        if let Some(s) = self.hot.ephemeral(id) {
            if !fence.contains(&s.scope) {
                return Err(Error::SessionNotFound(id.into()));
            }
            return self
                .hot
                .end_ephemeral(id, now)
                .ok_or_else(|| Error::SessionNotFound(id.into()));
        }
        if fence.is_everything() {
            return self.store.archive_session(id, now);
        }
        let session = self
            .store
            .get_session(id)?
            .filter(|s| fence.contains(&s.scope))
            .ok_or_else(|| Error::SessionNotFound(id.into()))?;
        let q = Query::everything(now)
            .filter(Filter::parse(&json!({"session": id}))?)
            .include_expired(true);
        let held = self.store.query(&q)?;
        if held.iter().all(|m| fence.contains(&m.scope)) {
            return self.store.archive_session(id, now);
        }
        let mine: Vec<String> = held
            .into_iter()
            .filter(|m| fence.contains(&m.scope))
            .map(|m| m.id)
            .collect();
        self.store.archive(&mine, "session_archived", now)?;
        Ok(self.store.get_session(id)?.unwrap_or(session))
    }
}
