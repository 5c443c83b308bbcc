use std::collections::HashMap;

use super::*;
use crate::kv::KvManager;

/// The scheduler with its sequences' records in a plain map, as a caller keeps them
/// (the engine keeps them in its request records).
struct Sched {
    s: Scheduler,
    seqs: HashMap<SeqId, SeqState>,
    cfg: SchedulerConfig,
}

/// Records whose every sequence knows `tokens` (prefix sharing at admission).
struct WithTokens<'a>(&'a mut HashMap<SeqId, SeqState>, &'a [u32]);

impl SeqStore for WithTokens<'_> {
    fn state(&self, id: SeqId) -> Option<&SeqState> {
        self.0.get(&id)
    }

    fn state_mut(&mut self, id: SeqId) -> Option<&mut SeqState> {
        self.0.get_mut(&id)
    }

    fn tokens(&self, _: SeqId) -> &[u32] {
        self.1
    }
}

impl Sched {
    fn new(cfg: SchedulerConfig) -> Self {
        Sched {
            s: Scheduler::new(cfg.clone()),
            seqs: HashMap::new(),
            cfg,
        }
    }

    fn add(&mut self, r: Request) {
        let id = r.id;
        let state = self.s.add(r);
        self.seqs.insert(id, state);
    }

    fn schedule(&mut self, kv: &mut KvManager) -> SchedulerOutput {
        self.s.schedule(&mut self.seqs, kv)
    }

    fn schedule_with(&mut self, kv: &mut KvManager, tokens: &[u32]) -> SchedulerOutput {
        self.s.schedule(&mut WithTokens(&mut self.seqs, tokens), kv)
    }

    fn commit(&mut self, out: &SchedulerOutput) {
        self.s.commit(out, &mut self.seqs);
    }

    fn finish(&mut self, id: SeqId, kv: &mut KvManager) {
        self.s.finish(id, kv);
        self.seqs.remove(&id);
    }

    fn num_running(&self) -> usize {
        self.s.num_running()
    }

    fn num_waiting(&self) -> usize {
        self.s.num_waiting()
    }

    fn preemptions(&self) -> u64 {
        self.s.preemptions()
    }
}

/// Runs the scheduler like an engine would (no model: sampled tokens are just
/// counted) until every request has generated `max_new` tokens. Returns, per
/// sequence, the chunks it was given, and the number of steps.
fn drive(
    sched: &mut Sched,
    kv: &mut KvManager,
    max_new: &HashMap<SeqId, usize>,
) -> (HashMap<SeqId, Vec<ScheduledChunk>>, usize) {
    let mut log: HashMap<SeqId, Vec<ScheduledChunk>> = HashMap::new();
    // Each sequence's table as a runner keeps it: appended with `new_blocks`.
    let mut tables: HashMap<SeqId, Vec<u32>> = HashMap::new();
    let mut generated: HashMap<SeqId, usize> = HashMap::new();
    let mut steps = 0;
    while sched.num_running() + sched.num_waiting() > 0 {
        steps += 1;
        assert!(steps < 10_000, "no progress");
        let out = sched.schedule(kv);
        for p in &out.preempted {
            tables.insert(*p, Vec::new());
            // a preempted sequence restarts from scratch
            log.entry(*p).or_default().push(ScheduledChunk {
                seq: *p,
                start_pos: usize::MAX,
                n_tokens: 0,
                new_blocks: vec![],
                samples: false,
                snapshot: None,
                drafts: 0,
            });
        }
        let total: usize = out.chunks.iter().map(|c| c.n_tokens).sum();
        assert!(total <= sched.cfg.max_batch_tokens);
        sched.commit(&out);
        for c in &out.chunks {
            // The appended table is the KV manager's and covers the chunk (a sequence
            // scheduled before `drive` was handed its earlier blocks then).
            let kv_table = kv.table(c.seq).unwrap_or_default();
            let table = tables
                .entry(c.seq)
                .or_insert_with(|| kv_table[..kv_table.len() - c.new_blocks.len()].to_vec());
            table.extend_from_slice(&c.new_blocks);
            assert_eq!(table.as_slice(), kv_table, "sequence {}", c.seq);
            assert!(table.len() * kv.block_size() >= c.start_pos + c.n_tokens);
            log.entry(c.seq).or_default().push(c.clone());
            if c.samples {
                let g = generated.entry(c.seq).or_default();
                *g += 1;
                if *g == max_new[&c.seq] {
                    sched.finish(c.seq, kv);
                }
            }
        }
    }
    assert_eq!(
        kv.pool().num_free(),
        kv.pool().num_blocks(),
        "every block returned"
    );
    assert_eq!(
        kv.state_pool().num_free(),
        kv.state_pool().num_slots(),
        "every state slot returned"
    );
    for (id, n) in max_new {
        assert_eq!(generated.get(id), Some(n), "sequence {id} completed");
    }
    (log, steps)
}

