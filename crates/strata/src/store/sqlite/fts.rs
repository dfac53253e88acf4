//! The SQLite backend's full-text dialect and index: FTS5 match
//! expressions, the scope terms that put a view into the index, and the
//! postings the search pipeline ranks with (`store/search.rs`).
//!
//! Why scope terms: FTS5 scores every match before a `WHERE scope = ?` on the
//! joined table runs, so a scoped query costs as much as an unscoped one
//! (PERF-NOTES: 5× slower at 100k rows, 9× at 1M). Each row therefore also
//! indexes one term per scope prefix (`p<hash>`) and one for its exact scope
//! (`x<hash>`); a wide view becomes `scopes : (x… OR p…)` inside the MATCH.
//! The store still checks the view on the joined row, so a hash collision
//! can cost speed, never isolation.
//!
//! Why scoped terms (schemas 9 and 10): a term's postings in the whole
//! store grow with every other project's memories. The index therefore
//! holds each distinct stem of a memory's content joined to its exact
//! scope's number ([`scoped_term`]: `stem_12`, the number from
//! `scope_ids`), and nothing else of the content. A view of at most
//! [`SCOPED_MAX`] scopes holding memories reads just its own postings,
//! `scoped : (stem_3 OR stem_12)`; a wider view reads the stem's postings
//! in every scope, `scopes : (…) AND scoped : ("stem_" *)` (without the
//! scope terms when the view holds every scope with memories), a prefix
//! query: stems hold no `_` (`text::words` splits there), so the prefix
//! `stem_` is that stem's and no other's. Schema 9 kept the stemmed
//! content beside `scoped` for the wide views; version 10 dropped it
//! (every posting was written twice) and numbered scopes instead of
//! hashing them (a token's bytes are most of the index).
//!
//! Stems are `text::stem`'s, as the PostgreSQL backend's postings are, and
//! the index's tokenizer only folds them (`unicode61`, no stemmer): a
//! change to `text::words` or `text::stem` changes these tokens, and a
//! delete must pass the tokens that were indexed, so it needs a migration
//! that rebuilds the index (as versions 9 and 10 did,
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
/// reads each stem's tokens in every scope by prefix, within its scope
/// terms: naming hundreds of scopes would cost more. (Chosen against
/// schema 9's lookup of the stemmed content; not measured again since.)
pub const SCOPED_MAX: usize = 32;

/// The token `stem` of a memory in the scope numbered `scope_id`
/// (`scope_ids`) is indexed under in the `scoped` column: `stem_12`. Stems
/// hold no `_`, so the token names its stem and scope unambiguously, and
/// `stem_` is a prefix of that stem's tokens alone.
pub fn scoped_term(stem: &str, scope_id: i64) -> String {
    format!("{stem}_{scope_id}")
}

/// The `scoped` column's text for a memory of `content` in the scope
/// numbered `scope_id`: each distinct stem of the content as
/// [`scoped_term`].
pub fn scoped_terms(content: &str, scope_id: i64) -> String {
    // Written on every insert and delete: each distinct word is stemmed
    // once, and the scope's number is formatted once.
    let mut words: Vec<String> = crate::text::words(content).collect();
    words.sort_unstable();
    words.dedup();
    let mut stems: Vec<String> = words.iter().map(|w| crate::text::stem(w)).collect();
    stems.sort_unstable();
    stems.dedup();
    let suffix = scoped_term("", scope_id);
    let mut out = String::with_capacity(stems.iter().map(|s| s.len() + suffix.len() + 1).sum());
    for s in stems {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&s);
        out.push_str(&suffix);
    }
    out
}

/// The number `scope_ids` gives `scope`, given now when it has none yet
/// (numbers are never taken back: the index may hold them).
pub(super) fn scope_id(tx: &Connection, scope: &Scope) -> Result<i64> {
    if let Some(id) = known_scope_id(tx, scope)? {
        return Ok(id);
    }
    tx.prepare_cached("INSERT INTO scope_ids (scope) VALUES (?)")?
        .execute([scope.as_str()])?;
    Ok(tx.last_insert_rowid())
}

