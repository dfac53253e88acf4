//! Secrets and personal data on write: detectors that find API keys,
//! private keys, passwords, e-mail addresses, card numbers and phone
//! numbers in what an agent writes, and the `[[secrets]]` rules that say,
//! per scope, what happens to each finding: the memory is flagged
//! `sensitive`, the span is replaced by a typed placeholder, or the write
//! is refused.
//!
//! The detectors are hand-written scanners over the text's ASCII bytes
//! (every pattern they look for is ASCII, so every span starts and ends on
//! a character boundary). They run on the write path, before anything
//! reaches the store, and only when a rule covers the memory's scope: a
//! store without `[[secrets]]` rules pays nothing.
//!
//! What each detector accepts is chosen to be caught without context (a
//! provider's prefix, a checksum, a shape no prose has) rather than fitted
//! to any set of examples; `strata eval secrets` measures them on planted
//! secrets and on ordinary conversation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::scope::Scope;

/// Every detector: its name (as rules and placeholders spell it) and what
/// it finds.
pub const DETECTORS: &[(&str, &str)] = &[
    ("private_key", "a PEM or OpenSSH private key block"),
    (
        "url_password",
        "the password of a URL (scheme://user:password@host)",
    ),
    ("aws_key", "an AWS access key id (AKIA…, ASIA…)"),
    (
        "provider_token",
        "a token in a provider's format (GitHub, GitLab, Slack, OpenAI, Anthropic, Stripe, \
         Google, Hugging Face, npm, PyPI)",
    ),
    ("jwt", "a JSON Web Token"),
    (
        "password",
        "the value given to a password, secret, token or key (password=…, \"api_key\": \"…\")",
    ),
    (
        "card_number",
        "a payment card number (13 to 19 digits with a valid Luhn checksum and issuer prefix)",
    ),
    ("email", "an e-mail address"),
    (
        "phone",
        "a phone number (+ and 8 to 15 digits, or a grouped national number)",
    ),
    (
        "high_entropy",
        "a long random-looking string (20 or more characters mixing letters and digits)",
    ),
];

/// What `detector` finds, for messages.
pub fn describe(detector: &str) -> &'static str {
    DETECTORS
        .iter()
        .find(|(n, _)| *n == detector)
        .map_or("a secret", |(_, what)| what)
}

/// What a detector found: `text[start..end]` (byte offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Secret {
    /// The detector's name (see [`DETECTORS`]).
    pub detector: &'static str,
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// Finds what every detector finds in `text`: spans that do not overlap,
/// in order. Where two detectors claim overlapping spans, the one earlier
/// in [`DETECTORS`] (the more specific) keeps its span.
pub fn scan(text: &str) -> Vec<Secret> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    private_keys(b, &mut found);
    url_passwords(b, &mut found);
    prefixed_tokens(b, &mut found);
    jwts(b, &mut found);
    assigned_passwords(b, &mut found);
    digit_runs(b, &mut found);
    emails(b, &mut found);
    high_entropy(b, &mut found);
    let rank = |d: &str| {
        DETECTORS
            .iter()
            .position(|(n, _)| *n == d)
            .unwrap_or(usize::MAX)
    };
    found.sort_by_key(|s: &Secret| (rank(s.detector), s.start));
    let mut kept: Vec<Secret> = Vec::with_capacity(found.len());
    for s in found {
        if !kept.iter().any(|k| k.start < s.end && s.start < k.end) {
            kept.push(s);
        }
    }
    kept.sort_by_key(|s| s.start);
    kept
}

/// The placeholder a redacted span becomes.
pub fn placeholder(detector: &str) -> String {
    format!("[REDACTED:{detector}]")
}

/// `text` with every span in `spans` (in order, not overlapping) replaced
/// by its placeholder.
pub fn redact(text: &str, spans: &[Secret]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for s in spans {
        out.push_str(&text[at..s.start]);
        out.push_str(&placeholder(s.detector));
        at = s.end;
    }
    out.push_str(&text[at..]);
    out
}

// ---------------------------------------------------------------------
// Detectors

fn push(found: &mut Vec<Secret>, detector: &'static str, start: usize, end: usize) {
    found.push(Secret {
        detector,
        start,
        end,
    });
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from >= hay.len() {
        return None;
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// Maximal runs of bytes for which `class` holds, as `(start, end)`.
fn runs(b: &[u8], class: impl Fn(u8) -> bool) -> impl Iterator<Item = (usize, usize)> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < b.len() && !class(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            return None;
        }
        let start = i;
        while i < b.len() && class(b[i]) {
            i += 1;
        }
        Some((start, i))
    })
}

fn word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-'
}

/// `-----BEGIN … PRIVATE KEY-----` through its `-----END …-----` line (or
/// the end of the text, when the block was cut off).
fn private_keys(b: &[u8], found: &mut Vec<Secret>) {
    let mut from = 0;
    while let Some(begin) = find(b, b"-----BEGIN ", from) {
        let head_start = begin + b"-----BEGIN ".len();
        let Some(head_end) = find(b, b"-----", head_start) else {
            return;
        };
        let head = &b[head_start..head_end];
        from = head_end + 5;
        if head.len() > 40
            || !(head.ends_with(b"PRIVATE KEY") || head.ends_with(b"PRIVATE KEY BLOCK"))
        {
            continue;
        }
        let end = match find(b, b"-----END ", from) {
            Some(e) => find(b, b"-----", e + b"-----END ".len()).map_or(b.len(), |x| x + 5),
            None => b.len(),
        };
        push(found, "private_key", begin, end);
        from = end;
    }
}

