//! Batch invariance, bit for bit: every logits row of the tiny fixture models is
//! identical (f32 `to_bits`) whatever the pass it is computed in — the whole
//! prompt at once, the prompt in chunks of any size, mixed with other sequences,
//! as a lone decode step, or on any number of worker threads. The engine relies
//! on it (concurrent greedy requests give what they give alone, chunked prefill
//! equals unchunked, preempted sequences are recomputed exactly).

mod common;

use common::*;
use inferd_runtime::{CpuBackend, CpuConfig, ForwardBatch, KvDtype, Model};

/// One chunk of a pass: (tokens, start position, prompt length, block table).
type Part<'a> = (&'a [u32], usize, usize, &'a [u32]);
/// The logits of some rows as bits.  // [n][vocab]
type Bits = Vec<Vec<u32>>;

/// Logits bits of every row of one pass over `parts`.  -> [n_tokens][vocab]
fn pass(run: &mut Runner<'_, CpuBackend>, parts: &[Part<'_>]) -> Bits {
    let mut b = ForwardBatch::default();
    for &(ids, start, prompt_len, table) in parts {
        b.push(ids, start, prompt_len, table.to_vec(), false);
    }
    b.logits_rows = (0..b.tokens.len()).collect();
    let vocab = run.model.cfg.vocab_size;
    let l = run.model.forward(&mut run.kv, &run.layout, &b).unwrap();
    l.chunks(vocab)
        .map(|r| r.iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// Rows of `ids` prefilled (as prompt rows, or as generated rows from `prompt_len` on)
/// in passes of `chunk` tokens.  -> [n][vocab]
fn chunked(run: &mut Runner<'_, CpuBackend>, ids: &[u32], prompt_len: usize, chunk: usize) -> Bits {
    let (seq, table) = run.new_seq(ids.len());
    let mut out = Vec::new();
    for (i, c) in ids.chunks(chunk).enumerate() {
        out.extend(pass(run, &[(c, i * chunk, prompt_len, &table)]));
    }
    run.kvm.free(seq);
    out
}

fn synthetic(n: usize, salt: usize, vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|i| ((i * 7919 + salt * 104729 + 13) % vocab) as u32)
        .collect()
}

fn assert_rows_eq(name: &str, what: &str, got: &[Vec<u32>], want: &[Vec<u32>]) {
    assert_eq!(got.len(), want.len(), "{name}: {what}: row count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g == w, "{name}: {what}: row {i} differs in its bits");
    }
}

/// Every way of computing a prompt's rows gives the same bits as one pass alone.
fn bit_identical(name: &str, dtype: KvDtype) {
    let path = repo_root().join("fixtures/models").join(name);
    let n = 600; // several 32-token tiles, many 4-token KV blocks, two attention segments
    let mut reference: Option<(Bits, Bits)> = None;
    for threads in [1, 2, 3] {
        let backend = CpuBackend::with_config(CpuConfig {
            threads,
            ..Default::default()
        });
        let model = Model::load(backend, &path).unwrap();
        let vocab = model.cfg.vocab_size;
        let ids = synthetic(n, 0, vocab);
        let other_a = synthetic(30, 1, vocab);
        let other_b = synthetic(7, 2, vocab);
        let mut run = Runner::with_dtype(&model, 4 * n, dtype);
        let whole = chunked(&mut run, &ids, n, n);
        // The last token as a generated row (8-bit path): the recompute-after-preemption shape.
        let whole_gen = chunked(&mut run, &ids, n - 1, n);
        let ctx = format!("{} KV, {threads} threads", dtype.name());
        match &reference {
            None => reference = Some((whole.clone(), whole_gen.clone())),
            Some((w, wg)) => {
                assert_rows_eq(name, &format!("{ctx}: one pass"), &whole, w);
                assert_rows_eq(name, &format!("{ctx}: one pass, generated"), &whole_gen, wg);
            }
        }
        let (want, want_gen) = reference.as_ref().unwrap();

        for chunk in [1, 3, 5, 16, 33] {
            let parts = chunked(&mut run, &ids, n, chunk);
            assert_rows_eq(name, &format!("{ctx}: chunks of {chunk}"), &parts, want);
        }

        // The whole prompt between two other prompts in one pass.
        let (sa, ta) = run.new_seq(other_a.len());
        let (s, t) = run.new_seq(n);
        let (sb, tb) = run.new_seq(other_b.len());
        let rows = pass(
            &mut run,
            &[
                (&other_a, 0, other_a.len(), &ta),
                (&ids, 0, n, &t),
                (&other_b, 0, other_b.len(), &tb),
            ],
        );
        let what = format!("{ctx}: mixed with other prompts");
        assert_rows_eq(name, &what, &rows[other_a.len()..][..n], want);
        for seq in [sa, s, sb] {
            run.kvm.free(seq);
        }

        // A first chunk alone, then the rest mixed with another prompt and other decode steps.
        let split = 40;
        let (sa, ta) = run.new_seq(other_a.len() + 1);
        let (s, t) = run.new_seq(n);
        let (sb, tb) = run.new_seq(other_b.len());
        pass(&mut run, &[(&other_a, 0, other_a.len(), &ta)]);
        let first = pass(&mut run, &[(&ids[..split], 0, n, &t)]);
        let next_a = [5u32];
        let rest = pass(
            &mut run,
            &[
                (&other_b, 0, other_b.len(), &tb),
                (&ids[split..], split, n, &t),
                (&next_a, other_a.len(), other_a.len(), &ta),
            ],
        );
        let mut got = first;
        got.extend_from_slice(&rest[other_b.len()..][..n - split]);
        assert_rows_eq(name, &format!("{ctx}: chunk then mixed"), &got, want);
        for seq in [sa, s, sb] {
            run.kvm.free(seq);
        }

        // Decode of the last token after the rest of the prompt, alone and among other
        // decode steps, equals the last row of a prefill that includes it.
        let (s, t) = run.new_seq(n);
        let (sa, ta) = run.new_seq(other_a.len() + 1);
        pass(&mut run, &[(&ids[..n - 1], 0, n - 1, &t)]);
        pass(&mut run, &[(&other_a, 0, other_a.len(), &ta)]);
        let last = &ids[n - 1..];
        let alone = pass(&mut run, &[(last, n - 1, n - 1, &t)]);
        assert_rows_eq(
            name,
            &format!("{ctx}: decode alone"),
            &alone,
            &want_gen[n - 1..],
        );
        let mixed = pass(
            &mut run,
            &[
                (&next_a, other_a.len(), other_a.len(), &ta),
                (last, n - 1, n - 1, &t),
            ],
        );
        let what = format!("{ctx}: decode among others");
        assert_rows_eq(name, &what, &mixed[1..], &want_gen[n - 1..]);
        // The same token as a prompt row: the last row of the one-pass prefill.
        let as_prompt = pass(&mut run, &[(last, n - 1, n, &t)]);
        let what = format!("{ctx}: last prompt row alone");
        assert_rows_eq(name, &what, &as_prompt, &want[n - 1..]);
        run.kvm.free(s);
        run.kvm.free(sa);
    }
}

#[test]
fn prompt_logits_bit_identical_across_passes_llama() {
    bit_identical("llama", KvDtype::F32);
}

#[test]
fn prompt_logits_bit_identical_across_passes_llama_q8() {
    bit_identical("llama", KvDtype::Q8);
}

#[test]
fn prompt_logits_bit_identical_across_passes_qwen2() {
    bit_identical("qwen2", KvDtype::F32);
}

#[test]
fn prompt_logits_bit_identical_across_passes_qwen2_q8() {
    bit_identical("qwen2", KvDtype::Q8);
}

#[test]
fn prompt_logits_bit_identical_across_passes_qwen3() {
    bit_identical("qwen3", KvDtype::F32);
}

#[test]
fn prompt_logits_bit_identical_across_passes_qwen3_q8() {
    bit_identical("qwen3", KvDtype::Q8);
}
