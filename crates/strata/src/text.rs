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

/// BM25 with binary term frequency and view-local statistics, the
/// relevance score both stores compute the same way:
///
/// `score = Σ_{t matched} idf(t) × (k1 + 1) / (1 + k1 × (1 − b + b × len / avglen))`,
/// `idf(t) = ln(1 + (N − df_t + 0.5) / (df_t + 0.5))` (Lucene's form, which
/// stays positive where FTS5's `ln((N − df + 0.5) / (df + 0.5))` turns
/// negative and is floored to nothing: any term in more than half of a small
/// view, e.g. the only memory of a task),
/// k1 = 1.2, b = 0.75; `N` and `df_t` count the memories in the view, `len`
/// is a memory's token count and `avglen` the mean over the candidates.
///
/// Why not FTS5's own `bm25()`: it costs ~6 µs per matching row (it reads
/// each row's position lists and stored length), which made frequent-word
/// queries over a 2,000-memory project take 20 ms; term frequency carries
/// little signal in memories of one or two sentences; and view-local
/// statistics make a word rare *in this project* count as rare, which is
/// what a scoped recall asks for. The in-memory store uses this same
/// function, so both backends rank alike.
#[derive(Clone, Debug)]
pub struct Bm25 {
    idf: Vec<f64>,
}

impl Bm25 {
    /// Statistics for `df.len()` query terms over `n_docs` memories.
    pub fn new(n_docs: usize, df: &[usize]) -> Bm25 {
        let n = n_docs as f64;
        let idf = df
            .iter()
            .map(|&d| {
                let d = d as f64;
                (1.0 + (n - d + 0.5) / (d + 0.5)).ln()
            })
            .collect();
        Bm25 { idf }
    }

    /// The score of a memory of `len` tokens matching the terms `matched`
    /// (indices into the query's terms).
    pub fn score(&self, matched: impl Iterator<Item = usize>, len: f64, avglen: f64) -> f64 {
        let norm = 2.2 / (1.0 + 1.2 * (0.25 + 0.75 * len.max(1.0) / avglen.max(1.0)));
        matched
            .map(|t| self.idf.get(t).copied().unwrap_or(0.0) * norm)
            .sum()
    }
}

/// [`Bm25`] over a set of documents given as (text, token count), with the
/// set itself as the statistics' population; 0 for documents matching no
/// term. Used where no index exists (the archive, the in-memory store).
pub fn bm25_docs(docs: &[(&str, f64)], terms: &[String]) -> Vec<f64> {
    let (matched, df) = match_terms(docs.iter().map(|(d, _)| *d), terms);
    let bm = Bm25::new(docs.len(), &df);
    let hits: Vec<f64> = docs
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !m.is_empty())
        .map(|((_, l), _)| *l)
        .collect();
    let avglen = hits.iter().sum::<f64>() / (hits.len().max(1) as f64);
    docs.iter()
        .zip(&matched)
        .map(|((_, len), m)| {
            if m.is_empty() {
                0.0
            } else {
                bm.score(m.iter().copied(), *len, avglen)
            }
        })
        .collect()
}

/// For each text, the indices of the query terms it contains (stemmed
/// matching, as FTS5's porter tokenizer); and for each term, in how many
/// texts it occurs.
pub fn match_terms<'a>(
    texts: impl Iterator<Item = &'a str>,
    terms: &[String],
) -> (Vec<Vec<usize>>, Vec<usize>) {
    let stemmed: Vec<String> = terms.iter().map(|t| stem(t)).collect();
    let matched: Vec<Vec<usize>> = texts
        .map(|d| {
            let st = stems(d);
            stemmed
                .iter()
                .enumerate()
                .filter(|(_, t)| st.contains(*t))
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let df = (0..terms.len())
        .map(|t| matched.iter().filter(|m| m.contains(&t)).count())
        .collect();
    (matched, df)
}

/// Sorts scored hits best first, ties broken by id (descending), as every
/// ranking in strata is.
pub fn sort_hits<T>(hits: &mut [(T, f64)], id: impl Fn(&T) -> &str) {
    hits.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| id(&b.0).cmp(id(&a.0)))
    });
}

/// The stems of a text's words, for matching in memory.
pub fn stems(text: &str) -> std::collections::HashSet<String> {
    words(text).map(|w| stem(&w)).collect()
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
    fn bm25_prefers_rare_terms_and_short_memories() {
        let b = Bm25::new(100, &[2, 50]);
        let rare = b.score([0].into_iter(), 10.0, 10.0);
        let common = b.score([1].into_iter(), 10.0, 10.0);
        assert!(rare > common && common > 0.0);
        assert!(b.score([0].into_iter(), 5.0, 10.0) > rare);
        assert!(b.score([0, 1].into_iter(), 10.0, 10.0) > rare);
        let s = bm25_docs(
            &[
                ("the cats sat", 3.0),
                ("dogs bark loudly", 3.0),
                ("a cat", 2.0),
            ],
            &["cat".into()],
        );
        assert_eq!(s[1], 0.0);
        assert!(
            s[2] > s[0] && s[0] > 0.0,
            "stemmed match, shorter wins: {s:?}"
        );
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
