//! A BERT encoder's forward pass written for one job: turning a handful of
//! short texts into sentence vectors on a CPU, fast.
//!
//! candle runs the same model as a graph of general tensor operations:
//! every operation allocates its result, small matrix products go through
//! a thread pool that costs more than it saves at query sizes (one thread
//! was faster than two), and a batch pads every text to the longest. Here
//! the weights are packed once, at load, into column panels that the
//! matrix kernel streams; the texts of a batch are laid end to end, so
//! only attention sees where one ends (no padding, no mask); buffers are
//! reused; the kernel and GELU are compiled for the CPU's vector unit
//! (AVX2 and FMA where present, chosen at run time through `pulp`, which
//! keeps this code free of `unsafe`). What it computes is what candle's
//! `BertModel` computes, to float rounding: strata's
//! `crates/strata/tests/it/vectors.rs` holds the two side by side, on a
//! random tiny BERT and on all-MiniLM-L6-v2.
//!
//! Measured on 2 vCPUs (AMD EPYC, AVX-512), all-MiniLM-L6-v2, one short
//! question: p50 1.7 ms against candle's 8.2 ms; LoCoMo's 5,882 turns in
//! 30 s against ~227 s (`strata bench --only vectors`, `strata eval
//! locomo`; docs/history/performance-log.md).

use pulp::{Arch, Simd, WithSimd};

/// The kernel's register block for a vector unit of `lanes` floats: rows
/// of the activations and vectors of output columns it accumulates at
/// once. 4 × 3 is 12 accumulators, what 16 AVX2 registers hold beside
/// three panel loads and a broadcast; AVX-512 has 32 registers, room for
/// 6 × 4 (fewer loads per multiply-add).
const fn block_shape(lanes: usize) -> (usize, usize) {
    if lanes >= 16 { (6, 4) } else { (4, 3) }
}

/// The activation between a layer's two feed-forward products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// `x · Φ(x)` with the error function (BERT's `gelu`).
    GeluErf,
    /// The tanh approximation (`gelu_approximate`).
    GeluTanh,
    /// `max(x, 0)`.
    Relu,
}

/// `y = x · W + b`, with `W` packed for the kernel.
#[derive(Debug)]
struct Linear {
    n_in: usize,
    n_out: usize,
    /// Column panels of `width` output columns each, every panel `n_in`
    /// rows of `width` floats (zeros past `n_out`).
    packed: Vec<f32>,
    width: usize,
    bias: Vec<f32>,
}

impl Linear {
    /// From PyTorch's layout: `weight` is `[n_out, n_in]`, row-major.
    fn new(weight: &[f32], bias: Vec<f32>, n_out: usize, n_in: usize, width: usize) -> Linear {
        assert_eq!(weight.len(), n_out * n_in);
        Linear::from_fn(n_out, n_in, width, bias, |j, k| weight[j * n_in + k])
    }

    /// `weight(j, k)`: output `j`'s weight on input `k`.
    #[inline(always)]
    fn from_fn(
        n_out: usize,
        n_in: usize,
        width: usize,
        bias: Vec<f32>,
        weight: impl Fn(usize, usize) -> f32,
    ) -> Linear {
        assert_eq!(bias.len(), n_out);
        let panels = n_out.div_ceil(width);
        let mut packed = vec![0.0; panels * n_in * width];
        for (p, panel) in packed.chunks_exact_mut(n_in * width).enumerate() {
            let cols = width.min(n_out - p * width);
            for (k, row) in panel.chunks_exact_mut(width).enumerate() {
                for (c, v) in row[..cols].iter_mut().enumerate() {
                    *v = weight(p * width + c, k);
                }
            }
        }
        Linear {
            n_in,
            n_out,
            packed,
            width,
            bias,
        }
    }
}

#[derive(Debug)]
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

#[derive(Debug)]
struct Layer {
    /// Query, key and value side by side: `n_out` is three hidden widths.
    qkv: Linear,
    out: Linear,
    norm1: Norm,
    up: Linear,
    down: Linear,
    norm2: Norm,
}