/// The password of `scheme://user:password@host`.
fn url_passwords(b: &[u8], found: &mut Vec<Secret>) {
    let mut from = 0;
    while let Some(sep) = find(b, b"://", from) {
        from = sep + 3;
        // A scheme: letters, then letters, digits, + . -
        let mut s = sep;
        while s > 0 && (b[s - 1].is_ascii_alphanumeric() || b"+.-".contains(&b[s - 1])) {
            s -= 1;
        }
        if s == sep || !b[s].is_ascii_alphabetic() {
            continue;
        }
        // The authority: up to the path, query, fragment or a space.
        let mut e = from;
        // (A raw `?` or `#` in a password is not valid in a URL, but people
        // write them: the authority runs to the path or a space.)
        while e < b.len() && !b"/\"'<>()[]{}`".contains(&b[e]) && !b[e].is_ascii_whitespace() {
            e += 1;
        }
        let auth = &b[from..e];
        let Some(at) = auth.iter().rposition(|&c| c == b'@') else {
            continue;
        };
        let Some(colon) = auth[..at].iter().position(|&c| c == b':') else {
            continue;
        };
        let (pw_start, pw_end) = (from + colon + 1, from + at);
        let pw = &b[pw_start..pw_end];
        if colon == 0 || pw.is_empty() || at + 1 == auth.len() || placeholder_value(pw) {
            continue;
        }
        push(found, "url_password", pw_start, pw_end);
    }
}

/// Which bytes a token's random part may hold.
type ByteClass = fn(u8) -> bool;

/// Tokens whose prefix names their provider, and AWS access key ids.
fn prefixed_tokens(b: &[u8], found: &mut Vec<Secret>) {
    // (prefix, shortest rest, what the rest may hold)
    const ALNUM: ByteClass = |c| c.is_ascii_alphanumeric();
    const WORD: ByteClass = word_byte;
    const PREFIXES: &[(&str, usize, ByteClass)] = &[
        ("ghp_", 30, ALNUM),
        ("gho_", 30, ALNUM),
        ("ghu_", 30, ALNUM),
        ("ghs_", 30, ALNUM),
        ("ghr_", 30, ALNUM),
        ("github_pat_", 40, WORD),
        ("glpat-", 20, WORD),
        ("xoxb-", 15, WORD),
        ("xoxp-", 15, WORD),
        ("xoxa-", 15, WORD),
        ("xoxr-", 15, WORD),
        ("xoxs-", 15, WORD),
        ("xapp-", 15, WORD),
        ("sk-ant-", 20, WORD),
        ("sk-proj-", 20, WORD),
        ("sk-", 20, WORD),
        ("sk_live_", 16, ALNUM),
        ("sk_test_", 16, ALNUM),
        ("rk_live_", 16, ALNUM),
        ("rk_test_", 16, ALNUM),
        ("AIza", 35, WORD),
        ("hf_", 30, ALNUM),
        ("npm_", 36, ALNUM),
        ("pypi-", 50, WORD),
    ];
    const AWS: &[&str] = &[
        "AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "APKA", "AROA",
        "ASCA",
    ];
    for (start, end) in runs(b, word_byte) {
        let w = &b[start..end];
        if w.len() == 20
            && AWS.iter().any(|p| w.starts_with(p.as_bytes()))
            && w[4..]
                .iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        {
            push(found, "aws_key", start, end);
            continue;
        }
        let hit = PREFIXES.iter().find(|(p, min, class)| {
            let rest = w.strip_prefix(p.as_bytes()).unwrap_or_default();
            w.starts_with(p.as_bytes())
                && rest.len() >= *min
                && rest.iter().all(|&c| class(c))
                && random_part(p, rest)
        });
        if hit.is_some() {
            push(found, "provider_token", start, end);
        }
    }
}

/// Whether what follows a provider's prefix looks generated: digits, or
/// both cases. A long hyphenated word after `sk-` (`sk-learn-style-…`)
/// has neither, so that short prefix needs a digit.
fn random_part(prefix: &str, rest: &[u8]) -> bool {
    let digit = rest.iter().any(u8::is_ascii_digit);
    let mixed = rest.iter().any(u8::is_ascii_uppercase) && rest.iter().any(u8::is_ascii_lowercase);
    digit || (mixed && prefix != "sk-")
}

/// `eyJ….eyJ….…`: three base64url parts, the first two JSON objects.
fn jwts(b: &[u8], found: &mut Vec<Secret>) {
    let class = |c: u8| word_byte(c) || c == b'.';
    for (start, end) in runs(b, class) {
        let mut s = start;
        while let Some(p) = find(&b[..end], b"eyJ", s) {
            let parts: Vec<&[u8]> = b[p..end].splitn(4, |&c| c == b'.').collect();
            if parts.len() >= 3
                && parts[1].starts_with(b"eyJ")
                && parts[..3]
                    .iter()
                    .all(|x| x.len() >= 10 && !x.contains(&b'.'))
            {
                let len = parts[0].len() + parts[1].len() + parts[2].len() + 2;
                push(found, "jwt", p, p + len);
                s = p + len;
            } else {
                s = p + 3;
            }
        }
    }
}

/// Names whose value is a secret: the last word of an identifier such as
/// `DB_PASSWORD`, `client_secret`, `x-api-key`, `auth.token`.
fn secret_name(name: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    const ENDS: &[&str] = &[
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "token",
        "apikey",
        "api_key",
        "api-key",
        "access_key",
        "access-key",
        "secret_key",
        "secret-key",
        "private_key",
        "private-key",
        "auth",
        "credentials",
    ];
    ENDS.iter().any(|e| {
        lower.ends_with(e.as_bytes()) && {
            // The name ends a word: `mypassword` is fine, as is `db_password`.
            let before = lower.len() - e.len();
            before == 0 || !lower[before - 1].is_ascii_alphabetic() || e.len() >= 6
        }
    })
}

