//! The runner on the tiny committed Llama fixture: sequences stepped through the
//! persistent batch (tables appended chunk by chunk, prefills split, decodes side by
//! side, a preemption) draw exactly the tokens that whole-table passes give.

use std::path::Path;

use inferd_core::sampling::SamplingParams;
use inferd_runtime::{CpuBackend, CpuConfig, ForwardBatch, KvDtype, Model};

use super::*;

const BS: usize = 4;
const BLOCKS: usize = 32;

/// The tiny committed Llama fixture on one CPU thread (the draft model's tests too).
pub(crate) fn model() -> Model<CpuBackend> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/llama");
    let backend = CpuBackend::with_config(CpuConfig {
        threads: 1,
        ..Default::default()
    });
    Model::load(backend, &dir).expect("load the Llama fixture")
}

fn runner() -> ModelRunner<CpuBackend> {
    let model = model();
    let layout = model.kv_layout(BLOCKS, BS, KvDtype::F32);
    let kv = model.alloc_kv(&layout).expect("kv");
    let ws = model.workspace(64, 8).expect("workspace");
    ModelRunner::new(model, kv, layout, ws)
}

/// Greedy tokens of `prompt` run alone with its whole table every pass (the argmax
/// of the logits `Model::forward` returns).
fn reference(prompt: &[u32], table: &[u32], n: usize) -> Vec<u32> {
    let model = model();
    let layout = model.kv_layout(BLOCKS, BS, KvDtype::F32);
    let mut kv = model.alloc_kv(&layout).expect("kv");
    let vocab = model.cfg.vocab_size;
    let mut tokens = prompt.to_vec();
    let mut out = Vec::new();
    let mut start = 0;
    while out.len() < n {
        let mut b = ForwardBatch::default();
        b.push(&tokens[start..], start, prompt.len(), table.to_vec(), true);
        let logits = model.forward(&mut kv, &layout, &b).expect("forward");
        let last = &logits[logits.len() - vocab..];
        let t = (0..vocab)
            .max_by(|&a, &b| last[a].total_cmp(&last[b]).then(b.cmp(&a)))
            .unwrap() as u32;
        start = tokens.len();
        tokens.push(t);
        out.push(t);
    }
    out
}

fn new_row(seq: SeqId, prompt_len: usize) -> NewRow {
    NewRow {
        seq,
        prompt_len,
        sampling: SamplingParams::greedy(),
        dry_tokenizer: None,
    }
}

fn chunk(seq: SeqId, start: usize, tokens: &[u32], new_blocks: &[u32], samples: bool) -> StepChunk {
    StepChunk {
        seq,
        start_pos: start,
        tokens: ChunkTokens::Known(tokens.to_vec()),
        new_blocks: new_blocks.to_vec(),
        state_slot: 0,
        samples,
        drafts: 0,
    }
}

/// Runs `step`, drawing every sampling row; the tokens by sequence.
fn run(
    r: &mut ModelRunner<CpuBackend>,
    step: StepInput,
    hist: &[(SeqId, &[u32], &[u32])],
) -> Vec<(SeqId, u32)> {
    let p = r.prepare(step).expect("prepare");
    let l = r.launch(p).expect("launch");
    let draws: Vec<Draw> = hist
        .iter()
        .map(|&(seq, prompt, generated)| Draw {
            seq,
            prompt,
            generated,
            mask: None,
            drafts: &[],
            draft_masks: &[],
        })
        .collect();
    let out = r.collect(l, &draws).expect("collect");
    out.sampled.into_iter().map(|(s, t)| (s, t.token)).collect()
}

