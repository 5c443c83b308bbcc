//! Backend v2's contract through `Model::forward_into`: one workspace reused across
//! passes of every size gives exactly the logits of a fresh one (nothing stale is read,
//! buffers grow when a pass is larger than any before and never otherwise), shapes past
//! a buffer's capacity are errors, and batched block calls check everything before they
//! change anything. Bodies are generic over `Backend`.

mod common;

use common::*;
use inferd_runtime::{Backend, CpuBackend, DeviceTensor, ForwardBatch, Model};

fn tiny<B: Backend>(backend: B, name: &str) -> Model<B> {
    Model::load(backend, &repo_root().join("fixtures/models").join(name)).unwrap()
}

fn ids(n: usize, vocab: usize, seed: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ((i * 31 + seed * 7 + 3) % vocab) as u32)
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Prefills of 1..=12 tokens with every row's logits, in an order that shrinks and
/// grows: through one reused workspace and through fresh ones, bit for bit.
fn reused_workspace_matches_fresh_passes<B: Backend + Clone>(backend: B) {
    for name in ["llama", "qwen2", "qwen3", "qwen35_hybrid"] {
        if name.starts_with("qwen35") && !backend.supports_linear_attention() {
            continue;
        }
        let model = tiny(backend.clone(), name);
        let vocab = model.cfg.vocab_size;
        let mut ws = model.workspace(2, 1).unwrap();
        let mut reused = Vec::new();
        for (round, n) in [5usize, 1, 12, 3, 12, 7, 2].into_iter().enumerate() {
            let prompt = ids(n, vocab, round);
            let mut a = Runner::new(&model, 16);
            let (_, table) = a.new_seq(n);
            let mut b = ForwardBatch::default();
            b.push(&prompt, 0, n, table.clone(), false);
            b.logits_rows = (0..n).collect();
            model
                .forward_into(&mut ws, &mut a.kv, &a.layout, &b, &mut reused)
                .unwrap();
            let mut fresh = Runner::new(&model, 16);
            let (_, table2) = fresh.new_seq(n);
            assert_eq!(table, table2);
            let want = model.forward(&mut fresh.kv, &fresh.layout, &b).unwrap();
            assert_eq!(reused.len(), n * vocab, "{name} n={n}");
            assert_eq!(
                bits(&reused),
                bits(&want),
                "{name}: pass {round} of {n} tokens"
            );
        }
    }
}

/// A tensor reshapes within its capacity and refuses past it.
fn shapes_past_capacity_are_errors<B: Backend>(backend: B) {
    let mut t = backend.alloc(12).unwrap();
    assert_eq!((t.rows(), t.cols()), (0, 0));
    assert!(t.capacity() >= 12);
    t.set_shape(3, 4).unwrap();
    assert_eq!((t.rows(), t.cols()), (3, 4));
    t.set_shape(1, 2).unwrap();
    let cap = t.capacity();
    assert!(t.set_shape(cap + 1, 1).is_err());
    assert_eq!(
        (t.rows(), t.cols()),
        (1, 2),
        "a refused shape changes nothing"
    );
}

/// Batched copies, exports and imports check every id (and the length) first.
fn batched_block_calls_are_all_or_nothing<B: Backend>(backend: B) {
    let model = tiny(backend, "llama");
    let mut run = Runner::new(&model, 16);
    let n = run.layout.num_blocks as u32;
    let one = run.layout.block_bytes();
    let (_, table) = run.new_seq(8);
    let prompt = ids(8, model.cfg.vocab_size, 1);
    let mut b = ForwardBatch::default();
    b.push(&prompt, 0, 8, table.clone(), true);
    model.forward(&mut run.kv, &run.layout, &b).unwrap();
    let mut before = vec![0u8; one * 2];
    model
        .backend
        .export_blocks(&run.kv, &[table[0], table[1]], &mut before)
        .unwrap();
    let spare = n - 1;
    // A bad id anywhere: nothing copied or written.
    assert!(model
        .copy_blocks(&mut run.kv, &[(table[0], spare), (n, 0)])
        .is_err());
    let mut img = vec![0u8; one];
    model
        .backend
        .export_blocks(&run.kv, &[spare], &mut img)
        .unwrap();
    let zeros = img.clone();
    assert!(model
        .backend
        .import_blocks(&mut run.kv, &[table[0], n], &vec![7u8; one * 2])
        .is_err());
    assert!(model
        .backend
        .import_blocks(&mut run.kv, &[table[0]], &vec![7u8; one + 1])
        .is_err());
    let mut after = vec![0u8; one * 2];
    model
        .backend
        .export_blocks(&run.kv, &[table[0], table[1]], &mut after)
        .unwrap();
    assert_eq!(before, after);
    // Good calls: images in order, copies in order.
    model
        .copy_blocks(&mut run.kv, &[(table[1], spare), (table[0], spare - 1)])
        .unwrap();
    let mut copied = vec![0u8; one * 2];
    model
        .backend
        .export_blocks(&run.kv, &[spare - 1, spare], &mut copied)
        .unwrap();
    assert_eq!(copied, before);
    assert_ne!(zeros, before[..one]);
}