/// Values that stand for a secret without being one: `***`, `<password>`,
/// `${TOKEN}`, `%s`, an earlier redaction.
fn placeholder_value(v: &[u8]) -> bool {
    v.is_empty()
        || v.iter().all(|c| b"*xX.#?_-".contains(c))
        || v.starts_with(b"[REDACTED")
        || matches!(v[0], b'$' | b'<' | b'{')
        // `%s`, `%(password)s`; a value that merely starts with `%` is a
        // value.
        || v.starts_with(b"%(")
        || (v[0] == b'%' && v.len() <= 3)
        || matches!(
            v.to_ascii_lowercase().as_slice(),
            b"null" | b"none" | b"nil" | b"true" | b"false" | b"undefined" | b"redacted"
        )
}

/// The value after `name = `, `name: `, `"name": "`, `name => `.
fn assigned_passwords(b: &[u8], found: &mut Vec<Secret>) {
    let name_byte = |c: u8| c.is_ascii_alphanumeric() || b"_-.".contains(&c);
    for (start, end) in runs(b, name_byte) {
        if !secret_name(&b[start..end]) {
            continue;
        }
        let mut i = end;
        if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
            i += 1;
        }
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let assign = match b.get(i..i + 2) {
            Some(b":=") | Some(b"=>") => {
                i += 2;
                true
            }
            _ => match b.get(i) {
                Some(b'=') => {
                    i += 1;
                    true
                }
                Some(b':') => {
                    i += 1;
                    false
                }
                _ => continue,
            },
        };
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let quote = match b.get(i) {
            Some(&q @ (b'"' | b'\'' | b'`')) => {
                i += 1;
                Some(q)
            }
            _ => None,
        };
        let v_start = i;
        while i < b.len() {
            let c = b[i];
            let stop = match quote {
                Some(q) => c == q || c == b'\n',
                None => c.is_ascii_whitespace() || b"\"'`,;)}]".contains(&c),
            };
            if stop {
                break;
            }
            i += 1;
        }
        // An unquoted value does not end with the sentence's full stop
        // (`!` and `?` are kept: passwords end with them more often than
        // sentences that give a password do).
        let mut v_end = i;
        if quote.is_none() {
            while v_end > v_start && b".".contains(&b[v_end - 1]) {
                v_end -= 1;
            }
        }
        let v = &b[v_start..v_end];
        if v.len() < 4 || placeholder_value(v) || v.iter().any(|&c| c >= 0x80) {
            continue;
        }
        // `name = value` is an assignment whatever the value; after a colon
        // prose is as likely ("Token: a gift"), so the value must look made
        // up: a digit or a symbol, or length.
        let made_up = v
            .iter()
            .any(|c| c.is_ascii_digit() || c.is_ascii_punctuation())
            || v[1..].iter().any(u8::is_ascii_uppercase)
            || v.len() >= 16;
        if assign || (made_up && v.len() >= 6) || (quote.is_some() && v.len() >= 6) {
            push(found, "password", v_start, v_end);
        }
    }
}

/// Card numbers and phone numbers: runs of digits with separators.
fn digit_runs(b: &[u8], found: &mut Vec<Secret>) {
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let starts = (c.is_ascii_digit() || c == b'+' || c == b'(')
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b"+.-/".contains(&b[i - 1])));
        if !starts {
            i += 1;
            continue;
        }
        // Consume digits and single separators between them.
        let start = i;
        let plus = c == b'+';
        let mut j = if plus { i + 1 } else { i };
        let mut groups: Vec<usize> = Vec::new();
        let mut seps: Vec<u8> = Vec::new();
        let mut digits = Vec::new();
        let mut paren = false;
        let mut had_paren = false;
        // Where the number ends if what follows is no group after all
        // (`555-2671 (mobile)`), and the separators up to there.
        let (mut good_end, mut good_seps) = (j, 0);
        loop {
            let opened = j < b.len() && b[j] == b'(' && !had_paren && groups.len() <= 1;
            if opened {
                paren = true;
                had_paren = true;
                j += 1;
            }
            let g = j;
            while j < b.len() && b[j].is_ascii_digit() {
                digits.push(b[j] - b'0');
                j += 1;
            }
            if j == g {
                if opened {
                    (paren, had_paren) = (false, false);
                }
                j = good_end;
                seps.truncate(good_seps);
                break;
            }
            groups.push(j - g);
            (good_end, good_seps) = (j, seps.len());
            if paren && j < b.len() && b[j] == b')' {
                j += 1;
                paren = false;
                seps.push(b')');
                (good_end, good_seps) = (j, seps.len());
                if j < b.len() && b[j] == b' ' {
                    j += 1;
                }
                continue;
            }
            // One separator, then a digit.
            if j + 1 < b.len()
                && b" -.".contains(&b[j])
                && (b[j + 1].is_ascii_digit() || (b[j + 1] == b'(' && !had_paren))
            {
                seps.push(b[j]);
                j += 1;
                continue;
            }
            break;
        }
        let end = j;
        let followed = end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'@');
        if groups.is_empty() || followed || paren {
            i = end.max(i + 1);
            continue;
        }
        if !plus && is_card(&digits, &seps) {
            push(found, "card_number", start, end);
        } else if is_phone(plus, &digits, &groups, &seps, had_paren) {
            push(found, "phone", start, end);
        }
        i = end.max(i + 1);
    }
}