/// Chunks of one sequence since its last preemption tile 0..end contiguously.
fn assert_contiguous(chunks: &[ScheduledChunk]) {
    let start = chunks
        .iter()
        .rposition(|c| c.start_pos == usize::MAX)
        .map_or(0, |i| i + 1);
    let mut pos = 0;
    for c in &chunks[start..] {
        assert_eq!(c.start_pos, pos, "{chunks:?}");
        pos += c.n_tokens;
    }
}

#[test]
fn long_prompt_is_chunked_and_decodes_keep_going() {
    let cfg = SchedulerConfig {
        max_batch_tokens: 32,
        max_prefill_tokens: 16,
        ..Default::default()
    };
    let mut s = Sched::new(cfg);
    let mut kv = KvManager::new(64, 16);
    s.add(Request {
        id: 1,
        prompt_len: 4,
        priority: 0,
        ..Default::default()
    });
    let first = s.schedule(&mut kv);
    s.commit(&first);
    s.add(Request {
        id: 2,
        prompt_len: 100,
        priority: 0,
        ..Default::default()
    });
    let max_new = HashMap::from([(1, 20), (2, 3)]);
    let (log, _) = drive(&mut s, &mut kv, &max_new);
    let long = &log[&2];
    assert_contiguous(long);
    let prefill: Vec<usize> = long
        .iter()
        .take_while(|c| c.n_tokens > 1)
        .map(|c| c.n_tokens)
        .collect();
    assert!(prefill.iter().all(|&n| n <= 16), "{prefill:?}");
    assert_eq!(prefill.iter().sum::<usize>(), 100);
    // while sequence 2 was prefilling, sequence 1 decoded every step
    assert!(log[&1].len() >= prefill.len());
    assert!(log[&1].iter().all(|c| c.n_tokens == 1));
}

#[test]
fn small_request_passes_a_big_one_that_does_not_fit_and_aging_lets_the_big_one_in() {
    let cfg = SchedulerConfig {
        max_batch_tokens: 64,
        max_prefill_tokens: 64,
        aging_per_step: 0.5,
        ..Default::default()
    };
    let mut s = Sched::new(cfg);
    let mut kv = KvManager::new(8, 16); // 128 token slots
    s.add(Request {
        id: 1,
        prompt_len: 60,
        priority: 0,
        ..Default::default()
    });
    let o = s.schedule(&mut kv);
    s.commit(&o);
    s.add(Request {
        id: 2,
        prompt_len: 100,
        priority: 0,
        ..Default::default()
    }); // does not fit next to 1
    s.add(Request {
        id: 3,
        prompt_len: 10,
        priority: 0,
        ..Default::default()
    }); // fits
    let o = s.schedule(&mut kv);
    assert!(
        o.chunks.iter().any(|c| c.seq == 3),
        "small one admitted: {o:?}"
    );
    assert!(!o.chunks.iter().any(|c| c.seq == 2));
    s.commit(&o);
    let (log, _) = drive(&mut s, &mut kv, &HashMap::from([(1, 5), (2, 2), (3, 2)]));
    assert_contiguous(&log[&2]);
}

#[test]
fn higher_priority_is_admitted_first() {
    let cfg = SchedulerConfig {
        max_running: 1,
        ..Default::default()
    };
    let mut s = Sched::new(cfg);
    let mut kv = KvManager::new(64, 16);
    s.add(Request {
        id: 1,
        prompt_len: 8,
        priority: 0,
        ..Default::default()
    });
    s.add(Request {
        id: 2,
        prompt_len: 8,
        priority: 5,
        ..Default::default()
    });
    let o = s.schedule(&mut kv);
    assert_eq!(o.chunks.len(), 1);
    assert_eq!(o.chunks[0].seq, 2);
}

