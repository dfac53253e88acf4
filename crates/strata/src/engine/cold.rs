//! Moves between the store (warm) and the cold tier's segment files, each
//! one pairing a file step with one store transaction so that a crash
//! anywhere leaves every memory in exactly one tier after recovery:
//!
//! - **demote**: write the segment as `.pending` (fsynced, renamed, the
//!   directory fsynced) → delete the rows from the store (one
//!   transaction) → rename the segment `.cold`.
//! - **restore**: rename the segment `.pending` → put the memories back
//!   into the store's archive (one transaction) and restore them there →
//!   rewrite the segment without them → rename it `.cold`.
//! - **forget**: rewrite each segment without the memories (the old file
//!   replaced by rename) → delete them from the store.
//! - **recover**: a `.pending` segment's memories that the store holds are
//!   dropped from it (warm wins); then it is renamed `.cold`.
//! - **promote**: a demoted memory that recalls returned often enough
//!   (`reads.log`, `cold/reads.rs`) is restored as above, its reads then
//!   recorded in the store.
//!
//! Every step that changes segments runs under the store's `cold` lease,
//! so processes sharing the store never interleave them.

use super::*;
use crate::cold::{ColdRecord, SegState};
use crate::store::{Access, ImportItem, ImportRules};

/// How long one cold move holds the `cold` lease.
const COLD_LEASE: std::time::Duration = std::time::Duration::from_secs(120);

/// Most memories in one segment.
const SEGMENT_RECORDS: usize = 10_000;

