//! `strata eval secrets`: the write-path detectors on a labelled set this
//! module generates (planted secrets of every kind inside ordinary and
//! technical sentences) and on text with none (LoCoMo's turns, and
//! generated technical sentences full of ids, hashes, versions and dates).
//!
//! The planted values are random in each provider's documented shape; the
//! carrier sentences are varied on purpose and none is taken from the
//! detectors' tests.

use serde::Serialize;

use crate::rng::Rng;

const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const DIGITS: &str = "0123456789";
const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const HEX: &str = "0123456789abcdef";
const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The kinds planted, with the detector expected to name each.
pub const KINDS: &[(&str, &str)] = &[
    ("aws_access_key_id", "aws_key"),
    ("aws_secret_access_key", "high_entropy"),
    ("github_token", "provider_token"),
    ("gitlab_token", "provider_token"),
    ("slack_token", "provider_token"),
    ("openai_key", "provider_token"),
    ("anthropic_key", "provider_token"),
    ("stripe_key", "provider_token"),
    ("google_api_key", "provider_token"),
    ("huggingface_token", "provider_token"),
    ("npm_token", "provider_token"),
    ("jwt", "jwt"),
    ("random_token", "high_entropy"),
    ("private_key", "private_key"),
    ("url_password", "url_password"),
    ("assigned_password", "password"),
    ("email", "email"),
    ("card_number", "card_number"),
    ("phone", "phone"),
];

fn luhn_complete(r: &mut Rng, prefix: &str, len: usize) -> String {
    let mut d: Vec<u32> = prefix.bytes().map(|c| u32::from(c - b'0')).collect();
    while d.len() < len - 1 {
        d.push(r.below(10) as u32);
    }
    // The check digit that makes the Luhn sum a multiple of ten.
    let sum: u32 = d
        .iter()
        .rev()
        .enumerate()
        .map(|(k, &x)| {
            if k % 2 == 0 {
                let y = x * 2;
                if y > 9 { y - 9 } else { y }
            } else {
                x
            }
        })
        .sum();
    d.push((10 - sum % 10) % 10);
    d.iter().map(|x| char::from(b'0' + *x as u8)).collect()
}