fn luhn(digits: &[u8]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(k, &d)| {
            let d = u32::from(d);
            if k % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

fn is_card(digits: &[u8], seps: &[u8]) -> bool {
    if !(13..=19).contains(&digits.len()) || seps.iter().any(|&s| s == b'.' || s == b')') {
        return false;
    }
    let n = |k: usize| digits[..k].iter().fold(0u32, |a, &d| a * 10 + u32::from(d));
    let issuer = digits[0] == 4
        || (51..=55).contains(&n(2))
        || (2221..=2720).contains(&n(4))
        || n(2) == 34
        || n(2) == 37
        || n(4) == 6011
        || n(2) == 65
        || n(2) == 35
        || n(2) == 36
        || n(2) == 38
        || n(2) == 62;
    issuer && luhn(digits)
}

fn is_phone(plus: bool, digits: &[u8], groups: &[usize], seps: &[u8], paren: bool) -> bool {
    // One kind of separator (a closing parenthesis and a space count as one).
    // (`+1 (415) 555-2671` mixes a space and a hyphen around its
    // parentheses.)
    let mut kinds: Vec<u8> = seps.iter().copied().filter(|&s| s != b')').collect();
    kinds.sort_unstable();
    kinds.dedup();
    if kinds.len() > 1 && !(paren && kinds == [b' ', b'-']) {
        return false;
    }
    if plus {
        return (8..=15).contains(&digits.len()) && digits[0] != 0;
    }
    let g: Vec<usize> = groups.to_vec();
    // North American: (NXX) NXX-XXXX, NXX-NXX-XXXX, 1-NXX-NXX-XXXX.
    let nanp = |g: &[usize], d: &[u8]| {
        g == [3, 3, 4] && (2..=9).contains(&d[0]) && (2..=9).contains(&d[3])
    };
    if nanp(&g, digits)
        || (g.len() == 4 && g[0] == 1 && digits[0] == 1 && nanp(&g[1..], &digits[1..]))
    {
        return paren || !kinds.is_empty();
    }
    // National numbers with a trunk 0: 020 7946 0958, 07700 900123, 030-1234567.
    if paren || digits[0] != 0 || !(10..=11).contains(&digits.len()) || g.len() < 2 {
        return false;
    }
    g.iter().all(|&n| n >= 2) && kinds != [b'.']
}

/// `local@domain.tld`.
fn emails(b: &[u8], found: &mut Vec<Secret>) {
    let local = |c: u8| c.is_ascii_alphanumeric() || b"._%+-".contains(&c);
    let domain = |c: u8| c.is_ascii_alphanumeric() || c == b'.' || c == b'-';
    for (at, _) in b.iter().enumerate().filter(|(_, c)| **c == b'@') {
        let mut s = at;
        while s > 0 && local(b[s - 1]) {
            s -= 1;
        }
        while s < at && b[s] == b'.' {
            s += 1;
        }
        let mut e = at + 1;
        while e < b.len() && domain(b[e]) {
            e += 1;
        }
        while e > at + 1 && (b[e - 1] == b'.' || b[e - 1] == b'-') {
            e -= 1;
        }
        if s == at || e == at + 1 {
            continue;
        }
        let dom = &b[at + 1..e];
        let Some(dot) = dom.iter().rposition(|&c| c == b'.') else {
            continue;
        };
        let tld = &dom[dot + 1..];
        if tld.len() >= 2 && tld.iter().all(u8::is_ascii_alphabetic) && dot > 0 {
            push(found, "email", s, e);
        }
    }
}

/// Shannon entropy of `w`'s bytes, in bits per byte.
fn entropy(w: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &c in w {
        counts[c as usize] += 1;
    }
    let n = w.len() as f64;
    counts
        .iter()
        .filter(|&&k| k > 0)
        .map(|&k| {
            let p = f64::from(k) / n;
            -p * p.log2()
        })
        .sum()
}

/// The entropy a random string of `n` bytes over a 62-letter alphabet
/// comes close to, less a margin: an identifier made of words repeats its
/// letters and stays well below it.
fn entropy_floor(n: usize) -> f64 {
    // Expected distinct letters in n draws from 62, as bits, less 15 %.
    let distinct = 62.0 * (1.0 - (-(n as f64) / 62.0).exp());
    0.85 * distinct.log2()
}

/// A long token that mixes letters and digits with the entropy of a
/// random string. Hex strings (hashes, commit ids), UUIDs, URLs and paths
/// are not taken for secrets by this detector alone.
fn high_entropy(b: &[u8], found: &mut Vec<Secret>) {
    let class = |c: u8| c.is_ascii_alphanumeric() || b"+/=_-".contains(&c);
    for (start, end) in runs(b, class) {
        // Part of a URL, a path or an e-mail address: not a token.
        let before = &b[..start];
        if before.ends_with(b"://")
            || before.ends_with(b":")
            || before.ends_with(b"@")
            || before.ends_with(b".")
            || (end < b.len()
                && matches!(b[end], b'.' | b'@' | b':')
                && end + 1 < b.len()
                && b[end + 1].is_ascii_alphanumeric())
        {
            continue;
        }
        let mut w = &b[start..end];
        while let [rest @ .., b'='] = w {
            w = rest;
        }
        if w.len() < 20 {
            continue;
        }
        // A path: every part between slashes a word, maybe numbered
        // (`/Users/Ana/Projects/Strata2024`).
        let word = |p: &[u8]| {
            let letters = p.iter().take_while(|c| c.is_ascii_alphabetic()).count();
            p[letters..].iter().all(u8::is_ascii_digit)
        };
        if w.contains(&b'/') && w.split(|&c| c == b'/').all(word) {
            continue;
        }
        if w.iter().all(|c| c.is_ascii_hexdigit() || *c == b'-') {
            continue;
        }
        let digits = w.iter().filter(|c| c.is_ascii_digit()).count();
        let upper = w.iter().filter(|c| c.is_ascii_uppercase()).count();
        let lower = w.iter().filter(|c| c.is_ascii_lowercase()).count();
        if upper + lower == 0 {
            continue;
        }
        let mixed = upper > 0 && lower > 0;
        if digits == 0 {
            // Letters alone: random only when long and with about as many
            // capitals as small letters (an identifier's words start with
            // one capital each).
            let share = upper as f64 / (upper + lower) as f64;
            if w.len() < 24 || !(0.3..=0.7).contains(&share) {
                continue;
            }
        } else if !mixed && digits * 5 < w.len() {
            // One case only: the digits must be a real share of it.
            continue;
        }
        // Words joined by separators (`build-2024-release-notes`) are not
        // random: every part is short or alphabetic.
        let parts: Vec<&[u8]> = w.split(|c| b"_-".contains(c)).collect();
        if parts.len() > 1 && !parts.iter().any(|p| p.len() >= 16) {
            continue;
        }
        if entropy(w) >= entropy_floor(w.len()) {
            push(found, "high_entropy", start, start + w.len());
        }
    }
}

// ---------------------------------------------------------------------
// Rules

/// What a rule does with a detector's finding.
/// Ordered from the mildest to the strictest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretAction {
    /// Nothing: the detector does not run.
    Off,
    /// The memory is stored as written, marked `sensitive`.
    Flag,
    /// The span is replaced by `[REDACTED:<detector>]` before it is stored.
    Redact,
    /// The write is refused (422), naming the detector and the span.
    Refuse,
}

fn redact_action() -> SecretAction {
    SecretAction::Redact
}

/// One `[[secrets]]` rule: what happens to secrets written into `scope`
/// and below. The most specific rule covering a memory's scope applies.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRule {
    /// A scope (`project/acme`), covering it and everything below, or `*`
    /// for every scope.
    pub scope: String,
    /// What every detector's finding does (default `redact`).
    #[serde(default = "redact_action")]
    pub action: SecretAction,
    /// Per-detector actions over `action` (`email = "flag"`, `phone =
    /// "off"`).
    #[serde(default)]
    pub detectors: BTreeMap<String, SecretAction>,
}

