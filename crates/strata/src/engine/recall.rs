//! Reads: ranked recall (two phases: signals, then the memories that
//! made the cut), lists and counts.

use super::*;

/// A recall request.
#[derive(Clone, Debug)]
pub struct Recall {
    /// Natural-language or keyword query; may be empty.
    pub query: String,
    /// Scopes that may be seen.
    pub view: View,
    /// Conditions.
    pub filter: Filter,
    /// Ranking; `None` uses the configured default (hybrid).
    pub strategy: Option<Strategy>,
    /// Most results.
    pub limit: usize,
    /// Return score parts.
    pub explain: bool,
    /// Record the access (count and time) on returned memories.
    pub touch: bool,
    /// Search the archive too.
    pub include_archived: bool,
    /// The relevance floor (0–1) for a recall with a query; `None` uses
    /// `ranking.min_relevance`, `Some(0.0)` returns every match of the view
    /// up to `limit`. See [`crate::RankConfig::min_relevance`].
    pub min_relevance: Option<f64>,
    /// What was true at this time: memories written later are left out,
    /// and a keyed memory superseded since comes back as the version in
    /// effect then (with `valid_to`, when the next version replaced it).
    /// `None` is now. Ranking reads each memory's current text.
    pub as_of: Option<Timestamp>,
}

impl Recall {
    /// A recall of `query` over `view` with the defaults: hybrid, 10 results,
    /// access recorded.
    pub fn new(query: impl Into<String>, view: View) -> Recall {
        Recall {
            query: query.into(),
            view,
            filter: Filter::all(),
            strategy: None,
            limit: 10,
            explain: false,
            touch: true,
            include_archived: false,
            min_relevance: None,
            as_of: None,
        }
    }
}

/// One recall result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Recalled {
    /// The memory.
    #[serde(flatten)]
    pub memory: Memory,
    /// The score it was ranked by.
    pub score: f64,
    /// Score parts, under `explain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<ScoreParts>,
    /// Set when the memory came from the archive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived: Option<ArchiveMark>,
    /// Under `as_of`, when the version returned stopped being true (the
    /// next version of its key was written); absent when it still is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub valid_to: Option<Timestamp>,
}

/// Order of [`Engine::list`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    /// Newest first.
    #[default]
    Recency,
    /// Oldest first.
    Oldest,
    /// Highest effective importance first.
    Importance,
}

impl std::str::FromStr for ListOrder {
    type Err = Error;
    fn from_str(s: &str) -> Result<ListOrder> {
        match s {
            "recency" | "newest" => Ok(ListOrder::Recency),
            "oldest" => Ok(ListOrder::Oldest),
            "importance" => Ok(ListOrder::Importance),
            _ => Err(Error::field(
                "order",
                format!("`{s}` is not one of recency, oldest, importance"),
            )),
        }
    }
}

/// A list request: memories in a view, filtered and ordered, no query.
#[derive(Clone, Debug)]
pub struct List {
    /// Scopes that may be seen.
    pub view: View,
    /// Conditions.
    pub filter: Filter,
    /// Order.
    pub order: ListOrder,
    /// Most results.
    pub limit: usize,
    /// Skip this many.
    pub offset: usize,
}

impl List {
    /// Newest 50 in `view`.
    pub fn new(view: View) -> List {
        List {
            view,
            filter: Filter::all(),
            order: ListOrder::Recency,
            limit: 50,
            offset: 0,
        }
    }
}

