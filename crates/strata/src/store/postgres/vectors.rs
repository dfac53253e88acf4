//! Vectors: those waiting, storing them (one length per model), exact
//! search. Vectors live in `memories.embedding` (little-endian f32,
//! normalised); no pgvector is needed.

use super::*;

/// How long the embed worker's claim on a memory lasts (ms): far longer
/// than embedding one batch takes.
const CLAIM_MS: i64 = 120_000;

/// This process's copies of the vectors, by model.
pub(super) type Copies = std::sync::RwLock<std::collections::HashMap<String, VectorCopy>>;

/// More changed vectors than this in one sync are not added to the index
/// in the foreground: it is built again in the background.
#[cfg(feature = "ann")]
const FOREGROUND_ADDS: usize = 5_000;

/// One model's vectors as this process holds them: by row (`seq`), with
/// the row's scope, as of the model's `version` (the newest stamp read)
/// and `epoch` (bumped by every forget: a copy of another epoch may hold
/// forgotten vectors and is loaded again).
#[derive(Debug, Default)]
pub(super) struct VectorCopy {
    epoch: i64,
    version: i64,
    dim: i64,
    loaded: bool,
    /// The listener's generation read before the last sync: while it stays
    /// the same, nothing changed the vectors and the counters need no read.
    generation: Option<u64>,
    /// By scope, so a view skips whole scopes: row (`seq`) → vector.
    rows: std::collections::HashMap<Scope, std::collections::HashMap<i64, Vec<f32>>>,
    /// Where each row's vector is filed.
    scope_of: std::collections::HashMap<i64, Scope>,
    /// An HNSW index over every row of the copy, for large views.
    #[cfg(feature = "ann")]
    index: Option<crate::store::hnsw::Hnsw>,
    /// A build of the index is under way.
    #[cfg(feature = "ann")]
    building: bool,
    /// Rows changed since the build under way took its snapshot.
    #[cfg(feature = "ann")]
    changed: Vec<i64>,
}

impl VectorCopy {
    /// Brings the copy to `version` of `epoch`: everything again after a
    /// forget, else only the rows stamped since the last sync. Writers
    /// stamp under the write lock and commit in stamp order, so every row
    /// stamped up to `version` (read before the rows) is visible here.
    fn sync(
        &mut self,
        cx: &mut Cx<'_, Client>,
        model: &str,
        version: i64,
        epoch: i64,
    ) -> Result<()> {
        if self.loaded && self.epoch == epoch && self.version >= version {
            return Ok(());
        }
        let since = if self.loaded && self.epoch == epoch {
            self.version
        } else {
            self.rows.clear();
            self.scope_of.clear();
            // A forget (or a first load): an index may hold forgotten
            // vectors; a build under way is of the old epoch.
            #[cfg(feature = "ann")]
            {
                self.index = None;
                self.changed.clear();
            }
            i64::MIN
        };
        let rows = cx.query(
            "SELECT seq, scope, embedding FROM memories
             WHERE embedding_model = $1 AND vector_seq > $2",
            &[&model, &since],
        )?;
        for r in rows {
            let (seq, scope, b): (i64, String, &[u8]) = (r.get(0), r.get(1), r.get(2));
            let scope = Scope::parse(&scope).map_err(|e| Error::Corrupt {
                what: "column `scope` of a stored row".into(),
                source: Box::new(e),
            })?;
            let v = crate::embed::from_bytes(b).unwrap_or_default();
            if let Some(old) = self.scope_of.insert(seq, scope.clone())
                && let Some(r) = self.rows.get_mut(&old)
            {
                r.remove(&seq);
            }
            self.rows.entry(scope).or_default().insert(seq, v);
            #[cfg(feature = "ann")]
            if self.index.is_some() || self.building {
                self.changed.push(seq);
            }
        }
        #[cfg(feature = "ann")]
        self.catch_up_index()?;
        self.epoch = epoch;
        self.version = version;
        self.loaded = true;
        Ok(())
    }

    /// Vectors held.
    pub(super) fn len(&self) -> usize {
        self.scope_of.len()
    }

