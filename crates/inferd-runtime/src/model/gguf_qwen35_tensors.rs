//! A Qwen3.5 GGUF's tensors in the layout the decoder reads from safetensors: the
//! inverse of each transform llama.cpp's converter applies to a Gated DeltaNet layer
//! (`Qwen3NextModel.modify_tensors` and `_LinearAttentionVReorderBase.modify_tensors` in
//! convert_hf_to_gguf.py / conversion/qwen.py), under the file's own tensor names, so
//! errors name what the file holds. Every other tensor is the file's, zero-copy.
//!
//! The converter's transforms, and what this does about each:
//!
//! ```text
//! A_log [n_v]            -> ssm_a = -exp(A_log)          A_log = ln(-ssm_a)
//! conv1d [conv_dim,1,K]  -> ssm_conv1d [conv_dim, K]     shape back to [conv_dim, 1, K]
//! dt_bias                -> ssm_dt.bias                  (renamed only)
//! zero-centred norms w   -> 1 + w (f32)                  kept: ModelConfig::norm_offset 0
//! when n_k < n_v, the value heads from grouped order (value heads of key head g
//! consecutive: h = g * r + v, r = n_v / n_k) to tiled (t = v * n_k + g), in:
//!   attn_qkv rows past 2 * key_dim (V), attn_gate rows (z), ssm_beta / ssm_alpha rows,
//!   ssm_a, ssm_dt.bias, ssm_conv1d rows past 2 * key_dim, ssm_out columns
//!                                                        grouped order restored
//! ```
//!
//! With `--fuse-qkv` the converter also writes a full-attention layer's Q (with its gate),
//! K and V as one `attn_qkv` (rows Q|K|V, biases likewise): split here into the
//! `attn_q` / `attn_k` / `attn_v` the loader reads (and fuses again as it sees fit).
//!
//! Rows move whole, so any stored type keeps its bytes. `ssm_out`'s columns move in runs
//! of `v_head_dim`: whole blocks when the type's block length divides `v_head_dim`
//! (f32/f16/bf16 always, Q8_0 and Q4_0 for heads of 128), else the matrix is dequantized
//! to f32 first (K-quants, whose 256-element blocks hold two tiled heads of 128 that are
//! not neighbours in grouped order).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use inferd_formats::{DType, FormatError, GgufFile, TensorSource, TensorView};

use super::config::{LayerKind, LinearAttnConfig, ModelConfig};
use super::names::{Layer, Naming};
use crate::{Result, RuntimeError};

/// A tensor rewritten at load, row-major like a [`TensorView`].
struct Owned {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// The GGUF file with its DeltaNet tensors put back in HF layout (see the module doc).
pub struct Qwen35Tensors {
    file: Arc<GgufFile>,
    /// Rewritten tensors by the file's names.
    owned: HashMap<String, Owned>,
}

impl Qwen35Tensors {
    pub fn new(file: Arc<GgufFile>, cfg: &ModelConfig) -> Result<Self> {
        let mut owned = HashMap::new();
        for layer in 0..cfg.n_layers {
            match (cfg.layer_kinds[layer], &cfg.linear) {
                (LayerKind::LinearAttention, Some(la)) => {
                    rewrite_layer(&file, layer, cfg.hidden, la, &mut owned)?
                }
                (LayerKind::LinearAttention, None) => {
                    return Err(RuntimeError::Other(format!(
                        "layer {layer}: linear attention without its config"
                    )))
                }
                (LayerKind::FullAttention, _) => split_fused_qkv(&file, layer, cfg, &mut owned)?,
            }
        }
        Ok(Qwen35Tensors { file, owned })
    }
}

impl TensorSource for Qwen35Tensors {
    fn path(&self) -> &Path {
        self.file.path()
    }

    fn tensor(&self, name: &str) -> inferd_formats::Result<TensorView<'_>> {
        match self.owned.get_key_value(name) {
            Some((name, t)) => Ok(TensorView {
                name,
                dtype: t.dtype,
                shape: &t.shape,
                data: &t.data,
                file: self.file.path(),
            }),
            None => self.file.tensor(name),
        }
    }

