//! Forgetting: a selection deleted everywhere (row, index, archive,
//! history, vectors, cold segments).

use super::*;

/// What to forget.
#[derive(Clone, Debug)]
pub enum Forget {
    /// One memory by id (pinned or not).
    Id(String),
    /// Exactly these memories (pinned or not), e.g. the ids a dry run
    /// reported and a person confirmed; ids that no longer exist are skipped.
    Ids(Vec<String>),
    /// Everything in a view matching a filter.
    Filter {
        /// Scopes.
        view: View,
        /// Conditions.
        filter: Filter,
    },
    /// Every memory of a session; the session is then archived (no more writes).
    Session(String),
    /// A scope and everything below it.
    Scope(Scope),
    /// Everything created before a time, in a view (every scope when `None`).
    Before {
        /// The cut-off (exclusive).
        before: Timestamp,
        /// Scopes, or all.
        view: Option<View>,
    },
}

/// Options of [`Engine::forget`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ForgetOptions {
    /// Needed when the selection reaches global memory.
    pub confirm: Confirm,
    /// Delete pinned memories too.
    pub force: bool,
    /// Report what would be deleted without deleting.
    pub dry_run: bool,
}

/// What [`Engine::forget`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForgetReport {
    /// Memories deleted (active and archived).
    pub deleted: usize,
    /// Pinned memories that matched and were kept.
    pub pinned_kept: usize,
    /// Ids deleted (or that would be, under dry run).
    pub ids: Vec<String>,
    /// Whether this was a dry run.
    pub dry_run: bool,
}

impl Engine {
    /// Deletes memories everywhere (row, text index, archive, history).
    /// Pinned memories are kept by bulk selections unless `force`; anything
    /// reaching global memory needs `Confirm::Yes` unless it names one id.
    pub fn forget(&self, what: &Forget, opts: ForgetOptions) -> Result<ForgetReport> {
        let now = self.now();
        let (query, session): (Query, Option<&str>) = match what {
            Forget::Id(id) => {
                model::validate_id(id)?;
                if self.find_any(id)?.is_none() {
                    return Err(Error::NotFound(id.clone()));
                }
                return self.forget_named(vec![id.clone()], opts);
            }
            Forget::Ids(ids) => {
                for id in ids {
                    model::validate_id(id)?;
                }
                let mut global = false;
                for id in ids {
                    global |= self
                        .find_any(id)?
                        .is_some_and(|m| m.scope.tier() == Tier::Global);
                }
                if global && opts.confirm != Confirm::Yes && !opts.dry_run {
                    return Err(Error::NeedsConfirmation(
                        "forgetting global memories".into(),
                    ));
                }
                return self.forget_named(ids.clone(), opts);
            }
            Forget::Filter { view, filter } => {
                if view.is_empty() {
                    return Err(Error::field("view", "no scope named"));
                }
                (Query::view(view.clone(), now).filter(filter.clone()), None)
            }
            Forget::Session(s) => {
                model::validate_session_id(s)?;
                if !self.is_ephemeral(s) && self.store.get_session(s)?.is_none() {
                    return Err(Error::SessionNotFound(s.clone()));
                }
                (
                    Query::everything(now).filter(Filter::parse(&json!({"session": s}))?),
                    Some(s.as_str()),
                )
            }
            Forget::Scope(scope) => (Query::view(View::subtree(scope.clone()), now), None),
            Forget::Before { before, view } => {
                let f = Filter::parse(&json!({"created_at": {"$lt": before.as_millisecond()}}))?;
                match view {
                    Some(v) => (Query::view(v.clone(), now).filter(f), None),
                    None => (Query::everything(now).filter(f), None),
                }
            }
        };
        let query = query.include_expired(true);
        let reaches_global = match &query.view {
            Some(v) => v.touches_global(),
            None => true,
        };
        let mut selected: Vec<Memory> = self.store.query(&query)?;
        selected.extend(self.hot_candidates(&query, &[]).into_iter().map(|(m, _)| m));
        selected.extend(
            self.archived_everywhere(&query)?
                .into_iter()
                .map(|a| a.memory),
        );
        let (pinned, rest): (Vec<Memory>, Vec<Memory>) =
            selected.into_iter().partition(|m| m.pinned);
        let mut doomed = rest;
        let pinned_kept = if opts.force {
            doomed.extend(pinned);
            0
        } else {
            pinned.len()
        };
        // A dry run only reports, so it needs no confirmation.
        if reaches_global && opts.confirm != Confirm::Yes && !opts.dry_run {
            let global = doomed
                .iter()
                .filter(|m| m.scope.tier() == Tier::Global)
                .count();
            if global > 0 {
                return Err(Error::NeedsConfirmation(format!(
                    "forgetting {global} global memories"
                )));
            }
        }
        let mut ids: Vec<String> = doomed.into_iter().map(|m| m.id).collect();
        ids.sort();
        ids.dedup();
        let deleted = if opts.dry_run {
            ids.len()
        } else {
            self.forget_everywhere(&ids)?
        };
        if let (Some(s), false) = (session, opts.dry_run)
            && pinned_kept == 0
            && self.hot.end_ephemeral(s, now).is_none()
        {
            self.store.archive_session(s, now).ok();
        }
        Ok(ForgetReport {
            deleted,
            pinned_kept,
            ids,
            dry_run: opts.dry_run,
        })
    }

    /// An active or archived memory by id.
    pub(super) fn find_any(&self, id: &str) -> Result<Option<Memory>> {
        if let Some(m) = self.hot.get(id) {
            return Ok(Some(m));
        }
        match self.store.get(id)? {
            Some(m) => Ok(Some(m)),
            None => Ok(self.get_archived(id)?.map(|a| a.memory)),
        }
    }

    /// Deletes memories named by id (pinned or not), or only reports them.
    pub(super) fn forget_named(
        &self,
        ids: Vec<String>,
        opts: ForgetOptions,
    ) -> Result<ForgetReport> {
        let deleted = if opts.dry_run {
            ids.len()
        } else {
            self.forget_everywhere(&ids)?
        };
        Ok(ForgetReport {
            deleted,
            pinned_kept: 0,
            ids,
            dry_run: opts.dry_run,
        })
    }
}