impl SecretRule {
    /// A rule for `scope` with one action for every detector.
    pub fn new(scope: impl Into<String>, action: SecretAction) -> SecretRule {
        SecretRule {
            scope: scope.into(),
            action,
            detectors: BTreeMap::new(),
        }
    }

    /// The action for `detector`.
    pub fn action_for(&self, detector: &str) -> SecretAction {
        self.detectors.get(detector).copied().unwrap_or(self.action)
    }

    /// How many segments the rule's scope has (`*`: none), for choosing the
    /// most specific rule.
    fn depth(&self) -> Option<usize> {
        if self.scope == "*" {
            return Some(0);
        }
        Scope::parse(&self.scope)
            .ok()
            .map(|s| s.to_string().split('/').count())
    }

    fn covers(&self, scope: &Scope) -> bool {
        self.scope == "*" || Scope::parse(&self.scope).is_ok_and(|r| scope.is_within(&r))
    }
}

/// Checks `[[secrets]]` rules; errors name the rule and the key.
pub fn validate_rules(rules: &[SecretRule]) -> Result<(), Error> {
    for (i, r) in rules.iter().enumerate() {
        let at = format!("secrets[{i}]");
        if r.scope != "*" {
            Scope::parse(&r.scope).map_err(|e| {
                Error::InvalidConfig(format!(
                    "{at}.scope: `{}` is not `*` or a scope: {e}",
                    r.scope
                ))
            })?;
        }
        if let Some(j) = rules[..i].iter().position(|o| o.scope == r.scope) {
            return Err(Error::InvalidConfig(format!(
                "{at}.scope: `{}` has a rule already (secrets[{j}]); merge the two",
                r.scope
            )));
        }
        for d in r.detectors.keys() {
            if !DETECTORS.iter().any(|(n, _)| n == d) {
                let names: Vec<&str> = DETECTORS.iter().map(|(n, _)| *n).collect();
                return Err(Error::InvalidConfig(format!(
                    "{at}.detectors.{d}: no such detector (known: {})",
                    names.join(", ")
                )));
            }
        }
    }
    Ok(())
}

/// The rule that applies to memories of `scope`: the covering rule with
/// the longest scope.
pub fn rule_for<'a>(rules: &'a [SecretRule], scope: &Scope) -> Option<&'a SecretRule> {
    rules
        .iter()
        .filter(|r| r.covers(scope))
        .max_by_key(|r| r.depth())
}

/// What screening did to one memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Screened {
    /// Spans replaced by placeholders, by detector.
    pub redacted: BTreeMap<&'static str, usize>,
    /// Detectors whose findings marked the memory sensitive.
    pub flagged: Vec<&'static str>,
}

impl Screened {
    /// Whether the text changed.
    pub fn changed(&self) -> bool {
        !self.redacted.is_empty()
    }
}

