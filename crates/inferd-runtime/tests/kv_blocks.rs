//! Block operations of the KV pool (`copy_block`, `export_block`, `import_block`, and
//! batched exports and imports) on every KV dtype of a backend, through `Model`'s wrappers, and the Q8 rows the forward pass stores
//! (K minus the model's K offset). Bodies are generic over `Backend`.

mod common;

use common::*;
use inferd_runtime::{Backend, CpuBackend, ForwardBatch, KvDtype, Model, RuntimeError};

fn tiny<B: Backend>(backend: B) -> Model<B> {
    tiny_named(backend, "llama")
}

fn tiny_named<B: Backend>(backend: B, name: &str) -> Model<B> {
    Model::load(backend, &repo_root().join("fixtures/models").join(name)).unwrap()
}

fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 31 + 7) % vocab) as u32).collect()
}

/// Logits bits of one pass of `ids` at `start` through `table` (all rows).  -> [n][vocab]
fn pass<B: Backend>(
    run: &mut Runner<'_, B>,
    ids: &[u32],
    start: usize,
    table: &[u32],
) -> Vec<Vec<u32>> {
    let mut b = ForwardBatch::default();
    b.push(ids, start, start + ids.len(), table.to_vec(), false);
    b.logits_rows = (0..ids.len()).collect();
    let vocab = run.model.cfg.vocab_size;
    let l = run.model.forward(&mut run.kv, &run.layout, &b).unwrap();
    l.chunks(vocab)
        .map(|r| r.iter().map(|x| x.to_bits()).collect())
        .collect()
}

fn export<B: Backend>(run: &Runner<'_, B>, block: u32) -> Vec<u8> {
    let mut out = vec![0u8; run.layout.block_bytes()];
    run.model.export_block(&run.kv, block, &mut out).unwrap();
    out
}

/// Copy-on-write: a partly filled last block copied to a fresh block, then the next
/// token decoded through the original and through the copy gives the same bits.
fn copy_block_keeps_attention<B: Backend + Clone>(backend: B) {
    // tiny Qwen2 has a K bias, so its Q8 K rows are stored minus a nonzero offset
    for name in ["llama", "qwen2"] {
        let model = tiny_named(backend.clone(), name);
        for &dtype in profile(&model.backend).kv_dtypes {
            let mut run = Runner::with_dtype(&model, 64, dtype);
            let ids = prompt(10, model.cfg.vocab_size); // blocks of 4: the third holds 2 tokens
            let (_, table) = run.new_seq(11);
            pass(&mut run, &ids, 0, &table);
            let (_, spare) = run.new_seq(4);
            model.copy_block(&mut run.kv, table[2], spare[0]).unwrap();
            assert_eq!(
                export(&run, table[2]),
                export(&run, spare[0]),
                "{name} {dtype:?}: copy"
            );
            let next = [3u32];
            let via_original = pass(&mut run, &next, 10, &table);
            let forked = [table[0], table[1], spare[0]];
            let via_copy = pass(&mut run, &next, 10, &forked);
            assert!(
                via_original == via_copy,
                "{name} {dtype:?}: logits through the copy differ"
            );
            // copying a block onto itself is a no-op
            let before = export(&run, table[1]);
            model.copy_block(&mut run.kv, table[1], table[1]).unwrap();
            assert_eq!(export(&run, table[1]), before);
        }
    }
}

/// Export every block of a sequence, import the images into other blocks (same pool)
/// and into a fresh pool: the images read back bit for bit and the next token's logits
/// through the imported blocks are the same bits.
fn export_import_round_trip<B: Backend + Clone>(backend: B) {
    // tiny Qwen2 has a K bias, so its Q8 K rows are stored minus a nonzero offset
    for name in ["llama", "qwen2"] {
        let model = tiny_named(backend.clone(), name);
        for &dtype in profile(&model.backend).kv_dtypes {
            let mut run = Runner::with_dtype(&model, 64, dtype);
            let ids = prompt(14, model.cfg.vocab_size);
            let (_, table) = run.new_seq(15);
            pass(&mut run, &ids, 0, &table);
            let images: Vec<Vec<u8>> = table.iter().map(|&b| export(&run, b)).collect();
            assert!(images.iter().all(|i| i.len() == run.layout.block_bytes()));

            let (_, other) = run.new_seq(15);
            for (&b, img) in other.iter().zip(&images) {
                model.import_block(&mut run.kv, b, img).unwrap();
                assert_eq!(
                    &export(&run, b),
                    img,
                    "{name} {dtype:?}: re-export of block {b}"
                );
            }
            let next = [5u32];
            let want = pass(&mut run, &next, 14, &table);
            let got = pass(&mut run, &next, 14, &other);
            assert!(
                want == got,
                "{name} {dtype:?}: logits through imported blocks differ"
            );

            // into a fresh pool, reversed block ids
            let mut fresh = Runner::with_dtype(&model, 64, dtype);
            let (_, t2) = fresh.new_seq(40);
            let t2: Vec<u32> = t2.into_iter().rev().take(table.len()).collect();
            for (&b, img) in t2.iter().zip(&images) {
                model.import_block(&mut fresh.kv, b, img).unwrap();
            }
            let got = pass(&mut fresh, &next, 14, &t2);
            assert!(
                want == got,
                "{name} {dtype:?}: logits in a fresh pool differ"
            );
        }
    }
}

