//! Text handling shared by the stores, free of any backend's dialect:
//! turning a natural-language query into terms, the words and stems a text
//! is made of (exactly as SQLite's FTS5 `porter unicode61` tokenizer makes
//! them, so every backend ranks alike), and BM25. The FTS5 expressions and
//! the scope terms live with the SQLite backend (`store/sqlite/fts.rs`).

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

/// Whether `c` belongs to a token, as in FTS5's `unicode61` tokenizer:
/// letters and numbers, not marks (so a Devanagari vowel sign separates
/// tokens there and here). Combining diacritics (U+0300–U+036F) stay in the
/// token and are folded away with the other diacritics.
fn is_token_char(c: char) -> bool {
    if ('\u{300}'..='\u{36f}').contains(&c) {
        return true;
    }
    c.is_alphanumeric() && !unicode_normalization::char::is_combining_mark(c)
}

/// Lowercases and removes diacritics from Latin letters (`é` → `e`, `ö` →
/// `o`; Greek tonos stays), as `unicode61` with `remove_diacritics 2` does.
fn fold(word: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    if word.is_ascii() {
        return word.to_ascii_lowercase();
    }
    let latin = |c: char| c < '\u{250}' || ('\u{1e00}'..='\u{1eff}').contains(&c);
    let mut out = String::with_capacity(word.len());
    let mut prev_latin = false;
    for c in word.chars() {
        if ('\u{300}'..='\u{36f}').contains(&c) && prev_latin {
            continue; // a combining diacritic on a Latin letter
        }
        let d: Vec<char> = std::iter::once(c).nfd().collect();
        prev_latin = latin(d[0]);
        if prev_latin {
            out.extend(
                d.into_iter()
                    .filter(|x| !unicode_normalization::char::is_combining_mark(*x))
                    .flat_map(char::to_lowercase),
            );
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// Splits text into folded words, the tokens FTS5's tokenizer produces.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !is_token_char(c))
        .filter(|w| !w.is_empty())
        .map(fold)
        .filter(|w| !w.is_empty())
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

/// Most distinct terms a query may search for. Each is a term of the
/// full-text query and a set of postings to score; a query is a question
/// or a task, not a document.
pub const MAX_QUERY_TERMS: usize = 512;

/// Checks a query's terms against [`MAX_QUERY_TERMS`].
pub fn check_query_terms(terms: &[String]) -> Result<(), crate::Error> {
    if terms.len() > MAX_QUERY_TERMS {
        return Err(crate::Error::field(
            "query",
            format!(
                "{} distinct words, over the limit of {MAX_QUERY_TERMS}; search for the words that matter",
                terms.len()
            ),
        ));
    }
    Ok(())
}

/// Stems a folded word exactly as FTS5's `porter` tokenizer does, so the
/// in-memory store and the archive match the same words the index does.
///
/// The algorithm is M. F. Porter's (1980, "An algorithm for suffix
/// stripping", with the later `logi → log` rule), applied to the token's
/// bytes when it is 3–64 bytes long, as SQLite's `fts5_tokenize.c` does; the
/// test `stems_like_fts5` compares the two on a word list.
pub fn stem(word: &str) -> String {
    if word.len() < 3 || word.len() > 64 {
        return word.to_string();
    }
    let mut b = word.as_bytes().to_vec();
    porter::stem(&mut b);
    // Only ASCII suffixes are removed or added, so the bytes stay UTF-8.
    String::from_utf8(b).unwrap_or_else(|_| word.to_string())
}

/// Porter's algorithm on bytes. Conditions look at the stem left after a
/// suffix; within a step, the longest matching suffix decides, and if its
/// condition fails no shorter suffix is tried.
mod porter {
    fn vowel(c: u8, y_is_vowel: bool) -> bool {
        matches!(c, b'a' | b'e' | b'i' | b'o' | b'u') || (y_is_vowel && c == b'y')
    }

    /// Skips one vowel run then one consonant run; returns the index after
    /// the consonant run, or 0 when there is none.
    fn gobble_vc(s: &[u8], prev_cons: bool) -> usize {
        let mut cons = prev_cons;
        let mut i = 0;
        while i < s.len() {
            cons = !vowel(s[i], cons);
            if !cons {
                break;
            }
            i += 1;
        }
        i += 1;
        while i < s.len() {
            cons = !vowel(s[i], cons);
            if cons {
                return i + 1;
            }
            i += 1;
        }
        0
    }

    fn m_gt0(s: &[u8]) -> bool {
        gobble_vc(s, false) != 0
    }

    fn m_gt1(s: &[u8]) -> bool {
        let n = gobble_vc(s, false);
        n != 0 && gobble_vc(&s[n..], true) != 0
    }

    fn m_eq1(s: &[u8]) -> bool {
        let n = gobble_vc(s, false);
        n != 0 && gobble_vc(&s[n..], true) == 0
    }

    /// `*o`: ends consonant-vowel-consonant, the last not w, x or y.
    fn o_star(s: &[u8]) -> bool {
        match s.last() {
            None | Some(b'w' | b'x' | b'y') => false,
            Some(_) => {
                let mut mask = 0u8;
                let mut cons = false;
                for &c in s {
                    cons = !vowel(c, cons);
                    mask = ((mask << 1) | cons as u8) & 7;
                }
                mask == 5
            }
        }
    }

    /// `*v*`: the stem has a vowel (y counts after the first letter).
    fn has_vowel(s: &[u8]) -> bool {
        s.iter().enumerate().any(|(i, &c)| vowel(c, i > 0))
    }

    type Cond = fn(&[u8]) -> bool;

    /// Applies the first rule whose suffix ends `b` (and leaves a non-empty
    /// stem); returns whether its condition held.
    fn apply(b: &mut Vec<u8>, rules: &[(&str, &str, Cond)]) -> bool {
        for (suffix, with, cond) in rules {
            let (suffix, with) = (suffix.as_bytes(), with.as_bytes());
            if b.len() > suffix.len() && b.ends_with(suffix) {
                let stem = b.len() - suffix.len();
                if cond(&b[..stem]) {
                    b.truncate(stem);
                    b.extend_from_slice(with);
                    return true;
                }
                return false;
            }
        }
        false
    }

    fn mgt1_st(s: &[u8]) -> bool {
        matches!(s.last(), Some(b's' | b't')) && m_gt1(s)
    }

    pub(super) fn stem(b: &mut Vec<u8>) {
        // Step 1a.
        if b.last() == Some(&b's') {
            let n = b.len();
            if b[n - 2] == b'e' {
                if (n > 4 && &b[n - 4..n - 2] == b"ss") || (n > 3 && b[n - 3] == b'i') {
                    b.truncate(n - 2);
                } else {
                    b.truncate(n - 1);
                }
            } else if b[n - 2] != b's' {
                b.truncate(n - 1);
            }
        }
        // Step 1b.
        let removed = if b.len() > 3 && b.ends_with(b"eed") {
            if m_gt0(&b[..b.len() - 3]) {
                b.truncate(b.len() - 1);
            }
            false
        } else {
            apply(b, &[("ed", "", has_vowel as Cond), ("ing", "", has_vowel)])
        };
        if removed
            && !apply(
                b,
                &[
                    ("at", "ate", (|_| true) as Cond),
                    ("bl", "ble", |_| true),
                    ("iz", "ize", |_| true),
                ],
            )
        {
            let n = b.len();
            let c = b[n - 1];
            if n >= 2 && !vowel(c, false) && !matches!(c, b'l' | b's' | b'z') && c == b[n - 2] {
                b.truncate(n - 1);
            } else if m_eq1(b) && o_star(b) {
                b.push(b'e');
            }
        }
        // Step 1c.
        let n = b.len();
        if n > 0 && b[n - 1] == b'y' && has_vowel(&b[..n - 1]) {
            b[n - 1] = b'i';
        }
        // Step 2, grouped by the suffix's second-to-last letter as in SQLite
        // (within a group the longer suffix is listed first).
        let g0: Cond = m_gt0;
        let step2: &[(&str, &str, Cond)] = match b.len().checked_sub(2).map(|i| b[i]) {
            Some(b'a') => &[("ational", "ate", g0), ("tional", "tion", g0)],
            Some(b'c') => &[("enci", "ence", g0), ("anci", "ance", g0)],
            Some(b'e') => &[("izer", "ize", g0)],
            Some(b'g') => &[("logi", "log", g0)],
            Some(b'l') => &[
                ("bli", "ble", g0),
                ("alli", "al", g0),
                ("entli", "ent", g0),
                ("eli", "e", g0),
                ("ousli", "ous", g0),
            ],
            Some(b'o') => &[
                ("ization", "ize", g0),
                ("ation", "ate", g0),
                ("ator", "ate", g0),
            ],
            Some(b's') => &[
                ("alism", "al", g0),
                ("iveness", "ive", g0),
                ("fulness", "ful", g0),
                ("ousness", "ous", g0),
            ],
            Some(b't') => &[
                ("aliti", "al", g0),
                ("iviti", "ive", g0),
                ("biliti", "ble", g0),
            ],
            _ => &[],
        };
        apply(b, step2);
        let step3: &[(&str, &str, Cond)] = match b.len().checked_sub(2).map(|i| b[i]) {
            Some(b'a') => &[("ical", "ic", g0)],
            Some(b's') => &[("ness", "", g0)],
            Some(b't') => &[("icate", "ic", g0), ("iciti", "ic", g0)],
            Some(b'u') => &[("ful", "", g0)],
            Some(b'v') => &[("ative", "", g0)],
            Some(b'z') => &[("alize", "al", g0)],
            _ => &[],
        };
        apply(b, step3);
        let g1: Cond = m_gt1;
        let step4: &[(&str, &str, Cond)] = match b.len().checked_sub(2).map(|i| b[i]) {
            Some(b'a') => &[("al", "", g1)],
            Some(b'c') => &[("ance", "", g1), ("ence", "", g1)],
            Some(b'e') => &[("er", "", g1)],
            Some(b'i') => &[("ic", "", g1)],
            Some(b'l') => &[("able", "", g1), ("ible", "", g1)],
            Some(b'n') => &[
                ("ant", "", g1),
                ("ement", "", g1),
                ("ment", "", g1),
                ("ent", "", g1),
            ],
            Some(b'o') => &[("ion", "", mgt1_st), ("ou", "", g1)],
            Some(b's') => &[("ism", "", g1)],
            Some(b't') => &[("ate", "", g1), ("iti", "", g1)],
            Some(b'u') => &[("ous", "", g1)],
            Some(b'v') => &[("ive", "", g1)],
            Some(b'z') => &[("ize", "", g1)],
            _ => &[],
        };
        apply(b, step4);
        // Step 5a.
        let n = b.len();
        if n > 0 && b[n - 1] == b'e' {
            let s = &b[..n - 1];
            if m_gt1(s) || (m_eq1(s) && !o_star(s)) {
                b.truncate(n - 1);
            }
        }
        // Step 5b.
        let n = b.len();
        if n > 1 && b[n - 1] == b'l' && b[n - 2] == b'l' && m_gt1(&b[..n - 1]) {
            b.truncate(n - 1);
        }
    }
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

    /// The summed idf of the terms `matched`: a memory's score before
    /// length normalisation.
    pub fn weight(&self, matched: impl Iterator<Item = usize>) -> f64 {
        matched
            .map(|t| self.idf.get(t).copied().unwrap_or(0.0))
            .sum()
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
        assert_eq!(query_terms("Berlin move, Berlin!"), ["berlin", "move"]);
        assert!(query_terms("?!").is_empty());
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
}
