//! Text search: the `postings` table (one row per distinct stem of a
//! memory, with its scope) answers the shared BM25 pipeline's questions
//! (`store/search.rs`), so PostgreSQL ranks exactly as SQLite and the
//! in-memory store do. PostgreSQL's own `to_tsvector('english', …)` stems
//! differently and is not used.

use std::collections::HashSet;

use super::*;

/// The postings' answers to BM25 ([`search::text_search`]) for one query:
/// one index range per term inside the view, the view's size, and the
/// candidates' signals checked against view, expiry and filter on the row.
struct PgPostings<'a, 'c> {
    cx: &'a mut Cx<'c, Client>,
    q: &'a Query,
    /// The view's learned memories, when the terms' lookup brought them in
    /// the same round trip.
    learned: Option<HashSet<i64>>,
}

impl search::Postings for PgPostings<'_, '_> {
    type Doc = i64;

    fn docs_with(&mut self, term: &str) -> Result<Vec<i64>> {
        let mut p: Vec<P> = vec![Box::new(crate::text::stem(term))];
        let v = view_sql(self.q.view.as_ref(), "p.scope", &mut p);
        let rows = self.cx.query_p(
            &format!("SELECT p.seq FROM postings p WHERE p.term = $1::text AND {v}"),
            &p,
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn docs_with_each(&mut self, terms: &[String]) -> Result<Vec<Vec<i64>>> {
        let stems: Vec<String> = terms.iter().map(|t| crate::text::stem(t)).collect();
        let mut p: Vec<P> = vec![Box::new(stems.clone())];
        let v = view_sql(self.q.view.as_ref(), "p.scope", &mut p);
        let l = view_sql(self.q.view.as_ref(), "m.scope", &mut p);
        // The view's learned memories come along (a NULL term), in the
        // same round trip.
        let rows = self.cx.query_p(
            &format!(
                "SELECT p.term, p.seq FROM postings p WHERE p.term = ANY($1::text[]) AND {v}
                 UNION ALL
                 SELECT NULL, m.seq FROM memories m WHERE m.source = 'learned' AND {l}"
            ),
            &p,
        )?;
        let mut by_stem: std::collections::HashMap<String, Vec<i64>> = Default::default();
        let mut learned = HashSet::new();
        for r in &rows {
            match r.get::<_, Option<String>>(0) {
                Some(term) => by_stem.entry(term).or_default().push(r.get(1)),
                None => {
                    learned.insert(r.get(1));
                }
            }
        }
        self.learned = Some(learned);
        Ok(stems
            .iter()
            .map(|s| by_stem.get(s).cloned().unwrap_or_default())
            .collect())
    }

    fn doc_count(&mut self) -> Result<usize> {
        let mut p = Vec::new();
        let v = view_sql(self.q.view.as_ref(), "m.scope", &mut p);
        let r = self
            .cx
            .query_p(&format!("SELECT COUNT(*) FROM memories m WHERE {v}"), &p)?;
        Ok(r.first().map_or(0, |r| r.get::<_, i64>(0)) as usize)
    }

    fn learned(&mut self) -> Result<HashSet<i64>> {
        if let Some(l) = self.learned.take() {
            return Ok(l);
        }
        let mut p = Vec::new();
        let v = view_sql(self.q.view.as_ref(), "m.scope", &mut p);
        let rows = self.cx.query_p(
            &format!("SELECT m.seq FROM memories m WHERE m.source = 'learned' AND {v}"),
            &p,
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn signals(&mut self, docs: &[i64]) -> Result<Vec<(i64, Signals)>> {
        let mut p: Vec<P> = vec![Box::new(docs.to_vec())];
        let w = where_sql(self.q, false, &mut p);
        let rows = self.cx.query_p(
            &format!(
                "SELECT {SIGNAL_COLS}, m.seq FROM memories m WHERE m.seq = ANY($1::int8[]) AND {w}"
            ),
            &p,
        )?;
        rows.iter()
            .map(|r| Ok((r.get::<_, i64>(SIGNAL_N), read_signals(r)?)))
            .collect()
    }
}

impl TextSearch for PostgresStore {
    fn search_signals(
        &self,
        q: &Query,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(Signals, f64)>> {
        if q.view.as_ref().is_some_and(|v| v.is_empty()) {
            return Ok(Vec::new());
        }
        let mut c = self.conn()?;
        let mut cx = c.cx();
        search::text_search(
            &mut PgPostings {
                cx: &mut cx,
                q,
                learned: None,
            },
            terms,
            limit,
        )
    }
}
