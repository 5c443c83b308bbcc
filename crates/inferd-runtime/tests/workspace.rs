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