/// A BERT encoder's weights, packed.
#[derive(Debug)]
pub struct Bert {
    hidden: usize,
    heads: usize,
    eps: f32,
    act: Act,
    /// `[vocab, hidden]`.
    words: Vec<f32>,
    /// `[max_positions, hidden]`, with token type 0's row already added
    /// (every input here is one segment).
    positions: Vec<f32>,
    norm: Norm,
    layers: Vec<Layer>,
    arch: Arch,
    /// The panel width the weights are packed for.
    width: usize,
}

/// The shape of a BERT encoder, from its `config.json`.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// `hidden_size`.
    pub hidden: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `intermediate_size`.
    pub intermediate: usize,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `vocab_size`.
    pub vocab: usize,
    /// `max_position_embeddings`.
    pub max_positions: usize,
    /// `layer_norm_eps`.
    pub eps: f32,
    /// `hidden_act`.
    pub act: Act,
}

struct Lanes;

impl WithSimd for Lanes {
    type Output = usize;
    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) -> usize {
        S::F32_LANES
    }
}

impl Bert {
    /// Builds the encoder from named weights (PyTorch names, without the
    /// model-type prefix); `get` returns a tensor's floats and shape, or
    /// an error naming it.
    pub fn new<E>(
        shape: Shape,
        mut get: impl FnMut(&str) -> Result<(Vec<f32>, Vec<usize>), E>,
        mut bad: impl FnMut(String) -> E,
    ) -> Result<Bert, E> {
        let Shape {
            hidden: h,
            intermediate: i,
            ..
        } = shape;
        if h == 0 || shape.heads == 0 || h % shape.heads != 0 {
            return Err(bad(format!(
                "hidden_size {h} is not a multiple of num_attention_heads {}",
                shape.heads
            )));
        }
        let arch = Arch::new();
        let lanes = arch.dispatch(Lanes);
        let width = block_shape(lanes).1 * lanes;
        // Every input here is one segment: token type 0's row is folded
        // into the position table.
        let types = get("embeddings.token_type_embeddings.weight")?;
        if types.1.len() != 2 || types.1[1] != h || types.1[0] == 0 {
            return Err(bad(format!(
                "embeddings.token_type_embeddings.weight: shape {:?}, expected [_, {h}]",
                types.1
            )));
        }
        let mut tensor = |name: &str, want: &[usize]| -> Result<Vec<f32>, E> {
            let (v, got) = get(name)?;
            if got != want {
                return Err(bad(format!("{name}: shape {got:?}, expected {want:?}")));
            }
            Ok(v)
        };
        fn norm<E>(
            tensor: &mut impl FnMut(&str, &[usize]) -> Result<Vec<f32>, E>,
            at: &str,
            h: usize,
        ) -> Result<Norm, E> {
            Ok(Norm {
                weight: tensor(&format!("{at}.weight"), &[h])?,
                bias: tensor(&format!("{at}.bias"), &[h])?,
            })
        }
        let words = tensor("embeddings.word_embeddings.weight", &[shape.vocab, h])?;
        let mut positions = tensor(
            "embeddings.position_embeddings.weight",
            &[shape.max_positions, h],
        )?;
        for row in positions.chunks_exact_mut(h) {
            for (p, t) in row.iter_mut().zip(&types.0[..h]) {
                *p += t;
            }
        }
        let norm0 = norm(&mut tensor, "embeddings.LayerNorm", h)?;
        let mut layers = Vec::with_capacity(shape.layers);
        for l in 0..shape.layers {
            let at = format!("encoder.layer.{l}");
            let mut qkv_w = Vec::with_capacity(3 * h * h);
            let mut qkv_b = Vec::with_capacity(3 * h);
            for part in ["query", "key", "value"] {
                qkv_w.extend(tensor(
                    &format!("{at}.attention.self.{part}.weight"),
                    &[h, h],
                )?);
                qkv_b.extend(tensor(&format!("{at}.attention.self.{part}.bias"), &[h])?);
            }
            let mut linear = |name: &str, n_out: usize, n_in: usize| -> Result<Linear, E> {
                let w = tensor(&format!("{at}.{name}.weight"), &[n_out, n_in])?;
                let b = tensor(&format!("{at}.{name}.bias"), &[n_out])?;
                Ok(Linear::new(&w, b, n_out, n_in, width))
            };
            let out = linear("attention.output.dense", h, h)?;
            let up = linear("intermediate.dense", i, h)?;
            let down = linear("output.dense", h, i)?;
            layers.push(Layer {
                qkv: Linear::new(&qkv_w, qkv_b, 3 * h, h, width),
                out,
                norm1: norm(&mut tensor, &format!("{at}.attention.output.LayerNorm"), h)?,
                up,
                down,
                norm2: norm(&mut tensor, &format!("{at}.output.LayerNorm"), h)?,
            });
        }
        Ok(Bert {
            hidden: h,
            heads: shape.heads,
            eps: shape.eps,
            act: shape.act,
            words,
            positions,
            norm: norm0,
            layers,
            arch,
            width,
        })
    }

