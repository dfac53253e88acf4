//! Vectors: those waiting, storing them, exact search, and the HNSW
//! path for large views (`ann.rs`, feature `ann`).

use super::*;

/// The model's (version, epoch, index_version, dim), if it has vectors.
pub(super) fn counters(c: &Connection, model: &str) -> Result<Option<(i64, i64, i64, usize)>> {
    Ok(c.prepare_cached(
        "SELECT version, epoch, index_version, dim FROM vector_models WHERE model = ?",
    )?
    .query_row([model], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get::<_, i64>(3)? as usize,
        ))
    })
    .optional()?)
}

impl SqliteStore {
    /// Active memories in the view (from `scope_counts`).
    pub(super) fn view_size(&self, c: &Connection, q: &Query) -> Result<usize> {
        let mut p = Vec::new();
        let v = view_sql(q.view.as_ref(), "m.", &mut p);
        Ok(c.prepare_cached(&format!(
            "SELECT COALESCE(SUM(m.n), 0) FROM scope_counts m WHERE {v}"
        ))?
        .query_row(params_from_iter(p), |r| r.get::<_, i64>(0))? as usize)
    }

    /// How many vectors of `model` this process holds in memory for exact
    /// search (`None` before a search of the model has loaded any).
    pub fn vectors_in_memory(&self, model: &str) -> Option<usize> {
        self.copies.held(model)
    }