#[test]
fn the_extreme_priorities_order_without_overflow() {
    // Priorities come from clients as any i32; i32::MIN has no negation. The lowest runs
    // first, alone, then the others arrive.
    let cfg = SchedulerConfig {
        max_batch_tokens: 8,
        max_prefill_tokens: 8,
        ..Default::default()
    };
    let mut s = Sched::new(cfg);
    let mut kv = KvManager::new(64, 16);
    let request = |id, priority| Request {
        id,
        prompt_len: 32,
        priority,
        ..Default::default()
    };
    s.add(request(1, i32::MIN));
    let o = s.schedule(&mut kv);
    assert_eq!(o.chunks[0].seq, 1);
    s.commit(&o);
    s.add(request(2, 0));
    s.add(request(3, i32::MAX));
    // The step at which each sequence's prompt is done (its sampling chunk).
    let mut done = HashMap::new();
    let mut last = Vec::new();
    for step in 0..16 {
        let o = s.schedule(&mut kv);
        for c in o.chunks.iter().filter(|c| c.samples) {
            done.entry(c.seq).or_insert(step);
        }
        last = o.chunks.iter().map(|c| c.seq).collect();
        s.commit(&o);
    }
    assert!(done[&3] < done[&2], "{done:?}");
    // Once all three decode, they take the step's budget highest priority first.
    assert_eq!(last, vec![3, 2, 1]);
}

#[test]
fn tiny_kv_budget_preempts_and_still_completes_everything() {
    let cfg = SchedulerConfig {
        max_batch_tokens: 64,
        max_prefill_tokens: 32,
        ..Default::default()
    };
    let mut s = Sched::new(cfg);
    let mut kv = KvManager::new(6, 4); // 24 token slots for 4 sequences of up to 18 tokens
    let mut max_new = HashMap::new();
    for id in 0..4u64 {
        s.add(Request {
            id,
            prompt_len: 6,
            priority: (id % 2) as i32,
            ..Default::default()
        });
        max_new.insert(id, 12);
    }
    let (log, _) = drive(&mut s, &mut kv, &max_new);
    assert!(
        s.preemptions() > 0,
        "the budget was meant to force preemption"
    );
    for chunks in log.values() {
        assert_contiguous(chunks);
    }
}

#[test]
fn prefill_slices_are_smaller_while_others_decode() {
    let cfg = SchedulerConfig {
        max_prefill_tokens: 64,
        max_prefill_tokens_decoding: 16,
        ..Default::default()
    };
    let mut kv = KvManager::new(64, 16);
    let mut s = Sched::new(cfg);
    // Alone, a long prompt gets the full prefill budget.
    s.add(Request {
        id: 1,
        prompt_len: 100,
        priority: 0,
        ..Default::default()
    });
    let out = s.schedule(&mut kv);
    assert_eq!(out.chunks[0].n_tokens, 64);
    s.commit(&out);
    let out = s.schedule(&mut kv);
    assert_eq!(out.chunks[0].n_tokens, 36);
    s.commit(&out);
    // Sequence 1 now decodes: a new long prompt is read in slices of 16 beside it.
    s.add(Request {
        id: 2,
        prompt_len: 100,
        priority: 0,
        ..Default::default()
    });
    let out = s.schedule(&mut kv);
    let sizes: Vec<(u64, usize)> = out.chunks.iter().map(|c| (c.seq, c.n_tokens)).collect();
    assert_eq!(sizes, vec![(1, 1), (2, 16)]);
}

/// A request of a `len`-token prompt, default priority.
fn prompt(id: SeqId, len: usize) -> Request {
    Request {
        id,
        prompt_len: len,
        priority: 0,
        ..Default::default()
    }
}

