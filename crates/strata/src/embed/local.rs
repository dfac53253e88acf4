//! The local embedder: a sentence-transformers BERT-family model (MiniLM,
//! bge-small, e5-small, …) run in-process, offline.
//!
//! A model folder holds `config.json`, `tokenizer.json`,
//! `model.safetensors` and, optionally, `1_Pooling/config.json` (mean or CLS
//! pooling) and `sentence_bert_config.json` (`max_seq_length`). Inputs are
//! truncated at `max_seq_length`, as sentence-transformers does. The
//! `safetensors` crate reads the weights; `strata-bert` runs them, a
//! batch's texts end to end with no padding, so vectors do not depend on
//! what else is in the batch. The tests hold these vectors against
//! candle's `BertModel` over the same folder (a dev-dependency only).

use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};

use super::{Embedder, Purpose, normalize};
use crate::error::Error;
use strata_bert::{Act, Bert, Shape};

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
    model: Bert,
    /// Cuts inputs at `max_seq_length` (special tokens included).
    tokenizer: Tokenizer,
    /// The same, cutting nothing: where a long query's last tokens start.
    untruncated: Tokenizer,
    /// Tokens of a query's own text that are kept, its last ones
    /// (`query_max_tokens` less the special tokens and the model's query
    /// prefix): an agent's long query (its recent dialogue) ends with what
    /// it asks, and a query then costs what a short one does.
    query_keep: usize,
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

/// The fields of a model's `config.json` the forward pass needs.
#[derive(Debug, Deserialize)]
struct BertConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    hidden_act: String,
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    model_type: Option<String>,
}

fn default_eps() -> f64 {
    1e-12
}

impl BertConfig {
    /// The activation `hidden_act` names, as transformers names them.
    fn act(&self) -> Option<Act> {
        match self.hidden_act.as_str() {
            "gelu" => Some(Act::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" | "geluapproximate" => {
                Some(Act::GeluTanh)
            }
            "relu" => Some(Act::Relu),
            _ => None,
        }
    }
}

/// A tensor's values as `f32`, from any float type a checkpoint stores.
fn floats(t: &safetensors::tensor::TensorView<'_>) -> Result<Vec<f32>, String> {
    let b = t.data();
    Ok(match t.dtype() {
        Dtype::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F16 => b
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::BF16 => b
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => return Err(format!("stored as {other:?}, not F32, F16 or BF16")),
    })
}

/// What a model folder says about itself.
struct Folder {
    config: BertConfig,
    pooling: Pooling,
    tokenizer: Tokenizer,
}

impl Folder {
    fn read(dir: &Path, max_tokens: Option<usize>) -> Result<Folder, Error> {
        for f in ["config.json", "tokenizer.json", "model.safetensors"] {
            if !dir.join(f).is_file() {
                return Err(model_err(
                    dir,
                    format!("no {f} (install the default model with `strata model fetch`)"),
                ));
            }
        }
        let cfg_json = read_json(dir, "config.json")?.unwrap_or_default();
        let config: BertConfig = serde_json::from_value(cfg_json)
            .map_err(|e| model_err(dir, format!("config.json: {e}")))?;
        if config.act().is_none() {
            return Err(model_err(
                dir,
                format!(
                    "config.json: hidden_act {:?} is not one of gelu, gelu_new, gelu_pytorch_tanh, relu",
                    config.hidden_act
                ),
            ));
        }
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
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..TruncationParams::default()
            }))
            .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))?;
        Ok(Folder {
            config,
            pooling,
            tokenizer,
        })
    }

    fn name(dir: &Path) -> String {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "local".into())
    }
}