/// Many blocks in one call (the way sessions are parked and restored): the image of
/// blocks in any order is their single-block images end to end, and importing it into
/// other blocks, in one call, writes each block's own image.
fn batched_export_import_equals_one_at_a_time<B: Backend + Clone>(backend: B) {
    let model = tiny(backend);
    for &dtype in profile(&model.backend).kv_dtypes {
        let mut run = Runner::with_dtype(&model, 64, dtype);
        let ids = prompt(30, model.cfg.vocab_size);
        let (_, table) = run.new_seq(31); // 8 blocks of 4
        pass(&mut run, &ids, 0, &table);
        let order: Vec<u32> = table
            .iter()
            .rev()
            .step_by(2)
            .chain(table.iter().step_by(2))
            .copied()
            .collect();
        let bb = run.layout.block_bytes();
        let mut image = vec![0u8; order.len() * bb];
        model
            .backend
            .export_blocks(&run.kv, &order, &mut image)
            .unwrap();
        for (i, &b) in order.iter().enumerate() {
            assert!(
                image[i * bb..(i + 1) * bb] == export(&run, b)[..],
                "{dtype:?}: piece {i} (block {b}) of a batched export"
            );
        }
        let (_, other) = run.new_seq(order.len() * 4);
        model
            .backend
            .import_blocks(&mut run.kv, &other, &image)
            .unwrap();
        for (i, &b) in other.iter().enumerate() {
            assert!(
                export(&run, b)[..] == image[i * bb..(i + 1) * bb],
                "{dtype:?}: block {b} after a batched import"
            );
        }
    }
}

fn is_kv_error<T: std::fmt::Debug>(r: inferd_runtime::Result<T>) -> bool {
    matches!(r, Err(RuntimeError::Kv(_)))
}

/// Wrong lengths and out-of-range blocks are errors, and a refused import writes nothing.
fn bad_block_calls_error<B: Backend + Clone>(backend: B) {
    let model = tiny(backend);
    for &dtype in profile(&model.backend).kv_dtypes {
        let mut run = Runner::with_dtype(&model, 16, dtype);
        let n = run.layout.block_bytes();
        let blocks = run.layout.num_blocks as u32;
        let (_, table) = run.new_seq(6);
        pass(&mut run, &prompt(6, model.cfg.vocab_size), 0, &table);
        let before = export(&run, table[0]);
        for len in [0, 1, n - 1, n + 1, 2 * n] {
            let data = vec![7u8; len];
            assert!(
                is_kv_error(model.import_block(&mut run.kv, table[0], &data)),
                "{dtype:?} import {len}"
            );
            let mut out = vec![0u8; len];
            assert!(
                is_kv_error(model.export_block(&run.kv, table[0], &mut out)),
                "{dtype:?} export {len}"
            );
        }
        assert_eq!(
            export(&run, table[0]),
            before,
            "{dtype:?}: a refused import wrote"
        );
        let mut out = vec![0u8; n];
        assert!(is_kv_error(model.export_block(&run.kv, blocks, &mut out)));
        assert!(is_kv_error(model.import_block(
            &mut run.kv,
            blocks,
            &before
        )));
        assert!(is_kv_error(model.import_block(
            &mut run.kv,
            u32::MAX,
            &before
        )));
        assert!(is_kv_error(model.copy_block(&mut run.kv, blocks, 0)));
        assert!(is_kv_error(model.copy_block(&mut run.kv, 0, blocks)));
    }
}

/// A K offset of the wrong length or with a non-finite value is refused.
fn bad_k_offset_errors<B: Backend + Clone>(backend: B) {
    let model = tiny(backend);
    for &dtype in profile(&model.backend).kv_dtypes {
        let l = model.kv_layout(4, 4, dtype);
        let n = l.n_layers * l.n_kv_heads * l.head_dim;
        let b = &model.backend;
        assert!(b.alloc_kv(&l, Some(&vec![0.5; n])).is_ok());
        for len in [0, 1, n - 1, n + 1] {
            let r = b.alloc_kv(&l, Some(&vec![0.5; len])).map(|_| ());
            assert!(is_kv_error(r), "{dtype:?}: offset of {len}");
        }
        let mut c = vec![0.5; n];
        c[n / 2] = f32::NAN;
        assert!(is_kv_error(b.alloc_kv(&l, Some(&c)).map(|_| ())));
    }
}

