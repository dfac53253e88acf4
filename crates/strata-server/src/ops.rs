//! The operations both front ends serve: each checks the caller's [`Grant`]
//! and the limits, turns a request body into the engine's types and calls
//! the engine. Synchronous, like the engine; the async front ends run them
//! on the blocking pool.
//!
//! Rules, the same for every operation: a read's view must lie entirely
//! inside the grant (403 naming the first entry outside); a write needs
//! `read_write` and a scope inside the grant; an id outside the grant is
//! "not found", exactly like an id that does not exist.

use serde::Serialize;
use serde_json::Value;
use strata::{
    Confirm, ContextPackage, ContextRequest, Engine, Filter, Forget, ForgetOptions, ForgetReport,
    List, Memory, NewMemory, Patch, Promotion, Recall, Recalled, Scope, Session, TaskReport, View,
    ViewEntry,
};

use crate::api::{
    BatchAnswer, BatchBody, CompleteTaskBody, ContextAnswer, ContextBody, ForgetBody, ListAnswer,
    ListBody, MemoryAnswer, PatchBody, PromoteBody, RecallBody, RememberAnswer, RememberBody,
    SessionBody,
};
use crate::auth::Grant;
use crate::config::Limits;
use crate::error::ApiError;

type Result<T, E = ApiError> = std::result::Result<T, E>;

/// What one call runs with: the engine, the caller's grant, the limits.
#[derive(Clone, Copy, Debug)]
pub struct Ctx<'a> {
    /// The engine.
    pub engine: &'a Engine,
    /// What the caller may see and do.
    pub grant: &'a Grant,
    /// Request limits.
    pub limits: &'a Limits,
}

/// What an audited call touched (`strata::AuditEvent` without the actor
/// and operation): how many memories, the ids it wrote or deleted (or the
/// one it named), and the scopes its answer shows. Never content.
#[derive(Clone, Debug, Default)]
pub(crate) struct Touched {
    count: u64,
    ids: Vec<String>,
    scopes: Vec<String>,
}

impl Touched {
    /// A read that returned `n` memories.
    pub(crate) fn read(n: usize) -> Touched {
        Touched {
            count: n as u64,
            ..Touched::default()
        }
    }

    /// A write of these ids (the count is their number).
    pub(crate) fn wrote(ids: impl IntoIterator<Item = String>) -> Touched {
        let ids: Vec<String> = ids.into_iter().collect();
        Touched {
            count: ids.len() as u64,
            ids,
            scopes: Vec::new(),
        }
    }

    /// With the ids the call named (a read of one memory, a session).
    pub(crate) fn named(mut self, ids: impl IntoIterator<Item = String>) -> Touched {
        self.ids = ids.into_iter().collect();
        self
    }

    /// With a count other than the number of ids.
    pub(crate) fn count(mut self, n: usize) -> Touched {
        self.count = n as u64;
        self
    }

    /// With the scopes the answer shows (each once, in order).
    pub(crate) fn scopes<S: std::fmt::Display>(
        mut self,
        scopes: impl IntoIterator<Item = S>,
    ) -> Touched {
        for s in scopes {
            let s = s.to_string();
            if !self.scopes.contains(&s) {
                self.scopes.push(s);
            }
        }
        self
    }
}

/// The scopes or view entries a request named, as the audit trail records
/// them: only text that parses as a scope or view entry (anything else is
/// `<invalid>`, so a malformed field cannot carry content into the log).
pub(crate) fn asked<S: AsRef<str>>(entries: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // A view holds at most `View::MAX_ENTRIES`: a longer one is refused,
    // and its record need not name more.
    for e in entries.into_iter().take(View::MAX_ENTRIES) {
        let e = e.as_ref();
        let e = if ViewEntry::parse(e).is_ok() {
            e
        } else {
            "<invalid>"
        };
        if !out.iter().any(|o| o == e) {
            out.push(e.to_string());
        }
    }
    out
}

fn confirm(yes: bool) -> Confirm {
    if yes { Confirm::Yes } else { Confirm::No }
}

fn parse_filter(f: Option<&Value>) -> Result<Filter> {
    match f {
        Some(v) => Ok(Filter::parse(v)?),
        None => Ok(Filter::all()),
    }
}

fn parse<T: std::str::FromStr<Err = strata::Error>>(v: Option<&str>) -> Result<Option<T>> {
    Ok(v.map(str::parse).transpose()?)
}

