//! Token counting with a real tokenizer.
//!
//! Every memory's `tokens` is counted once, on write, with the configured
//! tokenizer (tiktoken's `cl100k_base` by default), so that context budgets
//! later add up exactly. Loading a BPE table costs ~40 ms, so it happens on
//! first use, not on open: a one-shot `strata recall` never pays it.

use tiktoken_rs::CoreBPE;

use crate::error::Error;

/// Tokenizers strata can count with.
pub const TOKENIZERS: [&str; 4] = ["cl100k_base", "o200k_base", "p50k_base", "r50k_base"];

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
        Ok(TokenCounter { name: name.into() })
    }

    /// The tokenizer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn bpe(&self) -> &'static CoreBPE {
        match self.name.as_str() {
            "o200k_base" => tiktoken_rs::o200k_base_singleton(),
            "p50k_base" => tiktoken_rs::p50k_base_singleton(),
            "r50k_base" => tiktoken_rs::r50k_base_singleton(),
            _ => tiktoken_rs::cl100k_base_singleton(),
        }
    }

    /// Counts the tokens of `text` (special tokens are counted as text).
    pub fn count(&self, text: &str) -> u32 {
        self.bpe().encode_ordinary(text).len() as u32
    }
}

#[cfg(test)]
mod tests {
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
}
