//! The local embedder: a sentence-transformers BERT-family model (MiniLM,
//! bge-small, e5-small, …) run in-process with candle, offline.
//!
//! A model folder holds `config.json`, `tokenizer.json`,
//! `model.safetensors` and, optionally, `1_Pooling/config.json` (mean or CLS
//! pooling) and `sentence_bert_config.json` (`max_seq_length`). Inputs are
//! padded per batch (not to a fixed length) and truncated at
//! `max_seq_length`, as sentence-transformers does; texts are sorted by
//! length before batching so each batch pads little, and the order is
//! restored.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::{Embedder, Purpose, normalize};
use crate::error::Error;

/// How token vectors become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pooling {
    Mean,
    Cls,
}

/// A BERT-family model in process memory.
pub struct LocalEmbedder {
    model_id: String,
    dir: PathBuf,
    dim: usize,
    pooling: Pooling,
    batch_size: usize,
    prefix: Option<(String, String)>,
    model: BertModel,
    // `encode_batch` needs `&self` but padding settings are per tokenizer;
    // one lock keeps calls from several threads simple.
    tokenizer: Mutex<Tokenizer>,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("model", &self.model_id)
            .field("dir", &self.dir)
            .field("dim", &self.dim)
            .field("pooling", &self.pooling)
            .finish()
    }
}

fn model_err(dir: &Path, what: impl std::fmt::Display) -> Error {
    Error::InvalidConfig(format!("embedder.model_dir: {}: {what}", dir.display()))
}

fn read_json(dir: &Path, name: &str) -> Result<Option<serde_json::Value>, Error> {
    let p = dir.join(name);
    if !p.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&p).map_err(|e| model_err(dir, format!("{name}: {e}")))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| model_err(dir, format!("{name}: {e}")))
}

impl LocalEmbedder {
    /// Loads the model in `dir`. Errors name the missing or bad file and
    /// say how to install the default model.
    pub fn open(
        dir: &Path,
        max_tokens: Option<usize>,
        batch_size: Option<usize>,
    ) -> Result<LocalEmbedder, Error> {
        for f in ["config.json", "tokenizer.json", "model.safetensors"] {
            if !dir.join(f).is_file() {
                return Err(model_err(
                    dir,
                    format!("no {f} (install the default model with `strata model fetch`)"),
                ));
            }
        }
        let cfg_json = read_json(dir, "config.json")?.unwrap_or_default();
        let config: BertConfig = serde_json::from_value(cfg_json.clone())
            .map_err(|e| model_err(dir, format!("config.json: {e}")))?;
        let pooling = match read_json(dir, "1_Pooling/config.json")? {
            Some(p) if p["pooling_mode_cls_token"].as_bool() == Some(true) => Pooling::Cls,
            _ => Pooling::Mean,
        };
        let seq = read_json(dir, "sentence_bert_config.json")?
            .and_then(|s| s["max_seq_length"].as_u64())
            .map_or(256, |n| n as usize);
        let max_len = max_tokens
            .unwrap_or(seq)
            .min(config.max_position_embeddings);
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))?;
        let mut padding = tokenizer.get_padding().cloned().unwrap_or(PaddingParams {
            pad_id: config.pad_token_id as u32,
            ..PaddingParams::default()
        });
        padding.strategy = PaddingStrategy::BatchLongest;
        tokenizer.with_padding(Some(padding));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..TruncationParams::default()
            }))
            .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))?;
        let weights = std::fs::read(dir.join("model.safetensors"))
            .map_err(|e| model_err(dir, format!("model.safetensors: {e}")))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| model_err(dir, format!("model.safetensors: {e}")))?;
        let model = BertModel::load(vb, &config)
            .map_err(|e| model_err(dir, format!("model.safetensors: {e}")))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "local".into());
        // e5 models want "query: " / "passage: " prefixes.
        let prefix = name
            .to_ascii_lowercase()
            .contains("e5")
            .then(|| ("query: ".to_string(), "passage: ".to_string()));
        Ok(LocalEmbedder {
            model_id: name,
            dir: dir.to_path_buf(),
            dim: config.hidden_size,
            pooling,
            batch_size: batch_size.unwrap_or(32),
            prefix,
            model,
            tokenizer: Mutex::new(tokenizer),
        })
    }

    fn run_batch(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, Error> {
        let err = |e: &dyn std::fmt::Display| Error::Embedding(format!("{}: {e}", self.model_id));
        let encodings = {
            let tok = self.tokenizer.lock().unwrap_or_else(|p| p.into_inner());
            tok.encode_batch(texts, true).map_err(|e| err(&e))?
        };
        let n = encodings.len();
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(n * len);
        let mut mask = Vec::with_capacity(n * len);
        for e in &encodings {
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let dev = Device::Cpu;
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(ids, (n, len), &dev)?;
            let mask = Tensor::from_vec(mask, (n, len), &dev)?;
            let types = ids.zeros_like()?;
            let hidden = self.model.forward(&ids, &types, Some(&mask))?;
            let pooled = match self.pooling {
                Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
                Pooling::Mean => {
                    let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                    let summed = hidden.broadcast_mul(&m)?.sum(1)?;
                    let counts = m.sum(1)?.clamp(1e-9, f64::MAX)?;
                    summed.broadcast_div(&counts)?
                }
            };
            pooled.to_vec2::<f32>()
        };
        let mut out = run().map_err(|e| err(&e))?;
        for v in &mut out {
            normalize(v);
        }
        Ok(out)
    }
}