/// With `decodes_in_prefill_slice` a pass's decode rows and its prompt slice together fill
/// `max_prefill_tokens_decoding` (whole tiles of a GPU's products), never leaving a prompt
/// less than 16 tokens; the next prompt's first tokens fill what the last slice of a
/// prompt leaves.
#[test]
fn decode_rows_share_the_prefill_slice_when_asked() {
    let cfg = SchedulerConfig {
        max_prefill_tokens: 64,
        max_prefill_tokens_decoding: 32,
        decodes_in_prefill_slice: true,
        ..Default::default()
    };
    let mut kv = KvManager::new(256, 16);
    let mut s = Sched::new(cfg.clone());
    (1..=3).for_each(|id| s.add(prompt(id, 4)));
    let out = s.schedule(&mut kv);
    s.commit(&out);
    // Three sequences decode; two long prompts arrive.
    [4, 5].into_iter().for_each(|id| s.add(prompt(id, 40)));
    let mut rows = Vec::new();
    for _ in 0..2 {
        let out = s.schedule(&mut kv);
        s.commit(&out);
        let sizes: Vec<(u64, usize)> = out.chunks.iter().map(|c| (c.seq, c.n_tokens)).collect();
        rows.push(out.chunks.iter().map(|c| c.n_tokens).sum::<usize>());
        assert!(sizes.iter().take(3).all(|&(_, n)| n == 1), "{sizes:?}");
    }
    assert_eq!(rows, vec![32, 32], "decodes and slices fill the pass");

    // Past the slice: 40 decodes leave a prompt its 16 tokens.
    let mut kv = KvManager::new(1024, 16);
    let mut s = Sched::new(cfg);
    (1..=40).for_each(|id| s.add(prompt(id, 2)));
    for _ in 0..8 {
        let out = s.schedule(&mut kv);
        s.commit(&out);
    }
    s.add(prompt(100, 100));
    let out = s.schedule(&mut kv);
    let slice = out.chunks.iter().find(|c| c.seq == 100).map(|c| c.n_tokens);
    assert_eq!(out.chunks.iter().filter(|c| c.n_tokens == 1).count(), 40);
    assert_eq!(slice, Some(16));
}

#[test]
fn late_slices_of_a_long_prompt_are_shorter_while_others_decode() {
    assert_eq!(area_capped(128, 0, 128 * 1024), 128);
    assert_eq!(area_capped(128, 896, 128 * 1024), 128);
    let m = area_capped(128, 2000, 128 * 1024);
    assert!(
        m * (2000 + m) <= 128 * 1024 && (m + 1) * (2001 + m) > 128 * 1024,
        "{m}"
    );
    assert_eq!(
        area_capped(128, 100_000, 128 * 1024),
        16,
        "never below 16 tokens"
    );
    assert_eq!(area_capped(5, 100_000, 1), 5);

    let cfg = SchedulerConfig {
        max_prefill_tokens: 2048,
        max_prefill_tokens_decoding: 128,
        max_prefill_area_decoding: 128 * 1024,
        ..Default::default()
    };
    let mut kv = KvManager::new(512, 16);
    let mut s = Sched::new(cfg);
    s.add(Request {
        id: 1,
        prompt_len: 8,
        priority: 0,
        ..Default::default()
    });
    let out = s.schedule(&mut kv);
    s.commit(&out);
    s.add(Request {
        id: 2,
        prompt_len: 3000,
        priority: 0,
        ..Default::default()
    });
    let mut sizes = Vec::new();
    for _ in 0..40 {
        let out = s.schedule(&mut kv);
        s.commit(&out);
        if let Some(c) = out.chunks.iter().find(|c| c.seq == 2) {
            sizes.push((c.start_pos, c.n_tokens));
        }
    }
    assert_eq!(sizes[0], (0, 128));
    let late = sizes.iter().find(|(p, _)| *p > 2000).unwrap();
    assert!(late.1 < 64, "{sizes:?}");
}