    /// The best of `cands` checked against their rows (still of this
    /// model at the stamp the copy holds, in the view and the filter, not
    /// expired) until `limit` pass and no unchecked candidate could tie
    /// with the last of them; best first. Candidates whose row is gone or
    /// was stamped again leave the copy.
    fn check_hits(
        &self,
        c: &Connection,
        q: &Query,
        model: &str,
        mut cands: Vec<copies::Candidate>,
        limit: usize,
    ) -> Result<Vec<(Signals, f32)>> {
        let by =
            |a: &copies::Candidate, b: &copies::Candidate| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1));
        // `cands[..sorted]` are the best, in order.
        let mut sorted = 0;
        let mut hits: Vec<(Signals, f32)> = Vec::new();
        let mut stale = Vec::new();
        let mut chunk = limit.saturating_mul(2).max(32);
        let mut filter = Vec::new();
        let w = where_sql(q, false, &mut filter);
        let sql = format!(
            "SELECT {SIGNAL_COLS}, m.rowid, m.vector_seq, COALESCE(({w}), 0)
             FROM json_each(?) AS j CROSS JOIN memories m ON m.rowid = j.value
             WHERE m.embedding_model = ?"
        );
        while sorted < cands.len() {
            if hits.len() >= limit && cands[sorted].0 < hits[limit - 1].1 {
                break;
            }
            let end = sorted.saturating_add(chunk).min(cands.len());
            chunk = chunk.saturating_mul(2);
            let rest = &mut cands[sorted..];
            if end - sorted < rest.len() {
                rest.select_nth_unstable_by(end - sorted - 1, by);
            }
            rest[..end - sorted].sort_unstable_by(by);
            let part = &cands[sorted..end];
            sorted = end;
            let ids: Vec<i64> = part.iter().map(|x| x.1).collect();
            // The filter's values come first: its terms are in the SELECT.
            let mut p = filter.clone();
            p.push(SqlValue::Text(
                serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()),
            ));
            p.push(SqlValue::Text(model.to_string()));
            let mut st = c.prepare_cached(&sql)?;
            let mut rows: std::collections::HashMap<i64, (Signals, i64, bool)> = st
                .query_map(params_from_iter(p), |r| {
                    Ok((
                        r.get::<_, i64>(SIGNAL_N)?,
                        (
                            read_signals(r)?,
                            r.get::<_, Option<i64>>(SIGNAL_N + 1)?.unwrap_or(0),
                            r.get::<_, bool>(SIGNAL_N + 2)?,
                        ),
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            for &(sim, rowid, seq, entry) in part {
                match rows.remove(&rowid) {
                    Some((s, now, pass)) if now == seq => {
                        if pass {
                            hits.push((s, sim));
                        }
                    }
                    _ => stale.push((entry, rowid, seq)),
                }
            }
        }
        self.copies.drop_stale(model, q.view.as_ref(), &stale);
        crate::store::sort_similar(&mut hits);
        hits.truncate(limit);
        Ok(hits)
    }
}

#[cfg(feature = "ann")]
impl SqliteStore {
    /// Vector search through the HNSW index: over-fetch, then check each
    /// hit against its row (view, filter, expiry, model) and score it with
    /// the stored vector. `None` when the index cannot serve the query now
    /// (missing, or being built in the background): the caller scans.
    fn search_ann(
        &self,
        c: &mut Connection,
        q: &Query,
        model: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Option<Vec<(Signals, f32)>>> {
        let Some((version, epoch, _, dim)) = counters(c, model)? else {
            return Ok(Some(Vec::new()));
        };
        if dim != query.len() {
            return Ok(Some(Vec::new()));
        }
        // The common case: this process's copy is current, and searches
        // share it.
        {
            let g = self.ann.loaded.read().unwrap_or_else(|p| p.into_inner());
            if let Some(a) = g.get(model)
                && a.epoch == epoch
                && a.version >= version
            {
                return self.search_copy(c, q, model, query, limit, a);
            }
        }
        let mut g = self.ann.loaded.write().unwrap_or_else(|p| p.into_inner());
        if g.get(model).is_none_or(|a| a.epoch != epoch) {
            g.remove(model);
            if ann::building(&self.ann, model) {
                return Ok(None);
            }
            match ann::Ann::load(c, &self.path, model)? {
                Some(a) if a.epoch == epoch => {
                    g.insert(model.to_string(), a);
                }
                _ => {
                    drop(g);
                    self.build_index(model);
                    return Ok(None);
                }
            }
        }
        let a = g.get_mut(model).expect("present");
        if !a.sync(c, model, version)? {
            g.remove(model);
            drop(g);
            self.build_index(model);
            return Ok(None);
        }
        if a.worth_saving() {
            // Best effort: a refused save means a forget happened; the next
            // search drops this copy.
            let _ = a.save(c, model);
        }
        self.search_copy(c, q, model, query, limit, a)
    }

    /// Searches a current copy of the index: over-fetches by how much of
    /// the index the view holds, checks and rescores each hit against its
    /// row, and widens the search until the view yields `limit` hits.
    fn search_copy(
        &self,
        c: &mut Connection,
        q: &Query,
        model: &str,
        query: &[f32],
        limit: usize,
        a: &ann::Ann,
    ) -> Result<Option<Vec<(Signals, f32)>>> {
        let total = a.index.size();
        let view = self.view_size(c, q)?.max(1);
        let mut k = (limit * 2 * total.div_ceil(view)).max(64);
        for _ in 0..4 {
            let found = a.search(query, k)?;
            let hits = self.rescore(c, q, model, query, &found)?;
            if hits.len() >= limit || k >= total {
                let mut hits = hits;
                crate::store::sort_similar(&mut hits);
                hits.truncate(limit);
                return Ok(Some(hits));
            }
            k *= 4;
        }
        Ok(None)
    }

    /// How many vectors this process's copy of `model`'s HNSW index holds
    /// (`None` when none is loaded).
    pub fn vector_index_size(&self, model: &str) -> Option<usize> {
        let g = self.ann.loaded.read().unwrap_or_else(|p| p.into_inner());
        g.get(model).map(|a| a.index.size())
    }

    /// Starts building `model`'s index from the store in the background.
    fn build_index(&self, model: &str) {
        let (path, opts) = (self.path.clone(), self.opts.clone());
        ann::build_in_background(&self.ann, &self.path, model, move || {
            super::open_conn(&path, &opts)
        });
    }

    /// The rows of `found` that `q` selects, with their exact similarity.
    fn rescore(
        &self,
        c: &Connection,
        q: &Query,
        model: &str,
        query: &[f32],
        found: &[(i64, f32)],
    ) -> Result<Vec<(Signals, f32)>> {
        let ids: Vec<i64> = found.iter().map(|f| f.0).collect();
        let mut p = vec![SqlValue::Text(
            serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()),
        )];
        let w = where_sql(q, false, &mut p);
        p.push(SqlValue::Text(model.to_string()));
        let mut st = c.prepare_cached(&format!(
            "SELECT {SIGNAL_COLS}, m.embedding FROM json_each(?) AS j CROSS JOIN memories m
             ON m.rowid = j.value WHERE {w} AND m.embedding_model = ?"
        ))?;
        let rows = st.query_map(params_from_iter(p), |r| {
            let s = read_signals(r)?;
            let sim = match r.get_ref(SIGNAL_N)? {
                rusqlite::types::ValueRef::Blob(b) if b.len() == query.len() * 4 => {
                    crate::embed::dot_bytes(query, b)
                }
                _ => f32::MIN,
            };
            Ok((s, sim))
        })?;
        let mut out = Vec::new();
        for r in rows {
            let (s, sim) = r?;
            if sim > f32::MIN {
                out.push((s, sim));
            }
        }
        Ok(out)
    }

    /// Deletes the index side files of the models whose vectors were just
    /// forgotten (the rows are gone; the next large search builds the index
    /// again, in the background), so no forgotten vector stays on disk.
    pub(super) fn forget_in_index(&self, vectors: &[(String, i64)]) -> Result<()> {
        let mut g = self.ann.loaded.write().unwrap_or_else(|p| p.into_inner());
        for (model, _) in vectors {
            g.remove(model);
            let path = ann::side_file(&self.path, model);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("removing {}", path.display()), e)),
            }
        }
        Ok(())
    }
}