    /// Vectors in the HNSW index, when there is one.
    #[cfg(feature = "ann")]
    pub(super) fn index_size(&self) -> Option<usize> {
        self.index.as_ref().map(|i| i.size())
    }

    /// The vector of row `seq`, if held.
    #[cfg(feature = "ann")]
    fn vector(&self, seq: i64) -> Option<&Vec<f32>> {
        self.rows.get(self.scope_of.get(&seq)?)?.get(&seq)
    }

    /// Adds the rows changed since the last catch-up to the index (a few
    /// in the foreground; too many drop it, to be built again).
    #[cfg(feature = "ann")]
    fn catch_up_index(&mut self) -> Result<()> {
        if self.building || self.changed.is_empty() {
            return Ok(());
        }
        let Some(index) = &mut self.index else {
            self.changed.clear();
            return Ok(());
        };
        if self.changed.len() > FOREGROUND_ADDS {
            self.index = None;
            self.changed.clear();
            return Ok(());
        }
        let fresh: Vec<(u64, Vec<f32>)> = self
            .changed
            .iter()
            .filter_map(|seq| {
                let v = self.rows.get(self.scope_of.get(seq)?)?.get(seq)?;
                Some((*seq as u64, v.clone()))
            })
            .collect();
        index.add(&fresh)?;
        self.changed.clear();
        Ok(())
    }

    /// How many vectors of the copy lie in the view.
    #[cfg(feature = "ann")]
    fn view_len(&self, q: &Query) -> usize {
        self.rows
            .iter()
            .filter(|(scope, _)| q.view.as_ref().is_none_or(|v| v.contains(scope)))
            .map(|(_, rows)| rows.len())
            .sum()
    }

    /// Every vector of the view with its similarity to `query`.
    fn scan(&self, q: &Query, query: &[f32]) -> Vec<(f32, i64)> {
        self.rows
            .iter()
            .filter(|(scope, _)| q.view.as_ref().is_none_or(|v| v.contains(scope)))
            .flat_map(|(_, rows)| rows.iter())
            .map(|(seq, v)| (crate::embed::dot(query, v), *seq))
            .collect()
    }