/// How long a forget or restore waits for another process's cold move.
const COLD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Engine {
    /// Whether the cold tier is on.
    pub fn has_cold(&self) -> bool {
        self.cold.is_some()
    }

    /// Runs `f` under the `cold` lease, waiting up to [`COLD_WAIT`] for
    /// another process to end its move.
    fn with_cold_lease<T>(&self, f: impl Fn() -> Result<T>) -> Result<T> {
        let start = std::time::Instant::now();
        loop {
            if let Some(out) = self.under_lease("cold", COLD_LEASE, &f)? {
                return Ok(out);
            }
            if start.elapsed() > COLD_WAIT {
                return Err(Error::Unavailable {
                    backend: "cold tier",
                    source: "another process is moving memories to or from the cold tier".into(),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Whether the store holds `id` (active or archived).
    fn warm_has(&self, id: &str) -> Result<bool> {
        Ok(self
            .store
            .ids_with_prefix(id, 1)?
            .first()
            .is_some_and(|(f, _)| f == id))
    }

    /// Finishes moves a crashed process left half done (see the module
    /// header); returns how many pending segments it settled. Does nothing
    /// while another process holds the `cold` lease.
    pub(super) fn recover_cold(&self) -> Result<usize> {
        let Some(c) = &self.cold else {
            return Ok(0);
        };
        Ok(self
            .under_lease("cold", COLD_LEASE, || self.recover_cold_held(c))?
            .unwrap_or(0))
    }

    fn recover_cold_held(&self, c: &crate::cold::ColdDir) -> Result<usize> {
        let pending = c.leftovers()?;
        for p in &pending {
            let mut warm = BTreeSet::new();
            for e in &c.index(p)?.entries {
                if self.warm_has(&e.id)? {
                    warm.insert(e.id.clone());
                }
            }
            c.rewrite_without(p, &|id| warm.contains(id))?;
            if c.exists(p)? {
                c.commit(p)?;
            }
        }
        Ok(pending.len())
    }

    /// A cold memory by id (none when the tier is off). A memory of a
    /// pending segment that the store holds is the store's.
    pub(crate) fn cold_get(&self, id: &str) -> Result<Option<ColdRecord>> {
        let Some(c) = &self.cold else {
            return Ok(None);
        };
        match c.find(id)? {
            Some((_, seg)) if seg.state == SegState::Pending && self.warm_has(id)? => Ok(None),
            Some((r, _)) => Ok(Some(r)),
            None => Ok(None),
        }
    }

    /// Cold memories in `view` (every scope for `None`) matching `filter`
    /// and any of `terms` (all for none), as archived memories.
    pub(super) fn cold_search(
        &self,
        view: Option<&View>,
        filter: &Filter,
        terms: &[String],
    ) -> Result<Vec<Archived>> {
        let Some(c) = &self.cold else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (r, seg) in c.search(view, filter, terms)? {
            if seg.state == SegState::Pending && self.warm_has(&r.memory.id)? {
                continue;
            }
            out.push(Archived {
                memory: r.memory,
                archived_at: r.archived_at,
                reason: r.reason,
            });
        }
        Ok(out)
    }

    /// The `limit` cold memories in `view` that best match `terms` (BM25
    /// with the cold tier's own statistics, from the segment indexes), as
    /// archived memories with their scores, best first.
    pub(super) fn cold_search_top(
        &self,
        view: &View,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(Archived, f64)>> {
        let Some(c) = &self.cold else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (r, seg, score) in c.search_top(view, terms, limit)? {
            if seg.state == SegState::Pending && self.warm_has(&r.memory.id)? {
                continue;
            }
            out.push((
                Archived {
                    memory: r.memory,
                    archived_at: r.archived_at,
                    reason: r.reason,
                },
                score,
            ));
        }
        Ok(out)
    }

    /// Archived memories `q` selects, in the store and the cold tier,
    /// newest archived first, at most `q.limit`.
    pub(crate) fn archived_everywhere(&self, q: &Query) -> Result<Vec<Archived>> {
        let mut all = self.store.query_archived(&Query {
            limit: None,
            offset: 0,
            ..q.clone()
        })?;
        all.extend(self.cold_search(q.view.as_ref(), &q.filter, &[])?);
        all.sort_by(|a, b| {
            b.archived_at
                .cmp(&a.archived_at)
                .then_with(|| b.memory.id.cmp(&a.memory.id))
        });
        let all = all.into_iter().skip(q.offset);
        Ok(match q.limit {
            Some(n) => all.take(n).collect(),
            None => all.collect(),
        })
    }

    /// Moves to the cold tier the unpinned memories idle for
    /// `demote_after_days` and those whose decayed importance fell under
    /// `demote_below_importance` (straight from the active rows, reason
    /// `demoted`), then every unpinned archived memory. Returns (demoted,
    /// of which by importance, moved to cold in all, segments merged).
    pub(super) fn demote(&self, now: Timestamp) -> Result<(usize, usize, usize, usize)> {
        let Some(c) = &self.cold else {
            return Ok((0, 0, 0, 0));
        };
        let days = self.cfg.cold.demote_after_days;
        let floor = self.cfg.cold.demote_below_importance;
        // Reads recalls recorded but have not written yet count: a memory
        // read a moment ago is not idle, and its reads raise its importance.
        if days > 0 || floor > 0.0 {
            self.flush_accesses()?;
        }
        let mut idle: Vec<Memory> = Vec::new();
        if days > 0 {
            let cutoff = now.as_millisecond() - (days as i64) * 86_400_000;
            idle = self
                .store
                .query(&unpinned_not_updated_since(now, cutoff)?)?
                .into_iter()
                .filter(|m| not_read_since(m, cutoff))
                .collect();
        }
        let mut faded: Vec<Memory> = Vec::new();
        if floor > 0.0 {
            // Untouched for a day: a memory just written or read is in use,
            // whatever its weight.
            let cutoff = now.as_millisecond() - 86_400_000;
            let by_age: BTreeSet<&str> = idle.iter().map(|m| m.id.as_str()).collect();
            // Ranking's columns only (no content), then the few under the
            // floor whole, for their last read.
            let under: Vec<String> = self
                .store
                .query_signals(&unpinned_not_updated_since(now, cutoff)?)?
                .into_iter()
                .filter(|s| !by_age.contains(s.id.as_str()))
                .filter(|s| crate::rank::decayed_importance(&self.cfg.ranking, s, now) < floor)
                .map(|s| s.id)
                .collect();
            for ids in under.chunks(1_000) {
                faded.extend(
                    self.store
                        .get_many(ids)?
                        .into_iter()
                        .filter(|m| not_read_since(m, cutoff)),
                );
            }
        }
        self.with_cold_lease(|| {
            self.recover_cold_held(c)?;
            let unpinned = Filter::parse(&json!({"pinned": false}))?;
            let archived = self
                .store
                .query_archived(&Query::everything(now).filter(unpinned))?;
            let demoted = |m: &Memory| (m.clone(), now, crate::store::DEMOTED.to_string());
            // One pass, so each segment but the first is written while the
            // store lets go of the one before.
            let leaving = idle
                .iter()
                .chain(&faded)
                .map(demoted)
                .chain(
                    archived
                        .into_iter()
                        .map(|a| (a.memory, a.archived_at, a.reason)),
                )
                .collect();
            let n_demoted = idle.len() + faded.len();
            let moved = self.move_to_cold(c, leaving)?;
            let (mut by_age, mut by_importance) = (0, 0);
            for (i, _) in &moved {
                if *i < idle.len() {
                    by_age += 1;
                } else if *i < n_demoted {
                    by_importance += 1;
                }
            }
            Ok((
                by_age + by_importance,
                by_importance,
                moved.len(),
                merge_small(c)?,
            ))
        })
    }

    /// Moves memories (each with when and why it leaves the store) to new
    /// segments of up to [`SEGMENT_RECORDS`]: each segment durable as
    /// `.pending` before the store lets go of its memories, each only at
    /// the version written (one changed or forgotten meanwhile stays in
    /// the store and leaves the segment before it goes live). The next
    /// segment is built and written while the store lets go of the one
    /// before. Returns the memories moved: their places in `leaving`, and
    /// ids. The caller holds the `cold` lease.
    fn move_to_cold(
        &self,
        c: &crate::cold::ColdDir,
        leaving: Vec<(Memory, Timestamp, String)>,
    ) -> Result<Vec<(usize, String)>> {
        let write = |batch: &[(Memory, Timestamp, String)]| -> Result<std::path::PathBuf> {
            let mut records = Vec::with_capacity(batch.len());
            for (m, at, reason) in batch {
                records.push(ColdRecord {
                    history: self.store.history(&m.id)?,
                    memory: m.clone(),
                    archived_at: *at,
                    reason: reason.clone(),
                });
            }
            c.write_pending(&records)
        };
        let batches: Vec<&[(Memory, Timestamp, String)]> =
            leaving.chunks(SEGMENT_RECORDS).collect();
        let Some(first) = batches.first() else {
            return Ok(Vec::new());
        };
        std::thread::scope(|s| {
            let mut moved = Vec::new();
            let mut next = Some(write(first));
            for (i, batch) in batches.iter().enumerate() {
                let pending = next.take().expect("each batch's segment is written")?;
                let ahead = batches.get(i + 1).map(|b| s.spawn(|| write(b)));
                let released = self.release_to_cold(c, &pending, batch);
                // A segment written ahead of a failed release holds
                // memories the store still has: recovery drops them from it.
                next = ahead.map(|h| h.join().expect("a segment writer panicked"));
                let gone = released?;
                let at = i * SEGMENT_RECORDS;
                moved.extend(
                    batch
                        .iter()
                        .enumerate()
                        .filter(|(_, (m, _, _))| gone.contains(&m.id))
                        .map(|(j, (m, _, _))| (at + j, m.id.clone())),
                );
            }
            Ok(moved)
        })
    }

    /// Deletes from the store the memories of a durable pending segment
    /// that are still at the version written, drops the others from the
    /// segment (the store's copy wins), and makes it live. Returns the ids
    /// that moved.
    fn release_to_cold(
        &self,
        c: &crate::cold::ColdDir,
        pending: &std::path::Path,
        batch: &[(Memory, Timestamp, String)],
    ) -> Result<BTreeSet<String>> {
        let written: Vec<(String, u64)> = batch
            .iter()
            .map(|(m, _, _)| (m.id.clone(), m.version))
            .collect();
        let gone: BTreeSet<String> = self.store.delete_moved(&written)?.into_iter().collect();
        if gone.len() < written.len() {
            c.rewrite_without(pending, &|id| !gone.contains(id))?;
            if !c.exists(pending)? {
                return Ok(gone);
            }
        }
        c.commit(pending)?;
        Ok(gone)
    }

    /// Notes the reads of the cold memories among `out` (those in
    /// `from_cold`), when promotion is on.
    pub(super) fn note_cold_reads(
        &self,
        out: &[crate::Recalled],
        from_cold: &BTreeSet<String>,
    ) -> Result<()> {
        let Some(c) = self
            .cold
            .as_ref()
            .filter(|_| self.cfg.cold.promote_after_reads > 0)
        else {
            return Ok(());
        };
        let read: Vec<String> = out
            .iter()
            .filter(|r| from_cold.contains(&r.memory.id))
            .map(|r| r.memory.id.clone())
            .collect();
        c.note_reads(&read)
    }

    /// Brings back to the store, active, the memories demoted to cold that
    /// recalls returned `promote_after_reads` times or more since they
    /// left (their reads counted as reads, so upkeep does not demote them
    /// again at once); forgets the counts of memories no longer cold.
    /// Returns how many came back.
    pub(super) fn promote_cold(&self, now: Timestamp) -> Result<usize> {
        let bound = self.cfg.cold.promote_after_reads;
        let Some(c) = self.cold.as_ref().filter(|_| bound > 0) else {
            return Ok(0);
        };
        let due = self.with_cold_lease(|| {
            let reads = c.take_reads()?;
            let mut keep = BTreeMap::new();
            let mut due = Vec::new();
            for (id, &n) in &reads.counts {
                // Only demoted memories: an evicted one would be evicted
                // again, an expired or completed one was meant to leave.
                let demoted = c
                    .find(id)?
                    .is_some_and(|(r, _)| r.reason == crate::store::DEMOTED);
                if !demoted {
                    continue;
                }
                if n >= bound {
                    due.push(Access {
                        id: id.clone(),
                        count: n,
                        at: now,
                    });
                } else {
                    keep.insert(id.clone(), n);
                }
            }
            c.reads_handled(reads, &keep)?;
            Ok(due)
        })?;
        if due.is_empty() {
            return Ok(0);
        }
        let ids: Vec<String> = due.iter().map(|a| a.id.clone()).collect();
        let back = self.restore(&ids)?;
        self.store.touch(&due)?;
        self.wake_embedder();
        Ok(back)
    }

    /// Brings cold memories back into the store's archive (their ids,
    /// versions and history kept) and takes them out of their segments;
    /// returns the ids brought back.
    pub(super) fn unfreeze(&self, ids: &[String]) -> Result<Vec<String>> {
        let Some(c) = &self.cold else {
            return Ok(Vec::new());
        };
        self.with_cold_lease(|| {
            let mut by_seg: BTreeMap<std::path::PathBuf, Vec<ColdRecord>> = BTreeMap::new();
            for id in ids {
                if self.warm_has(id)? {
                    continue;
                }
                if let Some((r, seg)) = c.find(id)? {
                    by_seg.entry(seg.path).or_default().push(r);
                }
            }
            let mut back = Vec::new();
            for (path, records) in by_seg {
                let pending = if path.extension().is_some_and(|x| x == "cold") {
                    c.uncommit(&path)?
                } else {
                    path
                };
                let items: Vec<ImportItem> = records
                    .iter()
                    .map(|r| ImportItem {
                        line: 0,
                        memory: r.memory.clone(),
                        archived: Some((r.archived_at, r.reason.clone())),
                        history: r.history.clone(),
                    })
                    .collect();
                self.store.import(
                    &items,
                    &ImportRules {
                        session_max_bytes: self.cfg.session_max_bytes,
                        ..ImportRules::default()
                    },
                )?;
                let out: BTreeSet<&str> = records.iter().map(|r| r.memory.id.as_str()).collect();
                c.rewrite_without(&pending, &|id| out.contains(id))?;
                if c.exists(&pending)? {
                    c.commit(&pending)?;
                }
                back.extend(out.into_iter().map(String::from));
            }
            Ok(back)
        })
    }

    /// Before an import: brings back to the store's archive every cold
    /// memory whose id the import names, so the store's rules for an id
    /// it holds (error, skip, replace, a fresh id outside the caller's
    /// fence) apply as to any archived memory, and no id ends up in both
    /// tiers.
    ///
    /// Only what the caller's `fence` holds thaws: a line naming a cold
    /// memory outside is stored under a fresh id, as for a warm one
    /// ([`crate::store::IdPlan::Rekey`]), and the other memory stays where
    /// it is, so neither its tier nor the time a thaw takes tells that it
    /// exists.
    pub(crate) fn thaw_for_import(&self, items: &mut [ImportItem], fence: &Fence) -> Result<()> {
        let Some(c) = &self.cold else {
            return Ok(());
        };
        let ids: BTreeSet<&str> = items.iter().map(|i| i.memory.id.as_str()).collect();
        let mut held = Vec::new();
        let mut foreign = BTreeSet::new();
        for (id, scope) in c.holding_scoped(&ids)? {
            if Scope::parse(&scope).is_ok_and(|s| fence.contains(&s)) {
                held.push(id);
            } else {
                foreign.insert(id);
            }
        }
        for item in items.iter_mut() {
            if foreign.contains(&item.memory.id) {
                *item = crate::store::rekeyed(item);
            }
        }
        if !held.is_empty() {
            self.unfreeze(&held)?;
        }
        Ok(())
    }

    /// Deletes memories from their segments (each rewritten without them,
    /// the old file replaced, so their text is in no file afterwards);
    /// answers the records dropped.
    pub(super) fn forget_cold(&self, ids: &[String]) -> Result<Vec<ColdRecord>> {
        let Some(c) = &self.cold else {
            return Ok(Vec::new());
        };
        let doomed: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
        let mut gone = Vec::new();
        for seg in c.segments()? {
            if c.index(&seg.path)?
                .entries
                .iter()
                .any(|e| doomed.contains(e.id.as_str()))
            {
                gone.extend(c.rewrite_without(&seg.path, &|id| doomed.contains(id))?);
            }
        }
        Ok(gone)
    }

    /// Deletes `ids` from every tier (the cold tier's segments and the
    /// store under the `cold` lease, so a concurrent demotion cannot carry
    /// a forgotten memory into a segment), and from the compaction
    /// summaries that quote them.
    pub(super) fn forget_everywhere(&self, ids: &[String]) -> Result<usize> {
        // Summaries that quote a compacted memory lose its lines once it
        // is gone (`unquote`): the store's are found before the delete, the
        // cold tier's among the records its segments are rewritten without.
        let mut quoted = self.quoted_in_store(ids)?;
        let (n, cold) = self.forget_everywhere_now(ids)?;
        quoted.extend(super::compact::compacted_sessions(
            cold.into_iter().map(|r| (r.reason, r.memory)),
        ));
        self.unquote(ids, &quoted)?;
        Ok(n)
    }

    /// Deletes `ids` from every tier; answers how many, and the records
    /// the cold tier held.
    fn forget_everywhere_now(&self, ids: &[String]) -> Result<(usize, Vec<ColdRecord>)> {
        // The hot tier first: an ephemeral memory is in no other tier, and
        // a write-through ring's copy leaves this process's memory at once.
        let hot = self.hot.remove_ids(ids);
        if self.cold.is_none() {
            return Ok((hot + self.store.delete(ids)?, Vec::new()));
        }
        self.with_cold_lease(|| {
            if let Some(c) = &self.cold {
                self.recover_cold_held(c)?;
            }
            let cold = self.forget_cold(ids)?;
            let warm = self.store.delete(ids)?;
            if !cold.is_empty() && warm == 0 {
                // The rows left the store when they were demoted, without
                // the rewrite a forget does: do it now.
                self.store.scrub()?;
            }
            Ok((hot + cold.len() + warm, cold))
        })
    }
}

/// Live segments holding fewer records than this are merged (a quarter of
/// a full one): a tier that upkeep feeds a little every day would
/// otherwise be hundreds of small segments, each with its own index to
/// read and its own compression to restart.
const MERGE_BELOW: usize = SEGMENT_RECORDS / 4;

/// Small segments wait until there are this many: a merge rewrites them
/// all, and a tier fed a little every day would otherwise rewrite its
/// growing small segment every day.
const MERGE_AT: usize = 8;

/// Merges the small live segments, once there are `MERGE_AT` of them, into
/// segments of at most `SEGMENT_RECORDS`, oldest first; answers how many
/// segments merged away.
/// The caller holds the `cold` lease.
fn merge_small(c: &crate::cold::ColdDir) -> Result<usize> {
    let small: Vec<(std::path::PathBuf, usize)> = c
        .live_sizes()?
        .into_iter()
        .filter(|(_, n)| *n < MERGE_BELOW)
        .collect();
    if small.len() < MERGE_AT {
        return Ok(0);
    }
    let mut merged = 0;
    let mut batch: Vec<std::path::PathBuf> = Vec::new();
    let mut total = 0;
    let mut flush = |batch: &mut Vec<std::path::PathBuf>| -> Result<()> {
        if batch.len() >= 2 {
            c.merge(batch)?;
            merged += batch.len();
        }
        batch.clear();
        Ok(())
    };
    for (p, n) in small {
        if total + n > SEGMENT_RECORDS {
            flush(&mut batch)?;
            total = 0;
        }
        batch.push(p);
        total += n;
    }
    flush(&mut batch)?;
    Ok(merged)
}

/// Active memories, expired ones too, unpinned and last updated before
/// `cutoff` (ms): what demotion looks at.
fn unpinned_not_updated_since(now: Timestamp, cutoff: i64) -> Result<Query> {
    let f = Filter::parse(&json!({"pinned": false, "updated_at": {"$lt": cutoff}}))?;
    Ok(Query::everything(now).filter(f).include_expired(true))
}

/// Whether `m` was last read before `cutoff` (ms), or never.
fn not_read_since(m: &Memory, cutoff: i64) -> bool {
    m.last_accessed_at
        .is_none_or(|t| t.as_millisecond() < cutoff)
}