    fn has(&self, name: &str) -> bool {
        self.owned.contains_key(name) || self.file.has(name)
    }

    /// The file's names, then the split parts of fused Q|K|V tensors.
    fn tensor_names(&self) -> Vec<&str> {
        let mut names = self.file.tensor_names();
        let mut split: Vec<&str> = self
            .owned
            .keys()
            .map(String::as_str)
            .filter(|n| !self.file.has(n))
            .collect();
        split.sort_unstable();
        names.extend(split);
        names
    }
}

/// Grouped value head `h`'s position in the converter's tiled order.
fn tiled(h: usize, la: &LinearAttnConfig) -> usize {
    let r = la.n_v_heads / la.n_k_heads;
    (h % r) * la.n_k_heads + h / r
}

/// The grouped order's source position of each value head (the identity when every key
/// head has one value head: the converter then reorders nothing).  // [n_v_heads]
fn grouped_from_tiled(la: &LinearAttnConfig) -> Vec<usize> {
    (0..la.n_v_heads).map(|h| tiled(h, la)).collect()
}

fn rewrite_layer(
    file: &GgufFile,
    layer: usize,
    hidden: usize,
    la: &LinearAttnConfig,
    owned: &mut HashMap<String, Owned>,
) -> Result<()> {
    let n = |t: Layer| Naming::GgufQwen35.layer(layer, t);
    let perm = grouped_from_tiled(la);
    let reordered = perm.iter().enumerate().any(|(h, &t)| h != t);
    let (qk_rows, vd) = (2 * la.key_dim(), la.v_head_dim);

    // A_log = ln(-ssm_a), heads back in grouped order.  // [n_v_heads]
    let name = n(Layer::LinALog);
    let a = file.tensor(&name)?;
    a.expect_shape(&[la.n_v_heads])?;
    let a = a.to_f32_vec()?;
    if let Some(x) = a.iter().find(|x| x.is_nan() || **x > 0.0) {
        return Err(invalid(file, &name, format!("holds {x}: not -exp(A_log)")));
    }
    let a_log: Vec<f32> = perm.iter().map(|&t| (-a[t]).ln()).collect();
    owned.insert(name, f32_tensor(vec![la.n_v_heads], &a_log));

    // The conv kernel: [conv_dim, K] -> [conv_dim, 1, K], V channels regrouped.
    let name = n(Layer::LinConv);
    let conv = file.tensor(&name)?;
    conv.expect_shape(&[la.conv_dim(), la.conv_kernel])?;
    let data = permute_rows(&conv, qk_rows, vd, &perm);
    owned.insert(
        name,
        Owned {
            dtype: conv.dtype,
            shape: vec![la.conv_dim(), 1, la.conv_kernel],
            data,
        },
    );
    if !reordered {
        return Ok(());
    }

    // Per-head vectors and row blocks of the input projections.
    let dt = n(Layer::LinDtBias);
    let t = file.tensor(&dt)?;
    t.expect_shape(&[la.n_v_heads])?;
    let v = t.to_f32_vec()?;
    let v: Vec<f32> = perm.iter().map(|&t| v[t]).collect();
    owned.insert(dt, f32_tensor(vec![la.n_v_heads], &v));
    for (t, first, head_rows, rows) in [
        (Layer::LinQkv, qk_rows, vd, la.conv_dim()),
        (Layer::LinZ, 0, vd, la.value_dim()),
        (Layer::LinB, 0, 1, la.n_v_heads),
        (Layer::LinA, 0, 1, la.n_v_heads),
    ] {
        let name = n(t);
        let w = file.tensor(&name)?;
        w.expect_shape(&[rows, hidden])?;
        let data = permute_rows(&w, first, head_rows, &perm);
        owned.insert(
            name,
            Owned {
                dtype: w.dtype,
                shape: w.shape.to_vec(),
                data,
            },
        );
    }

    // The output projection's columns: [hidden, value_dim].
    let name = n(Layer::LinOut);
    let w = file.tensor(&name)?;
    w.expect_shape(&[hidden, la.value_dim()])?;
    let t = permute_cols(&w, vd, &perm)?;
    owned.insert(name, t);
    Ok(())
}