    /// The index's `k` nearest that lie in the view, with their exact
    /// similarity (from the copy's vectors).
    #[cfg(feature = "ann")]
    fn nearest(
        &self,
        index: &crate::store::hnsw::Hnsw,
        q: &Query,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<(f32, i64)>> {
        Ok(index
            .search(query, k)?
            .into_iter()
            .filter_map(|(seq, _)| {
                let scope = self.scope_of.get(&seq)?;
                if q.view.as_ref().is_some_and(|v| !v.contains(scope)) {
                    return None;
                }
                Some((crate::embed::dot(query, self.vector(seq)?), seq))
            })
            .collect())
    }
}

/// Builds `model`'s index from a snapshot of its copy on a background
/// thread, then catches it up with what changed meanwhile; at most one build
/// per model at a time. A forget meanwhile (a new epoch) discards it.
#[cfg(feature = "ann")]
fn build_index(copies: &std::sync::Arc<Copies>, model: &str) {
    let snapshot = {
        let mut g = copies.write().unwrap_or_else(|p| p.into_inner());
        let Some(copy) = g.get_mut(model) else { return };
        if copy.building || copy.index.is_some() {
            return;
        }
        copy.building = true;
        copy.changed.clear();
        let rows: Vec<(u64, Vec<f32>)> = copy
            .rows
            .values()
            .flat_map(|r| r.iter().map(|(seq, v)| (*seq as u64, v.clone())))
            .collect();
        (copy.epoch, copy.dim as usize, rows)
    };
    let (shared, name) = (copies.clone(), model.to_string());
    let spawned = std::thread::Builder::new()
        .name("strata-pg-hnsw".into())
        .spawn(move || {
            let (epoch, dim, rows) = snapshot;
            let built = crate::store::hnsw::Hnsw::new(dim).and_then(|mut h| {
                h.add(&rows)?;
                Ok(h)
            });
            drop(rows);
            let mut g = shared.write().unwrap_or_else(|p| p.into_inner());
            let Some(copy) = g.get_mut(&name) else { return };
            copy.building = false;
            if let Ok(h) = built
                && copy.loaded
                && copy.epoch == epoch
            {
                copy.index = Some(h);
                // Best effort: an index that cannot catch up is dropped.
                if copy.catch_up_index().is_err() {
                    copy.index = None;
                }
            }
            copy.changed.clear();
        });
    if spawned.is_err() {
        let mut g = copies.write().unwrap_or_else(|p| p.into_inner());
        if let Some(copy) = g.get_mut(model) {
            copy.building = false;
        }
    }
}

impl VectorSearch for PostgresStore {
    fn pending_vectors(
        &self,
        model: &str,
        ids: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<PendingVector>> {
        let mut c = self.conn()?;
        let mut cx = c.cx();
        let lim = limit.min(i64::MAX as usize) as i64;
        // Claimed, not just read: nodes sharing the database embed each
        // memory once. A claim runs out after `CLAIM_MS` (by the server's
        // clock), so a node that dies mid-batch holds nothing for long; a
        // row another node is claiming right now is skipped, not waited for.
        let claim = |cx: &mut Cx<'_, Client>, wanted: &str, p: &[&(dyn ToSql + Sync)]| {
            cx.query(
                &format!(
                    "WITH now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8 AS ms),
                     claimed AS (
                       UPDATE memories m SET embed_claim = (SELECT ms FROM now) + {CLAIM_MS}
                       FROM (SELECT seq FROM memories m WHERE {wanted}
                             AND (m.embed_claim IS NULL OR m.embed_claim <= (SELECT ms FROM now))
                             ORDER BY m.seq LIMIT $1::int8 FOR UPDATE SKIP LOCKED) p
                       WHERE m.seq = p.seq
                       RETURNING m.seq, m.id, m.checksum, m.content, m.scope, m.kind, m.session, m.created_at)
                     SELECT id, checksum, content, scope, kind, session, created_at FROM claimed ORDER BY seq"
                ),
                p,
            )
        };
        let rows = match ids {
            Some(ids) => claim(
                &mut cx,
                "m.id = ANY($2::text[]) AND m.embedding_model IS DISTINCT FROM $3::text",
                &[&lim, &ids, &model],
            )?,
            None => {
                let mut rows = claim(&mut cx, "m.embedding_model IS NULL", &[&lim])?;
                if rows.len() < limit {
                    let more = lim - rows.len() as i64;
                    rows.extend(claim(
                        &mut cx,
                        "m.embedding_model <> $2::text",
                        &[&more, &model],
                    )?);
                }
                rows
            }
        };
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut p = PendingVector {
                id: r.get(0),
                checksum: r.get(1),
                content: r.get(2),
                before: None,
            };
            let (scope, kind, session, created): (String, String, Option<String>, i64) =
                (r.get(3), r.get(4), r.get(5), r.get(6));
            if kind == "conversation" {
                p.before = cx
                    .query_opt(
                        "SELECT content FROM memories m WHERE m.scope = $1 AND m.kind = 'conversation'
                         AND m.session IS NOT DISTINCT FROM $2::text
                         AND (m.created_at < $3 OR (m.created_at = $3 AND m.id < $4))
                         ORDER BY m.created_at DESC, m.id DESC LIMIT 1",
                        &[&scope, &session, &created, &p.id],
                    )?
                    .map(|r| r.get(0));
            }
            out.push(p);
        }
        Ok(out)
    }

    fn vector_counts(&self, model: &str) -> Result<VectorCounts> {
        let mut c = self.conn()?;
        let r = c.cx().query_one(
            "SELECT COUNT(*) FILTER (WHERE embedding_model = $1::text), COUNT(*) FROM memories",
            &[&model],
        )?;
        let (vectors, all): (i64, i64) = (r.get(0), r.get(1));
        Ok(VectorCounts {
            vectors: vectors as u64,
            pending: (all - vectors) as u64,
        })
    }

