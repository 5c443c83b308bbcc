//! The gated delta rule on the CPU: the chunked (WY / UT) form that prefill runs against
//! the token-by-token recurrent form, on one value head of Qwen3.5's shape
//! (d_k = d_v = 128) and a small one, over prompts of 512 and 2048 tokens.
//!
//! `cargo bench -p inferd-runtime --bench delta_rule`
//!
//! Single-threaded (one head is one work item of the op; heads and sequences run in
//! parallel around it), best of several runs; tok/s = tokens of one head per second.
//! Also checks that both forms agree.

use std::hint::black_box;
use std::time::{Duration, Instant};

use inferd_runtime::backend::cpu::delta_rule::inputs::{noise, unit_rows};
use inferd_runtime::backend::cpu::delta_rule::{chunked, recurrent, HeadInputs};

fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn main() {
    println!(
        "| d_k × d_v | tokens | chunked tok/s | recurrent tok/s | chunked / recurrent | max |Δ| |"
    );
    println!("|---|---|---|---|---|---|");
    for (dk, dv) in [(128, 128), (16, 16)] {
        for l in [512, 2048] {
            let q = unit_rows(noise(l * dk, 1), dk, 1.0 / (dk as f32).sqrt());
            let k = unit_rows(noise(l * dk, 2), dk, 1.0);
            let v = noise(l * dv, 3);
            let g: Vec<f32> = noise(l, 4).iter().map(|x| -0.2 * (x + 1.0)).collect();
            let beta: Vec<f32> = noise(l, 5).iter().map(|x| 0.5 + 0.4 * x).collect();
            let x = HeadInputs {
                q: &q,
                k: &k,
                v: &v,
                g: &g,
                beta: &beta,
                dk,
                dv,
            };
            let (mut oc, mut orr) = (vec![0.0; l * dv], vec![0.0; l * dv]);
            let runs = if dk >= 128 { 9 } else { 40 };
            let tc = best_of(runs, || {
                let mut s = vec![0.0; dk * dv];
                chunked(black_box(x), 0, &mut s, &mut oc);
                black_box(&s);
            });
            let tr = best_of(runs, || {
                let mut s = vec![0.0; dk * dv];
                recurrent(black_box(x), &mut s, &mut orr);
                black_box(&s);
            });
            let diff = oc
                .iter()
                .zip(&orr)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let rate = |t: Duration| l as f64 / t.as_secs_f64();
            println!(
                "| {dk} × {dv} | {l} | {:.0} | {:.0} | {:.2} | {diff:.1e} |",
                rate(tc),
                rate(tr),
                tr.as_secs_f64() / tc.as_secs_f64()
            );
        }
    }
}
