//! The optional LLM detector: what changed since the last run, sent in
//! batches to the OpenAI-compatible chat endpoint of `[summarizer]`, which
//! answers with preferences and areas of confusion as JSON.
//!
//! It adds to the offline detectors, never replaces them: they run first
//! and stand whatever the endpoint does. A run sends at most
//! `llm_max_input_tokens` of memories (the rest are counted as unsent),
//! `llm_batch` memories a request. A reply is trusted with nothing: a
//! finding must name a kind it was asked for and evidence among the ids it
//! was sent (others are dropped, and a finding left with none is ignored),
//! a malformed reply is logged (standard error and the run's notes) and
//! ignored, and a failed request ends the LLM part of the run. Tokens the
//! endpoint reports are counted, and priced when prices are configured.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Evidence, Finding, LearnConfig};
use crate::context::SummarizerConfig;
use crate::model::{Kind, Memory};
use crate::tokens::TokenCounter;

/// The detector's name.
pub(super) const NAME: &str = "llm";
/// Confidence of one piece of evidence (0.5: a model's reading, not the
/// user's words matched by a rule).
pub(super) const PER_EVIDENCE: f64 = 0.5;
/// Longest content kept from a finding, in characters.
const MAX_CONTENT: usize = 300;
/// Tokens a reply may take.
const MAX_REPLY_TOKENS: u32 = 1_000;

const SYSTEM: &str = "You read memories an AI agent kept about its work with a user, \
and find what is worth learning about the user. Answer with JSON only: \
{\"findings\": [{\"kind\": \"preference\" or \"confusion\", \"subject\": \"two to six words\", \
\"content\": \"one sentence\", \"evidence\": [\"<id>\", ...]} or {\"kind\": \"fact\", \
\"person\": \"user\" or a first name, \"attribute\": one of city, employer, team, role, school, \
partner, car, pet, tool, phone, gym, \"value\": \"the value now\", \"evidence\": [\"<id>\"]}]}. \
A preference is a standing instruction or a preference the user stated about how the work \
should be done; a confusion is a topic the user found hard to understand; a fact is what a \
person's city, employer, ... is as of the memory cited (cite the statement of the current \
value). Cite as evidence only ids given in brackets. Encouragement, small talk, plans and \
what others said are not preferences or facts. With nothing to learn, answer {\"findings\": []}.";

/// What the LLM part of one learning run did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LlmRun {
    /// Requests sent.
    pub requests: usize,
    /// Requests that failed (the run's LLM part stops at the first).
    pub failed: usize,
    /// Memories sent.
    pub sent: usize,
    /// Memories left out by the token budget (or after a failure).
    pub unsent: usize,
    /// Prompt tokens, as the endpoint reported them.
    pub prompt_tokens: u64,
    /// Completion tokens, as the endpoint reported them.
    pub completion_tokens: u64,
    /// What they cost, at the configured prices per 1,000 tokens.
    pub cost: f64,
    /// Findings taken.
    pub findings: usize,
    /// Findings or replies ignored (malformed, unknown kind, no evidence
    /// among the ids sent).
    pub ignored: usize,
    /// Why anything failed or was ignored.
    pub notes: Vec<String>,
}

// `cost` is a product of counts and validated prices (finite, not
// negative), never NaN: equality is total.
impl Eq for LlmRun {}

/// Whether the detector reads `m`: what a person said or noted.
pub(super) fn reads(m: &Memory) -> bool {
    super::users_word(m)
        && matches!(
            m.kind,
            Kind::Conversation | Kind::Note | Kind::Preference | Kind::Finding | Kind::Decision
        )
}

#[derive(Deserialize)]
struct Reply {
    findings: Vec<Value>,
}

