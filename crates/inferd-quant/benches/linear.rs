//! Linear benchmark on the matmul shapes of SmolLM2-135M and Qwen2.5-0.5B.
//!
//! `cargo bench -p inferd-quant --bench linear [-- FILTER] [--crossover]`
//! Reports decode (n = 1) in GB/s of weight bytes streamed and prefill (n = 128, 512)
//! in GFLOP/s (2·rows·cols·n). Uses the global rayon pool (all cores) and
//! `INFERD_SIMD` like the server. `--crossover` times the dot and GEMM paths for
//! small n, to tune `DEFAULT_GEMM_MIN_N`. `--dot-n` times the dot path (all rows
//! [`RowPath::Dot`]) at n = 1, 4, 8, 16 (concurrent decodes). `--in-pool` runs everything on a rayon
//! worker (the calling thread joins each `linear`).

use inferd_quant::{
    linear, linear_config, linear_planned, simd_level, DType, LinearConfig, RowPath, WeightMatrix,
};
use std::hint::black_box;
use std::time::{Duration, Instant};

const SHAPES: [(&str, usize, usize); 8] = [
    // (model, rows = out features, cols = in features)
    ("smollm2", 576, 576),
    ("smollm2", 1536, 576),
    ("smollm2", 576, 1536),
    ("smollm2", 49152, 576),
    ("qwen2.5", 896, 896),
    ("qwen2.5", 4864, 896),
    ("qwen2.5", 896, 4864),
    ("qwen2.5", 151936, 896),
];

const TYPES: [DType; 5] = [
    DType::Q4_1,
    DType::Q5_0,
    DType::Q8_0,
    DType::Q4K,
    DType::Q6K,
];

/// Random block bytes with small f16 scales (the kernels' speed does not depend on values).
fn weights(dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let row: Vec<f32> = (0..cols)
        .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let q = inferd_quant::quantize_row(dtype, &row);
    let mut data = Vec::with_capacity(q.len() * rows);
    for _ in 0..rows {
        data.extend_from_slice(&q);
    }
    data
}

