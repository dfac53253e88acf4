//! Text handling shared by the stores: turning a natural-language query into
//! terms, the FTS5 match expression built from them, the scope terms that put
//! a view into the full-text index, and a small BM25 for the in-memory store.
//!
//! Why scope terms: FTS5 scores every match before a `WHERE scope = ?` on the
//! joined table runs, so a scoped query costs as much as an unscoped one
//! (PERF-NOTES: 5× slower at 100k rows, 9× at 1M). Each row therefore also
//! indexes one term per scope prefix (`p<hash>`) and one for its exact scope
//! (`x<hash>`); a view becomes `scopes : (x… OR p…)` inside the MATCH. The
//! stores still check the view on the joined row, so a hash collision can
//! cost speed, never isolation.

use std::collections::HashMap;

use crate::scope::{Scope, View};

/// English stop-words dropped from queries. Questions are mostly made of
/// them, and FTS5 ORs what is left.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// Splits text into lowercase alphanumeric words.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
}

/// The distinct search terms of a query, in order: its words less
/// stop-words. A query made only of stop-words ("what is it?") has no terms:
/// matching them would select nearly every memory at the cost of scoring
/// all of them, and rank by noise; such a recall ranks by importance and
/// recency instead.
pub fn query_terms(query: &str) -> Vec<String> {
    let mut kept: Vec<String> = words(query)
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .collect();
    let mut seen = std::collections::HashSet::new();
    kept.retain(|w| seen.insert(w.clone()));
    kept
}

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

/// Stems a lowercase word with the English Snowball stemmer (close to the
/// porter tokenizer FTS5 uses).
pub fn stem(word: &str) -> String {
    thread_local! {
        static STEMMER: rust_stemmers::Stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    }
    STEMMER.with(|s| s.stem(word).into_owned())
}

/// Okapi BM25 (k1 = 1.2, b = 0.75, as FTS5) over a small set of documents,
/// for the in-memory store. Returns one score per document, higher is better,
/// 0 for documents matching no term.
pub fn bm25(docs: &[&str], terms: &[String]) -> Vec<f64> {
    let terms: Vec<String> = terms.iter().map(|t| stem(t)).collect();
    let tokenized: Vec<Vec<String>> = docs
        .iter()
        .map(|d| words(d).map(|w| stem(&w)).collect())
        .collect();
    let n = docs.len() as f64;
    let avgdl = tokenized.iter().map(|t| t.len()).sum::<usize>() as f64 / n.max(1.0);
    let mut df: HashMap<&str, f64> = HashMap::new();
    for t in &terms {
        let c = tokenized
            .iter()
            .filter(|d| d.iter().any(|w| w == t))
            .count();
        df.insert(t, c as f64);
    }
    tokenized
        .iter()
        .map(|d| {
            let dl = d.len() as f64;
            terms
                .iter()
                .map(|t| {
                    let tf = d.iter().filter(|w| *w == t).count() as f64;
                    if tf == 0.0 {
                        return 0.0;
                    }
                    let nq = df[t.as_str()];
                    // FTS5's idf, floored at a small positive value.
                    let idf = (((n - nq + 0.5) / (nq + 0.5)).ln()).max(1e-6);
                    idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl.max(1.0)))
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_keep_their_content_words() {
        assert_eq!(query_terms("Where does she live now?"), ["live"]);
        assert!(query_terms("what is it").is_empty());
        assert_eq!(
            fts_terms_expr(&query_terms("Berlin move, Berlin!")).unwrap(),
            "\"berlin\" OR \"move\""
        );
        assert!(fts_terms_expr(&query_terms("?!")).is_none());
    }

    #[test]
    fn bm25_prefers_the_matching_document() {
        let s = bm25(
            &["the cat sat", "dogs bark loudly", "a cat and a cat"],
            &["cat".into()],
        );
        assert_eq!(s[1], 0.0);
        assert!(s[2] > s[0] && s[0] > 0.0);
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