/// Layer 0's K/V depend only on the tokens, so the f32 and 8-bit pools hold the same rows
/// up to quantization: each stored code is exactly the host quantizer's of the f32 row
/// (`crate::kv::q8` / `fp8`: on the GPU, the append kernel and CUDA's e4m3 conversion
/// against the host's own), so each Q8 value is within half a step (its row's scale / 2)
/// of f32 and each Fp8 value within 1/16 of itself, after subtracting the model's K offset
/// from K (tiny Qwen2 has a K bias, so a nonzero offset; tiny Llama none).
fn eight_bit_rows_as_the_host_writes_them<B: Backend + Clone>(backend: B) {
    for dtype in [KvDtype::Q8, KvDtype::Fp8] {
        if !profile(&backend).kv_dtypes.contains(&dtype) {
            eprintln!("note: {} stores no {} KV", backend.name(), dtype.name());
            continue;
        }
        for name in ["llama", "qwen2"] {
            let model = tiny_named(backend.clone(), name);
            let offset = model.k_offset().map(<[f32]>::to_vec);
            assert_eq!(offset.is_some(), name == "qwen2", "{name}: K offset");
            rows_as_the_host_quantizes_them(&model, offset.as_deref(), dtype);
        }
    }
}

fn rows_as_the_host_quantizes_them<B: Backend>(
    model: &Model<B>,
    offset: Option<&[f32]>,
    dtype: KvDtype,
) {
    use inferd_runtime::kv::fp8;
    let fp = dtype == KvDtype::Fp8;
    let ids = prompt(12, model.cfg.vocab_size);
    let mut f = Runner::with_dtype(model, 16, KvDtype::F32);
    let mut q = Runner::with_dtype(model, 16, dtype);
    let (_, tf) = f.new_seq(12);
    let (_, tq) = q.new_seq(12);
    pass(&mut f, &ids, 0, &tf);
    pass(&mut q, &ids, 0, &tq);
    let l = q.layout;
    let (e, r, d) = (l.block_elems(), l.block_rows(), l.head_dim);
    let bs = l.block_size;
    let mut offset_used = false;
    let le_f32 = |b: &[u8]| -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let mut worst = 0f32; // largest |x - x̂| / scale seen
    for (&bf, &bq) in tf.iter().zip(&tq) {
        let (img_f, img_q) = (export(&f, bf), export(&q, bq));
        // layer 0: f32 image K [e] V [e]; Q8 image K [e] i8, K scales [r], V [e] i8, V scales [r]
        for part in 0..2 {
            let mut xs = le_f32(&img_f[part * 4 * e..(part + 1) * 4 * e]); // [n_kv_heads, block_size, d]
            if let (0, Some(c)) = (part, offset) {
                // K rows are stored minus layer 0's offset of their head: c[0][h]
                for (row, x) in xs.chunks_exact_mut(d).enumerate() {
                    let h = row / bs;
                    for (x, c) in x.iter_mut().zip(&c[h * d..(h + 1) * d]) {
                        offset_used |= *c != 0.0;
                        *x -= c;
                    }
                }
            }
            let base = part * (e + 4 * r);
            let qs = &img_q[base..base + e]; // [n_kv_heads, block_size, d] codes
            let scales = le_f32(&img_q[base + e..base + e + 4 * r]); // [n_kv_heads, block_size]
            for (row, &s) in scales.iter().enumerate() {
                let amax = xs[row * d..(row + 1) * d]
                    .iter()
                    .fold(0f32, |m, v| m.max(v.abs()));
                let want_scale = amax / if fp { fp8::MAX } else { 127.0 };
                assert_eq!(s, want_scale, "{}: scale of row {row}", dtype.name());
                for (&x, &qv) in xs[row * d..(row + 1) * d]
                    .iter()
                    .zip(&qs[row * d..(row + 1) * d])
                {
                    let want = if s == 0.0 {
                        0
                    } else if fp {
                        fp8::encode(x / s)
                    } else {
                        (x / s).round().clamp(-127.0, 127.0) as i8 as u8
                    };
                    assert_eq!(qv, want, "{}: {x} / {s}", dtype.name());
                    let back = if fp {
                        fp8::decode(qv) * s
                    } else {
                        qv as i8 as f32 * s
                    };
                    let err = (x - back).abs();
                    let bound = if fp {
                        (x.abs() / 16.0).max(s / 1024.0) * (1.0 + 1e-6)
                    } else {
                        s / 2.0 * (1.0 + 1e-6) + x.abs() * f32::EPSILON
                    };
                    assert!(err <= bound, "{x} vs {qv} × {s}");
                    if s > 0.0 {
                        worst = worst.max(err / s);
                    }
                }
            }
        }
    }
    assert!(worst > 0.0, "nothing was compared");
    assert_eq!(offset_used, offset.is_some());
}

macro_rules! backend_tests {
    ($modname:ident, $backend:expr) => {
        mod $modname {
            use super::*;
            #[test]
            fn copy_block_then_attention_is_identical() {
                copy_block_keeps_attention($backend);
            }
            #[test]
            fn export_import_round_trips_bit_exactly() {
                export_import_round_trip($backend);
            }
            #[test]
            fn batched_export_import_equal_one_block_at_a_time() {
                batched_export_import_equals_one_at_a_time($backend);
            }
            #[test]
            fn import_export_with_bad_length_or_block_error() {
                bad_block_calls_error($backend);
            }
            #[test]
            fn alloc_kv_refuses_a_bad_k_offset() {
                bad_k_offset_errors($backend);
            }
            #[test]
            fn eight_bit_stored_rows_are_the_host_quantizers() {
                eight_bit_rows_as_the_host_writes_them($backend);
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
