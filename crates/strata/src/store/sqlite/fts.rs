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
//!
//! Why scoped terms (schema 9): `scopes : (x…) AND content : (term)` still
//! walks the term's postings in the whole store, so a project's recall
//! cost grew with every other project's memories. Each row therefore also
//! indexes, in `scoped`, each distinct stem of its content joined to its
//! exact scope ([`scoped_term`]); a view of at most [`SCOPED_MAX`] scopes
//! holding memories reads just its own postings, `scoped : (stem<x> OR
//! stem<y>)`. Stems are `text::stem`'s, as the PostgreSQL backend's postings
//! are: a change to `text::words` or `text::stem` changes these tokens,
//! and a delete must pass the tokens that were indexed, so it needs a
//! migration that rebuilds the index (as version 9 did,
//! [`super::schema::reindex_text`]).

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

/// Most scopes a view's text search names one by one in the `scoped`
/// column. A view whose memories lie in more (a subtree of many projects)
/// reads each term's postings in the whole store within its scope terms,
/// as before schema 9: naming hundreds of scopes would cost more.
pub const SCOPED_MAX: usize = 32;

/// The token `stem` of a memory in the scope hashed `scope_hash` is indexed
/// under in the `scoped` column: the stem, then the hash as 20 digits (a
/// fixed width, so no two pairs make one token). Ending in a digit, it
/// passes FTS5's porter stemmer unchanged.
pub fn scoped_term(stem: &str, scope_hash: u64) -> String {
    format!("{stem}{scope_hash:020}")
}

/// The `scoped` column's text for a memory of `content` in `scope`: each
/// distinct stem of the content as [`scoped_term`].
pub fn scoped_terms(content: &str, scope: &Scope) -> String {
    // Written on every insert and delete: each distinct word is stemmed
    // once, and the scope's digits are formatted once.
    let mut words: Vec<String> = crate::text::words(content).collect();
    words.sort_unstable();
    words.dedup();
    let mut stems: Vec<String> = words.iter().map(|w| crate::text::stem(w)).collect();
    stems.sort_unstable();
    stems.dedup();
    let digits = scoped_term("", fnv1a(scope.as_str()));
    let mut out = String::with_capacity(stems.iter().map(|s| s.len() + 21).sum());
    for s in stems {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&s);
        out.push_str(&digits);
    }
    out
}

/// The hashes of the scopes holding a view's active memories (from
/// `scope_counts`), or `None` when there are more than [`SCOPED_MAX`].
fn view_scope_hashes(c: &Connection, view: &View) -> Result<Option<Vec<u64>>> {
    let mut p = Vec::new();
    let v = view_sql(Some(view), "", &mut p);
    let mut st = c.prepare_cached(&format!(
        "SELECT scope FROM scope_counts WHERE {v} LIMIT {}",
        SCOPED_MAX + 1
    ))?;
    let scopes: Vec<String> = st
        .query_map(params_from_iter(p), |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok((scopes.len() <= SCOPED_MAX).then(|| scopes.iter().map(|s| fnv1a(s)).collect()))
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
/// query: one FTS5 lookup per term, of the term's scoped tokens in the
/// view's scopes or inside the view's scope terms; the view's size from
/// `scope_counts`; the candidates' signals checked against view, expiry
/// and filter on the row itself.
pub(super) struct FtsPostings<'a> {
    c: &'a Connection,
    q: &'a Query,
    within: Within,
}

/// Where [`FtsPostings`] looks a term up.
enum Within {
    /// In `scoped`, under these scopes' hashes (the scopes holding the
    /// view's memories).
    Scopes(Vec<u64>),
    /// In `content`, within `scopes : (…) AND ` (empty without a view).
    Terms(String),
}

impl search::Postings for FtsPostings<'_> {
    type Doc = i64;

    fn docs_with(&mut self, term: &str) -> Result<Vec<i64>> {
        let expr = match &self.within {
            Within::Scopes(hashes) => {
                let stem = crate::text::stem(term);
                let tokens: Vec<String> = hashes.iter().map(|h| scoped_term(&stem, *h)).collect();
                fts::fts_terms_expr(&tokens).map(|e| format!("scoped : ({e})"))
            }
            Within::Terms(scope_part) => fts::fts_terms_expr(&[term.to_string()])
                .map(|e| format!("{scope_part}content : ({e})")),
        };
        let Some(expr) = expr else {
            return Ok(Vec::new());
        };
        let mut st = self
            .c
            .prepare_cached("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?")?;
        let rows = st.query_map([expr], |r| r.get::<_, i64>(0))?;
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
        let within = match &q.view {
            Some(v) => match view_scope_hashes(&c, v)? {
                Some(hashes) => Within::Scopes(hashes),
                None => Within::Terms(format!("scopes : ({}) AND ", fts::view_expr(v))),
            },
            None => Within::Terms(String::new()),
        };
        search::text_search(&mut FtsPostings { c: &c, q, within }, terms, limit)
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
    fn scoped_terms_pass_fts5_unchanged() {
        let s = Scope::parse("project/a").unwrap();
        let text = "The café's crème brûlée: running, happiness, generalization, 42, \
            snake_case, 日本語のテキスト, किताबें, sing, agreed";
        let ours = scoped_terms(text, &s);
        let tokens: Vec<&str> = ours.split(' ').collect();
        assert_eq!(tokens.len(), text::stems(text).len());
        // FTS5 (porter over unicode61) keeps each as one token, as written.
        assert_eq!(fts5_tokens(&[ours.as_str()])[0], tokens);
        let other = scoped_terms(text, &Scope::parse("project/b").unwrap());
        assert!(tokens.iter().all(|t| !other.split(' ').any(|o| o == *t)));
        assert!(tokens.contains(&scoped_term("run", fnv1a("project/a")).as_str()));
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