impl Engine {
    /// Ranked memories for a query within a view.
    ///
    /// Two phases: candidates are ranked on a few columns ([`Signals`]:
    /// bm25 from the full-text index, importance, kind, times, reads), then
    /// only the memories that made the cut are loaded.
    ///
    /// A recall with a query returns only memories whose text match or
    /// vector similarity reaches the relevance floor (`min_relevance`), so
    /// it can answer "nothing relevant"; a recall without one is a listing
    /// and has no floor.
    pub fn recall(&self, req: &Recall) -> Result<Vec<Recalled>> {
        req.view.check()?;
        let floor = req.min_relevance.unwrap_or(self.cfg.ranking.min_relevance);
        if !(0.0..=1.0).contains(&floor) {
            return Err(Error::field(
                "min_relevance",
                format!("{floor} is outside 0.0–1.0"),
            ));
        }
        let terms = text::query_terms(&req.query);
        text::check_query_terms(&terms)?;
        if req.limit == 0 {
            return Ok(Vec::new());
        }
        let now = self.now();
        let strategy = req.strategy.unwrap_or(self.cfg.ranking.strategy);
        let mut filter = req.filter.clone();
        if let Some(t) = req.as_of {
            // What was not yet written was not known then.
            let then = Filter::parse(&json!({"created_at": {"$lte": t.as_millisecond()}}))?;
            filter = Filter::And(vec![filter, then]);
        }
        let base = Query::view(req.view.clone(), now).filter(filter.clone());
        // Relevance and hybrid rank the best text matches; recency and
        // importance order every match by their own measure.
        let want = match strategy {
            Strategy::Relevance | Strategy::Hybrid => req
                .limit
                .saturating_mul(self.cfg.ranking.candidates_per_result)
                .max(100),
            Strategy::Recency | Strategy::Importance => usize::MAX,
        };
        // Vectors rank for relevance and hybrid (recency and importance
        // order by their own measure).
        let qvec = match strategy {
            Strategy::Relevance | Strategy::Hybrid => self.query_vector(&req.query)?,
            Strategy::Recency | Strategy::Importance => None,
        };
        let mut cands: Vec<(Signals, Relevance)> = if !terms.is_empty() || qvec.is_some() {
            self.relevant(&base, &terms, qvec.as_ref(), want)?
        } else if strategy == Strategy::Recency {
            self.store
                .query_signals(&base.clone().limit(req.limit))?
                .into_iter()
                .map(|m| (m, Relevance::default()))
                .collect()
        } else {
            self.store
                .query_signals(&base)?
                .into_iter()
                .map(|m| (m, Relevance::default()))
                .collect()
        };
        // Ephemeral sessions' memories (the hot tier) compete in the same
        // ranking, their text matched against each other as the archive's.
        let mut hot: BTreeMap<String, Memory> = BTreeMap::new();
        for (m, rel) in self.hot_candidates(&base, &terms) {
            cands.push((Signals::of(&m), rel));
            hot.insert(m.id.clone(), m);
        }
        // Archived memories, when asked for, compete in the same ranking
        // (one normalisation of relevance across both).
        let mut archived: BTreeMap<String, (Memory, ArchiveMark)> = BTreeMap::new();
        // The archived candidates from the cold tier: their reads count
        // towards promotion back to the store.
        let mut from_cold: BTreeSet<String> = BTreeSet::new();
        if req.include_archived {
            let mut found = self
                .store
                .query_archived(&Query::view(req.view.clone(), now).filter(filter.clone()))?;
            // The cold tier: with query terms and no filter, the best
            // `want` by BM25 from the segment indexes (scored with the cold
            // tier's own statistics, as the archive's are its own), else
            // every match, scored with the archive below.
            let mut cold_top: Vec<(Archived, f64)> = Vec::new();
            if !terms.is_empty() && filter.is_trivial() && want != usize::MAX {
                cold_top = self.cold_search_top(&req.view, &terms, want)?;
                from_cold.extend(cold_top.iter().map(|(a, _)| a.memory.id.clone()));
            } else {
                let cold = self.cold_search(Some(&req.view), &filter, &terms)?;
                from_cold.extend(cold.iter().map(|a| a.memory.id.clone()));
                found.extend(cold);
            }
            let found: Vec<(Memory, ArchiveMark)> = found
                .into_iter()
                .map(|a| {
                    (
                        a.memory,
                        ArchiveMark {
                            at: a.archived_at,
                            reason: a.reason,
                        },
                    )
                })
                .collect();
            let scores: Vec<Option<f64>> = if terms.is_empty() {
                vec![None; found.len()]
            } else {
                let docs: Vec<(&str, f64)> = found
                    .iter()
                    .map(|(m, _)| (m.content.as_str(), m.tokens as f64))
                    .collect();
                text::bm25_docs(&docs, &terms)
                    .into_iter()
                    .map(Some)
                    .collect()
            };
            let (found, scores): (Vec<(Memory, ArchiveMark)>, Vec<Option<f64>>) = found
                .into_iter()
                .zip(scores)
                .chain(cold_top.into_iter().map(|(a, score)| {
                    let mark = ArchiveMark {
                        at: a.archived_at,
                        reason: a.reason,
                    };
                    ((a.memory, mark), Some(score))
                }))
                .unzip();
            // The archive's bm25 comes from the archive's own statistics:
            // its text match (the floor's evidence) is against the archive's
            // best, not the active memories'.
            let best = scores.iter().flatten().fold(0.0f64, |a, b| a.max(*b));
            for ((m, mark), s) in found.into_iter().zip(scores) {
                if terms.is_empty() || s.is_some_and(|x| x > 0.0) {
                    let mut rel = Relevance::text(s);
                    rel.text_match = s.filter(|_| best > 0.0).map(|x| x / best);
                    cands.push((Signals::of(&m), rel));
                    archived.insert(m.id.clone(), (m, mark));
                }
            }
        }
        let has_query = !terms.is_empty() || qvec.is_some();
        let span = crate::when::named_span(&req.query, req.as_of.unwrap_or(now));
        let mut ranked: Vec<(Signals, ScoreParts, bool)> = self
            .rank_floored(
                cands,
                strategy,
                now,
                has_query.then_some(floor),
                span,
                req.explain,
            )
            .into_iter()
            .map(|(s, p)| {
                let arch = archived.contains_key(&s.id);
                (s, p, arch)
            })
            .collect();
        ranked.truncate(req.limit);
        let active_ids: Vec<String> = ranked
            .iter()
            .filter(|r| !r.2 && !hot.contains_key(&r.0.id))
            .map(|r| r.0.id.clone())
            .collect();
        let mut loaded: BTreeMap<String, Memory> = self
            .store
            .get_many(&active_ids)?
            .into_iter()
            .map(|m| (m.id.clone(), m))
            .collect();
        loaded.append(&mut hot);
        let mut out = Vec::with_capacity(ranked.len());
        for (sig, parts, arch) in ranked {
            let found = if arch {
                archived.remove(&sig.id).map(|(m, mark)| (m, Some(mark)))
            } else {
                // None when forgotten between the two phases.
                loaded.remove(&sig.id).map(|m| (m, None))
            };
            let Some((mut memory, mark)) = found else {
                continue;
            };
            let mut valid_to = None;
            if let Some(t) = req.as_of
                && memory.version > 1
                && memory.updated_at > t
            {
                let (then, until) = self.version_at(memory, t)?;
                memory = then;
                valid_to = until;
            }
            // A caller reads what was recalled; the vector is for ranking
            // (and stays in `get` and exports).
            memory.embedding = None;
            out.push(Recalled {
                score: parts.total,
                explain: req.explain.then_some(parts),
                memory,
                archived: mark,
                valid_to,
            });
        }
        if req.touch {
            self.record_access(&active_ids, now)?;
            self.note_cold_reads(&out, &from_cold)?;
        }
        Ok(out)
    }