/// A full-attention layer's fused `attn_qkv` (weight `[q_proj_dim + 2 kv_dim, hidden]`,
/// bias likewise) split into its Q (with the output gate), K and V parts; nothing when
/// the layer has them apart.
fn split_fused_qkv(
    file: &GgufFile,
    layer: usize,
    cfg: &ModelConfig,
    owned: &mut HashMap<String, Owned>,
) -> Result<()> {
    let n = |t: Layer| Naming::GgufQwen35.layer(layer, t);
    let widths = [cfg.q_proj_dim(), cfg.kv_dim(), cfg.kv_dim()];
    let total: usize = widths.iter().sum();
    let parts = [
        (
            "weight",
            [Layer::Q, Layer::K, Layer::V],
            vec![total, cfg.hidden],
        ),
        (
            "bias",
            [Layer::QBias, Layer::KBias, Layer::VBias],
            vec![total],
        ),
    ];
    for (suffix, names, shape) in parts {
        let name = format!("blk.{layer}.attn_qkv.{suffix}");
        if !file.has(&name) || file.has(&n(names[0])) {
            continue;
        }
        let t = file.tensor(&name)?;
        t.expect_shape(&shape)?;
        // Bytes per output: a weight row, or one element of a bias.
        let rb = match shape.len() {
            1 => t.data.len() / total,
            _ => t.row_bytes(),
        };
        let mut at = 0;
        for (part, rows) in names.into_iter().zip(widths) {
            let mut part_shape = shape.clone();
            part_shape[0] = rows;
            owned.insert(
                n(part),
                Owned {
                    dtype: t.dtype,
                    shape: part_shape,
                    data: t.data[at * rb..(at + rows) * rb].to_vec(),
                },
            );
            at += rows;
        }
    }
    Ok(())
}

/// The rows of `t` with rows `first..` regrouped: grouped head `h` (`head_rows` rows)
/// taken from tiled head `perm[h]`.
fn permute_rows(t: &TensorView<'_>, first: usize, head_rows: usize, perm: &[usize]) -> Vec<u8> {
    let rb = t.row_bytes();
    let mut out = Vec::with_capacity(t.data.len());
    out.extend_from_slice(&t.data[..first * rb]);
    let heads = &t.data[first * rb..];
    for &src in perm {
        let at = src * head_rows * rb;
        out.extend_from_slice(&heads[at..at + head_rows * rb]);
    }
    out
}

