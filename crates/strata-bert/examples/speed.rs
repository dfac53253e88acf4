//! How long one forward pass takes on a MiniLM-shaped encoder with
//! made-up weights (the speed does not depend on their values):
//! `cargo run --release -p strata-bert --example speed`.

use std::time::Instant;

use strata_bert::{Act, Bert, Shape};

fn main() {
    let shape = Shape {
        hidden: 384,
        heads: 12,
        intermediate: 1536,
        layers: 6,
        vocab: 30522,
        max_positions: 512,
        eps: 1e-12,
        act: Act::GeluErf,
    };
    let mut seed = 1u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
    };
    let bert = Bert::new(
        shape,
        |name: &str| -> Result<(Vec<f32>, Vec<usize>), String> {
            let dims: Vec<usize> = match name {
                n if n.ends_with("word_embeddings.weight") => vec![30522, 384],
                n if n.ends_with("position_embeddings.weight") => vec![512, 384],
                n if n.ends_with("token_type_embeddings.weight") => vec![2, 384],
                n if n.contains("intermediate.dense.weight") => vec![1536, 384],
                n if n.contains("intermediate.dense.bias") => vec![1536],
                n if n.contains("output.dense.weight") && !n.contains("attention") => {
                    vec![384, 1536]
                }
                n if n.ends_with(".weight") && !n.contains("LayerNorm") => vec![384, 384],
                _ => vec![384],
            };
            let n = dims.iter().product();
            Ok(((0..n).map(|_| next()).collect(), dims))
        },
        |e| e,
    )
    .unwrap();
    for len in [8usize, 16, 24, 32, 64, 128] {
        let ids: Vec<u32> = (0..len as u32).map(|i| 1000 + i * 37).collect();
        let runs = 200;
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            std::hint::black_box(bert.encode(&[&ids]));
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let flop = 2.0 * len as f64 * 6.0 * (4.0 * 384.0 * 384.0 + 2.0 * 384.0 * 1536.0);
        println!(
            "{len:4} tokens: p50 {:.3} ms  p95 {:.3} ms  ({:.1} GFLOP/s in the products)",
            times[runs / 2],
            times[runs * 95 / 100],
            flop / times[runs / 2] / 1e6
        );
    }
}