    /// The version of `current` in effect at `t` (the latest written at or
    /// before it) and when it stopped being (the next version's time).
    /// Versions are whole rewrites, so their `updated_at` is when each was
    /// written; the first is `current` itself when history has none older.
    fn version_at(&self, current: Memory, t: Timestamp) -> Result<(Memory, Option<Timestamp>)> {
        let mut versions = self.store.history(&current.id)?;
        versions.push(current);
        versions.sort_by_key(|m| m.version);
        let i = versions
            .iter()
            .rposition(|m| m.updated_at <= t)
            .unwrap_or(0);
        let until = versions.get(i + 1).map(|m| m.updated_at);
        Ok((versions.swap_remove(i), until))
    }

    /// Scores and sorts candidates, best first.
    pub(crate) fn rank(
        &self,
        mut cands: Vec<(Signals, Relevance)>,
        strategy: Strategy,
        now: Timestamp,
        span: Option<crate::when::Span>,
    ) -> Vec<(Signals, ScoreParts)> {
        rank::fuse(&self.cfg.ranking, &mut cands);
        rank::prefer_named_time(&self.cfg.ranking, span, &mut cands);
        rank::share_with_neighbours(&self.cfg.ranking, &mut cands);
        let queried = cands.iter().any(|(_, r)| r.fused > 0.0);
        let mut scored: Vec<(Signals, ScoreParts)> = cands
            .into_iter()
            .map(|(m, r)| {
                let p = rank::score(&self.cfg.ranking, strategy, &m, &r, queried, now);
                (m, p)
            })
            .collect();
        rank::sort_scored(&mut scored, |m| m.id.as_str());
        scored
    }