impl LocalEmbedder {
    /// Loads the model in `dir`. Errors name the missing or bad file and
    /// say how to install the default model.
    pub fn open(
        dir: &Path,
        max_tokens: Option<usize>,
        query_max_tokens: usize,
        batch_size: Option<usize>,
    ) -> Result<LocalEmbedder, Error> {
        let Folder {
            config,
            pooling,
            tokenizer,
        } = Folder::read(dir, max_tokens)?;
        let mut untruncated = tokenizer.clone();
        untruncated
            .with_truncation(None)
            .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))?;
        // The file's bytes are read once; each tensor is a view into them
        // until it is packed.
        let bytes = std::fs::read(dir.join("model.safetensors"))
            .map_err(|e| model_err(dir, format!("model.safetensors: {e}")))?;
        let tensors = SafeTensors::deserialize(&bytes)
            .map_err(|e| model_err(dir, format!("model.safetensors: {e}")))?;
        // Some checkpoints name their tensors `bert.embeddings…`.
        let prefix = config
            .model_type
            .as_deref()
            .map(|t| format!("{t}."))
            .filter(|p| tensors.names().iter().any(|k| k.starts_with(p.as_str())))
            .unwrap_or_default();
        let act = config.act().unwrap_or(Act::GeluErf);
        let shape = Shape {
            hidden: config.hidden_size,
            heads: config.num_attention_heads,
            intermediate: config.intermediate_size,
            layers: config.num_hidden_layers,
            vocab: config.vocab_size,
            max_positions: config.max_position_embeddings,
            eps: config.layer_norm_eps as f32,
            act,
        };
        let get = |name: &str| {
            let full = format!("{prefix}{name}");
            let t = tensors
                .tensor(&full)
                .map_err(|_| model_err(dir, format!("model.safetensors: no tensor {full}")))?;
            let values = floats(&t)
                .map_err(|e| model_err(dir, format!("model.safetensors: {full}: {e}")))?;
            Ok((values, t.shape().to_vec()))
        };
        let model = Bert::new(shape, get, |what| {
            model_err(dir, format!("model.safetensors: {what}"))
        })?;
        let name = Folder::name(dir);
        // e5 models want "query: " / "passage: " prefixes.
        let prefix = name
            .to_ascii_lowercase()
            .contains("e5")
            .then(|| ("query: ".to_string(), "passage: ".to_string()));
        // What a query's text may keep: the limit less what surrounds it.
        let around = |text: &str| {
            untruncated
                .encode(text, true)
                .map(|e| e.len())
                .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))
        };
        let q = prefix.as_ref().map_or("", |p| p.0.as_str());
        let query_keep = query_max_tokens.saturating_sub(around(q)?).max(1);
        Ok(LocalEmbedder {
            model_id: name,
            dir: dir.to_path_buf(),
            dim: config.hidden_size,
            pooling,
            batch_size: batch_size.unwrap_or(32).max(1),
            prefix,
            model,
            tokenizer,
            untruncated,
            query_keep,
        })
    }

    /// A query's last `query_keep` tokens, cut where a token starts (the
    /// whole query when it is shorter).
    fn tail<'a>(&self, query: &'a str) -> Result<&'a str, Error> {
        let enc = self
            .untruncated
            .encode(query, false)
            .map_err(|e| Error::Embedding(format!("{}: {e}", self.model_id)))?;
        let n = enc.len();
        if n <= self.query_keep {
            return Ok(query);
        }
        let start = enc.get_offsets()[n - self.query_keep].0;
        Ok(query.get(start..).unwrap_or(query))
    }

    fn run_batch(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, Error> {
        let encodings = self
            .tokenizer
            .encode_batch(texts, true)
            .map_err(|e| Error::Embedding(format!("{}: {e}", self.model_id)))?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        if let Some(bad) = ids
            .iter()
            .flat_map(|s| s.iter())
            .find(|&&id| !self.model.knows(id))
        {
            return Err(Error::Embedding(format!(
                "{}: the tokenizer gave token id {bad}, past the model's vocabulary",
                self.model_id
            )));
        }
        let hidden = self.model.encode(&ids);
        let h = self.dim;
        let mut out = Vec::with_capacity(ids.len());
        let mut start = 0;
        for s in &ids {
            let rows = &hidden[start * h..(start + s.len()) * h];
            let mut v = vec![0.0f32; h];
            match self.pooling {
                // An input of no tokens (a tokenizer without [CLS]) stays zero.
                Pooling::Cls => {
                    if let Some(cls) = rows.get(..h) {
                        v.copy_from_slice(cls);
                    }
                }
                Pooling::Mean => {
                    for row in rows.chunks_exact(h) {
                        for (a, b) in v.iter_mut().zip(row) {
                            *a += b;
                        }
                    }
                    let n = s.len().max(1) as f32;
                    v.iter_mut().for_each(|a| *a /= n);
                }
            }
            normalize(&mut v);
            out.push(v);
            start += s.len();
        }
        Ok(out)
    }

    /// The texts with the model's prefix for `purpose`, if it has one.
    fn prefixed(&self, texts: &[&str], purpose: Purpose) -> Vec<String> {
        texts
            .iter()
            .map(|t| match (&self.prefix, purpose) {
                (Some((q, _)), Purpose::Query) => format!("{q}{t}"),
                (Some((_, d)), Purpose::Document) => format!("{d}{t}"),
                (None, _) => t.to_string(),
            })
            .collect()
    }
}