/// Applies `rule` to a memory's content and the strings of its payload,
/// in place. A finding whose action is `refuse` fails the whole memory
/// (nothing changed) with [`Error::Refused`] naming `field` (prefixed by
/// `at`), the detector and the span.
pub(crate) fn screen(
    rule: &SecretRule,
    at: &str,
    content: &mut String,
    payload: &mut Option<serde_json::Value>,
) -> Result<Screened, Error> {
    let mut texts: Vec<(String, &mut String)> = vec![(format!("{at}content"), content)];
    if let Some(p) = payload.as_mut() {
        strings(p, format!("{at}payload"), &mut texts);
    }
    let mut plan = Vec::new();
    for (field, text) in &texts {
        let spans: Vec<(Secret, SecretAction)> = scan(text)
            .into_iter()
            .map(|s| (s, rule.action_for(s.detector)))
            .filter(|(_, a)| *a != SecretAction::Off)
            .collect();
        if let Some((s, _)) = spans.iter().find(|(_, a)| *a == SecretAction::Refuse) {
            return Err(Error::Refused {
                field: field.clone(),
                detector: s.detector.to_string(),
                start: s.start,
                end: s.end,
                rule: rule.scope.clone(),
            });
        }
        plan.push(spans);
    }
    let mut out = Screened::default();
    for ((_, text), spans) in texts.into_iter().zip(plan) {
        let cut: Vec<Secret> = spans
            .iter()
            .filter(|(_, a)| *a == SecretAction::Redact)
            .map(|(s, _)| *s)
            .collect();
        for (s, a) in &spans {
            if *a == SecretAction::Flag && !out.flagged.contains(&s.detector) {
                out.flagged.push(s.detector);
            }
        }
        if !cut.is_empty() {
            for s in &cut {
                *out.redacted.entry(s.detector).or_default() += 1;
            }
            *text = redact(text, &cut);
        }
    }
    Ok(out)
}

/// The findings in `text` that `rule` acts on, or the refusal naming
/// `field` when one of them is refused.
fn acted_on(
    rule: &SecretRule,
    field: &str,
    text: &str,
) -> Result<Vec<(Secret, SecretAction)>, Error> {
    let spans: Vec<(Secret, SecretAction)> = scan(text)
        .into_iter()
        .map(|s| (s, rule.action_for(s.detector)))
        .filter(|(_, a)| *a != SecretAction::Off)
        .collect();
    if let Some((s, _)) = spans.iter().find(|(_, a)| *a == SecretAction::Refuse) {
        return Err(Error::Refused {
            field: field.to_string(),
            detector: s.detector.to_string(),
            start: s.start,
            end: s.end,
            rule: rule.scope.clone(),
        });
    }
    Ok(spans)
}

/// `text` with the redacted ones of `spans` replaced, the flagged ones
/// and the replaced ones counted in `out`; `None` when nothing changed.
fn apply(text: &str, spans: &[(Secret, SecretAction)], out: &mut Screened) -> Option<String> {
    for (s, a) in spans {
        if *a == SecretAction::Flag && !out.flagged.contains(&s.detector) {
            out.flagged.push(s.detector);
        }
    }
    let cut: Vec<Secret> = spans
        .iter()
        .filter(|(_, a)| *a == SecretAction::Redact)
        .map(|(s, _)| *s)
        .collect();
    if cut.is_empty() {
        return None;
    }
    for s in &cut {
        *out.redacted.entry(s.detector).or_default() += 1;
    }
    Some(redact(text, &cut))
}

/// Applies `rule` to what else a writer names a memory with: its tags,
/// key, the keys of its payload's objects (each redacted or refused as
/// content is), and its session. A session's name is an identifier that
/// other writes must find again, so a finding there that the rule would
/// redact is refused as well (400 naming `session`). A refusal changes
/// nothing.
pub(crate) fn screen_labels(
    rule: &SecretRule,
    at: &str,
    tags: &mut [String],
    key: &mut Option<String>,
    payload: &mut Option<serde_json::Value>,
    session: Option<&str>,
) -> Result<Screened, Error> {
    let mut out = Screened::default();
    if let Some(id) = session {
        let spans = acted_on(rule, &format!("{at}session"), id)?;
        if let Some((s, _)) = spans.iter().find(|(_, a)| *a == SecretAction::Redact) {
            return Err(Error::field(
                format!("{at}session"),
                format!(
                    "bytes {}..{} look like {} (detector `{}`), and a session's name is not \
                     redacted (other writes name it again): name the session otherwise",
                    s.start,
                    s.end,
                    describe(s.detector),
                    s.detector
                ),
            ));
        }
        apply(id, &spans, &mut out);
    }
    // Every refusal first, so that a refused write changes nothing.
    let tag_spans = tags
        .iter()
        .enumerate()
        .map(|(i, t)| acted_on(rule, &format!("{at}tags[{i}]"), t))
        .collect::<Result<Vec<_>, Error>>()?;
    let key_spans = match key {
        Some(k) => acted_on(rule, &format!("{at}key"), k)?,
        None => Vec::new(),
    };
    if let Some(p) = payload.as_mut() {
        object_keys(
            rule,
            p,
            &format!("{at}payload"),
            true,
            &mut Screened::default(),
        )?;
    }
    for (t, spans) in tags.iter_mut().zip(tag_spans) {
        if let Some(new) = apply(t, &spans, &mut out) {
            *t = new;
        }
    }
    if let Some(k) = key.as_mut()
        && let Some(new) = apply(k, &key_spans, &mut out)
    {
        *k = new;
    }
    if let Some(p) = payload.as_mut() {
        object_keys(rule, p, &format!("{at}payload"), false, &mut out)?;
    }
    Ok(out)
}

