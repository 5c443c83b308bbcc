//! `lanes`: a mixed pass's decode rows beside its prompt chunk instead of after it.
//!
//! A mixed pass runs its decode rows' attention (bound by reading their K/V) and its
//! prompt chunk's work (bound by the tensor cores) one after the other on one stream, so
//! each adds to the other. Here the same work runs three ways on one model's shape:
//! - the whole GPU: the decode step alone, the chunk alone, both as one mixed pass;
//! - two backends on complementary shares of the multiprocessors (green contexts,
//!   `CudaConfig::share`): the decode rows on SMS of them (their step a replayed graph),
//!   the chunk on the rest; each alone, then both at once from two threads, the chunk
//!   passes timed and the decode steps done meanwhile counted.
//!
//! Timing only: the pools' K/V are never written by a prompt (what the kernels read does
//! not change how long they take).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use inferd_runtime::{Backend, CudaBackend, CudaConfig, ForwardBatch, KvDtype, Model, SmShare};

use super::common::*;
use super::speed::{median_pass, timed_pass};

/// `rows` decode rows at position `context - 1`, each its own sequence, and/or one chunk of
/// `chunk` tokens ending at `context` (decode rows first, as the scheduler orders them).
struct Work {
    rows: Vec<Vec<u32>>,
    /// The chunk's sequence's block table.
    chunk_table: Vec<u32>,
    context: usize,
    chunk_len: usize,
}

impl Work {
    fn new(pool: &mut Pool<CudaBackend>, rows: usize, context: usize, chunk: usize) -> Work {
        Work {
            rows: (0..rows).map(|_| pool.table(context)).collect(),
            chunk_table: if chunk > 0 {
                pool.table(context)
            } else {
                Vec::new()
            },
            context,
            chunk_len: chunk,
        }
    }

    fn batch(&self, decode: bool, prompt: bool) -> ForwardBatch {
        let mut b = ForwardBatch::default();
        let c = self.context;
        if decode {
            for (i, t) in self.rows.iter().enumerate() {
                b.push(&[(i * 13 + 5) as u32], c - 1, c, t.clone(), true);
            }
        }
        if prompt && self.chunk_len > 0 {
            let n = self.chunk_len;
            let ids: Vec<u32> = (0..n).map(|i| ((i * 7919 + 17) % 30000) as u32).collect();
            b.push(&ids, c - n, c, self.chunk_table.clone(), true);
        }
        b
    }
}

fn load(model_dir: &Path, share: Option<SmShare>) -> Model<CudaBackend> {
    let cfg = CudaConfig {
        share,
        ..CudaConfig::default()
    };
    Model::load(CudaBackend::new(cfg).unwrap(), model_dir).unwrap()
}

pub fn lanes(model_dir: &Path, context: usize, rows: usize, chunk: usize, sms: u32) {
    assert!(
        chunk <= context && rows > 0 && chunk > 0,
        "CHUNK <= CONTEXT, ROWS > 0"
    );
    let reps = 9;
    // The whole GPU: today's passes.
    let (t_dec, t_pre, t_mix) = {
        let model = load(model_dir, None);
        let mut pool = Pool::new(&model, (rows + 1) * context, KvDtype::Bf16, 1);
        let work = Work::new(&mut pool, rows, context, chunk);
        let mut ws = model.workspace(chunk + rows, rows + 1).unwrap();
        let dec = work.batch(true, false);
        let pre = work.batch(false, true);
        let mix = work.batch(true, true);
        for b in [&dec, &dec, &pre, &mix] {
            timed_pass(&model, &mut ws, &mut pool, b); // warm-up; the decode graph captured
        }
        (
            median_pass(&model, &mut ws, &mut pool, &dec, reps),
            median_pass(&model, &mut ws, &mut pool, &pre, reps),
            median_pass(&model, &mut ws, &mut pool, &mix, reps),
        )
    };
    println!(
        "lanes: {rows} decode rows at {context}, a {chunk}-token chunk ending at {context}; whole GPU: \
         decode step {:.2} ms, chunk {:.2} ms, mixed pass {:.2} ms (their sum {:.2})",
        t_dec * 1e3,
        t_pre * 1e3,
        t_mix * 1e3,
        (t_dec + t_pre) * 1e3
    );
    // Two shares, two threads: decode steps on `sms` multiprocessors, the chunk on the rest.
    let start = Barrier::new(2);
    let loaded = Barrier::new(2);
    let done = AtomicBool::new(false);
    let (pre, dec) = std::thread::scope(|s| {
        let prompt = s.spawn(|| {
            let model = load(model_dir, Some(SmShare { sms, rest: true }));
            let sms_rest = model.backend.info().multiprocessors;
            let mut pool = Pool::new(&model, context, KvDtype::Bf16, 1);
            let work = Work::new(&mut pool, 0, context, chunk);
            let mut ws = model.workspace(chunk, 1).unwrap();
            let b = work.batch(false, true);
            timed_pass(&model, &mut ws, &mut pool, &b);
            loaded.wait();
            let alone = median_pass(&model, &mut ws, &mut pool, &b, reps);
            start.wait(); // the decode lane measured alone too
            let t = Instant::now();
            for _ in 0..reps {
                model
                    .forward_in(&mut ws, &mut pool.kv, &pool.layout, &b)
                    .unwrap();
            }
            model.backend.synchronize().unwrap();
            let both = t.elapsed().as_secs_f64() / reps as f64;
            done.store(true, Ordering::Release);
            (sms_rest, alone, both)
        });
        let decode = s.spawn(|| {
            let model = load(model_dir, Some(SmShare { sms, rest: false }));
            let sms_own = model.backend.info().multiprocessors;
            let mut pool = Pool::new(&model, rows * context, KvDtype::Bf16, rows);
            let work = Work::new(&mut pool, rows, context, 0);
            let mut ws = model.workspace(rows, rows).unwrap();
            let b = work.batch(true, false);
            for _ in 0..2 {
                timed_pass(&model, &mut ws, &mut pool, &b);
            }
            loaded.wait();
            start.wait(); // idle while the chunk lane is timed alone

            let mut steps = 0usize;
            let t = Instant::now();
            while !done.load(Ordering::Acquire) {
                model
                    .forward_in(&mut ws, &mut pool.kv, &pool.layout, &b)
                    .unwrap();
                model.backend.synchronize().unwrap();
                steps += 1;
            }
            let during = t.elapsed().as_secs_f64();
            let alone = median_pass(&model, &mut ws, &mut pool, &b, reps);
            (sms_own, alone, steps, during)
        });
        (prompt.join().unwrap(), decode.join().unwrap())
    });
    let (sms_rest, pre_alone, pre_both) = pre;
    let (sms_own, dec_alone, steps, during) = dec;
    let per_chunk = steps as f64 / reps as f64;
    println!(
        "lanes: decode rows on {sms_own} SMs: step alone {:.2} ms; chunk on {sms_rest} SMs: alone {:.2} ms, \
         beside the decode lane {:.2} ms a chunk, {per_chunk:.2} decode steps a chunk ({steps} in {:.1} ms)",
        dec_alone * 1e3,
        pre_alone * 1e3,
        pre_both * 1e3,
        during * 1e3,
    );
    println!(
        "lanes: a chunk and one decode step: mixed pass {:.2} ms, lanes {:.2} ms ({:.3}x){}",
        t_mix * 1e3,
        pre_both * 1e3,
        t_mix / pre_both,
        if per_chunk < 1.0 {
            " -- but fewer than one decode step a chunk"
        } else {
            ""
        }
    );
}
