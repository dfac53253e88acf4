//! Training the utterance classifier (`strata eval train-utterances`):
//! a multinomial logistic regression over the local model's sentence
//! vectors and the word cues of `strata::utterance`, fitted to a labelled
//! set (`data/utterances/train.jsonl`), scored by five-fold cross
//! validation, and written as the `utterance.json` the engine ships.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use strata::utterance::{self, CUE_NAMES, Classifier, LABELS};
use strata::{Embedder, Purpose};

/// One labelled sentence.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    text: String,
    label: String,
}

/// Settings of a training run.
#[derive(Clone, Copy, Debug)]
pub struct TrainOptions {
    /// L2 penalty on the weights.
    pub lambda: f32,
    /// Gradient steps (full batch, Adam).
    pub steps: usize,
    /// Folds of the cross validation (0 skips it).
    pub folds: usize,
}

impl Default for TrainOptions {
    fn default() -> TrainOptions {
        TrainOptions {
            lambda: 1e-3,
            steps: 600,
            folds: 5,
        }
    }
}

/// Precision and recall of one class.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ClassScore {
    /// Sentences of the class.
    pub support: usize,
    /// Of those predicted as the class, the share that are.
    pub precision: f64,
    /// Of the class, the share predicted as it.
    pub recall: f64,
}

/// What a training run did.
#[derive(Debug, Serialize)]
pub struct TrainReport {
    /// Labelled sentences.
    pub sentences: usize,
    /// Cross-validated accuracy (0 when not run).
    pub cv_accuracy: f64,
    /// Cross-validated scores per class.
    pub per_class: BTreeMap<String, ClassScore>,
    /// The classifier fitted to every sentence.
    pub classifier: Classifier,
}

/// Reads a labelled set: one `{"text", "label"}` object a line.
pub(crate) fn read(path: &Path) -> Result<Vec<(String, usize)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(l).with_context(|| {
            format!(
                "{}:{}: not a {{\"text\", \"label\"}} line",
                path.display(),
                i + 1
            )
        })?;
        let Some(k) = LABELS.iter().position(|x| *x == line.label) else {
            bail!(
                "{}:{}: label `{}` is not one of {}",
                path.display(),
                i + 1,
                line.label,
                LABELS.join(", ")
            );
        };
        out.push((line.text, k));
    }
    if out.is_empty() {
        bail!("{}: no labelled sentences", path.display());
    }
    Ok(out)
}

/// The features of a sentence: its vector, then its cues.
fn features(vector: &[f32], text: &str) -> Vec<f32> {
    let mut f = vector.to_vec();
    f.extend(utterance::cues(text));
    f
}

/// Fits weights (`classes × width`) and biases to `rows` with
/// class-balanced sample weights.
fn fit(rows: &[(&[f32], usize)], width: usize, o: TrainOptions) -> (Vec<Vec<f32>>, Vec<f32>) {
    let k = LABELS.len();
    let mut count = vec![0usize; k];
    for (_, y) in rows {
        count[*y] += 1;
    }
    let n = rows.len() as f32;
    let weight: Vec<f32> = count
        .iter()
        .map(|c| {
            if *c == 0 {
                0.0
            } else {
                n / (k as f32 * *c as f32)
            }
        })
        .collect();
    let mut w = vec![vec![0f32; width]; k];
    let mut b = vec![0f32; k];
    // Adam's moments.
    let (mut mw, mut vw) = (vec![vec![0f32; width]; k], vec![vec![0f32; width]; k]);
    let (mut mb, mut vb) = (vec![0f32; k], vec![0f32; k]);
    let (lr, b1, b2, eps) = (0.05f32, 0.9f32, 0.999f32, 1e-8f32);
    for step in 1..=o.steps {
        let mut gw = vec![vec![0f32; width]; k];
        let mut gb = vec![0f32; k];
        for (x, y) in rows {
            let mut z: Vec<f32> = w
                .iter()
                .zip(&b)
                .map(|(r, bi)| r.iter().zip(*x).map(|(a, v)| a * v).sum::<f32>() + bi)
                .collect();
            utterance::softmax(&mut z);
            let sw = weight[*y] / n;
            for c in 0..k {
                let d = sw * (z[c] - if c == *y { 1.0 } else { 0.0 });
                gb[c] += d;
                for (g, v) in gw[c].iter_mut().zip(*x) {
                    *g += d * v;
                }
            }
        }
        let t = step as i32;
        let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
        for c in 0..k {
            for j in 0..width {
                let g = gw[c][j] + o.lambda * w[c][j];
                mw[c][j] = b1 * mw[c][j] + (1.0 - b1) * g;
                vw[c][j] = b2 * vw[c][j] + (1.0 - b2) * g * g;
                w[c][j] -= lr * (mw[c][j] / c1) / ((vw[c][j] / c2).sqrt() + eps);
            }
            mb[c] = b1 * mb[c] + (1.0 - b1) * gb[c];
            vb[c] = b2 * vb[c] + (1.0 - b2) * gb[c] * gb[c];
            b[c] -= lr * (mb[c] / c1) / ((vb[c] / c2).sqrt() + eps);
        }
    }
    (w, b)
}

