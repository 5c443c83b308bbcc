//! The draft model on the tiny committed Llama fixture: whatever happened before (guesses
//! kept or not, catch-up in pieces, blocks taken by other sequences), a proposal is the
//! model's greedy continuation of the sequence's tokens as they are now.

use inferd_runtime::{CpuBackend, ForwardBatch, KvDtype};

use super::*;
use crate::runner::tests::model;

const BS: usize = 4;

fn draft(num_blocks: usize, catchup: usize) -> DraftModel<CpuBackend> {
    draft_sure(num_blocks, catchup, 0.0)
}

/// [`draft`] whose guesses end at the first one less likely than `min_confidence`.
fn draft_sure(num_blocks: usize, catchup: usize, min_confidence: f32) -> DraftModel<CpuBackend> {
    let m = model();
    let vocab_limit = m.cfg.vocab_size;
    DraftModel::new(
        m,
        DraftSizes {
            num_blocks,
            block_size: BS,
            dtype: KvDtype::F32,
            catchup,
            max_rows: 4,
            vocab_limit,
            min_confidence,
        },
    )
    .expect("draft model")
}

/// The model's greedy continuation of `tokens`, `n` tokens, each from a pass over the
/// whole sequence (no KV kept between them).
fn greedy(tokens: &[u32], n: usize) -> Vec<u32> {
    let model = model();
    let blocks = (tokens.len() + n).div_ceil(BS);
    let layout = model.kv_layout(blocks, BS, KvDtype::F32);
    let vocab = model.cfg.vocab_size;
    let mut t = tokens.to_vec();
    for _ in 0..n {
        let mut kv = model.alloc_kv(&layout).expect("kv");
        let mut b = ForwardBatch::default();
        b.push(&t, 0, tokens.len(), (0..blocks as u32).collect(), true);
        let logits = model.forward(&mut kv, &layout, &b).expect("forward");
        let last = &logits[logits.len() - vocab..];
        let next = (0..vocab)
            .max_by(|&a, &b| last[a].total_cmp(&last[b]).then(b.cmp(&a)))
            .unwrap() as u32;
        t.push(next);
    }
    t[tokens.len()..].to_vec()
}

/// A pseudo-random stream of token ids below the fixture's vocabulary.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % 500) as u32
    }
}

/// `d.propose(reqs)`, a sequence that did not draft as no guesses.
fn guesses(d: &mut DraftModel<CpuBackend>, reqs: &[DraftRequest<'_>]) -> Vec<Vec<u32>> {
    d.propose(reqs)
        .expect("propose")
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect()
}

fn req(seq: SeqId, tokens: &[u32], prompt_len: usize, max: usize) -> DraftRequest<'_> {
    DraftRequest {
        seq,
        tokens,
        prompt_len,
        max,
    }
}

#[test]
fn every_proposal_is_the_greedy_continuation_of_the_tokens_as_they_are() {
    // Two sequences side by side; a catch-up of 7 tokens a step, so the prompts (19 and
    // 11 tokens) are read in pieces, and a sequence drafts only once it has caught up.
    let mut d = draft(64, 7);
    let mut rng = Lcg(5);
    let mut seqs: Vec<Vec<u32>> = vec![
        (0..19).map(|_| rng.next()).collect(),
        (0..11).map(|_| rng.next()).collect(),
    ];
    let prompt_lens = [19, 11];
    let mut drafted = [0usize; 2];
    for step in 0..14 {
        let max = [4, 1 + step % 3];
        let reqs: Vec<DraftRequest<'_>> = (0..2)
            .map(|i| req(i as SeqId + 1, &seqs[i], prompt_lens[i], max[i]))
            .collect();
        let out = guesses(&mut d, &reqs);
        for i in 0..2 {
            if out[i].is_empty() {
                assert!(
                    drafted[i] == 0,
                    "step {step}: sequence {i} stopped drafting"
                );
                continue;
            }
            drafted[i] += 1;
            assert_eq!(
                out[i],
                greedy(&seqs[i], max[i]),
                "step {step}, sequence {i}"
            );
            // The target keeps some guesses, then draws a token of its own: all of
            // them, none, or a prefix, and the bonus token sometimes the next guess.
            let keep = (step + i) % (out[i].len() + 1);
            let mut next = out[i][..keep].to_vec();
            let bonus = match (step % 3, out[i].get(keep)) {
                (0, Some(&g)) => (g + 1) % 500,
                _ => rng.next(),
            };
            next.push(bonus);
            seqs[i].extend(next);
        }
    }
    assert!(drafted.iter().all(|&n| n >= 10), "{drafted:?}");
}

