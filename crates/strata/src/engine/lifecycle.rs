//! Lifetime tiers: promotion between scopes, task completion, the
//! project bound (eviction to the archive), restore and upkeep.

use super::*;

/// When and why a memory was archived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArchiveMark {
    /// When.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: Timestamp,
    /// Why.
    pub reason: String,
}

/// Which task memories survive [`Engine::complete_task`].
#[derive(Clone, Debug, Default)]
pub struct Promotion {
    /// These ids (each must be in the task).
    pub ids: Vec<String>,
    /// And every memory at or above this importance.
    pub min_importance: Option<f64>,
}

/// What [`Engine::complete_task`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskReport {
    /// The task scope that was cleared.
    pub task: String,
    /// The project scope promoted into.
    pub project: String,
    /// (old id, new id) of each promoted memory.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Vec<String>>))]
    pub promoted: Vec<(String, String)>,
    /// Task memories moved to the archive (reason `task_completed`).
    pub archived: usize,
}

/// What [`Engine::upkeep`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpkeepReport {
    /// Expired memories moved to the archive.
    pub expired: usize,
    /// Memories evicted to the archive over `max_items`.
    pub evicted: usize,
    /// Active memories idle for `cold.demote_after_days`, or whose decayed
    /// importance fell under `cold.demote_below_importance`, archived
    /// (reason `demoted`) on their way to the cold tier.
    #[serde(default)]
    pub demoted: usize,
    /// Of `demoted`, those demoted for their decayed importance.
    #[serde(default)]
    pub demoted_by_importance: usize,
    /// Memories demoted to cold that recalls returned
    /// `cold.promote_after_reads` times, back in the store as active ones.
    #[serde(default)]
    pub promoted_from_cold: usize,
    /// Archived memories moved out of the store into cold segments.
    #[serde(default)]
    pub moved_to_cold: usize,
    /// Small cold segments merged into larger ones (how many went).
    #[serde(default)]
    pub segments_merged: usize,
    /// Sessions at `compaction.at` of their bound that were compacted.
    #[serde(default)]
    pub sessions_compacted: usize,
    /// Their oldest memories summarised and archived (reason `compacted`).
    #[serde(default)]
    pub compacted: usize,
    /// Another process was running upkeep on this store: this one did
    /// nothing.
    #[serde(default)]
    pub skipped: bool,
    /// Audit entries removed by `[audit]` retention.
    #[serde(default)]
    pub audit_pruned: u64,
    /// What the detectors learned (`None` when `[learning]` is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<crate::learn::LearnReport>,
}

/// How long upkeep holds its lease: longer than a run takes, short enough
/// that a process killed mid-run does not stop upkeep for long.
const UPKEEP_LEASE: std::time::Duration = std::time::Duration::from_secs(600);

/// How long one project's eviction holds its lease.
const EVICT_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

impl Engine {
    /// Moves the lowest-value memories of a project to the archive when it
    /// holds more than `max_items`: lowest effective importance first, then
    /// oldest, never pinned; `evict_fraction` of the bound (at least the
    /// excess) at a time, so eviction does not run on every write.
    /// Whether one more memory in project `root` would put it over
    /// `max_items` (an eviction would follow the write).
    pub(super) fn at_bound(&self, root: &Scope) -> Result<bool> {
        if self.cfg.max_items == 0 {
            return Ok(false);
        }
        let q = Query::view(View::subtree(root.clone()), self.now()).include_expired(true);
        Ok(self.store.count(&q)? >= self.cfg.max_items)
    }

    pub(super) fn enforce_bound(&self, root: &Scope) -> Result<usize> {
        if self.cfg.max_items == 0 {
            return Ok(0);
        }
        let now = self.now();
        let view = View::subtree(root.clone());
        let count_all = || {
            self.store
                .count(&Query::view(view.clone(), now).include_expired(true))
        };
        if count_all()? <= self.cfg.max_items {
            return Ok(0);
        }
        // Two processes writing to one project must not both evict a batch:
        // eviction runs under the project's lease, and counts again there
        // (the last holder may have just made room).
        let lease = format!("evict:{root}");
        let evicted = self.under_lease(&lease, EVICT_LEASE, || match count_all()? {
            n if n <= self.cfg.max_items => Ok(0),
            n => self.evict(view.clone(), n - self.cfg.max_items, now),
        })?;
        Ok(evicted.unwrap_or(0))
    }

