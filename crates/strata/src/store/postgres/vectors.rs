//! Vectors: those waiting, storing them (one length per model), exact
//! search. Vectors live in `memories.embedding` (little-endian f32,
//! normalised); no pgvector is needed.

use super::*;

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
        let cols = "m.id, m.checksum, m.content, m.scope, m.kind, m.session, m.created_at";
        let rows = match ids {
            Some(ids) => cx.query(
                &format!(
                    "SELECT {cols} FROM memories m WHERE m.id = ANY($1::text[])
                     AND m.embedding_model IS DISTINCT FROM $2::text ORDER BY m.seq LIMIT $3::int8"
                ),
                &[&ids, &model, &lim],
            )?,
            None => {
                let mut rows = cx.query(
                    &format!(
                        "SELECT {cols} FROM memories m WHERE m.embedding_model IS NULL ORDER BY m.seq LIMIT $1::int8"
                    ),
                    &[&lim],
                )?;
                if rows.len() < limit {
                    let more = lim - rows.len() as i64;
                    rows.extend(cx.query(
                        &format!(
                            "SELECT {cols} FROM memories m WHERE m.embedding_model <> $1::text ORDER BY m.seq LIMIT $2::int8"
                        ),
                        &[&model, &more],
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

    fn count_pending(&self, model: &str) -> Result<u64> {
        let mut c = self.conn()?;
        let n: i64 = c
            .cx()
            .query_one(
                "SELECT COUNT(*) FROM memories WHERE embedding_model IS DISTINCT FROM $1::text",
                &[&model],
            )?
            .get(0);
        Ok(n as u64)
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
            let mut n = 0;
            for (id, checksum, v) in items {
                n += tx.execute(
                    "UPDATE memories SET embedding_model = $1, embedding = $2, vector_seq = $3
                     WHERE id = $4 AND checksum = $5",
                    &[&model, &crate::embed::to_bytes(v), &seq, id, checksum],
                )? as usize;
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
        let mut c = self.conn()?;
        let mut cx = c.cx();
        let mut p = Vec::new();
        let w = where_sql(q, false, &mut p);
        let m = sql::bind(&mut p, model.to_string());
        let rows = cx.query_p(
            &format!(
                "SELECT m.seq, m.embedding FROM memories m WHERE {w} AND m.embedding_model = {m}::text"
            ),
            &p,
        )?;
        let mut best = search::TopK::new(limit);
        for r in &rows {
            let seq: i64 = r.get(0);
            let b: &[u8] = r.get(1);
            if b.len() == query.len() * 4 {
                best.push(seq, crate::embed::dot_bytes(query, b));
            }
        }
        let sims: std::collections::HashMap<i64, f32> = best.into_vec().into_iter().collect();
        let seqs: Vec<i64> = sims.keys().copied().collect();
        let rows = cx.query(
            &format!("SELECT {SIGNAL_COLS}, m.seq FROM memories m WHERE m.seq = ANY($1::int8[])"),
            &[&seqs],
        )?;
        let mut hits = rows
            .iter()
            .map(|r| {
                let s = read_signals(r)?;
                let seq: i64 = r.get(7);
                Ok((s, sims.get(&seq).copied().unwrap_or(0.0)))
            })
            .collect::<Result<Vec<_>>>()?;
        crate::store::sort_similar(&mut hits);
        Ok(hits)
    }

    fn clear_vectors(&self, keep: Option<&str>) -> Result<u64> {
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
