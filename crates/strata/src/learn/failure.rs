//! The repeated-failure detector: failures with the same error signature,
//! within one scope, become one pattern memory ("… failed 3 times; fixed
//! by …" once a later finding says how).
//!
//! A failure's signature is its payload's `signature` when the writer gave
//! one, else the content words of its first line with everything that
//! varies between runs left out (numbers, hex ids, quoted values, the
//! numbered parts of paths). Failures join the pattern of the earliest
//! failure whose signature shares `failure_similarity` of their words (by
//! default all: the same signature); a pattern needs `min_failures` of
//! them. The fix is the latest finding or decision,
//! written after the pattern's first failure, that says it fixed,
//! solved or worked around something and names most of the signature's
//! words.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use super::{Evidence, Finding, LearnConfig};
use crate::model::{Kind, Memory};
use crate::text;

/// The detector's name.
pub(super) const NAME: &str = "failure";
/// Confidence of one independent occurrence (0.5: two occurrences in
/// different sessions make 0.75, three 0.875).
pub(super) const PER_EVIDENCE: f64 = 0.5;
/// The kinds it reads: failures, and findings or decisions that fix them.
pub(super) const READS: &[&str] = &["failure", "error", "finding", "decision"];

/// Stems that say a text reports a fix.
const FIX_WORDS: &[&str] = &["fix", "resolv", "solv", "solut", "workaround", "caus"];

/// Share of a signature's words a fix must name.
const FIX_OVERLAP: f64 = 0.5;

/// Whether `m` is a failure.
pub(super) fn is_failure(m: &Memory) -> bool {
    matches!(m.kind, Kind::Failure | Kind::Error)
}

/// A failure's signature: the writer's, or the words of its first line.
fn signature(m: &Memory) -> BTreeSet<String> {
    if let Some(s) = m
        .payload
        .as_ref()
        .and_then(|p| p.get("signature"))
        .and_then(|v| v.as_str())
    {
        return [format!("sig:{}", s.trim().to_lowercase())].into();
    }
    let line = m
        .content
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    words(line)
}

/// Content words of `text` with what varies between runs left out: tokens
/// with digits, quoted values, and the numbered parts of paths.
fn words(text: &str) -> BTreeSet<String> {
    let mut kept = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    for tok in text.split_whitespace() {
        let opens = tok.starts_with(['"', '\'', '`']);
        if quote.is_none() && opens {
            let q = tok.chars().next().unwrap_or('"');
            if !(tok.len() > 1 && tok.ends_with(q)) {
                quote = Some(q);
            }
            continue;
        }
        if let Some(q) = quote {
            if tok.ends_with(q) {
                quote = None;
            }
            continue;
        }
        if tok.contains('/') || tok.contains('\\') {
            // A path names where it failed; its numbered parts (line,
            // run, file numbers) vary.
            for part in tok.split(|c: char| !c.is_alphanumeric()) {
                if !part.is_empty() && !part.chars().any(|c| c.is_ascii_digit()) {
                    kept.push_str(part);
                    kept.push(' ');
                }
            }
            continue;
        }
        if tok.chars().any(|c| c.is_ascii_digit()) {
            continue;
        }
        kept.push_str(tok);
        kept.push(' ');
    }
    text::query_terms(&kept)
        .iter()
        .filter(|w| w.len() > 1)
        .map(|w| text::stem(w))
        .collect()
}

fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// Patterns among the failures of one scope (`memories` is every failure,
/// error, finding and decision of the scope).
pub(super) fn detect(memories: &[Memory], cfg: &LearnConfig) -> Vec<Finding> {
    let mut ordered: Vec<&Memory> = memories.iter().collect();
    ordered.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let mut groups: Vec<(BTreeSet<String>, Vec<&Memory>)> = Vec::new();
    for m in ordered.iter().copied().filter(|m| is_failure(m)) {
        let sig = signature(m);
        if sig.is_empty() {
            continue;
        }
        match groups
            .iter_mut()
            .find(|(first, _)| jaccard(first, &sig) >= cfg.failure_similarity)
        {
            Some((_, members)) => members.push(m),
            None => groups.push((sig, vec![m])),
        }
    }
    let mut out = Vec::new();
    for (sig, members) in groups {
        if members.len() < cfg.min_failures {
            continue;
        }
        let first = members[0];
        let latest = members[members.len() - 1];
        let fix = ordered
            .iter()
            .filter(|m| matches!(m.kind, Kind::Finding | Kind::Decision))
            .filter(|m| m.created_at >= first.created_at)
            .rfind(|m| fixes(m, &sig));
        let what = latest
            .content
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim();
        let what: String = what.chars().take(240).collect();
        let mut content = format!(
            "Repeated failure ({} times, {} to {}): {what}",
            members.len(),
            first.created_at.strftime("%Y-%m-%d"),
            latest.created_at.strftime("%Y-%m-%d"),
        );
        let mut evidence: Vec<Evidence> = members.iter().map(|m| Evidence::of(m)).collect();
        if let Some(f) = fix {
            let how: String = f.content.trim().chars().take(400).collect();
            content.push_str(&format!("\nFixed by: {how}"));
            evidence.push(Evidence::of(f));
        }
        let sig_text: Vec<&str> = sig.iter().map(String::as_str).collect();
        let digest = Sha256::digest(sig_text.join(" ").as_bytes());
        let subject: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        out.push(Finding {
            scope: first.scope.clone(),
            detector: NAME,
            subject,
            kind: Kind::Pattern,
            content,
            importance: 0.85,
            detail: serde_json::json!({NAME: {
                "signature": sig_text,
                "occurrences": members.len(),
                "fixed_by": fix.map(|f| f.id.clone()),
            }}),
            evidence,
            whole: true,
            at: None,
        });
    }
    out
}

/// Whether `m` reports fixing the failure with signature `sig`.
fn fixes(m: &Memory, sig: &BTreeSet<String>) -> bool {
    let stems = text::stems(&m.content);
    let says_fix = stems
        .iter()
        .any(|s| FIX_WORDS.iter().any(|f| s.starts_with(f)));
    if !says_fix {
        return false;
    }
    if sig.iter().any(|s| s.starts_with("sig:")) {
        let want = sig.iter().next().map(|s| &s[4..]).unwrap_or("");
        return m.content.to_lowercase().contains(want);
    }
    let named = sig.iter().filter(|s| stems.contains(*s)).count();
    named as f64 >= FIX_OVERLAP * sig.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_leave_out_what_varies() {
        let a = words("connection refused: could not reach db at 10.0.0.4:5432 (attempt 3)");
        let b = words("Connection refused: could not reach db at 10.0.0.9:5433 (attempt 7)");
        assert_eq!(a, b);
        let c = words("test `login_flow` failed: timeout after 30s in /src/auth.rs:42");
        let d = words("test `signup_flow` failed: timeout after 45s in /src/auth.rs:97");
        assert_eq!(c, d);
        assert!(jaccard(&a, &c) < 0.5);
        // Another service, or another file, is another failure.
        let e = words("Connection refused: could not reach search at 10.0.0.9:5433");
        assert_ne!(a, e);
        assert_ne!(
            c,
            words("test `login_flow` failed: timeout after 30s in /src/user.rs:42")
        );
    }
}
