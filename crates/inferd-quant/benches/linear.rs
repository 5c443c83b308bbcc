//! Linear benchmark on the matmul shapes of SmolLM2-135M and Qwen2.5-0.5B.
//!
//! `cargo bench -p inferd-quant --bench linear [-- FILTER] [--crossover]`
//! Reports decode (n = 1) in GB/s of weight bytes streamed and prefill (n = 128, 512)
//! in GFLOP/s (2·rows·cols·n). Uses the global rayon pool (all cores) and
//! `INFERD_SIMD` like the server. `--crossover` times the dot and GEMM paths for
//! small n, to tune `DEFAULT_GEMM_MIN_N`. `--dot-n` times the dot path (all rows
//! [`RowPath::Dot`]) at n = 1, 4, 8, 16 (concurrent decodes); with `--vs-old`
//! interleaved against one kernel call per activation row (the path before the
//! several-activation kernels), on every shape, lm_heads included
//! (`RAYON_NUM_THREADS=1 ... --in-pool --dot-n --vs-old --cpu-time` on a busy machine). `--vs-gemm` times the
//! GEMM path against the previous one (dequantized tiles multiplied by the `gemm`
//! crate, not batch-invariant), interleaved in one run, at n = 16, 128, 512; on a
//! busy machine run it as `RAYON_NUM_THREADS=1 ... --in-pool --vs-gemm --cpu-time`
//! to time the CPU time of the (single) worker thread instead of wall time. `--in-pool` runs everything on a rayon
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
    if args.iter().any(|a| a == "--vs-gemm") {
        return run_vs_gemm(filter, args.iter().any(|a| a == "--cpu-time"));
    }
    if args.iter().any(|a| a == "--dot-n") {
        if args.iter().any(|a| a == "--vs-old") {
            return run_dot_vs_old(filter, args.iter().any(|a| a == "--cpu-time"));
        }
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

/// `--dot-n --vs-old`: the dot path with one kernel call per activation row (as
/// before the several-activation kernels, `linear_dot_per_row`) against the current
/// one, interleaved call by call, best of each; all shapes including the lm_heads.
fn run_dot_vs_old(filter: Option<&String>, cpu_time: bool) {
    use inferd_quant::linear::linear_dot_per_row;
    const NS: [usize; 4] = [1, 4, 8, 16];
    let clock = clock_fn(cpu_time);
    println!(
        "dot path, {} per call, old (per activation row) / new; interleaved, best of each",
        if cpu_time { "thread CPU us" } else { "wall us" }
    );
    print!("{:<24}", "shape");
    for n in NS {
        print!(" {:>17}", format!("n={n} old/new"));
    }
    println!("  n=16 new/old");
    let cfg = LinearConfig::default();
    for (model, rows, cols) in SHAPES {
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
            print!("{:<24}", format!("{rows}x{cols} {dtype}"));
            let mut ratio = 0.0;
            // Fewer iterations for the big matrices.
            let budget = Duration::from_millis(if rows > 8192 { 1500 } else { 600 });
            for n in NS {
                let paths = vec![RowPath::Dot; n];
                let (xs, ys) = (&x[..n * cols], &mut y[..n * rows]);
                let mut best = [f64::MAX; 2];
                let start = Instant::now();
                let mut iters = 0;
                while iters < 4 || (start.elapsed() < budget && iters < 2000) {
                    for (k, b) in best.iter_mut().enumerate() {
                        let t = clock();
                        if k == 0 {
                            linear_dot_per_row(&cfg, &w, black_box(xs), n, ys).unwrap();
                        } else {
                            linear_planned(&cfg, &w, black_box(xs), n, &paths, ys).unwrap();
                        }
                        *b = b.min(clock() - t);
                    }
                    iters += 1;
                }
                ratio = best[1] / best[0];
                print!(
                    " {:>17}",
                    format!("{:.1}/{:.1}", best[0] * 1e6, best[1] * 1e6)
                );
            }
            println!("  {ratio:>12.2}");
        }
    }
}