    /// Whether `id` is in the vocabulary.
    pub fn knows(&self, id: u32) -> bool {
        (id as usize) < self.words.len() / self.hidden
    }

    /// The last layer's token vectors of each input, laid end to end:
    /// `[Σ len, hidden]`. An input longer than the position table is cut
    /// to it (a tokenizer set to the model's length never gives one).
    ///
    /// # Panics
    ///
    /// On an id past the vocabulary ([`Bert::knows`] says which are in).
    pub fn encode(&self, inputs: &[&[u32]]) -> Vec<f32> {
        let h = self.hidden;
        let longest = self.positions.len() / h;
        let inputs: Vec<&[u32]> = inputs.iter().map(|s| &s[..s.len().min(longest)]).collect();
        let inputs = &inputs[..];
        let total: usize = inputs.iter().map(|s| s.len()).sum();
        let mut x = vec![0.0f32; total * h];
        let mut row = 0;
        for ids in inputs {
            for (pos, &id) in ids.iter().enumerate() {
                let dst = &mut x[row * h..(row + 1) * h];
                let word = &self.words[id as usize * h..(id as usize + 1) * h];
                let place = &self.positions[pos * h..(pos + 1) * h];
                for ((d, w), p) in dst.iter_mut().zip(word).zip(place) {
                    *d = w + p;
                }
                row += 1;
            }
        }
        layer_norm(&mut x, &self.norm, self.eps);
        let widest = self
            .layers
            .iter()
            .map(|l| l.qkv.n_out.max(l.up.n_out))
            .max()
            .unwrap_or(0);
        let mut wide = vec![0.0f32; total * widest];
        let mut narrow = vec![0.0f32; total * h];
        let mut context = vec![0.0f32; total * h];
        for layer in &self.layers {
            let qkv = &mut wide[..total * 3 * h];
            self.linear(&x, total, &layer.qkv, qkv);
            self.arch.dispatch(Attention {
                bert: self,
                qkv,
                inputs,
                context: &mut context,
            });
            self.linear(&context, total, &layer.out, &mut narrow);
            add_norm(&mut x, &narrow, &layer.norm1, self.eps);
            let up = &mut wide[..total * layer.up.n_out];
            self.linear(&x, total, &layer.up, up);
            self.activate(up);
            self.linear(up, total, &layer.down, &mut narrow);
            add_norm(&mut x, &narrow, &layer.norm2, self.eps);
        }
        x
    }

    fn linear(&self, x: &[f32], rows: usize, lin: &Linear, out: &mut [f32]) {
        self.arch.dispatch(MatMul { x, rows, lin, out });
    }

    fn activate(&self, v: &mut [f32]) {
        match self.act {
            Act::Relu => v.iter_mut().for_each(|x| *x = x.max(0.0)),
            Act::GeluTanh => v.iter_mut().for_each(|x| {
                let t = (0.797_884_6 * (*x + 0.044_715 * *x * *x * *x)).tanh();
                *x *= 0.5 * (1.0 + t);
            }),
            Act::GeluErf => self.arch.dispatch(GeluErf(v)),
        }
    }