/// Drawing on the device gives, row for row, what each sampler draws from the host
/// copy of the same logits (greedy, seeded temperature sampling with penalties, a
/// mask), whatever the order of the rows.
fn device_sampling_matches_the_host_sampler<B: Backend>(backend: B) {
    use inferd_core::sampling::{Extra, Sampler, SamplingParams};
    use inferd_runtime::SampleRow;
    let model = tiny(backend, "qwen2");
    let vocab = model.cfg.vocab_size;
    let mut run = Runner::new(&model, 32);
    let mut b = ForwardBatch::default();
    let prompts: Vec<Vec<u32>> = (0..3).map(|i| ids(5 + i, vocab, i)).collect();
    for p in &prompts {
        let (_, table) = run.new_seq(p.len());
        b.push(p, 0, p.len(), table, true);
    }
    let mut ws = model.workspace(32, 3).unwrap();
    assert!(model
        .forward_in(&mut ws, &mut run.kv, &run.layout, &b)
        .unwrap());
    let mut host = Vec::new();
    model.backend.to_host(ws.logits(), &mut host).unwrap();
    let params = |i: usize| {
        let mut p = SamplingParams::greedy();
        if i > 0 {
            p.temperature = 0.8;
            p.top_p = 0.9;
            p.seed = Some(7 + i as u64);
            p.presence_penalty = 0.5;
            p.logprobs = Some(3);
        }
        p
    };
    // Only even ids allowed for the last row.
    let mask: Vec<u32> = vec![0x5555_5555; vocab.div_ceil(32)];
    let history: Vec<u32> = vec![1, 2, 3];
    let extra = |i: usize| Extra {
        allowed: (i == 2).then_some(&mask[..]),
        breaks: &[],
    };
    let mut device: Vec<Sampler> = (0..3).map(|i| Sampler::new(params(i))).collect();
    let mut reference: Vec<Sampler> = (0..3).map(|i| Sampler::new(params(i))).collect();
    for _step in 0..3 {
        // Rows given in reverse order: each result is its own row's.
        let mut rows: Vec<SampleRow<'_>> = device
            .iter_mut()
            .enumerate()
            .rev()
            .map(|(i, sampler)| SampleRow {
                row: i,
                sampler,
                prompt: &prompts[i],
                generated: &history,
                extra: extra(i),
            })
            .collect();
        let mut out = Vec::new();
        model.sample(&ws, &mut rows, &mut out).unwrap();
        for (k, i) in (0..3).rev().enumerate() {
            let want = reference[i].sample_with(
                &host[i * vocab..(i + 1) * vocab],
                &prompts[i],
                &history,
                &extra(i),
            );
            assert_eq!(out[k], want, "row {i}");
            if i == 2 {
                assert_eq!(out[k].token % 2, 0, "the mask holds");
            }
        }
    }
    // A row past the pass is an error, not a panic.
    let mut s = Sampler::new(params(0));
    let mut rows = vec![SampleRow {
        row: 3,
        sampler: &mut s,
        prompt: &prompts[0],
        generated: &[],
        extra: Extra::default(),
    }];
    assert!(model.sample(&ws, &mut rows, &mut Vec::new()).is_err());
}

