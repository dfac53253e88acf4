//! Token counting with a real tokenizer.
//!
//! Every memory's `tokens` is counted once, on write, with the configured
//! OpenAI encoding (`cl100k_base` by default, or `o200k_base` in a build
//! with the `o200k` feature: its table is 32 MB of the binary), so that
//! context budgets later add up exactly. The counting is done by the
//! `bpe-openai` crate rather than `tiktoken-rs`: it gives the same counts
//! (checked against tiktoken-rs by a property test, `tests` below) about
//! three times faster, and token counting is half the cost of a batched
//! write. Loading a table costs ~40 ms, so it happens on first use, not on
//! open: a one-shot `strata recall` never pays it.

use crate::error::Error;

/// Tokenizers strata can count with.
pub const TOKENIZERS: [&str; 2] = ["cl100k_base", "o200k_base"];

/// A token counter for one named tokenizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenCounter {
    name: String,
}

impl TokenCounter {
    /// A counter for `name` (one of [`TOKENIZERS`]); the table loads lazily.
    pub fn new(name: &str) -> Result<TokenCounter, Error> {
        if !TOKENIZERS.contains(&name) {
            return Err(Error::Tokenizer {
                name: name.into(),
                reason: format!("unknown tokenizer; known: {}", TOKENIZERS.join(", ")),
            });
        }
        if name == "o200k_base" && !cfg!(feature = "o200k") {
            return Err(Error::Tokenizer {
                name: name.into(),
                reason: "this build leaves its 32 MB table out: install with `--features o200k` \
                         (or use cl100k_base)"
                    .into(),
            });
        }
        Ok(TokenCounter { name: name.into() })
    }

    /// The tokenizer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn bpe(&self) -> &'static bpe_openai::Tokenizer {
        match self.name.as_str() {
            #[cfg(feature = "o200k")]
            "o200k_base" => bpe_openai::o200k_base(),
            _ => bpe_openai::cl100k_base(),
        }
    }

    /// Counts the tokens of `text` (special tokens are counted as text).
    pub fn count(&self, text: &str) -> u32 {
        self.bpe().count(text) as u32
    }

    /// The first `n` tokens of `text` as text, backing off a token at a time
    /// when a cut would split a character.
    pub fn head(&self, text: &str, n: usize) -> String {
        let toks = self.bpe().encode(text);
        let mut k = n.min(toks.len());
        while k > 0 {
            if let Some(s) = self.bpe().decode(&toks[..k]) {
                return s;
            }
            k -= 1;
        }
        String::new()
    }

    /// The last `n` tokens of `text` as text (see [`TokenCounter::head`]).
    pub fn tail(&self, text: &str, n: usize) -> String {
        let toks = self.bpe().encode(text);
        let mut k = n.min(toks.len());
        while k > 0 {
            if let Some(s) = self.bpe().decode(&toks[toks.len() - k..]) {
                return s;
            }
            k -= 1;
        }
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn counts_with_cl100k() {
        let t = TokenCounter::new("cl100k_base").unwrap();
        assert_eq!(t.count("hello world"), 2);
        assert!(
            TokenCounter::new("bogus")
                .unwrap_err()
                .to_string()
                .contains("unknown tokenizer")
        );
    }

    /// The tokenizers of this build.
    fn built() -> Vec<&'static str> {
        TOKENIZERS
            .into_iter()
            .filter(|n| TokenCounter::new(n).is_ok())
            .collect()
    }

    #[test]
    fn o200k_is_there_exactly_with_its_feature() {
        let r = TokenCounter::new("o200k_base");
        if cfg!(feature = "o200k") {
            assert_eq!(r.unwrap().count("hello world"), 2);
        } else {
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains("--features o200k") && e.contains("cl100k_base"),
                "{e}"
            );
        }
    }

    fn tiktoken(name: &str, text: &str) -> u32 {
        let bpe = match name {
            "o200k_base" => tiktoken_rs::o200k_base_singleton(),
            _ => tiktoken_rs::cl100k_base_singleton(),
        };
        bpe.encode_ordinary(text).len() as u32
    }

    #[test]
    fn same_counts_as_tiktoken_on_tricky_text() {
        for text in [
            "",
            "Hello, world! It's 2026-11-22 and the café costs €3.50.",
            "fn main() { println!(\"{}\", x); }\n\n\t  indented   spaces",
            "日本語のテキストと emoji 😀👍 mixed",
            "   leading and trailing   ",
            "URL https://example.com/a?b=c&d=e#f and email a.b@c.de",
            "<|endoftext|> is counted as text",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "1234567890 12 345 6789 3.14159e-10",
        ] {
            for name in built() {
                assert_eq!(
                    TokenCounter::new(name).unwrap().count(text),
                    tiktoken(name, text),
                    "{name}: {text:?}"
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn same_counts_as_tiktoken(text in "\\PC{0,80}", ascii in "[ -~\\n\\t]{0,120}") {
            for name in built() {
                let c = TokenCounter::new(name).unwrap();
                prop_assert_eq!(c.count(&text), tiktoken(name, &text), "{} {:?}", name, text);
                prop_assert_eq!(c.count(&ascii), tiktoken(name, &ascii), "{} {:?}", name, ascii);
            }
        }
    }
}