    /// Multi-head self-attention within each input: `qkv` is `[Σ len, 3 ·
    /// hidden]` (query, key, value), `context` receives `[Σ len, hidden]`.
    /// Per input and head, both products (queries × keys, weights ×
    /// values) go through the kernel, the keys and values packed as if
    /// they were a layer's weights, and the softmax's exponentials are
    /// vectorized.
    #[inline(always)]
    fn attention<S: Simd>(&self, simd: S, qkv: &[f32], inputs: &[&[u32]], context: &mut [f32]) {
        let h = self.hidden;
        let d = h / self.heads;
        let scale = 1.0 / (d as f32).sqrt();
        let row = |i: usize, at: usize| &qkv[i * 3 * h + at..][..d];
        let mut start = 0;
        for ids in inputs {
            let n = ids.len();
            let mut queries = vec![0.0f32; n * d];
            let mut scores = vec![0.0f32; n * n];
            let mut ctx = vec![0.0f32; n * d];
            for head in 0..self.heads {
                let (q0, k0, v0) = (head * d, h + head * d, 2 * h + head * d);
                for (i, q) in queries.chunks_exact_mut(d).enumerate() {
                    for (q, v) in q.iter_mut().zip(row(start + i, q0)) {
                        *q = v * scale;
                    }
                }
                let keys =
                    Linear::from_fn(n, d, self.width, vec![0.0; n], |j, t| row(start + j, k0)[t]);
                product(simd, &queries, n, &keys, &mut scores);
                for s in scores.chunks_exact_mut(n) {
                    softmax(simd, s);
                }
                let values =
                    Linear::from_fn(d, n, self.width, vec![0.0; d], |c, j| row(start + j, v0)[c]);
                product(simd, &scores, n, &values, &mut ctx);
                for (i, c) in ctx.chunks_exact(d).enumerate() {
                    context[(start + i) * h + head * d..][..d].copy_from_slice(c);
                }
            }
            start += n;
        }
    }
}

/// `s ← softmax(s)`.
#[inline(always)]
fn softmax<S: Simd>(simd: S, s: &mut [f32]) {
    let top = s
        .iter()
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    let (head, tail) = S::as_mut_simd_f32s(s);
    let top_v = simd.splat_f32s(top);
    let mut sum = simd.splat_f32s(0.0);
    for v in head.iter_mut() {
        *v = exp_nonpositive(simd, simd.sub_f32s(*v, top_v));
        sum = simd.add_f32s(sum, *v);
    }
    let mut total = simd.reduce_sum_f32s(sum);
    if !tail.is_empty() {
        let v = exp_nonpositive(simd, simd.sub_f32s(simd.partial_load_f32s(tail), top_v));
        simd.partial_store_f32s(tail, v);
        total += tail.iter().sum::<f32>();
    }
    let inv = 1.0 / total;
    for v in s.iter_mut() {
        *v *= inv;
    }
}

/// `e^x` for `x ≤ 0` (a softmax's score less its row's largest), relative
/// error under 1e-6 (`tests`): `x = n · ln 2 + r`, `e^r` by its series to
/// `r⁶` (|r| ≤ ln 2 / 2), `2^n` written straight into a float's exponent.
/// Below -87, where `e^x` leaves f32's normal range, it gives `e^-87`.
#[inline(always)]
fn exp_nonpositive<S: Simd>(simd: S, x: S::f32s) -> S::f32s {
    let x = simd.max_f32s(x, simd.splat_f32s(-87.0));
    // Adding 1.5 · 2^23 rounds x · log2(e) to an integer n and leaves
    // n + 0x40_0000 in the sum's low bits.
    let magic = simd.splat_f32s(12_582_912.0);
    let t = simd.mul_add_f32s(x, simd.splat_f32s(std::f32::consts::LOG2_E), magic);
    let n = simd.sub_f32s(t, magic);
    // ln 2 in two parts, so r keeps its low bits.
    let r = simd.mul_add_f32s(n, simd.splat_f32s(-0.693_359_4), x);
    let r = simd.mul_add_f32s(n, simd.splat_f32s(2.121_944_4e-4), r);
    let mut p = simd.splat_f32s(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = simd.mul_add_f32s(p, r, simd.splat_f32s(c));
    }
    let bits: S::u32s = pulp::cast(t);
    let exponent = simd.add_u32s(bits, simd.splat_u32s(127u32.wrapping_sub(0x4B40_0000)));
    let two_n: S::f32s = pulp::cast(simd.mul_u32s(exponent, simd.splat_u32s(1 << 23)));
    simd.mul_f32s(p, two_n)
}

/// [`Bert::attention`], compiled for the vector unit `pulp` found.
struct Attention<'a> {
    bert: &'a Bert,
    qkv: &'a [f32],
    inputs: &'a [&'a [u32]],
    context: &'a mut [f32],
}