    /// Archives the `excess` lowest-value unpinned memories of `view` (at
    /// least `evict_fraction` of the bound).
    fn evict(&self, view: View, excess: u64, now: Timestamp) -> Result<usize> {
        let batch = ((self.cfg.max_items as f64) * self.cfg.evict_fraction).ceil() as u64;
        let n = excess.max(batch) as usize;
        let unpinned = Filter::parse(&json!({"pinned": false}))?;
        let mut cands: Vec<(Signals, f64)> = self
            .store
            .query_signals(
                &Query::view(view, now)
                    .filter(unpinned)
                    .include_expired(true),
            )?
            .into_iter()
            .map(|m| {
                let e = rank::score(
                    &self.cfg.ranking,
                    Strategy::Importance,
                    &m,
                    &Relevance::default(),
                    false,
                    now,
                )
                .effective_importance;
                (m, e)
            })
            .collect();
        cands.sort_by(|a, b| {
            a.1.partial_cmp(&b.1)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.0.created_at.cmp(&b.0.created_at))
                .then_with(|| a.0.id.cmp(&b.0.id))
        });
        let ids: Vec<String> = cands.into_iter().take(n).map(|(m, _)| m.id).collect();
        self.store.archive(&ids, "evicted", now)
    }

    /// Moves archived memories back into active memory; a cold memory
    /// comes back from its segment (id, version and history kept).
    pub fn restore(&self, ids: &[String]) -> Result<usize> {
        self.unfreeze(ids)?;
        self.store.restore(ids)
    }

    /// Copies a memory into another scope (new id, provenance kept); the
    /// original stays. A preference copied into global needs `Confirm::Yes`.
    pub fn promote(&self, id: &str, to: &Scope, confirm: Confirm) -> Result<Memory> {
        let m = self
            .store
            .get(id)?
            .ok_or_else(|| Error::NotFound(id.into()))?;
        let new = self.copy_of(&m, to);
        self.check_confirm(&new, confirm)?;
        let now = self.now();
        let stored = self.store.put(&self.build(new, now)?)?.into_memory();
        if let Some(root) = stored.scope.project_root() {
            self.enforce_bound(&root)?;
        }
        self.wake_embedder();
        Ok(stored)
    }

    pub(super) fn copy_of(&self, m: &Memory, to: &Scope) -> NewMemory {
        NewMemory {
            scope: Some(to.clone()),
            content: m.content.clone(),
            kind: Some(m.kind.clone()),
            role: m.role,
            payload: m.payload.clone(),
            key: m.key.clone(),
            tags: m.tags.clone(),
            importance: Some(m.importance),
            source: Some(m.source),
            session: None,
            ttl: None,
            pinned: m.pinned,
            sensitive: m.sensitive,
            provenance: Some(Provenance {
                from_id: m.id.clone(),
                from_scope: m.scope.clone(),
                at: self.now(),
            }),
            created_at: None,
        }
    }

    /// Completes a task: promotes what should survive into `project/<project>`
    /// (new ids, provenance kept), then moves every memory of `task/<task>`
    /// (and below) to the archive with reason `task_completed`.
    pub fn complete_task(
        &self,
        task: &str,
        project: &str,
        promotion: &Promotion,
    ) -> Result<TaskReport> {
        let task_scope = Scope::task(task)?;
        let project_scope = Scope::project(project)?;
        if let Some(x) = promotion.min_importance {
            model::validate_importance(x)
                .map_err(|_| Error::field("min_importance", format!("{x} is outside 0.0–1.0")))?;
        }
        let now = self.now();
        let all = self
            .store
            .query(&Query::view(View::subtree(task_scope.clone()), now).order(Order::Oldest))?;
        for id in &promotion.ids {
            if !all.iter().any(|m| &m.id == id) {
                return Err(Error::field(
                    "promote",
                    format!("memory `{id}` is not an active memory of `{task_scope}`"),
                ));
            }
        }
        let chosen: Vec<&Memory> = all
            .iter()
            .filter(|m| {
                promotion.ids.contains(&m.id)
                    || promotion.min_importance.is_some_and(|x| m.importance >= x)
            })
            .collect();
        // A completion interrupted between its two steps is finished by
        // running it again: memories already copied are not copied twice.
        let copied: BTreeSet<String> = self
            .store
            .query(&Query::view(View::scope(project_scope.clone()), now).include_expired(true))?
            .into_iter()
            .filter_map(|m| m.provenance.map(|p| p.from_id))
            .collect();
        let chosen: Vec<&Memory> = chosen
            .into_iter()
            .filter(|m| !copied.contains(&m.id))
            .collect();
        let copies: Vec<NewMemory> = chosen
            .iter()
            .map(|m| self.copy_of(m, &project_scope))
            .collect();
        let stored = self.remember_batch(copies, Confirm::No)?;
        let promoted = chosen
            .iter()
            .map(|m| m.id.clone())
            .zip(stored.iter().map(|m| m.id.clone()))
            .collect();
        let ids: Vec<String> = all.iter().map(|m| m.id.clone()).collect();
        let archived = self.store.archive(&ids, "task_completed", now)?;
        Ok(TaskReport {
            task: task_scope.to_string(),
            project: project_scope.to_string(),
            promoted,
            archived,
        })
    }

    /// Expires TTLs, enforces project bounds across the store, runs the
    /// detectors ([`Engine::learn`]) unless `[learning]` is off, then, with
    /// the cold tier on, demotes idle memories and moves archived ones to
    /// cold segments — under
    /// the store's `upkeep` lease: while another process runs upkeep on the
    /// same store, this one does nothing and says so (`skipped`).
    pub fn upkeep(&self) -> Result<UpkeepReport> {
        Ok(self
            .under_lease("upkeep", UPKEEP_LEASE, || self.upkeep_now())?
            .unwrap_or(UpkeepReport {
                skipped: true,
                ..UpkeepReport::default()
            }))
    }

    fn upkeep_now(&self) -> Result<UpkeepReport> {
        let now = self.now();
        let f = Filter::parse(&json!({"expires_at": {"$lte": now.as_millisecond()}}))?;
        let expired: Vec<String> = self
            .store
            .query(&Query::everything(now).filter(f).include_expired(true))?
            .into_iter()
            .map(|m| m.id)
            .collect();
        let expired = self.store.archive(&expired, "expired", now)?;
        let mut evicted = 0;
        let roots: BTreeSet<Scope> = self
            .store
            .list_scopes()?
            .into_iter()
            .filter_map(|s| s.scope.project_root())
            .collect();
        for r in roots {
            evicted += self.enforce_bound(&r)?;
        }
        let learned = if self.cfg.learning.enabled {
            Some(self.learn()?)
        } else {
            None
        };
        // Compaction before the cold tier's pass, which takes what it
        // archived.
        let (sessions_compacted, compacted) = self.compact_sessions(now)?;
        // Promotion first: what comes back is read now, so the demotion
        // below leaves it.
        let promoted_from_cold = self.promote_cold(now)?;
        let (demoted, demoted_by_importance, moved_to_cold, segments_merged) = self.demote(now)?;
        let audit_pruned = self.audit_prune("upkeep")?.removed;
        Ok(UpkeepReport {
            audit_pruned,
            expired,
            evicted,
            demoted,
            demoted_by_importance,
            promoted_from_cold,
            moved_to_cold,
            segments_merged,
            sessions_compacted,
            compacted,
            skipped: false,
            learned,
        })
    }
}