/// Minimum seconds (robust against a shared, time-stolen machine) per call over at least `min_iters` calls and ~`budget`.
fn time(mut f: impl FnMut(), budget: Duration, min_iters: usize) -> f64 {
    f(); // warm-up (page faults, thread pool, scratch)
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < min_iters || (start.elapsed() < budget && samples.len() < 10_000) {
        let t = Instant::now();
        f();
        samples.push(t.elapsed().as_secs_f64());
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[0]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--bench"))
        .collect();
    if args.iter().any(|a| a == "--in-pool") {
        // Run the whole benchmark on a worker of the global pool, as a server
        // would run its forward pass inside `pool.install`: the calling thread then
        // takes part in every `linear` instead of waiting for woken workers.
        let args: Vec<String> = args.into_iter().filter(|a| a != "--in-pool").collect();
        println!("(running inside the rayon pool)");
        return rayon::join(|| run(args), || ()).0;
    }
    run(args)
}

fn run(args: Vec<String>) {
    let crossover = args.iter().any(|a| a == "--crossover");
    let filter: Option<&String> = args.iter().find(|a| !a.starts_with("--"));
    println!(
        "inferd-quant linear bench: simd={:?} threads={}",
        simd_level(),
        rayon::current_num_threads()
    );
    if crossover {
        return run_crossover();
    }
    if args.iter().any(|a| a == "--dot-n") {
        return run_dot_n(filter);
    }
    println!(
        "{:<8} {:>14} {:<5} {:>10} {:>9} {:>12} {:>12}",
        "model", "shape", "type", "decode us", "GB/s", "pf128 GF/s", "pf512 GF/s"
    );
    for (model, rows, cols) in SHAPES {
        for dtype in TYPES {
            let name = format!("{model} {rows}x{cols} {dtype}");
            if filter.is_some_and(|f| !name.contains(f.as_str())) {
                continue;
            }
            if cols % dtype.block_len() != 0 {
                // GGUF files store such tensors in a fallback type (e.g. Q5_0 / Q8_0)
                println!(
                    "{model:<8} {:>14} {:<5} n/a (cols not a multiple of 256)",
                    format!("{rows}x{cols}"),
                    dtype.name()
                );
                continue;
            }
            let data = weights(dtype, rows, cols);
            let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
            let x: Vec<f32> = (0..512 * cols)
                .map(|i| ((i % 97) as f32 - 48.0) / 48.0)
                .collect();
            let mut y = vec![0f32; 512 * rows];
            let dec = time(
                || linear(&w, black_box(&x[..cols]), 1, &mut y[..rows]),
                Duration::from_millis(300),
                5,
            );
            let gbs = data.len() as f64 / dec / 1e9;
            let mut pf = [0f64; 2];
            for (k, n) in [128usize, 512].into_iter().enumerate() {
                let s = time(
                    || linear(&w, black_box(&x[..n * cols]), n, &mut y[..n * rows]),
                    Duration::from_millis(600),
                    2,
                );
                pf[k] = 2.0 * (rows * cols * n) as f64 / s / 1e9;
            }
            println!(
                "{:<8} {:>14} {:<5} {:>10.1} {:>9.1} {:>12.1} {:>12.1}",
                model,
                format!("{rows}x{cols}"),
                dtype.name(),
                dec * 1e6,
                gbs,
                pf[0],
                pf[1]
            );
        }
    }
}

fn run_crossover() {
    println!(
        "{:<24} {:>3} {:>10} {:>10}",
        "shape", "n", "dot us", "gemm us"
    );
    for (rows, cols) in [(1536usize, 768usize), (896, 4864)] {
        for dtype in TYPES {
            let data = weights(dtype, rows, cols);
            let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
            for n in [1usize, 2, 4, 6, 8, 12, 16, 24, 32] {
                let x: Vec<f32> = (0..n * cols).map(|i| (i % 13) as f32 * 0.1).collect();
                let mut y = vec![0f32; n * rows];
                let mut t = [0f64; 2];
                for (k, g) in [usize::MAX, 1].into_iter().enumerate() {
                    let cfg = LinearConfig {
                        gemm_min_n: g,
                        ..Default::default()
                    };
                    t[k] = time(
                        || linear_config(&cfg, &w, black_box(&x), n, &mut y).unwrap(),
                        Duration::from_millis(150),
                        3,
                    );
                }
                println!(
                    "{:<24} {:>3} {:>10.1} {:>10.1}",
                    format!("{rows}x{cols} {dtype}"),
                    n,
                    t[0] * 1e6,
                    t[1] * 1e6
                );
            }
        }
    }
}

fn run_dot_n(filter: Option<&String>) {
    const NS: [usize; 4] = [1, 4, 8, 16];
    println!(
        "{:<24} {:>10} {:>10} {:>10} {:>10}   (dot path, us per call)",
        "shape", "n=1", "n=4", "n=8", "n=16"
    );
    let cfg = LinearConfig::default();
    for (model, rows, cols) in SHAPES {
        if rows > 8192 {
            continue;
        }
        for dtype in TYPES {
            let name = format!("{model} {rows}x{cols} {dtype}");
            if filter.is_some_and(|f| !name.contains(f.as_str())) || cols % dtype.block_len() != 0 {
                continue;
            }
            let data = weights(dtype, rows, cols);
            let w = WeightMatrix::new(dtype, rows, cols, &data).unwrap();
            let x: Vec<f32> = (0..16 * cols)
                .map(|i| ((i % 97) as f32 - 48.0) / 48.0)
                .collect();
            let mut y = vec![0f32; 16 * rows];
            let mut t = [0f64; NS.len()];
            for (k, n) in NS.into_iter().enumerate() {
                let paths = vec![RowPath::Dot; n];
                t[k] = time(
                    || {
                        linear_planned(
                            &cfg,
                            &w,
                            black_box(&x[..n * cols]),
                            n,
                            &paths,
                            &mut y[..n * rows],
                        )
                        .unwrap()
                    },
                    Duration::from_millis(200),
                    5,
                );
            }
            println!(
                "{:<24} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                format!("{rows}x{cols} {dtype}"),
                t[0] * 1e6,
                t[1] * 1e6,
                t[2] * 1e6,
                t[3] * 1e6
            );
        }
    }
}
