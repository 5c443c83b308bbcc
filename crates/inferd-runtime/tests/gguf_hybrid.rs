//! Qwen3.5 hybrids loaded from GGUF: the tiny hybrid fixtures as llama.cpp's own
//! converter writes them (`fixtures/models/qwen35_hybrid*/model.gguf`, made by
//! `scripts/fixtures/make_hybrid_gguf.py` with the converter of llama-cpp-python 0.3.36:
//! arch `qwen35`, norms stored as 1 + w, A_log as -exp(A_log), the conv kernel squeezed,
//! value heads reordered when key heads are fewer), against the same transformers
//! reference as the safetensors (`hybrid_reference.rs`, same tolerance), and against
//! the safetensors load itself: the same config and the same logits.

mod common;

use common::*;
use inferd_runtime::{Backend, CpuBackend, Model};
use serde_json::Value;

const MODELS: [&str; 2] = ["qwen35_hybrid", "qwen35_hybrid_nested"];

fn model_dir(name: &str) -> std::path::PathBuf {
    repo_root().join("fixtures/models").join(name)
}

fn gguf(name: &str) -> std::path::PathBuf {
    model_dir(name).join("model.gguf")
}

fn reference(name: &str) -> Value {
    let p = model_dir(name).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// Every prompt's logits within the backend's tolerance of transformers (top-1 where
/// the reference is no near-tie), and the greedy continuation equal to transformers'.
fn gguf_matches_transformers<B: Backend>(backend: B, name: &str) {
    let tol = profile(&backend).logit_tol;
    let model = Model::load(backend, &gguf(name)).unwrap();
    assert!(model.gguf.is_some(), "{name}: not loaded as GGUF");
    assert!(model.cfg.state_layer_count() > 0 && model.cfg.kv_layer_count() > 0);
    let r = reference(name);
    let mut run = Runner::new(&model, 512);
    for p in r["prompts"].as_array().unwrap() {
        let input = ids(&p["input_ids"]);
        let logits = run.prompt_logits(&input, input.len());
        let want = p["logits"].as_array().unwrap();
        let (margins, top1) = (floats(&p["margin"]), ids(&p["top1"]));
        let mut worst = 0.0f32;
        for (i, (row, w)) in logits.iter().zip(want).enumerate() {
            let d = max_abs_diff(row, &floats(w));
            assert!(
                d <= tol,
                "{name} {}: position {i}: |Δlogit| {d} > {tol}",
                p["name"]
            );
            if margins[i] > 2.0 * tol {
                assert_eq!(argmax(row), top1[i], "{name}: top-1 at position {i}");
            }
            worst = worst.max(d);
        }
        eprintln!(
            "{name} (GGUF) {}: max |Δlogit| {worst:.2e} vs transformers",
            p["name"]
        );
        let got = run.greedy(&input, ids(&p["greedy"]).len());
        assert_greedy_matches(&got, p, tol, name);
    }
}

/// The GGUF and the safetensors of one model: the same config (but for the norms'
/// offset, which the converter folded into the stored weights) and the same logits at
/// every position of the longest prompt, in one pass and in pieces of 37 (across the
/// delta rule's 64-token chunks).
fn gguf_equals_safetensors<B: Backend>(backend: B, other: B, name: &str) {
    let r = reference(name);
    let input = r["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["input_ids"]))
        .max_by_key(Vec::len)
        .unwrap();
    same_model(backend, other, &model_dir(name), &input);
}

/// `dir/model.gguf` and the safetensors in `dir`: the same config (norm offset aside)
/// and the same logits of `input`, in one pass and in pieces of 37.
fn same_model<B: Backend>(backend: B, other: B, dir: &std::path::Path, input: &[u32]) {
    let name = dir.display();
    let a = Model::load(backend, &dir.join("model.gguf")).unwrap();
    let b = Model::load(other, dir).unwrap();
    assert_eq!(a.cfg.norm_offset, 0.0);
    assert_eq!(b.cfg.norm_offset, 1.0);
    let mut cfg = a.cfg.clone();
    cfg.norm_offset = b.cfg.norm_offset;
    assert_eq!(cfg, b.cfg, "{name}: GGUF and safetensors configs differ");
    let (mut ra, mut rb) = (Runner::new(&a, 512), Runner::new(&b, 512));
    // Every weight is the same bits either way except A_log, which comes back as
    // ln(exp(A_log)) (f32 both ways): for these files that is the stored value exactly,
    // so the logits are the same bits.
    for chunk in [input.len(), 37] {
        let (la, lb) = (
            ra.prompt_logits(input, chunk),
            rb.prompt_logits(input, chunk),
        );
        let worst = la
            .iter()
            .zip(&lb)
            .map(|(x, y)| max_abs_diff(x, y))
            .fold(0.0, f32::max);
        assert!(
            la == lb,
            "{name}: chunk {chunk}: GGUF vs safetensors |Δlogit| {worst}"
        );
    }
}

/// `INFERD_HYBRID_GGUF_DIR`: a model folder with safetensors and the `model.gguf`
/// converted from them (`make_hybrid_gguf.py --folder`, e.g. the `--bench` model): the
/// same checks as on the fixtures, on 200 fixed token ids. Skipped (with a note) when
/// unset.
#[test]
fn gguf_equals_safetensors_in_env_dir() {
    let Some(dir) = std::env::var_os("INFERD_HYBRID_GGUF_DIR") else {
        eprintln!("note: INFERD_HYBRID_GGUF_DIR unset, skipping");
        return;
    };
    let input: Vec<u32> = (0..200u32).map(|i| (i * 97 + 13) % 251 + 3).collect();
    same_model(
        CpuBackend::new(),
        CpuBackend::new(),
        std::path::Path::new(&dir),
        &input,
    );
}

/// The converter's `--fuse-qkv` file (the attention layer's Q|gate, K, V in one
/// `attn_qkv`) computes the same logits as the file with them apart.
fn fused_qkv_equals_separate<B: Backend>(backend: B, other: B) {
    let name = MODELS[0];
    let fused = model_dir(name).join("model-fused-qkv.gguf");
    let g = inferd_formats::GgufFile::open(&fused).unwrap();
    assert!(g.has("blk.3.attn_qkv.weight") && !g.has("blk.3.attn_q.weight"));
    let a = Model::load(backend, &fused).unwrap();
    let b = Model::load(other, &gguf(name)).unwrap();
    assert_eq!(a.cfg, b.cfg);
    let r = reference(name);
    let input = ids(&r["prompts"][2]["input_ids"]);
    let (la, lb) = (
        Runner::new(&a, 512).prompt_logits(&input, input.len()),
        Runner::new(&b, 512).prompt_logits(&input, input.len()),
    );
    assert!(la == lb, "{name}: fused Q|K|V differs from separate");
}

/// A backend without the DeltaNet ops refuses the GGUF as it refuses the safetensors.
fn refused_without_linear_attention<B: Backend>(backend: B) {
    let e = Model::load(backend, &gguf(MODELS[0]))
        .err()
        .expect("a hybrid GGUF loads on a backend without linear attention")
        .to_string();
    assert!(e.contains("does not run linear-attention layers"), "{e}");
}

macro_rules! backend_tests {
    ($modname:ident, $backend:expr) => {
        mod $modname {
            use super::*;
            #[test]
            fn hybrid_gguf_matches_transformers() {
                let b = $backend;
                if !b.supports_linear_attention() {
                    return refused_without_linear_attention(b);
                }
                gguf_matches_transformers(b, MODELS[0]);
            }
            #[test]
            fn nested_hybrid_gguf_matches_transformers() {
                let b = $backend;
                if !b.supports_linear_attention() {
                    return refused_without_linear_attention(b);
                }
                gguf_matches_transformers(b, MODELS[1]);
            }
            #[test]
            fn hybrid_gguf_equals_safetensors() {
                let b = $backend;
                if !b.supports_linear_attention() {
                    return refused_without_linear_attention(b);
                }
                gguf_equals_safetensors(b, $backend, MODELS[0]);
                gguf_equals_safetensors($backend, $backend, MODELS[1]);
            }
            #[test]
            fn hybrid_gguf_with_fused_qkv() {
                let b = $backend;
                if !b.supports_linear_attention() {
                    return refused_without_linear_attention(b);
                }
                fused_qkv_equals_separate(b, $backend);
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

/// The converted files' metadata, read as a ModelConfig: what the converter wrote for
/// each fixture's HF config.
#[test]
fn gguf_metadata_gives_the_hybrid_config() {
    use inferd_runtime::{LayerKind::*, LinearAttnConfig};
    let g = inferd_formats::GgufFile::open(gguf(MODELS[0])).unwrap();
    assert_eq!(g.meta_str("general.architecture").unwrap(), "qwen35");
    let m = Model::load(CpuBackend::new(), &gguf(MODELS[0])).unwrap();
    let c = &m.cfg;
    assert_eq!(
        c.layer_kinds,
        [
            LinearAttention,
            LinearAttention,
            LinearAttention,
            FullAttention
        ]
    );
    assert_eq!(
        c.linear,
        Some(LinearAttnConfig {
            n_k_heads: 2,
            n_v_heads: 4,
            k_head_dim: 16,
            v_head_dim: 16,
            conv_kernel: 4
        })
    );
    assert_eq!(
        (c.head_dim, c.rope.rotary_dim, c.n_heads, c.n_kv_heads),
        (16, 4, 4, 2)
    );
    assert!(c.attn_output_gate && c.qk_norm && c.tied_embeddings && !c.qkv_bias && !c.o_bias);
    let m = Model::load(CpuBackend::new(), &gguf(MODELS[1])).unwrap();
    let c = &m.cfg;
    assert_eq!(
        c.layer_kinds,
        [
            FullAttention,
            LinearAttention,
            LinearAttention,
            FullAttention,
            LinearAttention
        ]
    );
    let la = c.linear.unwrap();
    assert_eq!(
        (
            la.n_k_heads,
            la.n_v_heads,
            la.k_head_dim,
            la.v_head_dim,
            la.conv_kernel
        ),
        (3, 3, 8, 12, 3)
    );
    assert_eq!((c.head_dim, c.rope.rotary_dim, c.rope.theta), (32, 16, 1e6));
    assert!(!c.tied_embeddings);
}

/// The converted files' vocabulary (`tokenizer.ggml.*`, pre-tokenizer `qwen35`) builds a
/// tokenizer (what `inferd serve` takes from a GGUF) that encodes text as the fixtures'
/// tokenizer.json does and covers the model's vocabulary.
#[test]
fn gguf_tokenizer_matches_tokenizer_json() {
    let text = "Gated DeltaNet, x\u{301} ünïcödé — 12345\n\tend";
    for name in MODELS {
        let m = Model::load(CpuBackend::new(), &gguf(name)).unwrap();
        let g = m.gguf.as_ref().unwrap();
        // llama.cpp refuses a gpt2 vocabulary without the merges key: it is there, empty.
        let merges = g.meta("tokenizer.ggml.merges").and_then(|v| v.as_array());
        assert_eq!(
            merges.map(<[_]>::len),
            Some(0),
            "{name}: tokenizer.ggml.merges"
        );
        let from_gguf = inferd_text::Tokenizer::from_gguf(g).unwrap();
        let from_json =
            inferd_text::Tokenizer::from_tokenizer_json(&model_dir(name).join("tokenizer.json"))
                .unwrap();
        assert_eq!(from_gguf.vocab_size(), m.cfg.vocab_size, "{name}");
        let ids = from_gguf.encode(text, false).unwrap();
        assert_eq!(ids, from_json.encode(text, false).unwrap(), "{name}");
        assert_eq!(ids.len(), text.len(), "{name}: one token per byte");
    }
}

/// A copy of fixture `name`'s GGUF in the temp dir with metadata `set` (a `None` value
/// drops the key) and tensors `replace`d (name, shape, f32 values), under `tag`.
fn edited(
    name: &str,
    tag: &str,
    set: &[(&str, Option<inferd_formats::MetaValue>)],
    replace: &[(&str, Vec<usize>, Vec<f32>)],
) -> std::path::PathBuf {
    let g = inferd_formats::GgufFile::open(gguf(name)).unwrap();
    let mut w = inferd_formats::GgufWriter::new();
    for (k, v) in g.metadata() {
        if !set.iter().any(|(s, _)| s == k) {
            w.add_meta(k.clone(), v.clone());
        }
    }
    for (k, v) in set {
        if let Some(v) = v {
            w.add_meta(*k, v.clone());
        }
    }
    for t in g.tensor_infos() {
        match replace.iter().find(|(n, ..)| *n == t.name) {
            Some((_, shape, vals)) => w.add_f32_tensor(t.name.clone(), shape, vals),
            None => w.add_tensor(
                t.name.clone(),
                t.dtype,
                &t.shape,
                g.tensor(&t.name).unwrap().data,
            ),
        }
        .unwrap();
    }
    let path = std::env::temp_dir().join(format!(
        "inferd-gguf-hybrid-{tag}-{}.gguf",
        std::process::id()
    ));
    w.write_to_file(&path).unwrap();
    path
}

fn load_err(path: &std::path::Path) -> String {
    let e = Model::load(CpuBackend::new(), path)
        .err()
        .expect("loads")
        .to_string();
    std::fs::remove_file(path).ok();
    e
}

/// Without `attention.recurrent_layers` the layer kinds come from
/// `full_attention_interval` (llama.cpp's fallback): the same model here.
#[test]
fn layer_kinds_fall_back_to_the_interval() {
    use inferd_formats::MetaValue;
    let p = edited(
        MODELS[0],
        "interval",
        &[("qwen35.attention.recurrent_layers", None)],
        &[],
    );
    let a = Model::load(CpuBackend::new(), &p).unwrap();
    let b = Model::load(CpuBackend::new(), &gguf(MODELS[0])).unwrap();
    assert_eq!(a.cfg, b.cfg);
    std::fs::remove_file(&p).ok();
    let p = edited(
        MODELS[0],
        "interval2",
        &[
            ("qwen35.attention.recurrent_layers", None),
            ("qwen35.full_attention_interval", Some(MetaValue::U32(2))),
        ],
        &[],
    );
    // Layers 1 and 3 full: layer 1 holds a DeltaNet's attn_qkv, which is no fused
    // Q|gate, K, V of the attention's shape.
    let e = load_err(&p);
    assert!(
        e.contains("blk.1.attn_qkv.weight") && e.contains("expected [192, 64]"),
        "{e}"
    );
}

/// Bad hybrid metadata and tensors are errors naming the key or tensor.
#[test]
fn bad_hybrid_files_are_clear_errors() {
    use inferd_formats::MetaValue;
    let e = load_err(&edited(
        MODELS[0],
        "inner",
        &[("qwen35.ssm.inner_size", Some(MetaValue::U32(66)))],
        &[],
    ));
    assert!(
        e.contains("ssm.inner_size 66 is not a multiple of ssm.time_step_rank 4"),
        "{e}"
    );
    let e = load_err(&edited(
        MODELS[0],
        "recurrent",
        &[(
            "qwen35.attention.recurrent_layers",
            Some(MetaValue::Array(vec![MetaValue::Bool(true); 3])),
        )],
        &[],
    ));
    assert!(e.contains("3 entries for 4 blocks"), "{e}");
    let e = load_err(&edited(
        MODELS[0],
        "nextn",
        &[("qwen35.nextn_predict_layers", Some(MetaValue::U32(4)))],
        &[],
    ));
    assert!(e.contains("4 MTP layers of 4 blocks"), "{e}");
    let e = load_err(&edited(
        MODELS[0],
        "ssm_a",
        &[],
        &[("blk.1.ssm_a", vec![4], vec![-0.5, 0.25, -1.0, -0.1])],
    ));
    assert!(
        e.contains("blk.1.ssm_a") && e.contains("not -exp(A_log)"),
        "{e}"
    );
    let e = load_err(&edited(
        MODELS[0],
        "conv",
        &[],
        &[("blk.2.ssm_conv1d.weight", vec![128, 3], vec![0.0; 384])],
    ));
    assert!(
        e.contains("blk.2.ssm_conv1d.weight") && e.contains("[128, 3]"),
        "{e}"
    );
    let e = load_err(&edited(
        MODELS[0],
        "beta",
        &[],
        &[("blk.0.ssm_beta.weight", vec![3, 64], vec![0.0; 192])],
    ));
    assert!(e.contains("blk.0.ssm_beta.weight"), "{e}");
}