#[test]
fn a_pool_too_small_for_both_evicts_the_one_not_asked_and_starts_it_again() {
    // 9 blocks of 4 tokens: one sequence of 24 tokens and its guesses fits, two do not.
    let mut d = draft(9, 64);
    let mut rng = Lcg(11);
    let mut a: Vec<u32> = (0..24).map(|_| rng.next()).collect();
    let mut b: Vec<u32> = (0..22).map(|_| rng.next()).collect();
    for round in 0..3 {
        let out = guesses(&mut d, &[req(1, &a, 24, 3)]);
        assert_eq!(out[0], greedy(&a, 3), "round {round}: a");
        a.push(out[0][0]);
        a.push(rng.next());
        // b takes a's blocks (a was not asked this time).
        let out = guesses(&mut d, &[req(2, &b, 22, 3)]);
        assert_eq!(out[0], greedy(&b, 3), "round {round}: b");
        b.push(rng.next());
    }
    // Both at once do not fit: the first asked gets the blocks, the other drafts nothing
    // this step (and takes no blocks from it).
    let out = guesses(&mut d, &[req(1, &a, 24, 3), req(2, &b, 22, 3)]);
    let drafting: Vec<bool> = out.iter().map(|g| !g.is_empty()).collect();
    assert_eq!(drafting.iter().filter(|&&x| x).count(), 1, "{out:?}");
    for (g, t) in out.iter().zip([&a, &b]) {
        if !g.is_empty() {
            assert_eq!(g, &greedy(t, 3));
        }
    }
    // A sequence too long for the pool even with every block not asked for drafts
    // nothing, and evicts no one for nothing.
    let long: Vec<u32> = (0..40).map(|_| rng.next()).collect();
    let before = d.seqs.values().map(|f| f.blocks.len()).sum::<usize>();
    assert_eq!(d.propose(&[req(3, &long, 40, 3)]).expect("long")[0], None);
    assert_eq!(
        d.seqs.values().map(|f| f.blocks.len()).sum::<usize>(),
        before
    );
    // A sequence dropped and asked again before any pass: its row is emptied, not made
    // and dropped in one diff.
    d.retain(|s| s != 1);
    let out = guesses(&mut d, &[req(1, &a, 24, 3)]);
    assert_eq!(out[0], greedy(&a, 3));
    // A sequence gone frees its blocks: the other fits again.
    d.retain(|s| s == 2);
    let out = guesses(&mut d, &[req(2, &b, 22, 3)]);
    assert_eq!(out[0], greedy(&b, 3));
}

#[test]
fn an_unsure_guess_ends_the_draft() {
    let mut rng = Lcg(3);
    let t: Vec<u32> = (0..12).map(|_| rng.next()).collect();
    // The fixture's random weights are never 99% sure of a token.
    let out = draft_sure(16, 64, 0.99)
        .propose(&[req(1, &t, 12, 4)])
        .unwrap();
    assert_eq!(out[0], Some(Vec::new()), "drafted, and sure of nothing");
    // A bar every guess clears: the whole greedy draft.
    let out = draft_sure(16, 64, 1e-9)
        .propose(&[req(1, &t, 12, 4)])
        .unwrap();
    assert_eq!(out[0], Some(greedy(&t, 4)));
}