    /// [`Engine::rank`], keeping only candidates whose evidence reaches
    /// `floor` (when there is one); under `explain`, each kept one says why
    /// in `passed`.
    fn rank_floored(
        &self,
        mut cands: Vec<(Signals, Relevance)>,
        strategy: Strategy,
        now: Timestamp,
        floor: Option<f64>,
        span: Option<crate::when::Span>,
        explain: bool,
    ) -> Vec<(Signals, ScoreParts)> {
        let Some(floor) = floor.filter(|f| *f > 0.0) else {
            return self.rank(cands, strategy, now, span);
        };
        rank::fuse(&self.cfg.ranking, &mut cands);
        rank::prefer_named_time(&self.cfg.ranking, span, &mut cands);
        // Why each passed is written before neighbours share (sharing
        // moves the relevance, not the evidence), and only when explained.
        let floor = rank::Floor::over(&self.cfg.ranking, floor, &cands);
        let mut passed: Vec<(Signals, Relevance)> = Vec::new();
        let mut why: Vec<Option<String>> = Vec::new();
        for (m, r) in cands {
            if r.passes(&floor) {
                why.push(explain.then(|| r.verdict(&floor)));
                passed.push((m, r));
            }
        }
        // Neighbours share among what passed: a memory the floor cut is
        // not evidence for the one beside it.
        rank::share_with_neighbours(&self.cfg.ranking, &mut passed);
        let mut scored: Vec<(Signals, ScoreParts)> = passed
            .into_iter()
            .zip(why)
            .map(|((m, r), why)| {
                let mut p = rank::score(&self.cfg.ranking, strategy, &m, &r, true, now);
                p.passed = why;
                (m, p)
            })
            .collect();
        rank::sort_scored(&mut scored, |m| m.id.as_str());
        scored
    }

    /// Memories in a view, filtered and ordered (no query, no access recorded).
    pub fn list(&self, req: &List) -> Result<Vec<Memory>> {
        req.view.check()?;
        if req.offset > i64::MAX as usize {
            return Err(Error::field(
                "offset",
                format!("{} is over the largest offset, {}", req.offset, i64::MAX),
            ));
        }
        self.settle_accesses();
        let now = self.now();
        let mut q = Query::view(req.view.clone(), now).filter(req.filter.clone());
        // Ephemeral sessions' memories (the hot tier) are listed with the
        // store's: the store's first `offset + limit` and theirs, merged.
        let hot: Vec<Memory> = self
            .hot_candidates(&q, &[])
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        match req.order {
            ListOrder::Recency | ListOrder::Oldest => {
                q.order = if req.order == ListOrder::Oldest {
                    Order::Oldest
                } else {
                    Order::Newest
                };
                if hot.is_empty() {
                    q.limit = Some(req.limit);
                    q.offset = req.offset;
                    return self.store.query(&q);
                }
                q.limit = Some(req.offset.saturating_add(req.limit));
                let mut all = self.store.query(&q)?;
                all.extend(hot);
                all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
                if req.order == ListOrder::Recency {
                    all.reverse();
                }
                Ok(all.into_iter().skip(req.offset).take(req.limit).collect())
            }
            ListOrder::Importance => {
                let mut cands: Vec<(Signals, Relevance)> = self
                    .store
                    .query_signals(&q)?
                    .into_iter()
                    .map(|m| (m, Relevance::default()))
                    .collect();
                cands.extend(hot.iter().map(|m| (Signals::of(m), Relevance::default())));
                let ids: Vec<String> = self
                    .rank(cands, Strategy::Importance, now, None)
                    .into_iter()
                    .skip(req.offset)
                    .take(req.limit)
                    .map(|(s, _)| s.id)
                    .collect();
                let mut by_id: BTreeMap<String, Memory> = self
                    .store
                    .get_many(&ids)?
                    .into_iter()
                    .chain(hot)
                    .map(|m| (m.id.clone(), m))
                    .collect();
                Ok(ids.iter().filter_map(|id| by_id.remove(id)).collect())
            }
        }
    }

    /// Archived memories in a view (store and cold tier), newest first.
    pub fn list_archived(
        &self,
        view: &View,
        filter: &Filter,
        limit: usize,
    ) -> Result<Vec<Archived>> {
        self.archived_everywhere(
            &Query::view(view.clone(), self.now())
                .filter(filter.clone())
                .limit(limit),
        )
    }

    /// How many active memories a view and filter select.
    pub fn count(&self, view: &View, filter: &Filter) -> Result<u64> {
        self.store
            .count(&Query::view(view.clone(), self.now()).filter(filter.clone()))
    }

    /// [`Engine::count`] per kind (by name; kinds without memories left
    /// out).
    pub fn count_by_kind(
        &self,
        view: &View,
        filter: &Filter,
    ) -> Result<std::collections::BTreeMap<String, u64>> {
        self.store
            .count_by_kind(&Query::view(view.clone(), self.now()).filter(filter.clone()))
    }
}