/// One batch's vectors.
type Batch = Vec<Vec<f32>>;

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
        let cut: Vec<&str>;
        let texts = match purpose {
            Purpose::Query => {
                cut = texts
                    .iter()
                    .map(|t| self.tail(t))
                    .collect::<Result<_, _>>()?;
                self.prefixed(&cut, purpose)
            }
            Purpose::Document => self.prefixed(texts, purpose),
        };
        if texts.len() <= self.batch_size {
            return self.run_batch(texts);
        }
        // Batches of `batch_size` texts (what bounds the buffers), shared
        // out to one thread per core; each batch's texts are laid end to
        // end, so nothing is padded and their order does not matter.
        let batches: Vec<Vec<String>> = texts
            .chunks(self.batch_size)
            .map(<[String]>::to_vec)
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(batches.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut vectors: Vec<Option<Batch>> = vec![None; batches.len()];
        std::thread::scope(|s| -> Result<(), Error> {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Result<Vec<(usize, Batch)>, Error> {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(batch) = batches.get(i) else {
                                return Ok(mine);
                            };
                            mine.push((i, self.run_batch(batch.clone())?));
                        }
                    })
                })
                .collect();
            for w in workers {
                let done = w.join().map_err(|_| {
                    Error::Embedding(format!("{}: a thread panicked", self.model_id))
                })??;
                for (i, v) in done {
                    vectors[i] = Some(v);
                }
            }
            Ok(())
        })?;
        let mut out = Vec::with_capacity(texts.len());
        for v in vectors {
            out.extend(v.unwrap_or_default());
        }
        Ok(out)
    }
}

/// Writes a tiny random-weight BERT (with a word-level tokenizer over
/// `words`) into `dir`, for tests: real code path, no model download.
pub fn write_tiny_model(dir: &Path, words: &[&str]) -> Result<(), Error> {
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
    // The tensors BERT has, initialised as transformers does at random:
    // embeddings around 0 with spread 1, a linear layer's weights and
    // bias within 1/sqrt(inputs), layer norms at 1 and 0.
    let (h, i, layers, positions) = (16, 32, 2, 64);
    let mut shapes: Vec<(String, Vec<usize>, Init)> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            vec![vocab_size, h],
            Init::Spread(1.7),
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![positions, h],
            Init::Spread(1.7),
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            vec![2, h],
            Init::Spread(1.7),
        ),
        ("embeddings.LayerNorm.weight".into(), vec![h], Init::One),
        ("embeddings.LayerNorm.bias".into(), vec![h], Init::Zero),
    ];
    for l in 0..layers {
        let at = format!("encoder.layer.{l}");
        let mut linear = |name: String, n_out: usize, n_in: usize| {
            let r = 1.0 / (n_in as f32).sqrt();
            shapes.push((format!("{name}.weight"), vec![n_out, n_in], Init::Spread(r)));
            shapes.push((format!("{name}.bias"), vec![n_out], Init::Spread(r)));
        };
        for part in ["query", "key", "value"] {
            linear(format!("{at}.attention.self.{part}"), h, h);
        }
        linear(format!("{at}.attention.output.dense"), h, h);
        linear(format!("{at}.intermediate.dense"), i, h);
        linear(format!("{at}.output.dense"), h, i);
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            shapes.push((format!("{at}.{norm}.weight"), vec![h], Init::One));
            shapes.push((format!("{at}.{norm}.bias"), vec![h], Init::Zero));
        }
    }
    // A fixed sequence (splitmix64): the same folder every time.
    let mut state: u64 = 0x05EE_D0F5_747A;
    let mut uniform = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
        .into_iter()
        .map(|(name, shape, init)| {
            let n: usize = shape.iter().product();
            let bytes = (0..n)
                .flat_map(|_| {
                    match init {
                        Init::Spread(r) => uniform() * r,
                        Init::One => 1.0,
                        Init::Zero => 0.0,
                    }
                    .to_le_bytes()
                })
                .collect();
            (name, shape, bytes)
        })
        .collect();
    let views = data
        .iter()
        .map(|(name, shape, bytes)| {
            safetensors::tensor::TensorView::new(Dtype::F32, shape.clone(), bytes)
                .map(|v| (name.as_str(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Embedding(format!("tiny model: {e}")))?;
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors"))
        .map_err(|e| Error::Embedding(format!("tiny model: {e}")))?;
    Ok(())
}

/// How [`write_tiny_model`] sets a tensor's values.
#[derive(Clone, Copy)]
enum Init {
    /// Uniform in ±r.
    Spread(f32),
    One,
    Zero,
}