impl Ctx<'_> {
    /// Who the caller is in the audit trail: the token's name, or
    /// `anonymous` on a server without authentication (the MCP server on
    /// stdio runs as `local:<user>`, a grant of its own).
    pub fn actor(&self) -> &str {
        self.grant.name.as_deref().unwrap_or("anonymous")
    }

    /// Runs one operation and, when `[audit]` is on, records it: the scopes
    /// the request `asked` for, and on success what `touched` says the
    /// answer holds (scopes it shows replace those asked for); on failure
    /// the error's code. Refusals are recorded too (`forbidden`,
    /// `not_found`, …). A call whose record cannot be written fails with a
    /// storage error: nothing is answered that the trail does not hold.
    pub(crate) fn audited<T>(
        &self,
        op: &str,
        asked: impl FnOnce() -> Vec<String>,
        run: impl FnOnce() -> Result<T>,
        touched: impl FnOnce(&T) -> Touched,
    ) -> Result<T> {
        let out = run();
        if !self.engine.audit_config().enabled {
            return out;
        }
        let ev = strata::AuditEvent::new(self.actor(), op);
        let ev = match &out {
            Ok(v) => {
                let t = touched(v);
                let scopes = if t.scopes.is_empty() {
                    asked()
                } else {
                    t.scopes
                };
                ev.scopes(scopes).ids(t.ids).count(t.count)
            }
            Err(e) => ev.scopes(asked()).outcome(e.code),
        };
        self.engine.audit_record(&ev)?;
        out
    }

    /// Records the refusal `e` of `op` (when `[audit]` is on) and returns
    /// it, for a call refused before [`Ctx::audited`] runs it.
    pub(crate) fn refused(&self, op: &str, asked: Vec<String>, e: ApiError) -> ApiError {
        match self.audited::<()>(op, || asked, || Err(e), |_| Touched::default()) {
            Err(e) => e,
            Ok(()) => unreachable!("a refusal is an error"),
        }
    }

    /// A view the grant covers entirely.
    pub fn view(&self, field: &str, entries: &[String]) -> Result<View> {
        if entries.is_empty() {
            return Err(ApiError::invalid(
                field,
                "name at least one scope the read may see (e.g. [\"project/acme\", \"global\"])",
            ));
        }
        if let Err(strata::Error::InvalidField { reason, .. }) = View::check_len(entries.len()) {
            return Err(ApiError::invalid(field, reason));
        }
        let parsed = entries
            .iter()
            .map(|e| ViewEntry::parse(e).map_err(|err| ApiError::invalid(field, err)))
            .collect::<Result<Vec<_>>>()?;
        let view = View::new(parsed);
        if let Some(e) = self.grant.first_outside(&view) {
            return Err(ApiError::outside(field, e));
        }
        Ok(view)
    }

    /// A scope the grant covers.
    pub fn scope(&self, field: &str, text: &str) -> Result<Scope> {
        let s = Scope::parse(text).map_err(|e| ApiError::invalid(field, e))?;
        if !self.grant.allows_scope(&s) {
            return Err(ApiError::outside(field, &s));
        }
        Ok(s)
    }

    pub(crate) fn need_write(&self) -> Result<()> {
        if self.grant.can_write() {
            Ok(())
        } else {
            Err(ApiError::read_only())
        }
    }

    fn limit(&self, limit: Option<usize>, default: usize) -> Result<usize> {
        let n = limit.unwrap_or(default);
        if n > self.limits.max_results {
            return Err(ApiError::invalid(
                "limit",
                format!(
                    "{n} is over the server's limit of {} (`server.limits.max_results`)",
                    self.limits.max_results
                ),
            ));
        }
        Ok(n)
    }

    /// The whole id a caller's `id` names inside the grant: itself, or the
    /// one memory whose id it starts (a prefix a person typed).
    /// An id shorter than 8 characters, or naming nothing, comes back as
    /// given (and is then not found); a prefix naming several is an error.
    pub fn resolve(&self, id: &str) -> Result<String> {
        if id.chars().count() < 8 {
            return Ok(id.to_string());
        }
        match self.engine.resolve_id(id, &self.grant.fence()) {
            Ok(full) => Ok(full),
            Err(strata::Error::NotFound(_)) => Ok(id.to_string()),
            Err(e) => Err(e.into()),
        }
    }

    /// The active memory `id`, when it exists inside the grant.
    pub fn visible(&self, id: &str) -> Result<Memory> {
        match self.engine.get(id)? {
            Some(m) if self.grant.allows_scope(&m.scope) => Ok(m),
            _ => Err(ApiError::memory_not_found(id)),
        }
    }

    /// The active or archived memory `id`, when it exists inside the grant.
    pub(crate) fn visible_anywhere(
        &self,
        id: &str,
    ) -> Result<Option<(Memory, Option<strata::ArchiveMark>)>> {
        if let Some(m) = self.engine.get(id)? {
            return Ok(self.grant.allows_scope(&m.scope).then_some((m, None)));
        }
        let Some(a) = self.engine.get_archived(id)? else {
            return Ok(None);
        };
        if !self.grant.allows_scope(&a.memory.scope) {
            return Ok(None);
        }
        let mark = strata::ArchiveMark {
            at: a.archived_at,
            reason: a.reason,
        };
        Ok(Some((a.memory, Some(mark))))
    }

    fn new_memory(&self, b: &RememberBody, field: &str) -> Result<NewMemory> {
        let at = |f: &str| {
            if field.is_empty() {
                f.to_string()
            } else {
                format!("{field}.{f}")
            }
        };
        let Some(scope) = b.scope.as_deref() else {
            return Err(ApiError::invalid(
                &at("scope"),
                "required: the scope to store the memory in (e.g. \"project/acme\")",
            ));
        };
        let scope = self.scope(&at("scope"), scope)?;
        let mut new = NewMemory::new(scope, b.content.clone());
        new.kind = parse(b.kind.as_deref())?;
        new.importance = b.importance;
        new.tags = b.tags.clone();
        new.key = b.key.clone();
        new.payload = b.payload.clone();
        new.role = parse(b.role.as_deref())?;
        new.source = parse(b.source.as_deref())?;
        if let Some(sid) = &b.session {
            self.session_allowed(&at("session"), sid)?;
        }
        new.session = b.session.clone();
        new.pinned = b.pinned;
        new.sensitive = b.sensitive;
        new.ttl = b.ttl.as_deref().map(strata::parse_ttl).transpose()?;
        Ok(new)
    }

    /// Stores one memory.
    pub fn remember(&self, b: &RememberBody) -> Result<Memory> {
        self.remember_reporting(b).map(|a| a.memory)
    }

    /// Stores one memory, naming the turns its ephemeral session let go
    /// to hold it.
    pub fn remember_reporting(&self, b: &RememberBody) -> Result<RememberAnswer> {
        self.audited(
            "remember",
            || asked(b.scope.iter()),
            || {
                self.need_write()?;
                let new = self.new_memory(b, "")?;
                let r = self.engine.remember_reporting(new, confirm(b.confirm))?;
                Ok(RememberAnswer {
                    memory: without_vector(r.memory),
                    dropped: r.dropped,
                })
            },
            |a| Touched::wrote([a.memory.id.clone()]).scopes([&a.memory.scope]),
        )
    }

    /// Stores many memories in one transaction, naming the turns
    /// ephemeral sessions let go to hold them.
    pub fn remember_batch(&self, b: &BatchBody) -> Result<BatchAnswer> {
        self.audited("remember", || asked(b.items.iter().filter_map(|i| i.scope.as_ref())), || {
        self.need_write()?;
        if b.items.len() > self.limits.max_batch {
            return Err(ApiError::too_large(
                Some("items"),
                format!(
                    "items: {} memories, over the server's limit of {} per batch (`server.limits.max_batch`)",
                    b.items.len(),
                    self.limits.max_batch
                ),
            ));
        }
        let items = b
            .items
            .iter()
            .enumerate()
            .map(|(i, m)| self.new_memory(m, &format!("items[{i}]")))
            .collect::<Result<Vec<_>>>()?;
        let (memories, dropped) = self
            .engine
            .remember_batch_reporting(items, confirm(b.confirm))?;
        Ok(BatchAnswer {
            memories: memories.into_iter().map(without_vector).collect(),
            dropped,
        })
        }, |a: &BatchAnswer| Touched::wrote(a.memories.iter().map(|m| m.id.clone())).scopes(a.memories.iter().map(|m| &m.scope)))
    }

    /// One memory (active or archived), optionally with its history, as the
    /// CLI's `get --json` prints it.
    pub fn get(&self, id: &str, history: bool) -> Result<MemoryAnswer> {
        self.audited(
            "get",
            Vec::new,
            || {
                let id = &self.resolve(id)?;
                let Some((m, archived)) = self.visible_anywhere(id)? else {
                    return Err(ApiError::memory_not_found(id));
                };
                let history = if history {
                    Some(
                        self.engine
                            .history(id)?
                            .into_iter()
                            .map(without_vector)
                            .collect(),
                    )
                } else {
                    None
                };
                Ok(MemoryAnswer {
                    memory: without_vector(m),
                    archived,
                    history,
                })
            },
            |a| {
                Touched::read(1)
                    .scopes([&a.memory.scope])
                    .named([a.memory.id.clone()])
            },
        )
    }

    /// Changes a memory (compare-and-swap on its version).
    pub fn update(&self, id: &str, b: &PatchBody) -> Result<Memory> {
        self.audited(
            "update",
            Vec::new,
            || {
                self.need_write()?;
                let id = &self.resolve(id)?;
                self.visible(id)?;
                let patch = Patch {
                    content: b.content.clone(),
                    payload: b.payload.clone(),
                    tags: b.tags.clone(),
                    importance: b.importance,
                    kind: parse(b.kind.as_deref())?,
                    key: b.key.clone(),
                    pinned: b.pinned,
                    sensitive: b.sensitive,
                    expires_at: match &b.expires_at {
                        None => None,
                        Some(None) => Some(None),
                        Some(Some(t)) => Some(Some(strata::parse_time("expires_at", t)?)),
                    },
                };
                Ok(without_vector(self.engine.update(
                    id,
                    patch,
                    b.expected_version,
                )?))
            },
            |m| Touched::wrote([m.id.clone()]).scopes([&m.scope]),
        )
    }

    /// Deletes one memory everywhere.
    pub fn delete(&self, id: &str, yes: bool) -> Result<ForgetReport> {
        self.audited(
            "forget",
            Vec::new,
            || {
                self.need_write()?;
                let id = &self.resolve(id)?;
                if self.visible_anywhere(id)?.is_none() {
                    return Err(ApiError::memory_not_found(id));
                }
                let opts = ForgetOptions {
                    confirm: confirm(yes),
                    force: true,
                    dry_run: false,
                };
                Ok(self.engine.forget(&Forget::Id(id.into()), opts)?)
            },
            |r| Touched::wrote(r.ids.iter().cloned()),
        )
    }

    /// Ranked memories for a query within a view.
    pub fn recall(&self, b: &RecallBody) -> Result<Vec<Recalled>> {
        self.audited(
            "recall",
            || asked(b.view.iter()),
            || {
                let view = self.view("view", &b.view)?;
                let mut req = Recall::new(b.query.clone(), view);
                req.filter = parse_filter(b.filter.as_ref())?;
                req.strategy = parse(b.strategy.as_deref())?;
                req.limit = self.limit(b.limit, 10)?;
                req.explain = b.explain;
                req.touch = b.touch.unwrap_or(true);
                req.include_archived = b.archived;
                req.min_relevance = b.min_relevance;
                req.as_of = b
                    .as_of
                    .as_deref()
                    .map(|t| strata::parse_time("as_of", t))
                    .transpose()?;
                let mut hits = self.engine.recall(&req)?;
                // The view lies inside the grant, so this keeps everything; it is
                // the last line of defence should a view ever see more.
                hits.retain(|h| self.grant.allows_scope(&h.memory.scope));
                Ok(hits)
            },
            |hits| Touched::read(hits.len()),
        )
    }

    /// Memories of a view, filtered and ordered (or the archive's).
    pub fn list(&self, b: &ListBody) -> Result<ListAnswer> {
        self.audited(
            "list",
            || asked(b.view.iter()),
            || {
                let view = self.view("view", &b.view)?;
                let filter = parse_filter(b.filter.as_ref())?;
                let limit = self.limit(b.limit, 50)?;
                let answer = |memory: Memory, archived| MemoryAnswer {
                    memory: without_vector(memory),
                    archived,
                    history: None,
                };
                if b.archived {
                    let mut rows = self.engine.list_archived(&view, &filter, limit)?;
                    rows.retain(|a| self.grant.allows_scope(&a.memory.scope));
                    let memories = rows
                        .into_iter()
                        .map(|a| {
                            let mark = strata::ArchiveMark {
                                at: a.archived_at,
                                reason: a.reason,
                            };
                            answer(a.memory, Some(mark))
                        })
                        .collect();
                    return Ok(ListAnswer { memories });
                }
                let mut req = List::new(view);
                req.filter = filter;
                req.order = parse(b.order.as_deref())?.unwrap_or_default();
                req.limit = limit;
                req.offset = b.offset.unwrap_or(0);
                let mut rows = self.engine.list(&req)?;
                rows.retain(|m| self.grant.allows_scope(&m.scope));
                let memories = rows.into_iter().map(|m| answer(m, None)).collect();
                Ok(ListAnswer { memories })
            },
            |a| Touched::read(a.memories.len()),
        )
    }

    /// Whether `view` holds no active memory the grant may see (a recall
    /// that found nothing says so rather than "nothing relevant"). A view
    /// that does not parse is an error, as for the read itself.
    pub fn view_is_empty(&self, view: &[String]) -> Result<bool> {
        let mut req = List::new(self.view("view", view)?);
        req.limit = 64;
        let rows = self.engine.list(&req)?;
        Ok(!rows.iter().any(|m| self.grant.allows_scope(&m.scope)))
    }

    /// Deletes a selection everywhere. A token limited to scopes deletes
    /// only inside them: ids outside are skipped as if they did not exist,
    /// and a session's memories outside are kept (the session stays open).
    pub fn forget(&self, b: &ForgetBody) -> Result<ForgetReport> {
        self.audited(
            if b.dry_run {
                "forget_dry_run"
            } else {
                "forget"
            },
            || asked(b.view.iter().chain(b.scope.iter())),
            || {
                self.need_write()?;
                let modes = [
                    b.ids.is_some(),
                    b.filter.is_some(),
                    b.session.is_some(),
                    b.scope.is_some(),
                    b.before.is_some(),
                ];
                if modes.iter().filter(|m| **m).count() != 1 {
                    return Err(ApiError::invalid(
                        "ids",
                        "name exactly one of ids, filter (with view), session, scope, before",
                    ));
                }
                let opts = ForgetOptions {
                    confirm: confirm(b.confirm),
                    force: b.force,
                    dry_run: b.dry_run,
                };
                let what = if let Some(ids) = &b.ids {
                    let mut mine = Vec::new();
                    for id in ids {
                        let id = self.resolve(id)?;
                        if self.visible_anywhere(&id)?.is_some() {
                            mine.push(id);
                        }
                    }
                    Forget::Ids(mine)
                } else if let Some(f) = &b.filter {
                    Forget::Filter {
                        view: self.view("view", &b.view)?,
                        filter: parse_filter(Some(f))?,
                    }
                } else if let Some(s) = &b.scope {
                    Forget::Scope(self.scope("scope", s)?)
                } else if let Some(t) = &b.before {
                    let before = strata::parse_time("before", t)?;
                    let view = if b.view.is_empty() && self.grant.is_unrestricted() {
                        None
                    } else {
                        Some(self.view("view", &b.view)?)
                    };
                    Forget::Before { before, view }
                } else {
                    let session = b.session.clone().unwrap_or_default();
                    if self.grant.is_unrestricted() {
                        Forget::Session(session)
                    } else {
                        let all = self.engine.forget(
                            &Forget::Session(session.clone()),
                            ForgetOptions {
                                dry_run: true,
                                ..opts
                            },
                        )?;
                        // A session outside the grant answers as one that does not
                        // exist, not as an empty one.
                        self.visible_session(&session)?;
                        let mut mine = Vec::new();
                        for id in all.ids {
                            if self.visible_anywhere(&id)?.is_some() {
                                mine.push(id);
                            }
                        }
                        Forget::Ids(mine)
                    }
                };
                Ok(self.engine.forget(&what, opts)?)
            },
            |r| {
                if r.dry_run {
                    Touched::read(r.ids.len())
                } else {
                    Touched::wrote(r.ids.iter().cloned())
                }
            },
        )
    }

    /// Copies a memory into another scope.
    pub fn promote(&self, b: &PromoteBody) -> Result<Memory> {
        self.audited(
            "promote",
            || asked([&b.to]),
            || {
                self.need_write()?;
                let id = self.resolve(&b.id)?;
                self.visible(&id)?;
                let to = self.scope("to", &b.to)?;
                Ok(without_vector(self.engine.promote(
                    &id,
                    &to,
                    confirm(b.confirm),
                )?))
            },
            |m| Touched::wrote([m.id.clone()]).scopes([&m.scope]),
        )
    }

    /// Moves archived memories back.
    pub fn restore(&self, ids: &[String]) -> Result<usize> {
        self.audited(
            "restore",
            Vec::new,
            || {
                self.need_write()?;
                for id in ids {
                    match self.engine.get_archived(id)? {
                        Some(a) if self.grant.allows_scope(&a.memory.scope) => {}
                        _ => return Err(ApiError::memory_not_found(id)),
                    }
                }
                Ok(self.engine.restore(ids)?)
            },
            |n| Touched::wrote(ids.iter().cloned()).count(*n),
        )
    }

    /// Completes a task.
    pub fn complete_task(&self, task: &str, b: &CompleteTaskBody) -> Result<TaskReport> {
        self.audited(
            "complete_task",
            || asked([format!("task/{task}"), format!("project/{}", b.project)].iter()),
            || {
                self.need_write()?;
                let t = Scope::task(task).map_err(|e| ApiError::invalid("task", e))?;
                if !self.grant.allows_scope(&t) {
                    return Err(ApiError::outside("task", &t));
                }
                let p = Scope::project(&b.project).map_err(|e| ApiError::invalid("project", e))?;
                if !self.grant.allows_scope(&p) {
                    return Err(ApiError::outside("project", &p));
                }
                let promotion = Promotion {
                    ids: b.promote.clone(),
                    min_importance: b.min_importance,
                };
                Ok(self.engine.complete_task(task, &b.project, &promotion)?)
            },
            |r| {
                Touched::wrote(r.promoted.iter().map(|(_, new)| new.clone()))
                    .count(r.promoted.len() + r.archived)
            },
        )
    }

    /// The context request a body describes.
    pub fn context_request(&self, b: &ContextBody) -> Result<ContextRequest> {
        let mut req = ContextRequest::new(b.profile.clone().unwrap_or_else(|| "global".into()));
        req.vars = b.vars.clone();
        for (name, v) in [
            ("task", &b.task),
            ("project", &b.project),
            ("sprint", &b.sprint),
            ("stage", &b.stage),
            ("agent", &b.agent),
            ("session", &b.session),
        ] {
            if let Some(v) = v {
                req.vars.insert(name.into(), v.clone());
            }
        }
        req.query = b.query.clone();
        req.render = parse(b.render.as_deref())?;
        req.max_tokens = b.max_tokens;
        if b.log {
            // Logging stores the package: a write.
            self.need_write()?;
        }
        req.log = b.log;
        Ok(req)
    }

    /// A context package, with its rendering as `text`. Every source the
    /// profile reads, filled from the request, must lie inside the grant.
    pub fn context(&self, b: &ContextBody) -> Result<ContextAnswer> {
        self.audited(
            "context",
            Vec::new,
            || {
                let req = self.context_request(b)?;
                if let Some(profile) = self.engine.resolve_profile(&req.profile)? {
                    for src in &profile.sources {
                        if let Some(entry) = src.view_entry(&req.vars)?
                            && !self.grant.allows_entry(&entry)
                        {
                            return Err(ApiError::outside(
                                "profile",
                                format!(
                                    "{} (source `{}` of profile `{}`)",
                                    entry, src.scope, profile.id
                                ),
                            ));
                        }
                    }
                }
                let pkg: ContextPackage = self.engine.context(&req)?;
                if let Some(i) = pkg
                    .items
                    .iter()
                    .find(|i| !self.grant.allows_scope(&i.scope))
                {
                    return Err(ApiError::outside("profile", &i.scope));
                }
                let render = req.render.unwrap_or(pkg.render);
                let text = pkg.to_text(render);
                Ok(ContextAnswer { package: pkg, text })
            },
            |a| {
                Touched::read(a.package.items.len())
                    .scopes(a.package.items.iter().map(|i| &i.scope))
            },
        )
    }

    /// Creates a session.
    pub fn create_session(&self, b: &SessionBody) -> Result<Session> {
        self.audited(
            "session_create",
            || asked(b.scope.iter()),
            || {
                self.need_write()?;
                if let Some(id) = &b.id
                    && !self.owns_session_name("id", id)?
                {
                    return Err(ApiError::outside("id", format!("session/{id}")));
                }
                let scope = match (&b.scope, &b.id) {
                    (Some(s), _) => Some(self.scope("scope", s)?),
                    (None, Some(id)) => Some(self.scope("id", &format!("session/{id}"))?),
                    (None, None) if self.grant.is_unrestricted() => None,
                    (None, None) => {
                        return Err(ApiError::invalid(
                            "scope",
                            "a token limited to scopes must name the session's scope or id",
                        ));
                    }
                };
                if b.ephemeral {
                    return Ok(self.engine.open_ephemeral_session_bounded(
                        b.id.as_deref(),
                        scope,
                        b.max_bytes,
                    )?);
                }
                Ok(self
                    .engine
                    .create_session(b.id.as_deref(), scope, b.max_bytes)?)
            },
            |s| Touched::default().scopes([&s.scope]).named([s.id.clone()]),
        )
    }

    /// A write may attach to a session whose scope is inside the grant, or
    /// create one whose name it owns (below); the engine creates it in the
    /// memory's scope. Both refusals read the same, so a token cannot tell
    /// a session outside from a missing one.
    pub(crate) fn session_allowed(&self, field: &str, id: &str) -> Result<()> {
        if self.grant.is_unrestricted() {
            return Ok(());
        }
        // The engine's lookup, not the store's: an ephemeral session lives
        // only in the hot tier, and its scope decides as a stored one's.
        let ok = match self.engine.get_session(id)? {
            Some(s) => self.grant.allows_scope(&s.scope),
            None => self.owns_session_name(field, id)?,
        };
        if ok {
            Ok(())
        } else {
            Err(ApiError::outside(field, id))
        }
    }

    /// Session ids are one namespace per store. The name `x` belongs to
    /// whoever holds `session/x`: a token limited to scopes creates a
    /// session under a name only when it holds that scope, else it takes a
    /// generated id. So no token can take a name before its owner does, or
    /// learn from a refusal whether the name is taken.
    fn owns_session_name(&self, field: &str, id: &str) -> Result<bool> {
        let name =
            Scope::parse(&format!("session/{id}")).map_err(|e| ApiError::invalid(field, e))?;
        Ok(self.grant.allows_scope(&name))
    }

    fn visible_session(&self, id: &str) -> Result<Session> {
        match self.engine.get_session(id)? {
            Some(s) if self.grant.allows_scope(&s.scope) => Ok(s),
            _ => Err(ApiError::from(strata::Error::SessionNotFound(id.into()))),
        }
    }

    /// Sessions whose scope is inside the grant.
    pub fn sessions(&self) -> Result<Vec<Session>> {
        let mut all = self.engine.list_sessions()?;
        all.retain(|s| self.grant.allows_scope(&s.scope));
        Ok(all)
    }

    /// A session's manifest.
    pub fn session(&self, id: &str) -> Result<strata::Manifest> {
        Ok(self
            .engine
            .session_manifest_within(id, &self.grant.fence())?)
    }

    /// The most turns one `last_turns` answers.
    pub const MAX_TURNS: usize = 10_000;

    /// A session's last `limit` memories, oldest first (the hot tier's
    /// ring when current). A session outside the grant is not found.
    pub fn last_turns(&self, id: &str, limit: usize) -> Result<Vec<strata::Memory>> {
        if limit == 0 || limit > Self::MAX_TURNS {
            return Err(ApiError::invalid(
                "limit",
                format!("{limit} must be between 1 and {}", Self::MAX_TURNS),
            ));
        }
        let fence = self.grant.fence();
        match self.engine.get_session(id)? {
            Some(s) if fence.contains(&s.scope) => {}
            _ => return Err(strata::Error::SessionNotFound(id.into()).into()),
        }
        let mut turns = self.engine.last_turns(id, limit)?;
        turns.retain(|m| fence.contains(&m.scope));
        Ok(turns)
    }

    /// Compacts a session now (a session outside the grant is not found).
    pub fn compact_session(&self, id: &str) -> Result<strata::Compaction> {
        self.audited(
            "session_compact",
            Vec::new,
            || {
                self.need_write()?;
                match self.engine.get_session(id)? {
                    Some(s) if self.grant.fence().contains(&s.scope) => {}
                    _ => return Err(strata::Error::SessionNotFound(id.into()).into()),
                }
                Ok(self.engine.compact_session(id)?)
            },
            |c| Touched::default().named([c.session.clone()]),
        )
    }

    /// Archives a session: only the memories inside the grant move.
    pub fn archive_session(&self, id: &str) -> Result<Session> {
        self.audited(
            "session_archive",
            Vec::new,
            || {
                self.need_write()?;
                Ok(self
                    .engine
                    .archive_session_within(id, &self.grant.fence())?)
            },
            |s| Touched::default().scopes([&s.scope]).named([s.id.clone()]),
        )
    }

    /// Scopes in use inside the grant, with counts.
    pub fn scopes(&self) -> Result<Vec<strata::ScopeCount>> {
        let mut all = self.engine.list_scopes()?;
        all.retain(|s| self.grant.allows_scope(&s.scope));
        Ok(all)
    }

    /// Counts inside the grant; store-wide figures only for a caller that
    /// sees every scope.
    pub fn stats(&self) -> Result<Stats> {
        let scopes = self.scopes()?;
        Ok(Stats {
            scopes: scopes.len() as u64,
            memories: scopes.iter().map(|s| s.memories).sum(),
            archived: scopes.iter().map(|s| s.archived).sum(),
            store: if self.grant.is_unrestricted() {
                Some(self.engine.stats()?)
            } else {
                None
            },
            vectors: if self.grant.is_unrestricted() {
                Some(self.engine.embed_status()?)
            } else {
                None
            },
        })
    }

    /// The export a query asks for; a token limited to scopes must name a
    /// view inside them.
    /// A full backup of what it selects unless `leave_out` says otherwise.
    pub fn export_request(
        &self,
        view: &[String],
        session: Option<String>,
        leave_out: ExportParts,
    ) -> Result<strata::Export> {
        let named = session.clone();
        let out: Result<strata::Export> = (|| {
            let view = if view.is_empty() && self.grant.is_unrestricted() {
                None
            } else {
                Some(self.view("view", view)?)
            };
            Ok(strata::Export {
                view,
                session,
                include_sensitive: leave_out.sensitive,
                include_archived: leave_out.archived,
                include_history: leave_out.history,
            })
        })();
        if let Err(e) = &out
            && self.engine.audit_config().enabled
        {
            let ev = self.export_event(view, named.as_deref());
            self.engine.audit_record(&ev.outcome(e.code))?;
        }
        out
    }

    /// The audit record of an export of `view` (or `session`), before its
    /// count is known: the stream records it when it ends
    /// (`http::export_stream`).
    pub fn export_event(&self, view: &[String], session: Option<&str>) -> strata::AuditEvent {
        let mut scopes = asked(view.iter());
        if let Some(s) = session {
            scopes.push(format!("session:{}", asked([s])[0]));
        }
        strata::AuditEvent::new(self.actor(), "export").scopes(scopes)
    }

    /// Imports JSONL; every line's scope (and its history's) must lie inside
    /// the grant, else nothing is imported.
    pub fn import(
        &self,
        body: &[u8],
        on_conflict: strata::OnConflict,
    ) -> Result<strata::ImportCounts> {
        self.audited(
            "import",
            Vec::new,
            || {
                self.need_write()?;
                let text = std::str::from_utf8(body)
                    .map_err(|e| ApiError::invalid("body", format!("not UTF-8: {e}")))?;
                if !self.grant.is_unrestricted() {
                    for (n, line) in text.lines().enumerate() {
                        if line.trim().is_empty() {
                            continue;
                        }
                        let item = strata::parse_line(line.trim()).map_err(|reason| {
                            ApiError::from(strata::Error::InvalidImport {
                                line: n + 1,
                                reason,
                            })
                        })?;
                        let at = format!("line {}", n + 1);
                        for m in std::iter::once(&item.memory).chain(&item.history) {
                            if !self.grant.allows_scope(&m.scope) {
                                return Err(ApiError::outside(&at, &m.scope));
                            }
                        }
                        if let Some(s) = &item.memory.session {
                            self.session_allowed(&at, s)?;
                        }
                    }
                }
                Ok(self.engine.import_within(
                    &mut text.as_bytes(),
                    on_conflict,
                    &self.grant.fence(),
                    &mut |_| {},
                )?)
            },
            |c| Touched::read(c.imported),
        )
    }
}