impl WithSimd for Attention<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        self.bert
            .attention(simd, self.qkv, self.inputs, self.context);
    }
}

/// `x ← LayerNorm(x)`, row by row.
fn layer_norm(x: &mut [f32], norm: &Norm, eps: f32) {
    let h = norm.weight.len();
    for row in x.chunks_exact_mut(h) {
        let mean = row.iter().sum::<f32>() / h as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(&norm.weight).zip(&norm.bias) {
            *v = (*v - mean) * inv * w + b;
        }
    }
}

/// `x ← LayerNorm(x + y)`.
fn add_norm(x: &mut [f32], y: &[f32], norm: &Norm, eps: f32) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
    layer_norm(x, norm, eps);
}

/// `out[rows, n_out] = x[rows, n_in] · W + b`.
struct MatMul<'a> {
    x: &'a [f32],
    rows: usize,
    lin: &'a Linear,
    out: &'a mut [f32],
}

impl WithSimd for MatMul<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let MatMul { x, rows, lin, out } = self;
        product(simd, x, rows, lin, out);
    }
}

/// `out[rows, n_out] = x[rows, n_in] · W + b`, with the register block of
/// this vector unit.
#[inline(always)]
fn product<S: Simd>(simd: S, x: &[f32], rows: usize, lin: &Linear, out: &mut [f32]) {
    match block_shape(S::F32_LANES) {
        (6, 4) => panels::<S, 6, 4>(simd, x, rows, lin, out),
        (4, 3) => panels::<S, 4, 3>(simd, x, rows, lin, out),
        other => unreachable!("no kernel for a {other:?} block"),
    }
}

/// Every panel of `lin` against every row of `x`, `R` rows at a time.
#[inline(always)]
fn panels<S: Simd, const R: usize, const V: usize>(
    simd: S,
    x: &[f32],
    rows: usize,
    lin: &Linear,
    out: &mut [f32],
) {
    let (k, n, width) = (lin.n_in, lin.n_out, lin.width);
    assert_eq!(width, V * S::F32_LANES, "packed for another vector unit");
    assert_eq!((x.len(), out.len()), (rows * k, rows * n));
    for (p, panel) in lin.packed.chunks_exact(k * width).enumerate() {
        let panel = S::as_simd_f32s(panel).0;
        let col = p * width;
        let bias = &lin.bias[col..col + width.min(n - col)];
        let mut r = 0;
        while r + R <= rows {
            block::<S, R, V>(simd, x, r, k, panel, bias, out, n, col);
            r += R;
        }
        // The rows left over, in the widest blocks that fit.
        if R > 4 && r + 4 <= rows {
            block::<S, 4, V>(simd, x, r, k, panel, bias, out, n, col);
            r += 4;
        }
        if r + 2 <= rows {
            block::<S, 2, V>(simd, x, r, k, panel, bias, out, n, col);
            r += 2;
        }
        if r < rows {
            block::<S, 1, V>(simd, x, r, k, panel, bias, out, n, col);
        }
    }
}

/// `R` rows of `x` from `r` times one panel, plus bias, into `out` at
/// column `col`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn block<S: Simd, const R: usize, const V: usize>(
    simd: S,
    x: &[f32],
    r: usize,
    k: usize,
    panel: &[S::f32s],
    bias: &[f32],
    out: &mut [f32],
    n: usize,
    col: usize,
) {
    let zero = simd.splat_f32s(0.0);
    let mut acc = [[zero; V]; R];
    let xs: [&[f32]; R] = std::array::from_fn(|i| &x[(r + i) * k..(r + i + 1) * k]);
    for (kk, b) in panel.chunks_exact(V).enumerate() {
        for (a, row) in acc.iter_mut().zip(&xs) {
            let s = simd.splat_f32s(row[kk]);
            for (a, b) in a.iter_mut().zip(b) {
                *a = simd.mul_add_f32s(s, *b, *a);
            }
        }
    }
    let lanes = S::F32_LANES;
    let mut tmp = [0.0f32; 64];
    for (i, a) in acc.iter().enumerate() {
        let dst = &mut out[(r + i) * n + col..][..bias.len()];
        let tmp = &mut tmp[..V * lanes];
        let (t, _) = S::as_mut_simd_f32s(tmp);
        t.copy_from_slice(a);
        for ((d, t), b) in dst.iter_mut().zip(tmp.iter()).zip(bias) {
            *d = t + b;
        }
    }
}

