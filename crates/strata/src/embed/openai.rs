//! Any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM,
//! TEI, LM Studio): batched requests, a timeout, retries with exponential
//! backoff on network errors, 429 and 5xx, and errors that quote the
//! endpoint's answer on everything else.

use std::sync::OnceLock;
use std::time::Duration;

use super::{Embedder, EmbedderConfig, Purpose, normalize};
use crate::error::Error;

#[derive(Debug)]
pub(super) struct OpenAiEmbedder {
    url: String,
    request_model: String,
    id: String,
    api_key: Option<String>,
    dimensions: Option<usize>,
    dim: OnceLock<usize>,
    batch_size: usize,
    retries: u32,
    agent: ureq::Agent,
}

impl OpenAiEmbedder {
    pub(super) fn new(cfg: &EmbedderConfig) -> Result<OpenAiEmbedder, Error> {
        let url = cfg.url.clone().unwrap_or_default();
        let model = cfg.model.clone().unwrap_or_default();
        let api_key = match &cfg.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                Error::InvalidConfig(format!("embedder.api_key_env: {var} is not set"))
            })?),
            None => None,
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(
                cfg.timeout_ms.unwrap_or(30_000),
            )))
            .http_status_as_error(false)
            .build()
            .into();
        let dim = OnceLock::new();
        if let Some(d) = cfg.dimensions {
            let _ = dim.set(d);
        }
        Ok(OpenAiEmbedder {
            url: format!("{}/embeddings", url.trim_end_matches('/')),
            id: format!("openai:{model}"),
            request_model: model,
            api_key,
            dimensions: cfg.dimensions,
            dim,
            batch_size: cfg.batch_size.unwrap_or(64),
            retries: cfg.retries.unwrap_or(3),
            agent,
        })
    }

    /// One request; `Err((retryable, message))`.
    fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, (bool, String)> {
        let mut body = serde_json::json!({ "model": self.request_model, "input": texts });
        if let Some(d) = self.dimensions {
            body["dimensions"] = serde_json::json!(d);
        }
        let mut req = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json");
        if let Some(k) = &self.api_key {
            req = req.header("authorization", &format!("Bearer {k}"));
        }
        let mut resp = req
            .send(body.to_string().as_bytes())
            .map_err(|e| (true, format!("POST {}: {e}", self.url)))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| (true, format!("reading the reply of {}: {e}", self.url)))?;
        if status != 200 {
            let snippet: String = text.chars().take(300).collect();
            let retry = status == 429 || status >= 500;
            return Err((retry, format!("{} answered {status}: {snippet}", self.url)));
        }
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| (false, format!("{}: reply is not JSON: {e}", self.url)))?;
        let data = v["data"]
            .as_array()
            .ok_or_else(|| (false, format!("{}: reply has no `data` list", self.url)))?;
        if data.len() != texts.len() {
            return Err((
                false,
                format!(
                    "{}: {} vectors for {} inputs",
                    self.url,
                    data.len(),
                    texts.len()
                ),
            ));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for (pos, d) in data.iter().enumerate() {
            let i = d["index"].as_u64().map_or(pos, |i| i as usize);
            let vec: Option<Vec<f32>> = d["embedding"]
                .as_array()
                .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect());
            match (out.get_mut(i), vec) {
                (Some(slot), Some(mut v)) if !v.is_empty() => {
                    normalize(&mut v);
                    *slot = Some(v);
                }
                _ => return Err((false, format!("{}: bad vector at data[{pos}]", self.url))),
            }
        }
        let out: Vec<Vec<f32>> = out.into_iter().flatten().collect();
        if out.len() != texts.len() {
            return Err((
                false,
                format!("{}: vectors missing from the reply", self.url),
            ));
        }
        let dim = *self.dim.get_or_init(|| out[0].len());
        if let Some(v) = out.iter().find(|v| v.len() != dim) {
            return Err((
                false,
                format!(
                    "{}: a vector of length {} where {dim} was expected",
                    self.url,
                    v.len()
                ),
            ));
        }
        Ok(out)
    }
}

impl Embedder for OpenAiEmbedder {
    fn model(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        // Unknown until the first reply: ask the endpoint once.
        if let Some(d) = self.dim.get() {
            return *d;
        }
        match self.request(&["dimension probe"]) {
            Ok(v) => v[0].len(),
            Err(_) => 0,
        }
    }

    fn embed(&self, texts: &[&str], _: Purpose) -> Result<Vec<Vec<f32>>, Error> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.batch_size) {
            let mut attempt = 0;
            loop {
                match self.request(chunk) {
                    Ok(v) => {
                        out.extend(v);
                        break;
                    }
                    Err((true, _)) if attempt < self.retries => {
                        std::thread::sleep(Duration::from_millis(200 << attempt.min(6)));
                        attempt += 1;
                    }
                    Err((_, msg)) => {
                        let tries = attempt + 1;
                        return Err(Error::Embedding(format!(
                            "{msg} (after {tries} attempt{})",
                            if tries == 1 { "" } else { "s" }
                        )));
                    }
                }
            }
        }
        Ok(out)
    }
}