/// The keys of every object in `v`: checked only (`dry`), or redacted.
/// Paths name a key by its redacted form, so an error never repeats a
/// secret the key holds.
fn object_keys(
    rule: &SecretRule,
    v: &mut serde_json::Value,
    path: &str,
    dry: bool,
    out: &mut Screened,
) -> Result<(), Error> {
    match v {
        serde_json::Value::Object(o) => {
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                let probe = scan(&k);
                let shown = if probe.is_empty() {
                    k.clone()
                } else {
                    redact(&k, &probe)
                };
                let here = format!("{path}.{shown}");
                let spans = acted_on(rule, &format!("{here} (an object key)"), &k)?;
                if let Some(child) = o.get_mut(&k) {
                    object_keys(rule, child, &here, dry, out)?;
                }
                if dry {
                    continue;
                }
                if let Some(mut new) = apply(&k, &spans, out) {
                    // Two keys redacted alike stay two keys.
                    while o.contains_key(&new) {
                        new.push('_');
                    }
                    if let Some(x) = o.remove(&k) {
                        o.insert(new, x);
                    }
                }
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter_mut().enumerate() {
                object_keys(rule, x, &format!("{path}[{i}]"), dry, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// One rule that takes, for every detector, the strictest action of
/// `rules`: for text logged outside any one scope (a context request's
/// query and placeholder values), which may concern any of them.
pub(crate) fn strictest(rules: &[SecretRule]) -> Option<SecretRule> {
    let first = rules.first()?;
    let mut out = SecretRule::new("*", first.action);
    for r in rules {
        out.action = out.action.max(r.action);
    }
    for (d, _) in DETECTORS {
        let a = rules
            .iter()
            .map(|r| r.action_for(d))
            .max()
            .unwrap_or(SecretAction::Off);
        out.detectors.insert((*d).to_string(), a);
    }
    Some(out)
}

/// `text` as it may be logged under `rule`: redacted, or the refusal
/// naming `field`.
pub(crate) fn screen_text(rule: &SecretRule, field: &str, text: &str) -> Result<String, Error> {
    let spans = acted_on(rule, field, text)?;
    Ok(apply(text, &spans, &mut Screened::default()).unwrap_or_else(|| text.to_string()))
}

/// Every string value in `v`, with its path (`payload.a.b[2]`).
fn strings<'a>(
    v: &'a mut serde_json::Value,
    path: String,
    out: &mut Vec<(String, &'a mut String)>,
) {
    match v {
        serde_json::Value::String(s) => out.push((path, s)),
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter_mut().enumerate() {
                strings(x, format!("{path}[{i}]"), out);
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                strings(x, format!("{path}.{k}"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(&'static str, &str)> {
        scan(text)
            .into_iter()
            .map(|s| (s.detector, &text[s.start..s.end]))
            .collect()
    }

    #[test]
    fn provider_formats_and_aws() {
        let t = "key AKIAIOSFODNN7EXAMPLE and ghp_aB3dE5gH7jK9mN1pQ3rS5tU7vW9xY1zA2bC4 ok";
        assert_eq!(
            found(t),
            [
                ("aws_key", "AKIAIOSFODNN7EXAMPLE"),
                ("provider_token", "ghp_aB3dE5gH7jK9mN1pQ3rS5tU7vW9xY1zA2bC4")
            ]
        );
        let t = "use sk-proj-Zx81kQ0pLm2Nb7Vc4Xs9Ad3Fg6Hj1Kl5 for it";
        assert_eq!(
            found(t),
            [("provider_token", "sk-proj-Zx81kQ0pLm2Nb7Vc4Xs9Ad3Fg6Hj1Kl5")]
        );
        // A long hyphenated word is not a key.
        assert!(found("a sk-learn-style-pipeline-for-text-classification").is_empty());
        // AKIA with lowercase or the wrong length is not an AWS key id.
        assert!(
            !found("AKIAiosfodnn7example AKIA1234")
                .iter()
                .any(|(d, _)| *d == "aws_key")
        );
    }

    #[test]
    fn private_keys_urls_and_jwts() {
        let t = "here:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\nthanks";
        let f = found(t);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].0, "private_key");
        assert!(f[0].1.starts_with("-----BEGIN") && f[0].1.ends_with("KEY-----"));
        // A public key or certificate is not secret.
        assert!(found("-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----").is_empty());
        assert_eq!(
            found("db at postgres://admin:s3cr3t!@db.internal:5432/app"),
            [("url_password", "s3cr3t!")]
        );
        assert!(found("see https://example.com/a@b and postgres://user@host/db").is_empty());
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(found(&format!("token {jwt}.")), [("jwt", jwt)]);
    }

    #[test]
    fn assigned_passwords_but_not_prose() {
        assert_eq!(found("DB_PASSWORD=hunter2"), [("password", "hunter2")]);
        assert_eq!(
            found(r#"{"api_key": "abc123def456"}"#),
            [("password", "abc123def456")]
        );
        assert_eq!(
            found("password: Tr0ub4dor&3."),
            [("password", "Tr0ub4dor&3")]
        );
        assert!(found("Secret: I'm planning a surprise party").is_empty());
        assert!(found("Token: a small gift").is_empty());
        assert!(found("password = ${DB_PASSWORD}").is_empty());
        assert!(found("the password is long").is_empty());
    }

    #[test]
    fn cards_phones_and_emails() {
        assert_eq!(
            found("card 4111 1111 1111 1111 exp"),
            [("card_number", "4111 1111 1111 1111")]
        );
        // The same digits with a bad checksum are not a card.
        assert!(found("card 4111 1111 1111 1112").is_empty());
        assert_eq!(
            found("call (415) 555-2671 now"),
            [("phone", "(415) 555-2671")]
        );
        assert_eq!(
            found("or +44 20 7946 0958."),
            [("phone", "+44 20 7946 0958")]
        );
        assert_eq!(found("mobile 07700 900123"), [("phone", "07700 900123")]);
        assert_eq!(
            found("mail ana.lopez+x@mail.example.org."),
            [("email", "ana.lopez+x@mail.example.org")]
        );
        for prose in [
            "We met on 2023-05-07 at 10:30, 3 of us.",
            "Version 1.2.3 shipped; 192.168.1.100 is the host.",
            "It cost $1,234,567 in 2022 and 2023.",
            "Order 12345678 arrived; room 404.",
            "@alice thanks!",
        ] {
            assert!(found(prose).is_empty(), "{prose}: {:?}", found(prose));
        }
    }

    #[test]
    fn high_entropy_tokens_but_not_ids_or_words() {
        assert_eq!(
            found("secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY here"),
            [("high_entropy", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")]
        );
        for not in [
            "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
            "id 550e8400-e29b-41d4-a716-446655440000",
            "see https://github.com/org/repo/blob/main/src/lib.rs",
            "HTTPServerConfigurationBuilder and get_user_profile_by_identifier",
            "file build-2024-release-notes-final-v2.md",
            "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ] {
            assert!(found(not).is_empty(), "{not}: {:?}", found(not));
        }
    }

    #[test]
    fn labels_are_redacted_or_refused_without_repeating_the_secret() {
        let redact = SecretRule::new("*", SecretAction::Redact);
        let mut tags = vec!["ops".to_string(), "AKIAIOSFODNN7EXAMPLE".to_string()];
        let mut key = Some("ana@example.com".to_string());
        let mut p = Some(serde_json::json!({"AKIAIOSFODNN7EXAMPLE": {"x": 1}}));
        let s = screen_labels(&redact, "", &mut tags, &mut key, &mut p, Some("s1")).unwrap();
        assert_eq!(tags, ["ops", "[REDACTED:aws_key]"]);
        assert_eq!(key.as_deref(), Some("[REDACTED:email]"));
        assert_eq!(
            p.unwrap(),
            serde_json::json!({"[REDACTED:aws_key]": {"x": 1}})
        );
        assert_eq!(s.redacted.values().sum::<usize>(), 3);
        // A session is an identifier: not redacted, refused.
        let e = screen_labels(
            &redact,
            "",
            &mut [],
            &mut None,
            &mut None,
            Some("AKIAIOSFODNN7EXAMPLE"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("session") && !e.contains("AKIAIOSFODNN7EXAMPLE"),
            "{e}"
        );
        // Refused: named by the key's placeholder, and nothing changed.
        let refuse = SecretRule::new("*", SecretAction::Refuse);
        let mut tags = vec!["ok".to_string()];
        let mut p = Some(serde_json::json!({"a": {"AKIAIOSFODNN7EXAMPLE": 1}}));
        let before = p.clone();
        let e = screen_labels(&refuse, "line 3: ", &mut tags, &mut None, &mut p, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 3: payload.a.[REDACTED:aws_key] (an object key)")
                && !e.contains("AKIAIOSFODNN7EXAMPLE"),
            "{e}"
        );
        assert_eq!(p, before);
        // The logged context's rule: the strictest action of all rules.
        let rules = vec![
            SecretRule::new("*", SecretAction::Flag),
            SecretRule::new("project/pay", SecretAction::Redact),
        ];
        let r = strictest(&rules).unwrap();
        assert_eq!(
            screen_text(&r, "query", "key AKIAIOSFODNN7EXAMPLE").unwrap(),
            "key [REDACTED:aws_key]"
        );
    }

    #[test]
    fn redaction_is_idempotent() {
        let t = "AKIAIOSFODNN7EXAMPLE and ana@example.com";
        let once = redact(t, &scan(t));
        assert_eq!(once, "[REDACTED:aws_key] and [REDACTED:email]");
        assert!(scan(&once).is_empty());
    }

    #[test]
    fn the_most_specific_rule_applies() {
        let mut strict = SecretRule::new("project/pay", SecretAction::Refuse);
        strict.detectors.insert("email".into(), SecretAction::Flag);
        let rules = vec![SecretRule::new("*", SecretAction::Redact), strict];
        validate_rules(&rules).unwrap();
        let pay = Scope::parse("project/pay/task/t1").unwrap();
        let other = Scope::parse("project/other").unwrap();
        assert_eq!(rule_for(&rules, &pay).unwrap().scope, "project/pay");
        assert_eq!(rule_for(&rules, &other).unwrap().scope, "*");
        assert_eq!(rule_for(&rules[1..], &other), None);

        let r = rule_for(&rules, &pay).unwrap();
        let mut c = "mail me: ana@example.com".to_string();
        let mut p = None;
        let s = screen(r, "", &mut c, &mut p).unwrap();
        assert_eq!(s.flagged, ["email"]);
        assert_eq!(c, "mail me: ana@example.com");

        let mut c = "ok".to_string();
        let mut p = Some(serde_json::json!({"env": ["x", "AWS=AKIAIOSFODNN7EXAMPLE"]}));
        let e = screen(r, "", &mut c, &mut p).unwrap_err().to_string();
        assert!(
            e.contains("payload.env[1]") && e.contains("aws_key") && e.contains("4..24"),
            "{e}"
        );
        // Refused: nothing changed.
        assert_eq!(p.unwrap()["env"][1], "AWS=AKIAIOSFODNN7EXAMPLE");

        for bad in [
            vec![SecretRule::new("not a scope!", SecretAction::Redact)],
            vec![
                SecretRule::new("*", SecretAction::Redact),
                SecretRule::new("*", SecretAction::Flag),
            ],
        ] {
            assert!(validate_rules(&bad).is_err());
        }
        let mut typo = SecretRule::new("*", SecretAction::Redact);
        typo.detectors.insert("emial".into(), SecretAction::Off);
        let e = validate_rules(&[typo]).unwrap_err().to_string();
        assert!(e.contains("secrets[0].detectors.emial"), "{e}");
    }
}