/// Every kind of draw, on logits made here at a Qwen-sized vocabulary, is the host
/// sampler's bit for bit (the token and every logprob): greedy with and without a mask or
/// logprobs, temperature, top-k (cut inside a run of ties), top-p, min-p, penalties over a
/// long prompt, special values, a mask that leaves one token, DRY over a repeated phrase
/// with breakers (alone, and with logprobs).
fn every_draw_matches_the_host_sampler<B: Backend>(backend: B) {
    use inferd_core::sampling::{Dry, Extra, Sampler, SamplingParams, Xoshiro256};
    use inferd_runtime::SampleRow;
    let vocab = 151_936;
    let n = 12;
    let mut rng = Xoshiro256::from_seed(5);
    let mut host = vec![0f32; n * vocab];
    for (r, row) in host.chunks_mut(vocab).enumerate() {
        for x in row.iter_mut() {
            let u = rng.next_f64();
            // Even rows: few distinct values (ties everywhere); odd rows: a spread.
            *x = if r % 2 == 0 {
                (u * 8.0).floor() as f32 - 4.0
            } else {
                (u * 20.0 - 12.0) as f32
            };
        }
    }
    host[3 * vocab + 5] = f32::NAN;
    host[3 * vocab + 6] = f32::INFINITY;
    host[5 * vocab..6 * vocab].fill(f32::NEG_INFINITY);
    let mut logits = backend.alloc(n * vocab).unwrap();
    backend.from_host(&host, n, vocab, &mut logits).unwrap();
    let params = |r: usize| {
        let mut p = SamplingParams {
            seed: Some(100 + r as u64),
            temperature: 0.9,
            ..SamplingParams::default()
        };
        match r {
            0 => p.temperature = 0.0,
            1 => {
                p.logprobs = Some(20);
                p.dry = Dry {
                    multiplier: 1.5,
                    allowed_length: 1,
                    ..Dry::default()
                };
            }
            2 => p.top_k = 1000, // cuts a run of equal logits
            3 => p.top_p = 0.95,
            4 => {
                p.top_k = 50;
                p.top_p = 0.7;
                p.min_p = 0.01;
                p.logprobs = Some(5);
            }
            5 => p.logprobs = Some(3), // a row of -inf: uniform
            6 => {
                p.repetition_penalty = 1.5;
                p.presence_penalty = 0.5;
                p.frequency_penalty = 0.3;
                p.top_p = 0.9;
            }
            7 => p.min_p = 0.3,
            8 => {
                p.temperature = 0.0;
                p.logprobs = Some(2);
            }
            9 => p.temperature = 2.5,
            10 => {
                p.dry = Dry {
                    multiplier: 0.8,
                    ..Dry::default()
                };
                // Bias on tokens DRY penalises (the phrase's) and on others.
                p.logit_bias = vec![(3, 1.5), (77, -100.0), (250, 0.75), (4000, 6.0)];
            }
            _ => p.top_k = 3,
        }
        p
    };
    // Row 8: greedy under a mask; row 11: a mask that leaves one token.
    let mut mask = vec![0u32; vocab.div_ceil(32)];
    for t in (7..vocab).step_by(97) {
        mask[t / 32] |= 1 << (t % 32);
    }
    let mut one = vec![0u32; vocab.div_ceil(32)];
    one[4000 / 32] |= 1 << (4000 % 32);
    let prompt: Vec<u32> = (0..3000).map(|i| (i * 7919 % vocab) as u32).collect();
    // A phrase written over and over, token 9 a breaker: DRY penalises what comes next.
    let generated: Vec<u32> = (0..40).map(|i| [11, 250, 3, 77, 1200, 9][i % 6]).collect();
    let breaks: Vec<bool> = generated.iter().map(|&t| t == 9).collect();
    let extra = |r: usize| Extra {
        allowed: match r {
            8 => Some(&mask[..]),
            11 => Some(&one[..]),
            _ => None,
        },
        breaks: &breaks,
    };
    let mut device: Vec<Sampler> = (0..n).map(|r| Sampler::new(params(r))).collect();
    let mut reference: Vec<Sampler> = (0..n).map(|r| Sampler::new(params(r))).collect();
    for step in 0..4 {
        let mut rows: Vec<SampleRow<'_>> = device
            .iter_mut()
            .enumerate()
            .map(|(r, sampler)| SampleRow {
                row: r,
                sampler,
                prompt: &prompt,
                generated: &generated,
                extra: extra(r),
            })
            .collect();
        let mut out = Vec::new();
        backend.sample(&logits, &mut rows, &mut out).unwrap();
        for r in 0..n {
            let want = reference[r].sample_with(
                &host[r * vocab..(r + 1) * vocab],
                &prompt,
                &generated,
                &extra(r),
            );
            assert_eq!(out[r], want, "row {r} step {step}");
        }
        assert_eq!(out[11].token, 4000, "the one allowed token");
        assert_eq!(out[8].token % 97, 7, "greedy within the mask");
    }
    assert!(backend
        .from_host(&host[1..], n, vocab, &mut logits)
        .is_err());
}

macro_rules! backend_tests {
    ($modname:ident, $backend:expr) => {
        mod $modname {
            use super::*;
            #[test]
            fn a_reused_workspace_gives_the_bits_of_a_fresh_one() {
                reused_workspace_matches_fresh_passes($backend);
            }
            #[test]
            fn tensors_refuse_shapes_past_their_capacity() {
                shapes_past_capacity_are_errors($backend);
            }
            #[test]
            fn device_sampling_is_the_host_sampler_row_for_row() {
                device_sampling_matches_the_host_sampler($backend);
            }
            #[test]
            fn every_draw_is_the_host_sampler_bit_for_bit() {
                every_draw_matches_the_host_sampler($backend);
            }
            #[test]
            fn batched_block_calls_check_everything_first() {
                batched_block_calls_are_all_or_nothing($backend);
            }
        }
    };
}

backend_tests!(cpu, CpuBackend::new());

#[cfg(feature = "cuda")]
backend_tests!(
    cuda,
    match cuda() {
        Some(b) => b,
        None => return,
    }
);