/// Seconds: thread CPU time (`--cpu-time`, needs one thread in the pool) or wall time.
fn clock_fn(cpu_time: bool) -> impl Fn() -> f64 {
    if cpu_time {
        assert_eq!(
            rayon::current_num_threads(),
            1,
            "--cpu-time needs RAYON_NUM_THREADS=1"
        );
        assert!(
            rayon::current_thread_index().is_some(),
            "--cpu-time needs --in-pool"
        );
    }
    move || {
        if cpu_time {
            thread_cpu_time()
        } else {
            Instant::now()
                .duration_since(*EPOCH.get_or_init(Instant::now))
                .as_secs_f64()
        }
    }
}

static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

thread_local! {
    static OLD_TILE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The GEMM path before batch invariance: per task, dequantize a tile of weight
/// rows and multiply it with the `gemm` crate (single-threaded inside the task).
fn old_gemm_path(w: &WeightMatrix, x: &[f32], n: usize, y: &mut [f32]) {
    use rayon::prelude::*;
    let (rows, cols) = (w.rows, w.cols);
    let rb = w.data.len() / rows;
    let threads = rayon::current_num_threads().max(1);
    let tile = rows.div_ceil(threads * 4).clamp(16, 256).div_ceil(16) * 16;
    let yp = y.as_mut_ptr() as usize;
    (0..rows.div_ceil(tile)).into_par_iter().for_each(|t| {
        OLD_TILE.with(|buf| {
            let mut buf = buf.borrow_mut();
            let r0 = t * tile;
            let tr = tile.min(rows - r0);
            buf.resize(tr * cols, 0.0);
            inferd_quant::dequantize_row(w.dtype, &w.data[r0 * rb..(r0 + tr) * rb], &mut buf[..]);
            // SAFETY: tasks write disjoint output columns r0..r0+tr of y [n, rows].
            unsafe {
                gemm::gemm(
                    n,
                    tr,
                    cols,
                    (yp as *mut f32).add(r0),
                    1,
                    rows as isize,
                    false,
                    x.as_ptr(),
                    1,
                    cols as isize,
                    buf.as_ptr(),
                    cols as isize,
                    1,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            };
        })
    });
}

/// CPU time of the calling thread in seconds (`CLOCK_THREAD_CPUTIME_ID`, Linux).
fn thread_cpu_time() -> f64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: libc's clock_gettime with a valid out pointer.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

fn run_vs_gemm(filter: Option<&String>, cpu_time: bool) {
    let clock = clock_fn(cpu_time);
    const NS: [usize; 3] = [16, 128, 512];
    println!("GFLOP/s, old path (gemm crate) / new (batch-invariant); interleaved, best of each");
    print!("{:<24}", "shape");
    for n in NS {
        print!(" {:>16}", format!("n={n} old/new"));
    }
    println!();
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
            let x: Vec<f32> = (0..512 * cols)
                .map(|i| ((i % 97) as f32 - 48.0) / 48.0)
                .collect();
            let mut y = vec![0f32; 512 * rows];
            let cfg = LinearConfig::default();
            print!("{:<24}", format!("{rows}x{cols} {dtype}"));
            for n in NS {
                let paths = vec![RowPath::Gemm; n];
                let (xs, ys) = (&x[..n * cols], &mut y[..n * rows]);
                let mut best = [f64::MAX; 2];
                let start = Instant::now();
                let mut iters = 0;
                while iters < 6 || (start.elapsed() < Duration::from_millis(1500) && iters < 2000) {
                    for (k, b) in best.iter_mut().enumerate() {
                        let t = clock();
                        if k == 0 {
                            old_gemm_path(&w, black_box(xs), n, ys);
                        } else {
                            linear_planned(&cfg, &w, black_box(xs), n, &paths, ys).unwrap();
                        }
                        *b = b.min(clock() - t);
                    }
                    iters += 1;
                }
                let gf = |s: f64| 2.0 * (rows * cols * n) as f64 / s / 1e9;
                print!(" {:>16}", format!("{:.0}/{:.0}", gf(best[0]), gf(best[1])));
            }
            println!();
        }
    }
}