#[test]
fn admission_starts_from_the_cached_prefix() {
    let mut s = Sched::new(SchedulerConfig::default());
    let mut kv = KvManager::new(16, 4);
    let prompt: Vec<u32> = (0..10).collect();
    s.add(Request {
        id: 1,
        prompt_len: 10,
        reuse_prefix: true,
        ..Default::default()
    });
    let out = s.schedule_with(&mut kv, &prompt);
    assert_eq!(out.admitted, vec![(1, 0)]);
    s.commit(&out);
    kv.register(1, &prompt);
    s.finish(1, &mut kv);
    // the same prompt again: two full blocks cached, the rest computed
    s.add(Request {
        id: 2,
        prompt_len: 10,
        reuse_prefix: true,
        ..Default::default()
    });
    let out = s.schedule_with(&mut kv, &prompt);
    assert_eq!(out.admitted, vec![(2, 8)]);
    assert_eq!(out.chunks[0].start_pos, 8);
    assert_eq!(out.chunks[0].n_tokens, 2);
    assert!(out.chunks[0].samples);
    s.commit(&out);
    // without reuse_prefix nothing is shared
    s.add(Request {
        id: 3,
        prompt_len: 10,
        ..Default::default()
    });
    let out = s.schedule_with(&mut kv, &prompt);
    assert_eq!(out.admitted, vec![(3, 0)]);
}

#[test]
fn a_short_arrival_is_not_held_behind_a_long_prefill() {
    // Nothing decodes: a 5700-token prompt is being read 256 tokens a step when a
    // 16-token request arrives. It used to wait for the whole prompt (55 s on 2 cores).
    let mut kv = KvManager::new(1024, 16);
    let mut s = Sched::new(SchedulerConfig::default());
    s.add(Request {
        id: 1,
        prompt_len: 5700,
        ..Default::default()
    });
    for _ in 0..2 {
        let out = s.schedule(&mut kv);
        assert_eq!(
            out.chunks[0].n_tokens, 256,
            "alone, the long prompt gets it all"
        );
        s.commit(&out);
    }
    s.add(Request {
        id: 2,
        prompt_len: 16,
        ..Default::default()
    });
    let out = s.schedule(&mut kv);
    let sizes: Vec<(u64, usize, bool)> = out
        .chunks
        .iter()
        .map(|c| (c.seq, c.n_tokens, c.samples))
        .collect();
    // Half the budget for the long prompt, the short one admitted whole: its first
    // token comes from this very step.
    assert_eq!(sizes, vec![(1, 128, false), (2, 16, true)]);
    s.commit(&out);
    // Next step it decodes beside the long prompt's slice.
    let out = s.schedule(&mut kv);
    assert!(out.chunks.iter().any(|c| c.seq == 2 && c.n_tokens == 1));
    assert!(out.chunks.iter().any(|c| c.seq == 1 && c.n_tokens > 0));
}

#[test]
fn shorter_running_prefills_go_first() {
    let mut kv = KvManager::new(1024, 16);
    let cfg = SchedulerConfig {
        max_prefill_tokens: 100,
        ..Default::default()
    };
    let mut s = Sched::new(cfg);
    s.add(Request {
        id: 1,
        prompt_len: 1000,
        ..Default::default()
    });
    s.add(Request {
        id: 2,
        prompt_len: 150,
        ..Default::default()
    });
    // Step 1: the first arrival takes the budget. Step 2: it gets half while the
    // second is admitted with the other half.
    let out = s.schedule(&mut kv);
    assert_eq!(out.chunks.len(), 1);
    s.commit(&out);
    let out = s.schedule(&mut kv);
    let sizes: Vec<(u64, usize)> = out.chunks.iter().map(|c| (c.seq, c.n_tokens)).collect();
    assert_eq!(sizes, vec![(1, 50), (2, 50)]);
    s.commit(&out);
    // Step 3: the one with fewer tokens left goes first and finishes its prompt.
    let out = s.schedule(&mut kv);
    assert_eq!((out.chunks[0].seq, out.chunks[0].n_tokens), (2, 100));
    assert!(out.chunks[0].samples);
}

