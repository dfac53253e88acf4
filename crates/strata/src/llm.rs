//! One call to an OpenAI-compatible chat endpoint (`[summarizer]` in
//! `strata.toml`), shared by the LLM summarizer and the LLM learning
//! detector. Built with the `llm` feature; without it every call fails,
//! saying so, and callers fall back to what needs no model.

use crate::context::SummarizerConfig;

/// What the endpoint answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// `choices[0].message.content`, trimmed.
    pub content: String,
    /// `usage.prompt_tokens`, when the endpoint reports it.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, when the endpoint reports it.
    pub completion_tokens: Option<u64>,
}

/// Sends one system and one user message; an error says what failed
/// (never the API key).
#[cfg(feature = "llm")]
pub fn chat(
    cfg: &SummarizerConfig,
    system: &str,
    user: &str,
    max_tokens: u32,
) -> Result<Reply, String> {
    use std::time::Duration;

    let body = serde_json::json!({
        "model": cfg.model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
        "max_tokens": max_tokens,
        "temperature": 0,
    });
    let url = format!("{}/chat/completions", cfg.url.trim_end_matches('/'));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_millis(cfg.timeout_ms)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.post(&url).header("content-type", "application/json");
    if let Some(var) = &cfg.api_key_env {
        let key = std::env::var(var).map_err(|_| format!("{var} is not set"))?;
        req = req.header("authorization", &format!("Bearer {key}"));
    }
    let mut resp = req
        .send(body.to_string().as_bytes())
        .map_err(|e| format!("POST {url}: {e}"))?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("reading the reply of {url}: {e}"))?;
    if status != 200 {
        let snippet: String = text.chars().take(200).collect();
        return Err(format!("{url} answered {status}: {snippet}"));
    }
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{url}: reply is not JSON: {e}"))?;
    let content = v
        .pointer("/choices/0/message/content")
        .and_then(|c| c.as_str())
        .ok_or_else(|| format!("{url}: reply has no choices[0].message.content"))?
        .trim()
        .to_string();
    if content.is_empty() {
        return Err(format!("{url}: empty reply"));
    }
    let usage = |k: &str| v.pointer(&format!("/usage/{k}")).and_then(|x| x.as_u64());
    Ok(Reply {
        content,
        prompt_tokens: usage("prompt_tokens"),
        completion_tokens: usage("completion_tokens"),
    })
}

/// Without the `llm` feature: always an error, saying so.
#[cfg(not(feature = "llm"))]
pub fn chat(_: &SummarizerConfig, _: &str, _: &str, _: u32) -> Result<Reply, String> {
    Err("strata was built without the `llm` feature".into())
}