/// Which parts an export carries (`GET /v1/export?sensitive=false&…`);
/// all by default.
#[derive(Clone, Copy, Debug)]
pub struct ExportParts {
    /// Sensitive memories.
    pub sensitive: bool,
    /// Archived memories.
    pub archived: bool,
    /// Earlier versions.
    pub history: bool,
}

impl Default for ExportParts {
    fn default() -> ExportParts {
        ExportParts {
            sensitive: true,
            archived: true,
            history: true,
        }
    }
}

/// `GET /v1/stats`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Stats {
    /// Scopes with memories inside the caller's grant.
    pub scopes: u64,
    /// Active memories inside the grant.
    pub memories: u64,
    /// Archived memories inside the grant.
    pub archived: u64,
    /// Store-wide figures (tiers, kinds, file size), for a caller that sees
    /// every scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub store: Option<strata::StoreStats>,
    /// Which embedder serves relevance, with vector counts (store-wide, so
    /// for a caller that sees every scope).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub vectors: Option<strata::EmbedStatus>,
}

/// A memory as answers show it: the stored vector is the engine's, for
/// ranking, and would be most of the answer (384 numbers for the default
/// model); exports still carry it.
pub(crate) fn without_vector(mut m: Memory) -> Memory {
    m.embedding = None;
    m
}
