//! `chain [LAYERS] [STAGES:PIECE,…]`: a one-row decode step's products (the Qwen3-8B
//! shape) as one persistent kernel against one launch a product.

use inferd_runtime::{chain_bench, ChainShape};

pub fn chain(layers: usize, configs: &[(usize, usize)]) {
    let shape = ChainShape {
        hidden: 4096,
        qkv_out: 6144,
        gate_up: 24576,
        layers,
    };
    let t = chain_bench(shape, 20, configs).unwrap();
    let gb = shape.weight_bytes() / 1e9;
    let tbs = |ms: f32| shape.weight_bytes() / (ms as f64 * 1e-3) / 1e12;
    println!(
        "chain: {layers} layers, {gb:.2} GB of weights; device copy {:.2} TB/s (read + written)",
        t.copy_tbs
    );
    println!("| products | ms | TB/s | of the copy's |");
    println!("|---|---:|---:|---:|");
    let row = |name: String, ms: f32| {
        println!(
            "| {name} | {ms:.3} | {:.2} | {:.0}% |",
            tbs(ms),
            100.0 * tbs(ms) / t.copy_tbs as f64
        )
    };
    row("gemv a launch, graph".into(), t.wave_ms);
    row(
        "gemv a launch + x rounding a launch, graph".into(),
        t.wave_rounded_ms,
    );
    if let Some(&(stages, piece)) = configs.first() {
        row(
            format!("persistent, {stages} x {piece} B, no waits (the stream alone)"),
            t.unchained_ms,
        );
    }
    for (&(stages, piece), &ms) in configs.iter().zip(&t.chain_ms) {
        row(format!("persistent, {stages} x {piece} B a warp"), ms);
    }
    println!(
        "chain: persistent outputs against the gemv's: max |Δ| {:.3e}",
        t.max_diff
    );
}