fn secret(r: &mut Rng, kind: &str) -> String {
    match kind {
        "aws_access_key_id" => format!(
            "{}{}",
            r.pick(&["AKIA", "ASIA"]),
            r.chars(16, &format!("{UPPER}{DIGITS}"))
        ),
        "aws_secret_access_key" => r.chars(40, B64),
        "github_token" => match r.below(2) {
            0 => format!(
                "{}_{}",
                r.pick(&["ghp", "gho", "ghs", "ghu"]),
                r.chars(36, ALNUM)
            ),
            _ => format!("github_pat_{}_{}", r.chars(22, ALNUM), r.chars(59, ALNUM)),
        },
        "gitlab_token" => format!("glpat-{}", r.chars(20, B64URL)),
        "slack_token" => format!(
            "{}-{}-{}-{}",
            r.pick(&["xoxb", "xoxp"]),
            r.chars(12, DIGITS),
            r.chars(12, DIGITS),
            r.chars(24, ALNUM)
        ),
        "openai_key" => match r.below(2) {
            0 => format!("sk-{}", r.chars(48, ALNUM)),
            _ => format!("sk-proj-{}", r.chars(64, B64URL)),
        },
        "anthropic_key" => format!("sk-ant-api03-{}AA", r.chars(93, B64URL)),
        "stripe_key" => format!(
            "{}_{}",
            r.pick(&["sk_live", "sk_test", "rk_live"]),
            r.chars(24, ALNUM)
        ),
        "google_api_key" => format!("AIza{}", r.chars(35, B64URL)),
        "huggingface_token" => format!("hf_{}", r.chars(34, LETTERS)),
        "npm_token" => format!("npm_{}", r.chars(36, ALNUM)),
        "jwt" => {
            let claims = format!(
                "{{\"sub\":\"{}\",\"iat\":{}}}",
                r.chars(8, DIGITS),
                1_700_000_000 + r.below(50_000_000)
            );
            format!(
                "{}.{}.{}",
                b64url(r.pick(&[r#"{"alg":"HS256","typ":"JWT"}"#, r#"{"alg":"RS256"}"#])),
                b64url(&claims),
                r.chars(43, B64URL)
            )
        }
        "random_token" => {
            let n = 24 + r.below(25);
            r.chars(n, ALNUM)
        }
        "private_key" => {
            let label = r.pick(&[
                "RSA PRIVATE KEY",
                "PRIVATE KEY",
                "EC PRIVATE KEY",
                "OPENSSH PRIVATE KEY",
            ]);
            let lines: Vec<String> = (0..3 + r.below(5)).map(|_| r.chars(64, B64)).collect();
            format!(
                "-----BEGIN {label}-----\n{}\n-----END {label}-----",
                lines.join("\n")
            )
        }
        // A URL spells `#` as `%23`: a raw one ends the authority.
        "url_password" => password(r).replace('#', "-"),
        "assigned_password" => password(r),
        "email" => {
            let first = r.pick(&[
                "ana",
                "john.smith",
                "k.tanaka",
                "li_wei",
                "maria-jose",
                "ops",
                "dev+alerts",
                "j.doe99",
            ]);
            let dom = r.pick(&[
                "example.com",
                "mail.acme.io",
                "uni-bonn.de",
                "gmail.com",
                "corp.example.co.uk",
            ]);
            format!("{first}@{dom}")
        }
        "card_number" => {
            let (prefix, len) = [
                ("4", 16),
                ("51", 16),
                ("55", 16),
                ("2221", 16),
                ("34", 15),
                ("37", 15),
                ("6011", 16),
                ("35", 16),
            ][r.below(8)];
            let d = luhn_complete(r, prefix, len);
            match r.below(3) {
                0 => d,
                k => {
                    let sep = if k == 1 { " " } else { "-" };
                    let groups: &[usize] = if len == 15 { &[4, 6, 5] } else { &[4, 4, 4, 4] };
                    let mut at = 0;
                    groups
                        .iter()
                        .map(|g| {
                            let s = &d[at..at + g];
                            at += g;
                            s.to_string()
                        })
                        .collect::<Vec<_>>()
                        .join(sep)
                }
            }
        }
        "phone" => {
            let n = |r: &mut Rng, k: usize| r.chars(k, DIGITS);
            let area = format!("{}{}", 2 + r.below(8), n(r, 2));
            let exch = format!("{}{}", 2 + r.below(8), n(r, 2));
            match r.below(8) {
                0 => format!("({area}) {exch}-{}", n(r, 4)),
                1 => format!("{area}-{exch}-{}", n(r, 4)),
                2 => format!("+1 {area} {exch} {}", n(r, 4)),
                3 => format!("+44 20 {} {}", n(r, 4), n(r, 4)),
                4 => format!("+49 30 {}", n(r, 7)),
                5 => format!("0{} {} {}", n(r, 2), n(r, 4), n(r, 4)),
                6 => format!("+91 9{} {}", n(r, 4), n(r, 5)),
                _ => format!("+1 ({area}) {exch}-{}", n(r, 4)),
            }
        }
        other => unreachable!("kind {other}"),
    }
}

fn password(r: &mut Rng) -> String {
    match r.below(3) {
        0 => format!(
            "{}{}{}",
            r.pick(&["Summer", "Winter", "Dragon", "Monkey", "Blue", "Coffee"]),
            1990 + r.below(40),
            r.pick(&["!", "#", "$", "", "?"])
        ),
        1 => {
            let n = 12 + r.below(6);
            r.chars(
                n,
                "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789!#%&*",
            )
        }
        _ => format!(
            "{}{}",
            r.chars(6, "abcdefghijklmnopqrstuvwxyz"),
            r.chars(3, DIGITS)
        ),
    }
}

fn b64url(s: &str) -> String {
    let t = B64URL.as_bytes();
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..=c.len() {
            out.push(t[((n >> (18 - 6 * k)) & 63) as usize] as char);
        }
    }
    out
}

/// Sentences a secret lands in: prose, chat, shell, config, logs.
const CARRIERS: &[&str] = &[
    "here's the key you asked for: {}",
    "Use {} for the staging deploy, not the prod one.",
    "I pasted {} into the settings page but it still says unauthorized",
    "{}",
    "can you check why {} stopped working after the rotation?",
    "The build log shows `{}` in the environment dump.",
    "ok so it's {} — please don't share it",
    "curl -H 'Authorization: Bearer {}' https://api.example.com/v1/items",
    "Found this in the old notes: {} (not sure it's still valid)",
    "config:\n  endpoint: https://api.example.com\n  credential: {}\n",
    "Error 401 when calling the API with {}, retried twice.",
    "\"{}\"",
    "My colleague sent me {} yesterday, is that the right format?",
    "- [ ] revoke {}\n- [ ] update the wiki",
];

/// How each kind sits in its sentence: the value alone, or after the name
/// that says what it is (a URL's password always sits inside its URL).
fn plant(r: &mut Rng, kind: &str, value: &str) -> (String, usize) {
    let wrapped = match kind {
        "url_password" => {
            let (scheme, port) = [
                ("postgres", 5432),
                ("mysql", 3306),
                ("redis", 6379),
                ("https", 443),
                ("amqp", 5672),
                ("mongodb", 27017),
            ][r.below(6)];
            let user = r.pick(&["admin", "app", "deploy", "ana", "svc_etl"]);
            let host = r.pick(&["db.internal", "10.0.3.12", "cache.example.com", "localhost"]);
            let pre = format!("{scheme}://{user}:");
            let whole = format!("{pre}{value}@{host}:{port}/main");
            let carrier = r.pick(CARRIERS);
            let at = carrier.find("{}").unwrap();
            return (carrier.replacen("{}", &whole, 1), at + pre.len());
        }
        "assigned_password" => {
            let form = r.pick(&[
                "DB_PASSWORD={}",
                "password: {}",
                "\"api_key\": \"{}\"",
                "export SECRET_KEY='{}'",
                "pwd={}",
                "Password: {}",
                "client_secret = \"{}\"",
                "smtp.password={}",
            ]);
            let at = form.find("{}").unwrap();
            let line = form.replacen("{}", value, 1);
            let carrier = r.pick(&["{}", "the .env has {} in it", "set {} and restart", "{}\n"]);
            let c_at = carrier.find("{}").unwrap();
            return (carrier.replacen("{}", &line, 1), c_at + at);
        }
        _ => value.to_string(),
    };
    let carrier = r.pick(CARRIERS);
    let at = carrier.find("{}").unwrap();
    (carrier.replacen("{}", &wrapped, 1), at)
}

/// Sentences with no secret: ids, hashes, versions, dates, numbers,
/// paths and URLs an agent's memories are full of.
fn technical(r: &mut Rng) -> String {
    let hex = |r: &mut Rng, n| r.chars(n, HEX);
    match r.below(16) {
        0 => format!(
            "Fixed in commit {} on main; see the PR for details.",
            hex(r, 40)
        ),
        1 => format!("The artifact's sha256 is {}.", hex(r, 64)),
        2 => format!(
            "Request {}-{}-4{}-a{}-{} failed with a timeout.",
            hex(r, 8),
            hex(r, 4),
            hex(r, 3),
            hex(r, 3),
            hex(r, 12)
        ),
        3 => format!(
            "Upgraded tokio from 1.{}.{} to 1.{}.0 and axum to 0.8.",
            r.below(40),
            r.below(9),
            40 + r.below(9)
        ),
        4 => format!(
            "Meeting moved to 2024-0{}-1{} at 1{}:30 UTC, room {}.",
            1 + r.below(9),
            r.below(9),
            r.below(9),
            100 + r.below(800)
        ),
        5 => format!(
            "Order #{} shipped; invoice {} for ${},{}.{:02}.",
            r.chars(10, DIGITS),
            r.chars(8, DIGITS),
            1 + r.below(99),
            r.chars(3, DIGITS),
            r.below(100)
        ),
        6 => format!(
            "The pod api-{}-{} restarted {} times on node 10.0.{}.{}.",
            hex(r, 9),
            r.chars(5, "abcdefghijklmnopqrstuvwxyz0123456789"),
            r.below(20),
            r.below(255),
            r.below(255)
        ),
        7 => format!(
            "See https://github.com/acme/{}/blob/main/src/{}.rs#L{}",
            r.pick(&["billing", "auth-service", "etl"]),
            r.pick(&["lib", "handlers/user_profile", "db/migrations"]),
            r.below(900)
        ),
        8 => format!(
            "Image ghcr.io/acme/api@sha256:{} is the one deployed.",
            hex(r, 64)
        ),
        9 => format!(
            "Renamed {} to {}.",
            r.pick(&[
                "getUserProfileByIdentifier",
                "HTTPServerConfigurationBuilder",
                "AbstractSingletonProxyFactoryBean",
                "parse_rfc3339_timestamp_v2"
            ]),
            r.pick(&[
                "fetch_user_profile",
                "ServerConfigBuilder",
                "ProxyFactory",
                "parse_timestamp"
            ])
        ),
        10 => format!(
            "Tests: {} passed, {} failed in {}.{}s (seed {}).",
            r.below(900),
            r.below(5),
            r.below(60),
            r.below(100),
            r.chars(10, DIGITS)
        ),
        11 => format!(
            "Set max_tokens to {} and the timeout to {}ms.",
            256 * (1 + r.below(16)),
            100 * (1 + r.below(50))
        ),
        12 => format!(
            "The file is at /var/lib/strata/{}/segment-{}.cold.",
            r.pick(&["prod", "staging"]),
            r.chars(6, DIGITS)
        ),
        13 => format!(
            "Call me on my extension {} or at the front desk.",
            r.chars(4, DIGITS)
        ),
        14 => format!(
            "Use the token from the vault (path secret/data/{}), never paste it here.",
            r.pick(&["ci", "deploy", "api"])
        ),
        _ => format!(
            "The ISBN is 978-{}-{}-{}-{} and the DOI 10.{}/{}.",
            r.below(10),
            r.chars(3, DIGITS),
            r.chars(5, DIGITS),
            r.below(10),
            r.chars(4, DIGITS),
            r.chars(7, DIGITS)
        ),
    }
}

/// One kind's score.
#[derive(Debug, Serialize)]
pub struct KindScore {
    /// The kind planted.
    pub kind: String,
    /// How many were planted.
    pub planted: usize,
    /// How many a finding covered whole.
    pub caught: usize,
    /// How many the expected detector covered.
    pub named: usize,
    /// A few sentences whose secret was missed, to read.
    pub missed: Vec<String>,
}

/// A set with no secrets, and what the detectors found in it anyway.
#[derive(Debug, Serialize)]
pub struct NegativeScore {
    /// Which set.
    pub set: String,
    /// Texts in it.
    pub texts: usize,
    /// Texts with at least one finding.
    pub flagged: usize,
    /// Share of texts flagged.
    pub rate: f64,
    /// Findings by detector.
    pub by_detector: std::collections::BTreeMap<String, usize>,
    /// A few of the flagged spans, to read.
    pub examples: Vec<String>,
}

/// `strata eval secrets`.
#[derive(Debug, Serialize)]
pub struct SecretsReport {
    /// Per kind.
    pub kinds: Vec<KindScore>,
    /// Planted in all.
    pub planted: usize,
    /// Caught in all.
    pub caught: usize,
    /// `caught / planted`.
    pub recall: f64,
    /// The sets without secrets.
    pub negatives: Vec<NegativeScore>,
    /// Scan speed over the LoCoMo turns (or the technical set), MB/s.
    pub scan_mb_per_s: f64,
}

fn negative(set: &str, texts: &[String]) -> NegativeScore {
    let mut by = std::collections::BTreeMap::new();
    let mut flagged = 0;
    let mut examples = Vec::new();
    for t in texts {
        let f = strata::scan(t);
        if !f.is_empty() {
            flagged += 1;
        }
        for s in f {
            *by.entry(s.detector.to_string()).or_insert(0) += 1;
            if examples.len() < 10 {
                examples.push(format!("{}: {}", s.detector, &t[s.start..s.end]));
            }
        }
    }
    NegativeScore {
        set: set.into(),
        texts: texts.len(),
        flagged,
        rate: flagged as f64 / texts.len().max(1) as f64,
        by_detector: by,
        examples,
    }
}

/// Every turn's text in a LoCoMo file.
pub fn locomo_turns(data: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for conv in data.as_array().into_iter().flatten() {
        let Some(c) = conv.get("conversation").and_then(|c| c.as_object()) else {
            continue;
        };
        for (k, v) in c {
            if !k.starts_with("session_") {
                continue;
            }
            for t in v.as_array().into_iter().flatten() {
                if let Some(s) = t.get("text").and_then(|x| x.as_str()) {
                    out.push(s.to_string());
                }
            }
        }
    }
    out
}

/// Plants `per_kind` secrets of every kind and scans them, the technical
/// negatives and `conversation` (ordinary turns, if given).
pub fn secrets(per_kind: usize, seed: u64, conversation: Option<&[String]>) -> SecretsReport {
    let mut r = Rng(seed.max(1));
    let mut kinds = Vec::new();
    for (kind, detector) in KINDS {
        let mut score = KindScore {
            kind: kind.to_string(),
            planted: per_kind,
            caught: 0,
            named: 0,
            missed: Vec::new(),
        };
        for _ in 0..per_kind {
            let value = secret(&mut r, kind);
            let (text, at) = plant(&mut r, kind, &value);
            let (s, e) = (at, at + value.len());
            debug_assert_eq!(&text[s..e], value);
            let found = strata::scan(&text);
            if let Some(f) = found.iter().find(|f| f.start <= s && f.end >= e) {
                score.caught += 1;
                if f.detector == *detector {
                    score.named += 1;
                }
            } else if score.missed.len() < 3 {
                score.missed.push(text.clone());
            }
        }
        kinds.push(score);
    }
    let technical: Vec<String> = (0..per_kind * 10).map(|_| technical(&mut r)).collect();
    let mut negatives = vec![negative("technical (generated)", &technical)];
    let timed = match conversation {
        Some(c) => {
            negatives.push(negative("conversation", c));
            c
        }
        None => &technical[..],
    };
    let bytes: usize = timed.iter().map(String::len).sum();
    let t = std::time::Instant::now();
    let mut n = 0;
    for _ in 0..5 {
        for s in timed {
            n += strata::scan(s).len();
        }
    }
    std::hint::black_box(n);
    let secs = t.elapsed().as_secs_f64();
    let planted: usize = kinds.iter().map(|k| k.planted).sum();
    let caught: usize = kinds.iter().map(|k| k.caught).sum();
    SecretsReport {
        kinds,
        planted,
        caught,
        recall: caught as f64 / planted.max(1) as f64,
        negatives,
        scan_mb_per_s: 5.0 * bytes as f64 / 1e6 / secs.max(1e-9),
    }
}