#[test]
fn sequences_on_one_brief_share_its_blocks_and_draft_as_alone() {
    // A brief of 18 tokens: four full blocks of 4, and two tokens over.
    let mut d = draft(64, 64);
    let mut rng = Lcg(7);
    let brief: Vec<u32> = (0..18).map(|_| rng.next()).collect();
    let mut with = |n: usize| -> Vec<u32> {
        let tail: Vec<u32> = (0..n).map(|_| rng.next()).collect();
        [brief.clone(), tail].concat()
    };
    let (mut a, mut b, c) = (with(3), with(1), with(5));
    let out = guesses(&mut d, &[req(1, &a, a.len(), 3)]);
    assert_eq!(out[0], greedy(&a, 3));
    // b starts from the brief's four full blocks, which a's catch-up computed; the block
    // holding its own tokens is its own.
    let out = guesses(&mut d, &[req(2, &b, b.len(), 3)]);
    assert_eq!(out[0], greedy(&b, 3));
    let shared = d.seqs[&1].blocks[..4].to_vec();
    assert_eq!(d.seqs[&2].blocks[..4], shared[..]);
    assert_ne!(d.seqs[&2].blocks[4], d.seqs[&1].blocks[4]);
    // Both go on drafting side by side over the shared blocks, guesses kept or not.
    for step in 0..6 {
        let out = guesses(&mut d, &[req(1, &a, 21, 2), req(2, &b, 19, 3)]);
        assert_eq!(out[0], greedy(&a, 2), "step {step}: a");
        assert_eq!(out[1], greedy(&b, 3), "step {step}: b");
        a.extend(out[0][..step % 3].iter().copied().chain([rng.next()]));
        b.push(rng.next());
    }
    // With both gone the brief's blocks stay cached: c takes them.
    d.retain(|_| false);
    let out = guesses(&mut d, &[req(3, &c, c.len(), 3)]);
    assert_eq!(out[0], greedy(&c, 3));
    assert_eq!(d.seqs[&3].blocks[..4], shared[..]);
}

#[test]
fn cached_blocks_give_way_when_their_room_is_wanted() {
    // 8 blocks: a's 26 tokens and 3 guesses take 8 (6 full ones cached); then b (no
    // common tokens) needs them all, so a's cached blocks go: were one still named by a's
    // tokens, a's next draft would read b's KV there.
    let mut d = draft(8, 64);
    let mut rng = Lcg(13);
    let a: Vec<u32> = (0..26).map(|_| rng.next()).collect();
    let b: Vec<u32> = (0..26).map(|_| rng.next()).collect();
    assert_eq!(guesses(&mut d, &[req(1, &a, 26, 3)])[0], greedy(&a, 3));
    d.retain(|_| false);
    assert_eq!(guesses(&mut d, &[req(2, &b, 26, 3)])[0], greedy(&b, 3));
    d.retain(|_| false);
    assert_eq!(guesses(&mut d, &[req(1, &a, 26, 3)])[0], greedy(&a, 3));
    // A sequence on b's tokens and more, asked with b, shares b's full blocks but finds
    // no room for its own: it drafts nothing, and b keeps its blocks.
    let b_blocks = {
        d.retain(|_| false);
        assert_eq!(guesses(&mut d, &[req(2, &b, 26, 3)])[0], greedy(&b, 3));
        d.seqs[&2].blocks.clone()
    };
    let b2 = [b.clone(), vec![rng.next(); 8]].concat();
    let out = d.propose(&[req(2, &b, 26, 3), req(4, &b2, 34, 3)]).unwrap();
    assert_eq!(out[0], Some(greedy(&b, 3)));
    assert_eq!(out[1], None, "no room past b's blocks");
    assert_eq!(d.seqs[&2].blocks, b_blocks);
}

#[test]
fn a_warmed_up_draft_model_gives_its_blocks_back_and_drafts_as_before() {
    let mut rng = Lcg(17);
    let t: Vec<u32> = (0..12).map(|_| rng.next()).collect();
    let mut d = draft(16, 64);
    d.warmup().expect("warm-up");
    assert_eq!(d.blocks.available(), 16);
    assert_eq!(guesses(&mut d, &[req(1, &t, 12, 3)])[0], greedy(&t, 3));
    // A pool too small for the warm-up's 17 positions skips it, and keeps its blocks.
    let mut small = draft(4, 64);
    small.warmup().expect("skipped");
    assert_eq!(small.blocks.available(), 4);
}
