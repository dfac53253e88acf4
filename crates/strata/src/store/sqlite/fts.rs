//! The SQLite backend's full-text dialect and index: FTS5 match
//! expressions, the scope terms that put a view into the index, and the
//! postings the search pipeline ranks with (`store/search.rs`).
//!
//! Why scope terms: FTS5 scores every match before a `WHERE scope = ?` on the
//! joined table runs, so a scoped query costs as much as an unscoped one
//! (PERF-NOTES: 5× slower at 100k rows, 9× at 1M). Each row therefore also
//! indexes one term per scope prefix (`p<hash>`) and one for its exact scope
//! (`x<hash>`); a view becomes `scopes : (x… OR p…)` inside the MATCH. The
//! store still checks the view on the joined row, so a hash collision can
//! cost speed, never isolation.

use crate::scope::{Scope, View};

use super::*;

/// An FTS5 expression OR-ing the quoted terms, or `None` when there are none.
/// Terms are alphanumeric, so quoting cannot be broken out of.
pub fn fts_terms_expr(terms: &[String]) -> Option<String> {
    if terms.is_empty() {
        return None;
    }
    Some(
        terms
            .iter()
            .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The terms a memory in `scope` indexes in the FTS `scopes` column.
pub fn scope_terms(scope: &Scope) -> String {
    let mut out = String::new();
    for p in scope.prefixes() {
        out.push_str(&format!("p{} ", fnv1a(p)));
    }
    out.push_str(&format!("x{}", fnv1a(scope.as_str())));
    out
}

/// The FTS5 expression selecting the rows a view may see.
pub fn view_expr(view: &View) -> String {
    let parts: Vec<String> = view
        .entries()
        .iter()
        .map(|e| {
            if e.subtree {
                format!("p{}", fnv1a(e.scope.as_str()))
            } else {
                format!("x{}", fnv1a(e.scope.as_str()))
            }
        })
        .collect();
    parts.join(" OR ")
}

/// The text index's answers to BM25 ([`search::text_search`]) for one
/// query: one FTS5 lookup per term, inside the view's scope terms; the
/// view's size from `scope_counts`; the candidates' signals checked against
/// view, expiry and filter on the row itself.
pub(super) struct FtsPostings<'a> {
    c: &'a Connection,
    q: &'a Query,
    /// `scopes : (…) AND `, or empty without a view.
    scope_part: String,
}

impl search::Postings for FtsPostings<'_> {
    type Doc = i64;

    fn docs_with(&mut self, term: &str) -> Result<Vec<i64>> {
        let Some(expr) = fts::fts_terms_expr(&[term.to_string()]) else {
            return Ok(Vec::new());
        };
        let mut st = self
            .c
            .prepare_cached("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?")?;
        let rows = st.query_map([format!("{}content : ({expr})", self.scope_part)], |r| {
            r.get::<_, i64>(0)
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn doc_count(&mut self) -> Result<usize> {
        let mut p = Vec::new();
        let v = view_sql(self.q.view.as_ref(), "m.", &mut p);
        Ok(self
            .c
            .prepare_cached(&format!(
                "SELECT COALESCE(SUM(m.n), 0) FROM scope_counts m WHERE {v}"
            ))?
            .query_row(params_from_iter(p), |r| r.get::<_, i64>(0))? as usize)
    }

    fn learned(&mut self) -> Result<std::collections::HashSet<i64>> {
        let mut p = Vec::new();
        let v = view_sql(self.q.view.as_ref(), "m.", &mut p);
        // The partial index holds only learned memories: a few, however
        // large the view.
        let mut st = self.c.prepare_cached(&format!(
            "SELECT m.rowid FROM memories m INDEXED BY memories_learned
             WHERE m.source = 'learned' AND {v}"
        ))?;
        let rows = st.query_map(params_from_iter(p), |r| r.get::<_, i64>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn signals(&mut self, docs: &[i64]) -> Result<Vec<(i64, Signals)>> {
        let mut p = vec![SqlValue::Text(
            serde_json::to_string(docs).unwrap_or_else(|_| "[]".into()),
        )];
        let w = where_sql(self.q, false, &mut p);
        let sql = format!(
            // CROSS JOIN keeps SQLite from walking the scope index instead
            // of looking each candidate up by rowid.
            "SELECT {SIGNAL_COLS}, m.rowid FROM json_each(?) AS j CROSS JOIN memories m
             ON m.rowid = j.value WHERE {w}"
        );
        let mut st = self.c.prepare_cached(&sql)?;
        let rows = st.query_map(params_from_iter(p), |r| {
            Ok((r.get::<_, i64>(SIGNAL_N)?, read_signals(r)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

impl TextSearch for SqliteStore {
    fn search_signals(
        &self,
        q: &Query,
        terms: &[String],
        limit: usize,
    ) -> Result<Vec<(Signals, f64)>> {
        if q.view.as_ref().is_some_and(|v| v.is_empty()) {
            return Ok(Vec::new());
        }
        let c = self.conn()?;
        let scope_part = q
            .view
            .as_ref()
            .map(|v| format!("scopes : ({}) AND ", fts::view_expr(v)))
            .unwrap_or_default();
        search::text_search(
            &mut FtsPostings {
                c: &c,
                q,
                scope_part,
            },
            terms,
            limit,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text;

    #[test]
    fn terms_become_one_quoted_or() {
        assert_eq!(
            fts_terms_expr(&text::query_terms("Berlin move, Berlin!")).unwrap(),
            "\"berlin\" OR \"move\""
        );
        assert!(fts_terms_expr(&text::query_terms("?!")).is_none());
    }

    /// FTS5's own tokens (porter over unicode61 with diacritics removed) for
    /// each text, read back through `fts5vocab`.
    fn fts5_tokens(texts: &[&str]) -> Vec<Vec<String>> {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE VIRTUAL TABLE f USING fts5(x, tokenize='porter unicode61 remove_diacritics 2');
             CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance');",
        )
        .unwrap();
        for (i, t) in texts.iter().enumerate() {
            c.execute(
                "INSERT INTO f(rowid, x) VALUES (?, ?)",
                rusqlite::params![i as i64, t],
            )
            .unwrap();
        }
        let mut out = vec![Vec::new(); texts.len()];
        let mut st = c
            .prepare("SELECT doc, term FROM v ORDER BY doc, offset")
            .unwrap();
        let rows = st
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))
            .unwrap();
        for r in rows {
            let (d, t) = r.unwrap();
            out[d as usize].push(t);
        }
        out
    }

    #[test]
    fn stems_like_fts5() {
        let words_list = "caresses ponies ties caress cats feed agreed plastered bled motoring sing conflated troubled \
            sized hopping tanned falling hissing fizzed failing filing happy sky relational conditional rational \
            valenci hesitanci digitizer conformabli radicalli differentli vileli analogousli vietnamization \
            predication operator feudalism decisiveness hopefulness callousness formaliti sensitiviti sensibiliti \
            triplicate formative formalize electriciti electrical hopeful goodness revival allowance inference \
            airliner gyroscopic adjustable defensible irritant replacement adjustment dependent adoption homologou \
            communism activate angulariti homologous effective bowdlerize probate rate cease controll roll \
            agreement apology bubbly complement complimenting document elements ecology dyed dying news \
            generous general generalization eed aed oed ing sses ies yes is as us tie lie die spying \
            running runner ran generously communication community apologies biology biologist \
            whispering whispered skiing skies cooking cookies studies studying meeting meetings";
        let words: Vec<&str> = words_list.split_whitespace().collect();
        let fts = fts5_tokens(&words);
        for (w, f) in words.iter().zip(&fts) {
            let ours: Vec<String> = text::words(w).map(|t| text::stem(&t)).collect();
            assert_eq!(&ours, f, "{w}");
        }
    }

    #[test]
    fn tokenizes_like_fts5() {
        let texts = [
            "The café's crème brûlée costs €3.50 (naïve coöperation)",
            "किताबें पढ़ना अच्छा है",
            "Ünïcödé ÅNGSTRÖM Straße ΆΛΦΑ Ελληνικά",
            "e\u{301}cole decomposed and x\u{308}",
            "mixed123numbers and 42 and 3.14 and t-42 snake_case CamelCase",
            "emoji 😀 and CJK 日本語のテキスト and Hangul 한국어",
            "apostrophes don't won't it's",
        ];
        let fts = fts5_tokens(&texts);
        for (t, f) in texts.iter().zip(&fts) {
            let ours: Vec<String> = text::words(t).map(|w| text::stem(&w)).collect();
            assert_eq!(&ours, f, "{t}");
        }
    }

    #[test]
    fn scope_terms_cover_prefixes() {
        let s = Scope::parse("project/a/x").unwrap();
        let t = scope_terms(&s);
        assert_eq!(t.split(' ').count(), 4);
        let v = View::parse(&["project/a/**"]).unwrap();
        assert!(t.contains(&view_expr(&v)));
    }
}