/// Runs the detector over `changed`; findings go to `out`.
pub(super) fn detect(
    endpoint: Option<&SummarizerConfig>,
    counter: &TokenCounter,
    cfg: &LearnConfig,
    changed: &[Memory],
    out: &mut Vec<Finding>,
) -> LlmRun {
    let mut run = LlmRun::default();
    let mut todo: Vec<&Memory> = changed.iter().filter(|m| reads(m)).collect();
    todo.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let Some(endpoint) = endpoint else {
        run.unsent = todo.len();
        run.notes
            .push("learning.llm is on but no [summarizer] endpoint is configured".into());
        return run;
    };
    let mut budget = cfg.llm_max_input_tokens as usize;
    let mut at = 0;
    while at < todo.len() {
        let mut batch: Vec<&Memory> = Vec::new();
        let mut prompt = String::new();
        while at < todo.len() && batch.len() < cfg.llm_batch {
            let m = todo[at];
            let line = match &m.session {
                Some(s) => format!("[{}] (session {s}) {}\n", m.id, m.content),
                None => format!("[{}] {}\n", m.id, m.content),
            };
            let t = counter.count(&line) as usize;
            if t > budget {
                break;
            }
            budget -= t;
            prompt.push_str(&line);
            batch.push(m);
            at += 1;
        }
        if batch.is_empty() {
            break;
        }
        run.requests += 1;
        run.sent += batch.len();
        match crate::llm::chat(endpoint, SYSTEM, &prompt, MAX_REPLY_TOKENS) {
            Ok(r) => {
                run.prompt_tokens += r.prompt_tokens.unwrap_or(0);
                run.completion_tokens += r.completion_tokens.unwrap_or(0);
                read_reply(&r.content, &batch, &mut run, out);
            }
            Err(e) => {
                run.failed += 1;
                let n = run.requests;
                note(&mut run, format!("request {n} failed: {e}"));
                break;
            }
        }
    }
    run.unsent = todo.len() - run.sent;
    run.cost = (run.prompt_tokens as f64 * cfg.llm_cost_per_1k_input
        + run.completion_tokens as f64 * cfg.llm_cost_per_1k_output)
        / 1000.0;
    run
}

/// Logs and keeps a note of what went wrong.
fn note(run: &mut LlmRun, text: String) {
    eprintln!("strata: learning: LLM detector: {text}");
    run.notes.push(text);
}

/// The reply's JSON: the whole text, or the part between the first `{`
/// and the last `}` (a fenced block, a sentence before it).
fn json_of(text: &str) -> Option<&str> {
    let (a, b) = (text.find('{')?, text.rfind('}')?);
    (a < b).then(|| &text[a..=b])
}

fn read_reply(text: &str, batch: &[&Memory], run: &mut LlmRun, out: &mut Vec<Finding>) {
    let parsed = json_of(text).and_then(|j| serde_json::from_str::<Reply>(j).ok());
    let Some(reply) = parsed else {
        let head: String = text.chars().take(80).collect();
        run.ignored += 1;
        let n = run.requests;
        note(
            run,
            format!("reply {n} is not the JSON asked for: {head:?}"),
        );
        return;
    };
    for (i, f) in reply.findings.iter().enumerate() {
        match finding(f, batch) {
            Ok(found) => {
                run.findings += 1;
                out.push(found);
            }
            Err(why) => {
                run.ignored += 1;
                let n = run.requests;
                note(run, format!("reply {n} finding {}: {why}", i + 1));
            }
        }
    }
}

fn finding(f: &Value, batch: &[&Memory]) -> Result<Finding, String> {
    let s = |k: &str| {
        f.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("`{k}` is missing or not text"))
    };
    let (kind, what) = match s("kind")? {
        "preference" => (Kind::Preference, "preference"),
        "confusion" => (Kind::Pattern, "confusion"),
        "fact" => return fact(f, batch),
        other => return Err(format!("unknown kind `{other}`")),
    };
    let subject: String = s("subject")?
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(8)
        .collect::<Vec<_>>()
        .join("-");
    if subject.is_empty() {
        return Err("`subject` has no words".into());
    }
    let content: String = s("content")?.chars().take(MAX_CONTENT).collect();
    let sent = cited(f, batch)?;
    let first = sent[0];
    let evidence: Vec<Evidence> = sent.iter().map(|m| Evidence::of(m)).collect();
    Ok(Finding {
        scope: first.scope.clone(),
        detector: NAME,
        subject: format!("{what}-{subject}"),
        kind,
        content,
        importance: 0.7,
        detail: serde_json::json!({NAME: {"kind": what}}),
        evidence,
        whole: false,
        at: None,
    })
}

