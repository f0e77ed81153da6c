//! `nc-bench kernels`: the encoder's matrix products alone, per instruction set — the
//! narrow product of a query (1–32 tokens) and the general one — on MiniLM's layer
//! shapes, in GFLOP/s and in weight bytes streamed per second (a query's product reads
//! every weight once, so it is bound by whichever runs out first).

use std::time::Instant;

use neuralcore_models::kernels::{self, Isa, Parallelism};
use serde_json::json;

use crate::embed_query::isas;
use crate::Result;

/// `nc-bench kernels [--isa all|LIST] [--tokens 1,8,16,24,32,64,256] [--weights f32,bf16,int8]
/// [--threads N]`
pub fn bench_kernels(args: &[String]) -> Result<()> {
    let mut isa_spec = None;
    let mut threads = 1usize;
    let mut formats = vec!["f32".to_string()];
    let mut tokens = vec![1usize, 8, 16, 24, 32, 64, 256];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--isa" => isa_spec = Some(v.clone()),
            "--weights" => formats = v.split(',').map(String::from).collect(),
            "--threads" => threads = v.parse().map_err(|e| format!("--threads: {e}"))?,
            "--tokens" => {
                tokens = v
                    .split(',')
                    .map(|t| t.parse().map_err(|e| format!("--tokens: {e}")))
                    .collect::<Result<_>>()?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    // One MiniLM layer: QKV [1152, 384], output [384, 384], up [1536, 384], down [384, 1536].
    let shapes = [(1152usize, 384usize), (384, 384), (1536, 384), (384, 1536)];
    // Six layers of distinct weights (42 MB in f32), as a query streams them.
    let layers = 6;
    let weights: Vec<Vec<f32>> = (0..layers)
        .flat_map(|l| {
            shapes.iter().map(move |&(r, i)| {
                (0..r * i)
                    .map(|j| ((j * 7919 + l * 13) % 101) as f32 * 0.01 - 0.5)
                    .collect()
            })
        })
        .collect();
    let params: usize = shapes.iter().map(|(r, i)| r * i).sum();
    // Each matrix as bfloat16, and as int8 with its row scales.
    type Compact = (Vec<u16>, (Vec<i8>, Vec<f32>));
    let compact: Vec<Compact> = weights
        .iter()
        .zip(shapes.iter().cycle())
        .map(|(w, &(r, _))| (kernels::to_bf16(w), kernels::to_int8(w, r)))
        .collect();
    for isa in isas(isa_spec.as_deref())? {
        for format in &formats {
            for &t in &tokens {
                let xs: Vec<Vec<f32>> = shapes
                    .iter()
                    .map(|&(_, i)| (0..i * t).map(|j| ((j * 31) % 17) as f32 * 0.1).collect())
                    .collect();
                let mut dst = vec![0f32; 1536 * t];
                let mut scratch = kernels::LinearScratch::default();
                // A query's products (six layers) per pass; the median of 30 passes.
                let mut times = Vec::new();
                for _ in 0..30 {
                    let start = Instant::now();
                    for l in 0..layers {
                        for (s, &(r, _)) in shapes.iter().enumerate() {
                            let m = l * shapes.len() + s;
                            let w = match format.as_str() {
                                "bf16" => kernels::Weights::Bf16(&compact[m].0),
                                "int8" => kernels::Weights::Int8 {
                                    q: &compact[m].1 .0,
                                    scales: &compact[m].1 .1,
                                },
                                _ => kernels::Weights::F32(&weights[m]),
                            };
                            if t > kernels::NARROW_MAX && !matches!(w, kernels::Weights::F32(_)) {
                                continue;
                            }
                            kernels::linear(
                                isa,
                                &mut dst[..r * t],
                                w,
                                r,
                                &xs[s],
                                t,
                                false,
                                if threads > 1 {
                                    Parallelism::Rayon(threads)
                                } else {
                                    Parallelism::None
                                },
                                &mut scratch,
                            );
                        }
                    }
                    times.push(start.elapsed().as_secs_f64());
                }
                times.sort_by(f64::total_cmp);
                let med = times[times.len() / 2];
                let flops = 2.0 * (params * layers * t) as f64;
                let bytes = (params * layers) as f64
                    * match format.as_str() {
                        "bf16" => 2.0,
                        "int8" => 1.0,
                        _ => 4.0,
                    };
                println!(
                    "{}",
                    json!({
                        "bench": "kernels", "isa": isa.name(), "cpu_isa": kernels::detected().name(),
                        "weights": format, "tokens": t, "threads": threads,
                        "path": if t <= kernels::NARROW_MAX { "narrow" } else if isa == Isa::Portable { "tiled" } else { "gemm" },
                        "ms_per_query": med * 1e3, "min_ms": times[0] * 1e3,
                        "gflops": flops / med / 1e9, "weight_gb_per_s": bytes / med / 1e9,
                    })
                );
            }
        }
    }
    Ok(())
}