impl Embedder for LocalEmbedder {
    fn model(&self) -> &str {
        &self.model_id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn is_local(&self) -> bool {
        true
    }

    fn embed(&self, texts: &[&str], purpose: Purpose) -> Result<Vec<Vec<f32>>, Error> {
        // Longest first, so each batch pads to a similar length.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(texts[i].len()));
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        for chunk in order.chunks(self.batch_size) {
            let batch: Vec<String> = chunk
                .iter()
                .map(|&i| match (&self.prefix, purpose) {
                    (Some((q, _)), Purpose::Query) => format!("{q}{}", texts[i]),
                    (Some((_, d)), Purpose::Document) => format!("{d}{}", texts[i]),
                    (None, _) => texts[i].to_string(),
                })
                .collect();
            for (&i, v) in chunk.iter().zip(self.run_batch(batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}

/// Writes a tiny random-weight BERT (with a word-level tokenizer over
/// `words`) into `dir`, for tests: real code path, no model download.
pub fn write_tiny_model(dir: &Path, words: &[&str]) -> Result<(), Error> {
    use candle_nn::VarMap;
    let io = |e: std::io::Error| Error::io(format!("writing {}", dir.display()), e);
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut vocab = serde_json::Map::new();
    for (i, w) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
        .iter()
        .chain(words.iter())
        .enumerate()
    {
        vocab.insert(w.to_string(), serde_json::json!(i));
    }
    let vocab_size = vocab.len();
    let tokenizer = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}
            }
        },
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    let config = serde_json::json!({
        "vocab_size": vocab_size, "hidden_size": 16, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0, "max_position_embeddings": 64, "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
        "model_type": "bert"
    });
    let write = |name: &str, v: &serde_json::Value| {
        std::fs::write(dir.join(name), v.to_string()).map_err(io)
    };
    write("tokenizer.json", &tokenizer)?;
    write("config.json", &config)?;
    let bert: BertConfig = serde_json::from_value(config)
        .map_err(|e| Error::Embedding(format!("tiny model config: {e}")))?;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    BertModel::load(vb, &bert).map_err(|e| Error::Embedding(format!("tiny model: {e}")))?;
    varmap
        .save(dir.join("model.safetensors"))
        .map_err(|e| Error::Embedding(format!("tiny model: {e}")))?;
    Ok(())
}