fn predict(w: &[Vec<f32>], b: &[f32], x: &[f32]) -> usize {
    let z: Vec<f32> = w
        .iter()
        .zip(b)
        .map(|(r, bi)| r.iter().zip(x).map(|(a, v)| a * v).sum::<f32>() + bi)
        .collect();
    (0..z.len())
        .max_by(|i, j| z[*i].total_cmp(&z[*j]))
        .unwrap_or(0)
}

/// A stable fold for a sentence (its text's FNV hash), so a rerun scores
/// the same split.
fn fold_of(text: &str, folds: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % folds as u64) as usize
}

/// Embeds the labelled set at `path` with `embedder`, cross-validates, and
/// fits the classifier to all of it.
/// `model` is the id the weights are kept under (the default model's,
/// whatever folder it was loaded from).
pub fn train(
    path: &Path,
    embedder: &dyn Embedder,
    model: &str,
    o: TrainOptions,
) -> Result<TrainReport> {
    let set = read(path)?;
    let mut vectors = Vec::with_capacity(set.len());
    for chunk in set.chunks(64) {
        let texts: Vec<&str> = chunk.iter().map(|(t, _)| t.as_str()).collect();
        vectors.extend(embedder.embed(&texts, Purpose::Document)?);
    }
    let dim = embedder.dim();
    let width = dim + CUE_NAMES.len();
    let feats: Vec<Vec<f32>> = set
        .iter()
        .zip(&vectors)
        .map(|((t, _), v)| features(v, t))
        .collect();
    let rows: Vec<(&[f32], usize)> = feats
        .iter()
        .zip(&set)
        .map(|(f, (_, y))| (f.as_slice(), *y))
        .collect();
    let k = LABELS.len();
    let mut confusion = vec![vec![0usize; k]; k];
    if o.folds > 1 {
        for fold in 0..o.folds {
            let train: Vec<(&[f32], usize)> = rows
                .iter()
                .zip(&set)
                .filter(|(_, (t, _))| fold_of(t, o.folds) != fold)
                .map(|(r, _)| *r)
                .collect();
            let (w, b) = fit(&train, width, o);
            for (r, (t, _)) in rows.iter().zip(&set) {
                if fold_of(t, o.folds) == fold {
                    confusion[r.1][predict(&w, &b, r.0)] += 1;
                }
            }
        }
    }
    let total: usize = confusion.iter().flatten().sum();
    let right: usize = (0..k).map(|c| confusion[c][c]).sum();
    let mut per_class = BTreeMap::new();
    for (c, name) in LABELS.iter().enumerate() {
        let support: usize = confusion[c].iter().sum();
        let predicted: usize = (0..k).map(|r| confusion[r][c]).sum();
        per_class.insert(
            name.to_string(),
            ClassScore {
                support,
                precision: ratio(confusion[c][c], predicted),
                recall: ratio(confusion[c][c], support),
            },
        );
    }
    let (w, b) = fit(&rows, width, o);
    let round = |x: f32| (x * 1e4).round() / 1e4;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, y) in &set {
        *counts.entry(LABELS[*y]).or_default() += 1;
    }
    let classifier = Classifier {
        model: model.to_string(),
        dim,
        labels: LABELS.iter().map(|s| s.to_string()).collect(),
        cues: CUE_NAMES.iter().map(|s| s.to_string()).collect(),
        weights: w
            .iter()
            .map(|r| r.iter().map(|x| round(*x)).collect())
            .collect(),
        bias: b.iter().map(|x| round(*x)).collect(),
        trained: serde_json::json!({
            "set": "crates/strata-bench/data/utterances/train.jsonl",
            "sentences": set.len(),
            "per_label": counts,
            "lambda": o.lambda,
            "steps": o.steps,
            "cv_accuracy": ratio(right, total),
            "command": "strata eval train-utterances crates/strata-bench/data/utterances/train.jsonl --out crates/strata/src/learn/utterance.json",
        }),
    };
    classifier.check().map_err(anyhow::Error::msg)?;
    Ok(TrainReport {
        sentences: set.len(),
        cv_accuracy: ratio(right, total),
        per_class,
        classifier,
    })
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_separable_set_is_learned() {
        // Two classes told apart by the first coordinate; the cues are 0.
        let a = [1.0, 0.0, 0.0];
        let b = [-1.0, 0.0, 0.0];
        let rows: Vec<(&[f32], usize)> = vec![(&a, 0), (&b, 1), (&a, 0), (&b, 1)];
        let (w, bias) = fit(&rows, 3, TrainOptions::default());
        assert_eq!(predict(&w, &bias, &a), 0);
        assert_eq!(predict(&w, &bias, &b), 1);
    }

    #[test]
    fn bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"text\": \"hi\", \"label\": \"greeting\"}\n").unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("t.jsonl:1") && e.contains("greeting"), "{e}");
        std::fs::write(&p, "not json\n").unwrap();
        assert!(read(&p).unwrap_err().to_string().contains("t.jsonl:1"));
        std::fs::write(&p, "\n").unwrap();
        assert!(read(&p).unwrap_err().to_string().contains("no labelled"));
    }

    #[test]
    fn folds_are_stable() {
        assert_eq!(fold_of("same text", 5), fold_of("same text", 5));
        assert!(fold_of("x", 5) < 5);
    }
}