#[test]
fn stepped_rows_draw_what_whole_tables_give() {
    let a: Vec<u32> = (0..7).map(|i| (i * 37 + 5) % 200).collect();
    let b: Vec<u32> = (0..3).map(|i| (i * 11 + 3) % 200).collect();
    // Blocks come as the sequences grow (one per 4 positions).
    let (ta, tb) = ([3u32, 7, 1, 9], [4u32, 12, 13]);
    let want_a = reference(&a, &ta, 6);
    let want_b = reference(&b, &tb, 7);
    let mut r = runner();
    // Step 1: A's first 4 prompt tokens (no sample), B admitted whole.
    let s = StepInput {
        new: vec![new_row(1, a.len()), new_row(2, b.len())],
        chunks: vec![
            chunk(1, 0, &a[..4], &ta[..1], false),
            chunk(2, 0, &b, &tb[..1], true),
        ],
        ..Default::default()
    };
    let got = run(&mut r, s, &[(2, &b, &[])]);
    let (mut ga, mut gb) = (Vec::new(), vec![got[0].1]);
    // Step 2: B decodes; A's last 3 prompt tokens sample.
    let s = StepInput {
        chunks: vec![
            chunk(2, 3, &gb[..1], &tb[1..2], true),
            chunk(1, 4, &a[4..], &ta[1..2], true),
        ],
        ..Default::default()
    };
    let got = run(&mut r, s, &[(2, &b, &gb), (1, &a, &[])]);
    gb.push(got[0].1);
    ga.push(got[1].1);
    // Decodes side by side, A's table growing at position 8 and 12.
    for _ in 0..5 {
        let (pa, pb) = (a.len() + ga.len() - 1, b.len() + gb.len() - 1);
        let nb = |pos: usize, t: &[u32], seq_blocks: usize| -> Vec<u32> {
            t[seq_blocks.min(t.len())..(pos / BS + 1).min(t.len())].to_vec()
        };
        let na = nb(pa, &ta, r.rows.get(1).unwrap().n_blocks);
        let nbb = nb(pb, &tb, r.rows.get(2).unwrap().n_blocks);
        // A's input is the placeholder for its last draw, B's the token itself.
        let mut decode_a = chunk(1, pa, &[], &na, true);
        decode_a.tokens = ChunkTokens::LastDrawn;
        let s = StepInput {
            chunks: vec![decode_a, chunk(2, pb, &gb[gb.len() - 1..], &nbb, true)],
            ..Default::default()
        };
        let got = run(&mut r, s, &[(1, &a, &ga), (2, &b, &gb)]);
        ga.push(got[0].1);
        gb.push(got[1].1);
    }
    // The pool's tables hold what the edits appended.
    assert_eq!(table(&r, 1), ta[..3]);
    assert_eq!(table(&r, 2), tb);
    assert_eq!(ga, want_a);
    assert_eq!(gb, want_b);
    // B ends: its row goes with the next step, and its table row is the next row's,
    // rewritten from 0 (C's blocks are not B's).
    let b_row = r.rows.get(2).unwrap().table_row;
    let c: Vec<u32> = (0..6).map(|i| (i * 29 + 1) % 200).collect();
    let tc = [20u32, 21];
    let want_c = reference(&c, &tc, 3);
    let s = StepInput {
        new: vec![new_row(3, c.len())],
        finished: vec![2],
        chunks: vec![chunk(3, 0, &c, &tc, true)],
        ..Default::default()
    };
    let mut gc = vec![run(&mut r, s, &[(3, &c, &[])])[0].1];
    assert_eq!(r.num_rows(), 2);
    assert_eq!(r.rows.get(3).unwrap().table_row, b_row);
    assert_eq!(table(&r, 3), tc);
    for _ in 0..2 {
        let mut d = chunk(3, c.len() + gc.len() - 1, &[], &[], true);
        d.tokens = ChunkTokens::LastDrawn;
        let s = StepInput {
            chunks: vec![d],
            ..Default::default()
        };
        gc.push(run(&mut r, s, &[(3, &c, &gc)])[0].1);
    }
    assert_eq!(gc, want_c);
}

/// Sequence `seq`'s row of the pool's block tables.
fn table(r: &ModelRunner<CpuBackend>, seq: SeqId) -> Vec<u32> {
    r.kv.tables.row(r.rows.get(seq).unwrap().table_row).to_vec()
}

#[test]
fn a_preempted_row_restarts_from_its_new_table() {
    let a: Vec<u32> = (0..5).map(|i| (i * 53 + 2) % 200).collect();
    let want = reference(&a, &[5, 6], 3);
    let mut r = runner();
    let s = StepInput {
        new: vec![new_row(1, a.len())],
        chunks: vec![chunk(1, 0, &a, &[10, 11], true)],
        ..Default::default()
    };
    let mut g = vec![run(&mut r, s, &[(1, &a, &[])])[0].1];
    // A chunk that does not continue the row is refused.
    let s = StepInput {
        chunks: vec![chunk(1, 4, &g, &[], true)],
        ..Default::default()
    };
    assert!(r.prepare(s).is_err());
    // Preempted: the KV is gone, the row restarts at 0 in other blocks, recomputing
    // its prompt and the token it drew.
    let known: Vec<u32> = a.iter().chain(&g).copied().collect();
    let s = StepInput {
        preempted: vec![1],
        chunks: vec![chunk(1, 0, &known, &[5, 6], true)],
        ..Default::default()
    };
    g.push(run(&mut r, s, &[(1, &a, &g)])[0].1);
    assert_eq!(table(&r, 1), [5, 6]);
    let s = StepInput {
        chunks: vec![chunk(1, known.len(), &g[1..], &[], true)],
        ..Default::default()
    };
    g.push(run(&mut r, s, &[(1, &a, &g)])[0].1);
    assert_eq!(g, want);
}