/// `x ← x · Φ(x)`, Φ through a rational approximation of erf (absolute
/// error under 1e-6 on all of f32; `tests` checks it against libm).
struct GeluErf<'a>(&'a mut [f32]);

impl WithSimd for GeluErf<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let (head, tail) = S::as_mut_simd_f32s(self.0);
        for v in head {
            *v = gelu_erf(simd, *v);
        }
        if !tail.is_empty() {
            let v = gelu_erf(simd, simd.partial_load_f32s(tail));
            simd.partial_store_f32s(tail, v);
        }
    }
}

/// erf(x) ≈ x · P(x²) / Q(x²) on [-4, 4] (clamped outside, where erf is ±1
/// in f32): the minimax form common to vector math libraries.
const ERF_P: [f32; 7] = [
    -2.726_142_3e-10,
    2.770_681_4e-8,
    -2.101_024e-6,
    -5.692_506_4e-5,
    -7.349_906_3e-4,
    -2.9546e-3,
    -1.609_603_3e-2,
];
const ERF_Q: [f32; 5] = [
    -1.456_607_2e-5,
    -2.133_740_6e-4,
    -1.682_827e-3,
    -7.373_329_2e-3,
    -1.426_474e-2,
];

#[inline(always)]
fn gelu_erf<S: Simd>(simd: S, x: S::f32s) -> S::f32s {
    let half = simd.splat_f32s(0.5);
    let z = simd.mul_f32s(x, simd.splat_f32s(std::f32::consts::FRAC_1_SQRT_2));
    let z = simd.min_f32s(
        simd.max_f32s(z, simd.splat_f32s(-4.0)),
        simd.splat_f32s(4.0),
    );
    let z2 = simd.mul_f32s(z, z);
    let mut p = simd.splat_f32s(ERF_P[0]);
    for c in &ERF_P[1..] {
        p = simd.mul_add_f32s(z2, p, simd.splat_f32s(*c));
    }
    let mut q = simd.splat_f32s(ERF_Q[0]);
    for c in &ERF_Q[1..] {
        q = simd.mul_add_f32s(z2, q, simd.splat_f32s(*c));
    }
    let erf = simd.div_f32s(simd.mul_f32s(z, p), q);
    // 0.5 · x · (1 + erf)
    simd.mul_f32s(
        simd.mul_f32s(half, x),
        simd.add_f32s(simd.splat_f32s(1.0), erf),
    )
}