    fn set_vectors(
        &self,
        model: &str,
        dim: usize,
        items: &[(String, String, Vec<f32>)],
    ) -> Result<usize> {
        search::check_vectors(model, dim, None, items)?;
        self.write(|tx| {
            let known: Option<i64> = tx
                .query_opt("SELECT dim FROM vector_models WHERE model = $1", &[&model])?
                .map(|r| r.get(0));
            search::check_vectors(model, dim, known.map(|d| d as usize), &[])?;
            if known.is_none() {
                tx.execute(
                    "INSERT INTO vector_models (model, dim) VALUES ($1, $2)",
                    &[&model, &(dim as i64)],
                )?;
            }
            let seq: i64 = tx
                .query_one(
                    "UPDATE vector_models SET version = version + 1 WHERE model = $1 RETURNING version",
                    &[&model],
                )?
                .get(0);
            let ids: Vec<&str> = items.iter().map(|i| i.0.as_str()).collect();
            let sums: Vec<&str> = items.iter().map(|i| i.1.as_str()).collect();
            let vecs: Vec<Vec<u8>> = items.iter().map(|i| crate::embed::to_bytes(&i.2)).collect();
            let n = tx.execute(
                "UPDATE memories m SET embedding_model = $1, embedding = u.e, vector_seq = $2, embed_claim = NULL
                 FROM unnest($3::text[], $4::text[], $5::bytea[]) AS u(id, c, e)
                 WHERE m.id = u.id AND m.checksum = u.c",
                &[&model, &seq, &ids, &sums, &vecs],
            )?;
            Ok(n as usize)
        })
    }

    fn search_vectors(
        &self,
        q: &Query,
        model: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<(Signals, f32)>> {
        if limit == 0 || q.view.as_ref().is_some_and(|v| v.is_empty()) {
            return Ok(Vec::new());
        }
        let mut c = self.conn()?;
        let mut cx = c.cx();
        self.start_listening();
        // While the listener says nothing changed since the copy's last
        // sync, its counters are the model's: no round trip for them.
        let generation = self.listener.generation();
        let known = generation.and_then(|g| {
            let copies = self.vectors.read().unwrap_or_else(|p| p.into_inner());
            copies
                .get(model)
                .filter(|v| v.loaded && v.generation == Some(g))
                .map(|v| v.dim)
        });
        let dim = match known {
            Some(dim) => dim,
            None => {
                let Some(counters) = cx.query_opt(
                    "SELECT version, epoch, dim FROM vector_models WHERE model = $1",
                    &[&model],
                )?
                else {
                    return Ok(Vec::new());
                };
                let (version, epoch, dim): (i64, i64, i64) =
                    (counters.get(0), counters.get(1), counters.get(2));
                let mut g = self.vectors.write().unwrap_or_else(|p| p.into_inner());
                let copy = g.entry(model.to_string()).or_default();
                copy.sync(&mut cx, model, version, epoch)?;
                copy.dim = dim;
                copy.generation = generation;
                dim
            }
        };
        if dim as usize != query.len() {
            return Ok(Vec::new());
        }
        // A large view with the index built: its nearest, widened until the
        // view yields `limit` checked hits; else (or when that fails) every
        // vector of the view in this process's copy.
        #[cfg(feature = "ann")]
        {
            let mut k = 0;
            loop {
                let cands = {
                    let g = self.vectors.read().unwrap_or_else(|p| p.into_inner());
                    let Some(copy) = g.get(model) else { break };
                    let view = copy.view_len(q);
                    if view < self.opts.ann_min_view {
                        break;
                    }
                    let Some(index) = &copy.index else {
                        let building = copy.building;
                        drop(g);
                        if !building {
                            build_index(&self.vectors, model);
                        }
                        break;
                    };
                    let total = index.size();
                    k = if k == 0 {
                        (limit * 2 * total.div_ceil(view.max(1))).max(64)
                    } else {
                        k * 4
                    };
                    copy.nearest(index, q, query, k.min(total))?
                };
                let hits = self.check_hits(&mut cx, q, model, cands, limit)?;
                if hits.len() >= limit || k >= self.vectors_in_memory(model).unwrap_or(0) {
                    return Ok(hits);
                }
                if k > 1 << 16 {
                    break;
                }
            }
        }
        let cands = {
            let g = self.vectors.read().unwrap_or_else(|p| p.into_inner());
            let Some(copy) = g.get(model) else {
                return Ok(Vec::new());
            };
            copy.scan(q, query)
        };
        self.check_hits(&mut cx, q, model, cands, limit)
    }

    fn clear_vectors(&self, keep: Option<&str>) -> Result<u64> {
        self.vectors
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|m, _| Some(m.as_str()) == keep);
        self.write(|tx| {
            let n = tx.execute(
                "UPDATE memories SET embedding_model = NULL, embedding = NULL, vector_seq = NULL
                 WHERE embedding_model IS NOT NULL AND embedding_model IS DISTINCT FROM $1::text",
                &[&keep],
            )?;
            tx.execute(
                "UPDATE archive SET embedding_model = NULL, embedding = NULL
                 WHERE embedding_model IS NOT NULL AND embedding_model IS DISTINCT FROM $1::text",
                &[&keep],
            )?;
            tx.execute(
                "DELETE FROM vector_models WHERE model IS DISTINCT FROM $1::text",
                &[&keep],
            )?;
            Ok(n)
        })
    }