/// The columns of matrix `t` regrouped in runs of `head_cols`: grouped head `h` taken
/// from tiled head `perm[h]`; whole blocks when the type's blocks fit in a head, else
/// dequantized to f32.
fn permute_cols(t: &TensorView<'_>, head_cols: usize, perm: &[usize]) -> Result<Owned> {
    let (rows, rb) = (t.n_rows(), t.row_bytes());
    let block = t.dtype.block_len();
    let mut out = Vec::with_capacity(t.data.len());
    if head_cols.is_multiple_of(block) {
        let hb = head_cols / block * t.dtype.block_bytes();
        for row in t.data.chunks_exact(rb).take(rows) {
            for &src in perm {
                out.extend_from_slice(&row[src * hb..(src + 1) * hb]);
            }
        }
        return Ok(Owned {
            dtype: t.dtype,
            shape: t.shape.to_vec(),
            data: out,
        });
    }
    let cols = t.shape[1];
    let mut f = vec![0f32; cols]; // [cols]
    out.reserve(rows * cols * 4);
    for row in t.data.chunks_exact(rb).take(rows) {
        inferd_quant::try_dequantize_row(t.dtype, row, &mut f)
            .map_err(|e| invalid_view(t, format!("dequantizing: {e}")))?;
        for &src in perm {
            for x in &f[src * head_cols..(src + 1) * head_cols] {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
    }
    Ok(Owned {
        dtype: DType::F32,
        shape: t.shape.to_vec(),
        data: out,
    })
}

fn f32_tensor(shape: Vec<usize>, v: &[f32]) -> Owned {
    Owned {
        dtype: DType::F32,
        shape,
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn invalid(file: &GgufFile, tensor: &str, reason: String) -> RuntimeError {
    FormatError::InvalidTensor {
        path: file.path().to_path_buf(),
        tensor: tensor.to_string(),
        reason,
    }
    .into()
}

fn invalid_view(t: &TensorView<'_>, reason: String) -> RuntimeError {
    FormatError::InvalidTensor {
        path: t.file.to_path_buf(),
        tensor: t.name.to_string(),
        reason,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn la(n_k: usize, n_v: usize) -> LinearAttnConfig {
        LinearAttnConfig {
            n_k_heads: n_k,
            n_v_heads: n_v,
            k_head_dim: 2,
            v_head_dim: 2,
            conv_kernel: 4,
        }
    }

    /// The converter's reorder (`_reorder_v_heads`: [n_k, r, d] -> [r, n_k, d]) of heads
    /// labelled by their grouped index, undone.
    #[test]
    fn tiled_order_is_the_converters() {
        let c = la(2, 6); // r = 3
                          // tiled position t = v * n_k + g holds grouped head g * r + v
        let converted: Vec<usize> = (0..6).map(|t| (t % 2) * 3 + t / 2).collect();
        assert_eq!(converted, [0, 3, 1, 4, 2, 5]);
        let back: Vec<usize> = grouped_from_tiled(&c)
            .iter()
            .map(|&t| converted[t])
            .collect();
        assert_eq!(back, [0, 1, 2, 3, 4, 5]);
        assert_eq!(grouped_from_tiled(&la(3, 3)), [0, 1, 2]);
    }

    /// Dequantized rows of a matrix view.  -> [rows][cols]
    fn rows_f32(dtype: DType, data: &[u8], rows: usize, cols: usize) -> Vec<Vec<f32>> {
        data.chunks_exact(data.len() / rows)
            .map(|r| {
                let mut f = vec![0f32; cols];
                inferd_quant::try_dequantize_row(dtype, r, &mut f).unwrap();
                f
            })
            .collect()
    }

    /// `ssm_out`'s columns regrouped in heads: in blocks when a block fits in a head
    /// (Q8_0, heads of 32), through f32 when not (Q4_K's 256-element blocks, heads of
    /// 128); either way the values of the columns regrouped in f32.
    #[test]
    fn output_columns_regroup_in_blocks_or_through_f32() {
        let perm = [0usize, 2, 1, 3]; // n_k = 2, n_v = 4
        for (dtype, head) in [(DType::Q8_0, 32usize), (DType::Q4K, 128), (DType::BF16, 3)] {
            let (rows, cols) = (3usize, 4 * head);
            let vals: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let data: Vec<u8> = vals
                .chunks(cols)
                .flat_map(|r| inferd_quant::quantize_row(dtype, r))
                .collect();
            let shape = [rows, cols];
            let view = TensorView {
                name: "blk.0.ssm_out.weight",
                dtype,
                shape: &shape,
                data: &data,
                file: Path::new("m.gguf"),
            };
            let out = permute_cols(&view, head, &perm).unwrap();
            let want_dtype = if head % dtype.block_len() == 0 {
                dtype
            } else {
                DType::F32
            };
            assert_eq!((out.dtype, out.shape.as_slice()), (want_dtype, &shape[..]));
            let src = rows_f32(dtype, &data, rows, cols);
            let got = rows_f32(out.dtype, &out.data, rows, cols);
            for (s, g) in src.iter().zip(&got) {
                let want: Vec<f32> = perm
                    .iter()
                    .flat_map(|&t| s[t * head..(t + 1) * head].to_vec())
                    .collect();
                assert_eq!(g, &want, "{dtype}");
            }
        }
    }
}