#[test]
fn hybrid_prefill_chunks_end_at_every_snapshot_point_and_decodes_snapshot_tails() {
    let cfg = SchedulerConfig {
        max_batch_tokens: 300,
        max_prefill_tokens: 300,
        snapshot_interval: 256,
        ..Default::default()
    };
    let mut s = Sched::new(cfg);
    let mut kv = KvManager::new(128, 16).with_state_slots(4);
    s.add(Request {
        id: 1,
        prompt_len: 600,
        ..Default::default()
    });
    let (log, _) = drive(&mut s, &mut kv, &HashMap::from([(1, 40)]));
    let chunks = &log[&1];
    assert_contiguous(chunks);
    let snaps: Vec<(usize, SnapshotKind)> = chunks
        .iter()
        .filter_map(|c| c.snapshot.map(|k| (c.start_pos + c.n_tokens, k)))
        .collect();
    use SnapshotKind::*;
    assert_eq!(
        snaps,
        vec![
            (256, Keep),
            (512, Keep),
            (592, Keep),
            (608, Tail),
            (624, Tail)
        ]
    );
    // prompt chunks that end at no point end on a multiple of 64
    for c in chunks
        .iter()
        .filter(|c| c.n_tokens > 1 && c.snapshot.is_none())
    {
        let end = c.start_pos + c.n_tokens;
        assert!(end % 64 == 0 || end == 600, "{c:?}");
    }
}

#[test]
fn hybrid_admission_counts_state_slots_and_preemption_frees_them() {
    let cfg = SchedulerConfig {
        max_batch_tokens: 64,
        max_prefill_tokens: 64,
        ..Default::default()
    };
    let mut s = Sched::new(cfg);
    // blocks for everyone, slots for two at a time
    let mut kv = KvManager::new(64, 16).with_state_slots(2);
    for id in 1..=4 {
        s.add(Request {
            id,
            prompt_len: 20,
            ..Default::default()
        });
    }
    let o = s.schedule(&mut kv);
    assert_eq!(o.admitted.len(), 2, "two state slots, two running");
    assert!(o.kv_short);
    s.commit(&o);
    let max_new = HashMap::from([(1, 5), (2, 5), (3, 5), (4, 5)]);
    drive(&mut s, &mut kv, &max_new);
    // a shortage of blocks preempts: the victim's slot comes back too
    let mut s = Sched::new(SchedulerConfig {
        max_batch_tokens: 64,
        max_prefill_tokens: 64,
        ..Default::default()
    });
    let mut kv = KvManager::new(4, 16).with_state_slots(3);
    for id in 1..=2 {
        s.add(Request {
            id,
            prompt_len: 17,
            ..Default::default()
        });
    }
    let (_, _) = drive(&mut s, &mut kv, &HashMap::from([(1, 30), (2, 30)]));
    assert!(s.preemptions() > 0);
}

#[test]
fn chunks_hand_out_each_block_once_and_the_whole_table_again_after_preemption() {
    // 4 blocks of 4 tokens: two sequences of 6 tokens fit, then decoding runs short.
    let mut kv = KvManager::new(4, 4);
    let mut s = Sched::new(SchedulerConfig::default());
    for id in [1, 2] {
        s.add(Request {
            id,
            prompt_len: 6,
            ..Default::default()
        });
    }
    let out = s.schedule(&mut kv);
    // Admission hands out the whole table (6 + 1 tokens: 2 blocks each).
    for c in &out.chunks {
        assert_eq!(c.new_blocks, kv.table(c.seq).unwrap());
        assert_eq!(c.new_blocks.len(), 2);
    }
    s.commit(&out);
    // Positions 6 and 7 stay in the second block: nothing new.
    for _ in 0..2 {
        let out = s.schedule(&mut kv);
        assert_eq!(out.chunks.len(), 2);
        assert!(out.chunks.iter().all(|c| c.new_blocks.is_empty()));
        s.commit(&out);
    }
    // Position 8 needs a third block each: the pool has 4, so the newest (2) is
    // preempted, and sequence 1 gets exactly its one new block.
    let out = s.schedule(&mut kv);
    assert_eq!(out.preempted, vec![2]);
    let c = out.chunks.iter().find(|c| c.seq == 1).unwrap();
    assert_eq!(c.new_blocks, kv.table(1).unwrap()[2..]);
    s.commit(&out);
    s.finish(1, &mut kv);
    // Re-admitted, sequence 2 gets its whole (new) table again.
    let out = s.schedule(&mut kv);
    assert_eq!(out.admitted, vec![(2, 0)]);
    assert_eq!(out.chunks[0].new_blocks, kv.table(2).unwrap());
}