/// The memories a finding cites: only ids that were sent, and only of
/// the first cited memory's scope; at least one.
fn cited<'a>(f: &Value, batch: &[&'a Memory]) -> Result<Vec<&'a Memory>, String> {
    let ids: Vec<&str> = f
        .get("evidence")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let sent: Vec<&Memory> = ids
        .iter()
        .filter_map(|id| batch.iter().find(|m| m.id == *id).copied())
        .collect();
    let Some(first) = sent.first() else {
        return Err("no evidence among the ids sent".into());
    };
    let scope = first.scope.clone();
    Ok(sent.into_iter().filter(|m| m.scope == scope).collect())
}

/// A fact finding: kept under the fact detector's key for that person
/// and attribute, so a newer value supersedes an older one and `as_of`
/// answers as for any learned fact; its time is the cited statement's.
fn fact(f: &Value, batch: &[&Memory]) -> Result<Finding, String> {
    fn text<'a>(f: &'a Value, k: &str) -> Result<&'a str, String> {
        f.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("`{k}` is missing or not text"))
    }
    let attribute = match text(f, "attribute")? {
        "city" | "location" => "location",
        other => other,
    };
    let known = super::fact::attributes();
    let (Some(attribute), Some(say)) = (
        known.iter().copied().find(|a| *a == attribute),
        super::fact::say_of(attribute),
    ) else {
        return Err(format!(
            "unknown attribute `{attribute}` (one of {})",
            known.join(", ")
        ));
    };
    let value: String = text(f, "value")?.chars().take(80).collect();
    let person = text(f, "person")?;
    let (subject, shown) = match person.to_lowercase().as_str() {
        "user" | "i" | "me" | "the user" => ("i".to_string(), "The user".to_string()),
        p => {
            if !p
                .chars()
                .all(|c| c.is_alphanumeric() || c == ' ' || c == '-')
                || p.len() > 40
            {
                return Err(format!("`person` {person:?} is not a name"));
            }
            (p.to_string(), person.to_string())
        }
    };
    let sent = cited(f, batch)?;
    let first = sent[0];
    let evidence: Vec<Evidence> = sent.iter().map(|m| Evidence::of(m)).collect();
    let at = sent
        .iter()
        .map(|m| m.created_at)
        .max()
        .unwrap_or(first.created_at);
    let statement = super::fact::Statement {
        subject,
        shown,
        attribute,
        say,
        value,
    };
    Ok(super::fact::finding(
        &first.scope,
        &statement,
        evidence,
        at,
        NAME,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_found_inside_a_fence_or_a_sentence() {
        assert_eq!(json_of("```json\n{\"a\": 1}\n```"), Some("{\"a\": 1}"));
        assert_eq!(
            json_of("Here: {\"findings\": []}."),
            Some("{\"findings\": []}")
        );
        assert_eq!(json_of("no json"), None);
        assert_eq!(json_of("} {"), None);
    }

    #[test]
    fn findings_keep_only_evidence_that_was_sent() {
        let at = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let a = crate::testutil::memory("project/acme", "Always use tabs", at);
        let b = crate::testutil::memory("project/beta", "Use tabs please", at);
        let batch = [&a, &b];
        let f = serde_json::json!({"kind": "preference", "subject": "Tabs, not spaces!",
            "content": "Use tabs.", "evidence": [a.id, "made-up", b.id]});
        let got = finding(&f, &batch).unwrap();
        assert_eq!(got.subject, "preference-tabs-not-spaces");
        let ids: Vec<&str> = got.evidence.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, [a.id.as_str()], "another scope's evidence is left out");
        let none = serde_json::json!({"kind": "preference", "subject": "x", "content": "y",
            "evidence": ["made-up"]});
        assert!(finding(&none, &batch).unwrap_err().contains("no evidence"));
        let odd = serde_json::json!({"kind": "mood", "subject": "x", "content": "y",
            "evidence": [a.id]});
        assert!(finding(&odd, &batch).unwrap_err().contains("mood"));
    }
}