/// erf through the same approximation, one value (for tests).
#[cfg(test)]
fn erf_scalar(x: f32) -> f32 {
    let z = x.clamp(-4.0, 4.0);
    let z2 = z * z;
    let p = ERF_P[1..].iter().fold(ERF_P[0], |p, c| z2.mul_add(p, *c));
    let q = ERF_Q[1..].iter().fold(ERF_Q[0], |q, c| z2.mul_add(q, *c));
    z * p / q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_the_error_function() {
        // erf's Taylor series, in f64, where it converges well; the
        // asymptotic value past it.
        fn erf(x: f64) -> f64 {
            if x.abs() > 3.0 {
                // 1 - erfc(x), erfc(3) ≈ 2.2e-5: continued fraction.
                let t = x.abs();
                let mut f = 0.0;
                for k in (1..60).rev() {
                    f = (k as f64 / 2.0) / (t + f);
                }
                let erfc = (-t * t).exp() / std::f64::consts::PI.sqrt() / (t + f);
                return (1.0 - erfc).copysign(x);
            }
            let mut sum = 0.0;
            let mut term = x;
            for n in 0..200 {
                sum += term / (2 * n + 1) as f64;
                term *= -x * x / (n + 1) as f64;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        }
        let mut worst = 0.0f64;
        for i in -6000..=6000 {
            let x = i as f32 / 1000.0;
            worst = worst.max((erf_scalar(x) as f64 - erf(x as f64)).abs());
        }
        assert!(worst < 1e-6, "worst error {worst}");
    }

    #[test]
    fn exp_matches_f64s() {
        let arch = Arch::new();
        struct Exp<'a>(&'a mut [f32]);
        impl WithSimd for Exp<'_> {
            type Output = ();
            fn with_simd<S: Simd>(self, simd: S) {
                let (head, tail) = S::as_mut_simd_f32s(self.0);
                for v in head {
                    *v = exp_nonpositive(simd, *v);
                }
                let v = exp_nonpositive(simd, simd.partial_load_f32s(tail));
                simd.partial_store_f32s(tail, v);
            }
        }
        let xs: Vec<f32> = (0..=90_001).map(|i| -(i as f32) / 1000.0).collect();
        let mut ys = xs.clone();
        arch.dispatch(Exp(&mut ys));
        for (x, y) in xs.iter().zip(&ys) {
            let want = (*x as f64).max(-87.0).exp();
            let err = ((*y as f64) - want).abs() / want;
            assert!(err < 1e-6, "e^{x}: {y} against {want}");
        }
        // A softmax row sums to one, its order kept.
        let mut s = vec![1.0f32, 3.0, -2.0, 0.5, 3.0, 10.0, -40.0, 2.0, 1.5, 0.0, 7.0];
        let before = s.clone();
        struct Soft<'a>(&'a mut [f32]);
        impl WithSimd for Soft<'_> {
            type Output = ();
            fn with_simd<S: Simd>(self, simd: S) {
                softmax(simd, self.0);
            }
        }
        arch.dispatch(Soft(&mut s));
        let total: f64 = before.iter().map(|v| (*v as f64).exp()).sum();
        for (a, b) in before.iter().zip(&s) {
            let want = (*a as f64).exp() / total;
            assert!((*b as f64 - want).abs() < 1e-6, "{a}: {b} against {want}");
        }
    }

    #[test]
    fn the_kernel_multiplies_every_shape() {
        // Row and column counts off the kernel's block sizes, against the
        // plain triple loop, on every vector unit this CPU has: plain
        // floats (what a CPU without one runs), AVX2 (4 × 3 blocks) and
        // AVX-512 (6 × 4).
        let mut units: Vec<Unit> = vec![Box::new(|m| Simd::vectorize(pulp::Scalar::new(), m))];
        let mut lanes = vec![Simd::vectorize(pulp::Scalar::new(), Lanes)];
        #[cfg(target_arch = "x86_64")]
        if let Some(v3) = pulp::x86::V3::try_new() {
            units.push(Box::new(move |m| Simd::vectorize(v3, m)));
            lanes.push(Simd::vectorize(v3, Lanes));
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(v4) = pulp::x86::V4::try_new() {
            units.push(Box::new(move |m| Simd::vectorize(v4, m)));
            lanes.push(Simd::vectorize(v4, Lanes));
        }
        for (unit, lanes) in units.iter().zip(lanes) {
            kernel_matches_the_triple_loop(unit, block_shape(lanes).1 * lanes);
        }
    }

    /// Runs a product on one vector unit.
    type Unit = Box<dyn Fn(MatMul<'_>)>;

    fn kernel_matches_the_triple_loop(unit: &dyn Fn(MatMul<'_>), width: usize) {
        for (rows, k, n) in [
            (1, 3, 1),
            (5, 7, 30),
            (4, 16, 24),
            (6, 16, 64),
            (7, 5, 65),
            (11, 33, 50),
            (13, 33, 50),
            (16, 20, 48),
            (9, 384, 97),
        ] {
            let w: Vec<f32> = (0..n * k)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0)
                .collect();
            let b: Vec<f32> = (0..n).map(|i| i as f32 / 10.0).collect();
            let x: Vec<f32> = (0..rows * k)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0)
                .collect();
            let lin = Linear::new(&w, b.clone(), n, k, width);
            let mut out = vec![f32::NAN; rows * n];
            unit(MatMul {
                x: &x,
                rows,
                lin: &lin,
                out: &mut out,
            });
            for i in 0..rows {
                for j in 0..n {
                    let want: f32 = (0..k).map(|t| x[i * k + t] * w[j * k + t]).sum::<f32>() + b[j];
                    let got = out[i * n + j];
                    assert!(
                        (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{rows}x{k}x{n}, width {width}, at ({i}, {j}): {got} != {want}"
                    );
                }
            }
        }
    }
}