impl VectorSearch for SqliteStore {
    fn pending_vectors(
        &self,
        model: &str,
        ids: Option<&[String]>,
        limit: usize,
    ) -> Result<Vec<PendingVector>> {
        let c = self.conn()?;
        let lim = limit.min(i64::MAX as usize) as i64;
        let cols = "m.rowid, m.id, m.checksum, m.content, m.scope, m.kind, m.session, m.created_at";
        let read = |r: &Row<'_>| -> rusqlite::Result<(
            i64,
            PendingVector,
            String,
            String,
            Option<String>,
            i64,
        )> {
            Ok((
                r.get(0)?,
                PendingVector {
                    id: r.get(1)?,
                    checksum: r.get(2)?,
                    content: r.get(3)?,
                    before: None,
                },
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        };
        let mut rows: Vec<_> = match ids {
            Some(ids) => c
                .prepare_cached(&format!(
                    "SELECT {cols} FROM json_each(?1) AS j CROSS JOIN memories m ON m.id = j.value
                     WHERE m.embedding_model IS NOT ?2 ORDER BY m.rowid LIMIT ?3"
                ))?
                .query_map(
                    params![
                        serde_json::to_string(ids).unwrap_or_else(|_| "[]".into()),
                        model,
                        lim
                    ],
                    read,
                )?
                .collect::<rusqlite::Result<_>>()?,
            None => c
                .prepare_cached(&format!(
                    "SELECT {cols} FROM memories m WHERE m.embedding_model IS NULL ORDER BY m.embedding_model, m.rowid LIMIT ?"
                ))?
                .query_map([lim], read)?
                .collect::<rusqlite::Result<_>>()?,
        };
        if ids.is_none() && rows.len() < limit {
            let more: Vec<_> = c
                .prepare_cached(&format!(
                    "SELECT {cols} FROM memories m WHERE m.embedding_model < ?1 OR m.embedding_model > ?1 ORDER BY m.rowid LIMIT ?2"
                ))?
                .query_map(params![model, lim - rows.len() as i64], read)?
                .collect::<rusqlite::Result<_>>()?;
            rows.extend(more);
        }
        let mut before = c.prepare_cached(
            "SELECT content FROM memories m WHERE m.scope = ?1 AND m.kind = 'conversation'
             AND m.session IS ?2 AND (m.created_at < ?3 OR (m.created_at = ?3 AND m.id < ?4))
             ORDER BY m.created_at DESC, m.id DESC LIMIT 1",
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for (_, mut p, scope, kind, session, created) in rows {
            if kind == "conversation" {
                p.before = before
                    .query_row(params![scope, session, created, p.id], |r| r.get(0))
                    .optional()?;
            }
            out.push(p);
        }
        Ok(out)
    }

    fn vector_counts(&self, model: &str) -> Result<VectorCounts> {
        let c = self.conn()?;
        // One statement, one snapshot: a batch stored between two counts
        // would show as neither waiting nor done.
        let (vectors, all): (i64, i64) = c
            .prepare_cached(
                "SELECT COUNT(*) FILTER (WHERE embedding_model = ?), COUNT(*) FROM memories",
            )?
            .query_row([model], |r| Ok((r.get(0)?, r.get(1)?)))?;
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
                .prepare_cached("SELECT dim FROM vector_models WHERE model = ?")?
                .query_row([model], |r| r.get(0))
                .optional()?;
            search::check_vectors(model, dim, known.map(|d| d as usize), &[])?;
            if known.is_none() {
                tx.prepare_cached("INSERT INTO vector_models (model, dim) VALUES (?, ?)")?
                    .execute(params![model, dim as i64])?;
            }
            let seq: i64 = tx
                .prepare_cached(
                    "UPDATE vector_models SET version = version + 1 WHERE model = ? RETURNING version",
                )?
                .query_row([model], |r| r.get(0))?;
            let mut st = tx.prepare_cached(
                "UPDATE memories SET embedding_model = ?, embedding = ?, vector_seq = ?
                 WHERE id = ? AND checksum = ?",
            )?;
            let mut n = 0;
            for (id, checksum, v) in items {
                n += st.execute(params![model, crate::embed::to_bytes(v), seq, id, checksum])?;
            }
            Ok(n)
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
        let c = self.conn()?;
        #[cfg(feature = "ann")]
        let mut c = c;
        let size = self.view_size(&c, q)?;
        #[cfg(feature = "ann")]
        if size >= self.opts.ann_min_view
            && let Some(hits) = self.search_ann(&mut c, q, model, query, limit)?
        {
            return Ok(hits);
        }
        // This process's copy of the view's vectors, when they fit.
        let cap = self.opts.vector_cache_bytes;
        if cap > 0 {
            let Some((version, epoch, _, dim)) = counters(&c, model)? else {
                return Ok(Vec::new());
            };
            if dim != query.len() {
                return Ok(Vec::new());
            }
            let found = self.copies.scan(
                &c,
                model,
                (version, epoch, dim),
                (q.view.as_ref(), size),
                cap,
                query,
            )?;
            if let Some(cands) = found {
                return self.check_hits(&c, q, model, cands, limit);
            }
        }
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        p.push(SqlValue::Text(model.to_string()));
        let sql = format!(
            "SELECT m.rowid, m.embedding FROM memories m WHERE {w} AND +m.embedding_model = ?"
        );
        let mut best = search::TopK::new(limit);
        {
            let mut st = c.prepare_cached(&sql)?;
            let mut rows = st.query(params_from_iter(p))?;
            while let Some(r) = rows.next()? {
                let rowid: i64 = r.get(0)?;
                match r.get_ref(1)? {
                    rusqlite::types::ValueRef::Blob(b) if b.len() == query.len() * 4 => {
                        best.push(rowid, crate::embed::dot_bytes(query, b));
                    }
                    _ => {}
                }
            }
        }
        let sims: std::collections::HashMap<i64, f32> = best.into_vec().into_iter().collect();
        let ids: Vec<i64> = sims.keys().copied().collect();
        let mut st = c.prepare_cached(&format!(
            "SELECT {SIGNAL_COLS}, m.rowid FROM json_each(?) AS j CROSS JOIN memories m ON m.rowid = j.value"
        ))?;
        let json = serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into());
        let mut hits: Vec<(Signals, f32)> = st
            .query_map([json], |r| {
                let s = read_signals(r)?;
                let rowid: i64 = r.get(SIGNAL_N)?;
                Ok((s, sims.get(&rowid).copied().unwrap_or(0.0)))
            })?
            .collect::<rusqlite::Result<_>>()?;
        crate::store::sort_similar(&mut hits);
        Ok(hits)
    }

    fn clear_vectors(&self, keep: Option<&str>) -> Result<u64> {
        let dropped: Vec<String> = self
            .vector_models()?
            .into_iter()
            .map(|(m, _, _)| m)
            .filter(|m| Some(m.as_str()) != keep)
            .collect();
        let n = self.write(|tx| {
            let n = tx.execute(
                "UPDATE memories SET embedding_model = NULL, embedding = NULL
                 WHERE embedding_model IS NOT NULL AND embedding_model IS NOT ?1",
                [keep],
            )?;
            tx.execute(
                "UPDATE archive SET embedding_model = NULL, embedding = NULL
                 WHERE embedding_model IS NOT NULL AND embedding_model IS NOT ?1",
                [keep],
            )?;
            tx.execute("DELETE FROM vector_models WHERE model IS NOT ?1", [keep])?;
            Ok(n as u64)
        })?;
        // Their copies and indexes go too.
        self.copies.keep_only(keep);
        #[cfg(feature = "ann")]
        {
            let mut g = self.ann.loaded.write().unwrap_or_else(|p| p.into_inner());
            for m in &dropped {
                g.remove(m);
                let _ = std::fs::remove_file(ann::side_file(&self.path, m));
            }
        }
        #[cfg(not(feature = "ann"))]
        let _ = dropped;
        Ok(n)
    }

    fn vector_models(&self) -> Result<Vec<(String, usize, u64)>> {
        let c = self.conn()?;
        let mut st = c.prepare_cached(
            "SELECT v.model, v.dim, (SELECT COUNT(*) FROM memories m WHERE m.embedding_model = v.model)
             FROM vector_models v ORDER BY v.model",
        )?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)? as usize,
                    r.get::<_, i64>(2)? as u64,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}