#[test]
fn a_row_made_and_ended_within_one_diff_is_gone() {
    let mut r = runner();
    let s = StepInput {
        new: vec![new_row(1, 3), new_row(2, 3)],
        finished: vec![1],
        ..Default::default()
    };
    r.prepare(s).expect("a step without chunks");
    assert_eq!(r.num_rows(), 1);
    assert!(r.rows.get(2).is_some());
    // A row that drew nothing has no last draw to decode.
    let mut c = chunk(2, 3, &[], &[0], true);
    c.tokens = ChunkTokens::LastDrawn;
    let s = StepInput {
        chunks: vec![c],
        ..Default::default()
    };
    assert!(r.prepare(s).is_err());
}

/// A seeded sampler that draws at random (temperature 0.8).
fn seeded_row(seq: SeqId, prompt_len: usize) -> NewRow {
    let mut sampling = SamplingParams::greedy();
    sampling.temperature = 0.8;
    sampling.seed = Some(77);
    NewRow {
        sampling,
        ..new_row(seq, prompt_len)
    }
}

/// Runs one drafted chunk, `draw` its sequence's draw; the step's output.
fn run_drafted(
    r: &mut ModelRunner<CpuBackend>,
    c: StepChunk,
    draw: Draw<'_>,
) -> Result<StepOutput> {
    let p = r.prepare(StepInput {
        chunks: vec![c],
        ..Default::default()
    })?;
    let l = r.launch(p)?;
    r.collect(l, &[draw])
}

/// The draw of sequence 1 over `prompt` after `generated`, with `drafts`.
fn draft_draw<'a>(prompt: &'a [u32], generated: &'a [u32], drafts: &'a [u32]) -> Draw<'a> {
    Draw {
        seq: 1,
        prompt,
        generated,
        mask: None,
        drafts,
        draft_masks: &[],
    }
}

#[test]
fn a_speculative_row_draws_what_plain_decoding_draws() {
    let a: Vec<u32> = (0..6).map(|i| (i * 41 + 9) % 200).collect();
    let table = [2u32, 3, 4, 5];
    // Plain: the prompt, then one decode a step.
    let mut r = runner();
    let s = StepInput {
        new: vec![seeded_row(1, a.len())],
        chunks: vec![chunk(1, 0, &a, &table, true)],
        ..Default::default()
    };
    let mut plain = vec![run(&mut r, s, &[(1, &a, &[])])[0].1];
    while plain.len() < 9 {
        let pos = a.len() + plain.len() - 1;
        let s = StepInput {
            chunks: vec![chunk(1, pos, &plain[plain.len() - 1..], &[], true)],
            ..Default::default()
        };
        plain.push(run(&mut r, s, &[(1, &a, &plain)])[0].1);
    }
    // Speculative: a decode whose draft is right twice, then wrong (whatever plain
    // drew, plus one), then right again; then a whole right draft.
    let mut r = runner();
    let s = StepInput {
        new: vec![seeded_row(1, a.len())],
        chunks: vec![chunk(1, 0, &a, &table, true)],
        ..Default::default()
    };
    let mut got = vec![run(&mut r, s, &[(1, &a, &[])])[0].1];
    let drafts = [plain[1], plain[2], plain[3] + 1, plain[4]];
    let mut c = chunk(1, a.len(), &[&got[..], &drafts[..]].concat(), &[], true);
    c.drafts = drafts.len();
    let out = run_drafted(&mut r, c, draft_draw(&a, &got, &drafts)).expect("drafted step");
    let drawn: Vec<u32> = out.sampled.iter().map(|(_, s)| s.token).collect();
    assert_eq!(drawn.len(), 5);
    // The first three draws are plain's; the third is not the draft, so it ends there.
    assert_eq!(drawn[..3], plain[1..4]);
    got.extend_from_slice(&drawn[..3]);
    r.settle(1, &drawn[..3]);
    // Its position is back at the rejected draft's: the next decode writes over it.
    assert_eq!(r.rows.get(1).unwrap().position, Some(a.len() + 3));
    let mut d = chunk(1, a.len() + 3, &[], &[], true);
    d.tokens = ChunkTokens::LastDrawn;
    let s = StepInput {
        chunks: vec![d],
        ..Default::default()
    };
    got.push(run(&mut r, s, &[(1, &a, &got)])[0].1);
    let drafts = [plain[5], plain[6]];
    let mut c = chunk(1, a.len() + 4, &[got[4], drafts[0], drafts[1]], &[], true);
    c.drafts = 2;
    let out = run_drafted(&mut r, c, draft_draw(&a, &got, &drafts)).expect("drafted step");
    got.extend(out.sampled.iter().map(|(_, s)| s.token));
    assert_eq!(got, plain[..8]);
    r.settle(1, &got[5..8]);
    assert_eq!(r.rows.get(1).unwrap().position, Some(a.len() + 7));
    // A draft over the wrong number of rows is refused.
    let mut c = chunk(1, a.len() + 7, &[got[7], 1, 2], &[], true);
    c.drafts = 2;
    assert!(run_drafted(&mut r, c, draft_draw(&a, &got, &[1])).is_err());
}