#[test]
fn a_record_dropped_without_finish_leaves_the_queues_and_frees_its_kv() {
    let mut kv = KvManager::new(8, 4);
    let mut s = Sched::new(SchedulerConfig::default());
    for id in [1, 2] {
        s.add(Request {
            id,
            prompt_len: 5,
            ..Default::default()
        });
    }
    let out = s.schedule(&mut kv);
    s.commit(&out);
    assert_eq!(s.num_running(), 2);
    s.add(Request {
        id: 3,
        prompt_len: 5,
        ..Default::default()
    });
    // The caller forgets 1 (running) and 3 (waiting) without telling the scheduler.
    s.seqs.remove(&1);
    s.seqs.remove(&3);
    let out = s.schedule(&mut kv);
    assert_eq!(
        out.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!((s.num_running(), s.num_waiting()), (1, 0));
    assert!(kv.table(1).is_none());
    assert_eq!(kv.pool().num_free(), 8 - kv.table(2).unwrap().len());
}

/// Records whose sequences propose drafts: `.1` tokens each, or `.2[id]` where given.
struct Drafting<'a>(
    &'a mut HashMap<SeqId, SeqState>,
    usize,
    HashMap<SeqId, usize>,
);

impl SeqStore for Drafting<'_> {
    fn state(&self, id: SeqId) -> Option<&SeqState> {
        self.0.get(&id)
    }

    fn state_mut(&mut self, id: SeqId) -> Option<&mut SeqState> {
        self.0.get_mut(&id)
    }

    fn tokens(&self, _: SeqId) -> &[u32] {
        &[]
    }

    fn draft_len(&self, id: SeqId) -> usize {
        self.2.get(&id).copied().unwrap_or(self.1)
    }
}

impl Sched {
    /// A schedule where every sequence proposes `each` draft tokens, but those in `some`
    /// as many as it says.
    fn schedule_drafts(
        &mut self,
        kv: &mut KvManager,
        each: usize,
        some: &[(SeqId, usize)],
    ) -> SchedulerOutput {
        let some = some.iter().copied().collect();
        self.s
            .schedule(&mut Drafting(&mut self.seqs, each, some), kv)
    }
}

/// Each chunk as (sequence, start, tokens, drafts).
fn shapes(out: &SchedulerOutput) -> Vec<(u64, usize, usize, usize)> {
    out.chunks
        .iter()
        .map(|c| (c.seq, c.start_pos, c.n_tokens, c.drafts))
        .collect()
}

#[test]
fn drafts_ride_with_decodes_within_their_budget_and_never_preempt() {
    let cfg = SchedulerConfig {
        max_batch_tokens: 64,
        max_prefill_tokens: 64,
        draft_budget: 6,
        ..Default::default()
    };
    let mut sched = Sched::new(cfg);
    // 5 blocks of 4 tokens.
    let mut kv = KvManager::new(5, 4);
    for id in 1..=2 {
        sched.add(Request {
            id,
            prompt_len: 4,
            ..Default::default()
        });
    }
    let out = sched.schedule(&mut kv);
    assert_eq!(out.chunks.len(), 2);
    sched.commit(&out);
    // Both decode at position 4, each proposing 4: the first takes 4, the second the
    // budget's last 2.
    let out = sched.schedule_drafts(&mut kv, 4, &[]);
    assert_eq!(shapes(&out), vec![(1, 4, 5, 4), (2, 4, 3, 2)]);
    assert!(out.chunks.iter().all(|c| c.samples));
    sched.s.commit(&out, &mut sched.seqs);
    // Only the decoded token counts until drafts are accepted.
    assert_eq!(sched.seqs[&1].num_computed(), 5);
    assert_eq!(sched.seqs[&1].num_tokens(), 6);
    sched.s.accept_drafts(&mut sched.seqs, 1, 3);
    assert_eq!(sched.seqs[&1].num_computed(), 8);
    assert_eq!(sched.seqs[&1].num_tokens(), 9);
    // Sequence 1 decodes at 8, sequence 2 at 5. The pool's 5 blocks are all taken: 1
    // holds 3 (12 tokens), 2 holds 2 (8 tokens). A draft of 4 would need a block more
    // for each: none is free, so each is cut to what its blocks hold (3 for 1; 2 for 2,
    // which the budget's 3 left would allow), and nobody is preempted for a draft.
    let out = sched.schedule_drafts(&mut kv, 4, &[]);
    assert_eq!(shapes(&out), vec![(1, 8, 4, 3), (2, 5, 3, 2)]);
    assert!(out.preempted.is_empty());
}

