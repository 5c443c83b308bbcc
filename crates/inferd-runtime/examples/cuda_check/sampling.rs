//! `sampling`: the sample op on the device against the host sampler.

use std::time::Instant;

use inferd_core::sampling::{Extra, Sampler, SamplingParams};
use inferd_runtime::{Backend, CudaBackend, SampleRow};

/// Time of one `sample` call per kind of draw and row count, device against host.
pub fn sampling() {
    let vocab = 151_936;
    let max_rows = 64;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let host: Vec<f32> = (0..max_rows * vocab)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 24.0 - 16.0
        })
        .collect();
    let kinds: [(&str, fn(&mut SamplingParams)); 5] = [
        ("greedy", |p| p.temperature = 0.0),
        ("temperature 0.8", |_| {}),
        ("temperature 0.8, top-p 0.95", |p| p.top_p = 0.95),
        ("temperature 0.8, top-k 40, min-p 0.05", |p| {
            p.top_k = 40;
            p.min_p = 0.05
        }),
        ("greedy, 5 logprobs, repetition 1.1", |p| {
            p.temperature = 0.0;
            p.logprobs = Some(5);
            p.repetition_penalty = 1.1;
        }),
    ];
    let history: Vec<u32> = (0..2000).map(|i| (i * 7919 % vocab) as u32).collect();
    println!("| draw | rows | device ms | host ms (rows read back) | host / device |");
    println!("|---|---|---|---|---|");
    let device = CudaBackend::new(inferd_runtime::CudaConfig::default()).unwrap();
    let on_host = CudaBackend::new(inferd_runtime::CudaConfig {
        host_sampling: true,
        ..Default::default()
    })
    .unwrap();
    let mut logits = [
        device.alloc(max_rows * vocab).unwrap(),
        on_host.alloc(max_rows * vocab).unwrap(),
    ];
    device
        .from_host(&host, max_rows, vocab, &mut logits[0])
        .unwrap();
    on_host
        .from_host(&host, max_rows, vocab, &mut logits[1])
        .unwrap();
    for (name, set) in kinds {
        for rows in [1usize, 8, 32, 64] {
            let mut ms = [0.0; 2];
            for (k, be) in [&device, &on_host].into_iter().enumerate() {
                let mut samplers: Vec<Sampler> = (0..rows)
                    .map(|i| {
                        let mut p = SamplingParams {
                            temperature: 0.8,
                            seed: Some(i as u64),
                            ..Default::default()
                        };
                        set(&mut p);
                        Sampler::new(p)
                    })
                    .collect();
                let iters = 20;
                let mut total = 0.0;
                for it in 0..iters + 2 {
                    let mut rs: Vec<SampleRow<'_>> = samplers
                        .iter_mut()
                        .enumerate()
                        .map(|(i, sampler)| SampleRow {
                            row: i,
                            sampler,
                            prompt: &history,
                            generated: &history[..64],
                            extra: Extra::default(),
                        })
                        .collect();
                    let t = Instant::now();
                    be.sample(&logits[k], &mut rs, &mut Vec::new()).unwrap();
                    if it >= 2 {
                        total += t.elapsed().as_secs_f64();
                    }
                }
                ms[k] = 1e3 * total / iters as f64;
            }
            println!(
                "| {name} | {rows} | {:.3} | {:.3} | {:.1}x |",
                ms[0],
                ms[1],
                ms[1] / ms[0]
            );
        }
    }
}