    fn vector_models(&self) -> Result<Vec<(String, usize, u64)>> {
        let mut c = self.conn()?;
        let rows = c.cx().query(
            "SELECT v.model, v.dim, (SELECT COUNT(*) FROM memories m WHERE m.embedding_model = v.model)
             FROM vector_models v ORDER BY v.model",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    r.get::<_, i64>(1) as usize,
                    r.get::<_, i64>(2) as u64,
                )
            })
            .collect())
    }
}

impl PostgresStore {
    /// The best of `cands` (similarity, row) checked against their rows
    /// (still active, of this model, in the filter, not expired) until
    /// `limit` pass and no unchecked candidate could tie with the last of
    /// them; best first.
    fn check_hits(
        &self,
        cx: &mut Cx<'_, Client>,
        q: &Query,
        model: &str,
        mut cands: Vec<(f32, i64)>,
        limit: usize,
    ) -> Result<Vec<(Signals, f32)>> {
        cands.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        // Check the best against their rows (still active, of this model,
        // in the filter, not expired) until `limit` pass and no unchecked
        // candidate could tie with the last of them.
        let mut hits: Vec<(Signals, f32)> = Vec::new();
        let mut at = 0;
        let mut chunk = limit.saturating_mul(2).max(32);
        while at < cands.len() {
            if hits.len() >= limit {
                let mut sims: Vec<f32> = hits.iter().map(|h| h.1).collect();
                sims.sort_unstable_by(|a, b| b.total_cmp(a));
                if cands[at].0 < sims[limit - 1] {
                    break;
                }
            }
            let part = &cands[at..at.saturating_add(chunk).min(cands.len())];
            at += part.len();
            chunk = chunk.saturating_mul(2);
            let sims: std::collections::HashMap<i64, f32> =
                part.iter().map(|(s, seq)| (*seq, *s)).collect();
            let mut p: Vec<P> = vec![Box::new(part.iter().map(|x| x.1).collect::<Vec<i64>>())];
            let w = where_sql(q, false, &mut p);
            let m = sql::bind(&mut p, model.to_string());
            for r in cx.query_p(
                &format!(
                    "SELECT {SIGNAL_COLS}, m.seq FROM memories m
                     WHERE m.seq = ANY($1::int8[]) AND {w} AND m.embedding_model = {m}::text"
                ),
                &p,
            )? {
                let seq: i64 = r.get(SIGNAL_N);
                hits.push((
                    read_signals(&r)?,
                    sims.get(&seq).copied().unwrap_or(f32::MIN),
                ));
            }
        }
        crate::store::sort_similar(&mut hits);
        hits.truncate(limit);
        Ok(hits)
    }
}