#[test]
fn drafts_take_only_what_decodes_prefills_and_blocks_leave_and_go_after_plain_decodes() {
    let cfg = SchedulerConfig {
        max_batch_tokens: 8,
        max_prefill_tokens: 8,
        max_prefill_tokens_decoding: 4,
        draft_budget: 64,
        ..Default::default()
    };
    let mut sched = Sched::new(cfg);
    // 10 blocks of 4 tokens.
    let mut kv = KvManager::new(10, 4);
    for id in 1..=2 {
        sched.add(Request {
            id,
            prompt_len: 4,
            ..Default::default()
        });
    }
    let out = sched.schedule(&mut kv);
    assert_eq!(out.chunks.len(), 2);
    sched.commit(&out);
    // A long prompt arrives; 1 proposes 6 draft tokens, 2 none. The two decodes (2
    // tokens) and the prompt's slice (4 while others decode) leave 2 of the 8 tokens:
    // 1's draft is cut to 2, and it goes after 2's plain decode.
    sched.add(Request {
        id: 3,
        prompt_len: 12,
        ..Default::default()
    });
    let out = sched.schedule_drafts(&mut kv, 0, &[(1, 6)]);
    assert_eq!(shapes(&out), vec![(2, 4, 1, 0), (1, 4, 3, 2), (3, 0, 4, 0)]);
    // Blocks: 1 holds 2 (its draft reaches 7), 2 holds 2, 3 holds 1.
    assert_eq!(kv.pool().num_free(), 5);
    assert!(out.preempted.is_empty());
}

#[test]
fn no_drafts_while_more_sequences_decode_than_the_gate() {
    let cfg = SchedulerConfig {
        draft_budget: 64,
        draft_max_decodes: 2,
        ..Default::default()
    };
    let mut sched = Sched::new(cfg);
    let mut kv = KvManager::new(64, 4);
    for id in 1..=3 {
        sched.add(Request {
            id,
            prompt_len: 4,
            ..Default::default()
        });
    }
    let out = sched.schedule(&mut kv);
    sched.commit(&out);
    // Three decode: over the gate, no drafts.
    let out = sched.schedule_drafts(&mut kv, 3, &[]);
    assert!(out.chunks.iter().all(|c| c.drafts == 0 && c.n_tokens == 1));
    sched.s.commit(&out, &mut sched.seqs);
    // One ends: two decode, each with its draft.
    sched.finish(3, &mut kv);
    let out = sched.schedule_drafts(&mut kv, 3, &[]);
    let drafts: Vec<usize> = out.chunks.iter().map(|c| c.drafts).collect();
    assert_eq!(drafts, vec![3, 3]);
}

/// A sequence whose counted tokens reach its limit (the token in flight is its last) takes
/// no decode row; one without a limit, beside it, keeps decoding.
#[test]
fn a_sequence_at_its_token_limit_takes_no_decode_row() {
    let mut s = Sched::new(SchedulerConfig::default());
    let mut kv = KvManager::new(64, 16);
    s.add(Request {
        id: 1,
        prompt_len: 10,
        token_limit: Some(12),
        ..Default::default()
    });
    s.add(Request {
        id: 2,
        prompt_len: 10,
        ..Default::default()
    });
    let rows = |out: &SchedulerOutput| out.chunks.iter().map(|c| c.seq).collect::<Vec<_>>();
    let prefill = s.schedule(&mut kv);
    assert_eq!(rows(&prefill), [1, 2]);
    s.commit(&prefill); // 11 tokens counted: the 11th in flight
    let first = s.schedule(&mut kv);
    assert_eq!(rows(&first), [1, 2]);
    s.commit(&first); // 12: its last in flight
    let second = s.schedule(&mut kv);
    assert_eq!(rows(&second), [2]);
    s.commit(&second);
    assert_eq!(rows(&s.schedule(&mut kv)), [2]);
}