/// The number `scope_ids` gave `scope`, if any.
pub(super) fn known_scope_id(c: &Connection, scope: &Scope) -> Result<Option<i64>> {
    Ok(
        c.prepare_cached("SELECT id FROM scope_ids WHERE scope = ?")?
            .query_row([scope.as_str()], |r| r.get(0))
            .optional()?,
    )
}

/// The numbers of the scopes holding a view's active memories (from
/// `scope_counts`), or `None` when there are more than [`SCOPED_MAX`].
fn view_scope_ids(c: &Connection, view: &View) -> Result<Option<Vec<i64>>> {
    let mut p = Vec::new();
    let v = view_sql(Some(view), "m.", &mut p);
    let mut st = c.prepare_cached(&format!(
        "SELECT i.id FROM scope_counts m JOIN scope_ids i ON i.scope = m.scope WHERE {v} LIMIT {}",
        SCOPED_MAX + 1
    ))?;
    let ids: Vec<i64> = st
        .query_map(params_from_iter(p), |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok((ids.len() <= SCOPED_MAX).then_some(ids))
}

/// Whether every scope holding active memories (`scope_counts`) is in
/// the view. A write between this and the lookup can only add candidates
/// outside the view, which the row check drops.
fn view_covers_store(c: &Connection, view: &View) -> Result<bool> {
    let mut p = Vec::new();
    let v = view_sql(Some(view), "m.", &mut p);
    Ok(c.prepare_cached(&format!(
        "SELECT NOT EXISTS (SELECT 1 FROM scope_counts m WHERE NOT {v})"
    ))?
    .query_row(params_from_iter(p), |r| r.get(0))?)
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
/// view's scopes, or of all its scoped tokens inside the view's scope
/// terms; the view's size from `scope_counts`; the candidates' signals
/// checked against view, expiry and filter on the row itself.
pub(super) struct FtsPostings<'a> {
    c: &'a Connection,
    q: &'a Query,
    within: Within,
}

/// Where [`FtsPostings`] looks a term up.
enum Within {
    /// Under these scopes' numbers (the scopes holding the view's
    /// memories).
    Scopes(Vec<i64>),
    /// Under any scope, within `scopes : (…) AND ` (empty without a view).
    Terms(String),
}

impl search::Postings for FtsPostings<'_> {
    type Doc = i64;

    fn docs_with(&mut self, term: &str) -> Result<Vec<i64>> {
        let stem = crate::text::stem(term);
        let expr = match &self.within {
            Within::Scopes(ids) => {
                let tokens: Vec<String> = ids.iter().map(|id| scoped_term(&stem, *id)).collect();
                fts::fts_terms_expr(&tokens).map(|e| format!("scoped : ({e})"))
            }
            // A prefix query: the stem's tokens in every scope.
            Within::Terms(scope_part) => (!stem.is_empty()).then(|| {
                format!(
                    "{scope_part}scoped : (\"{}_\" *)",
                    stem.replace('"', "\"\"")
                )
            }),
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
            Some(v) => match view_scope_ids(&c, v)? {
                Some(ids) => Within::Scopes(ids),
                // Every memory of the store is in the view: the same
                // postings without ANDing a scope term's list, which is as
                // long as the store (a recall over all 50 projects of the
                // bench, p50 2.7 → 1.7 ms).
                None if view_covers_store(&c, v)? => Within::Terms(String::new()),
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

    /// The tokenizer of the content of strata's text index before schema 10,
    /// whose tokens `text::words` and `text::stem` reproduce.
    const PORTER: &str = "'porter unicode61 remove_diacritics 2'";
    /// The text index's tokenizer since schema 10 (migration 10).
    const INDEX: &str = "\"unicode61 remove_diacritics 2 tokenchars '_'\"";

    /// FTS5's own tokens (by `tokenizer`) for each text, read back through
    /// `fts5vocab`.
    fn fts5_tokens(tokenizer: &str, texts: &[&str]) -> Vec<Vec<String>> {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(&format!(
            "CREATE VIRTUAL TABLE f USING fts5(x, tokenize={tokenizer});
             CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance');"
        ))
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
        let fts = fts5_tokens(PORTER, &words);
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
        let fts = fts5_tokens(PORTER, &texts);
        for (t, f) in texts.iter().zip(&fts) {
            let ours: Vec<String> = text::words(t).map(|w| text::stem(&w)).collect();
            assert_eq!(&ours, f, "{t}");
        }
    }

    #[test]
    fn scoped_terms_pass_fts5_unchanged() {
        let text = "The café's crème brûlée: running, happiness, generalization, 42, \
            snake_case, 日本語のテキスト, किताबें, sing, agreed, Ünïcödé ÅNGSTRÖM Straße ΆΛΦΑ";
        let ours = scoped_terms(text, 7);
        let tokens: Vec<&str> = ours.split(' ').collect();
        assert_eq!(tokens.len(), text::stems(text).len());
        // The index's tokenizer keeps each as one token, as written.
        assert_eq!(fts5_tokens(INDEX, &[ours.as_str()])[0], tokens);
        let other = scoped_terms(text, 12);
        assert!(tokens.iter().all(|t| !other.split(' ').any(|o| o == *t)));
        assert!(tokens.contains(&"run_7"));
        assert!(tokens.contains(&"snake_7") && tokens.contains(&"case_7"));
    }

    /// A stem's prefix query finds that stem in every scope and no other
    /// stem, however the stems begin (`run`, `runner`, `run42`) and
    /// whatever the scope's number.
    #[test]
    fn a_stem_prefix_names_that_stem_alone() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(&format!(
            "CREATE VIRTUAL TABLE f USING fts5(scoped, content='', detail=column, tokenize={INDEX});"
        ))
        .unwrap();
        let docs = [
            (1, "run", 1),
            (2, "runner", 1),
            (3, "run42 runs", 2),
            (4, "running", 13),
            (5, "ran rune", 130),
            (6, "r u n", 1),
        ];
        for (rowid, text, scope) in docs {
            c.execute(
                "INSERT INTO f(rowid, scoped) VALUES (?, ?)",
                rusqlite::params![rowid, scoped_terms(text, scope)],
            )
            .unwrap();
        }
        let find = |q: &str| -> Vec<i64> {
            c.prepare("SELECT rowid FROM f WHERE f MATCH ? ORDER BY rowid")
                .unwrap()
                .query_map([q], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        // "run", "runs" and "running" stem to `run`.
        assert_eq!(find("scoped : (\"run_\" *)"), [1, 3, 4]);
        assert_eq!(find("scoped : (\"runner_\" *)"), [2]);
        assert_eq!(find("scoped : (\"run42_\" *)"), [3]);
        assert_eq!(find("scoped : (\"rune_\" *)"), [5]);
        assert_eq!(find("scoped : (\"run_1\")"), [1]);
        assert_eq!(find("scoped : (\"run_1\" OR \"run_13\")"), [1, 4]);
    }

    #[test]
    fn a_view_covers_the_store_when_it_holds_every_counted_scope() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE TABLE scope_counts (scope TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
             INSERT INTO scope_counts VALUES ('project/a', 3), ('project/b/x', 1), ('global', 2);",
        )
        .unwrap();
        let covers = |v: &[&str]| view_covers_store(&c, &View::parse(v).unwrap()).unwrap();
        assert!(covers(&["project/**", "global"]));
        assert!(covers(&["project/a", "project/b/**", "global"]));
        assert!(!covers(&["project/**"]));
        assert!(!covers(&["project/a/**", "project/b/x", "task/**"]));
        assert!(!covers(&["project/b", "project/a", "global"]));
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
