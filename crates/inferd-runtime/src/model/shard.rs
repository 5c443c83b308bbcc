//! Tensor parallelism: the slice of a model one rank of a group computes.
//!
//! A decoder layer splits across `world` ranks with two all-reduces and no other traffic:
//!
//! ```text
//! attention   Q, K, V   [heads·d, hidden]   rows split by head       rank r: heads r·H/w ..
//!             O         [hidden, heads·d]   columns split alike      partial sums of x
//!             all-reduce(out)                                        every rank: the whole sum
//! SwiGLU      gate, up  [ffn, hidden]       rows split               rank r: ffn r·F/w ..
//!             down      [hidden, ffn]       columns split alike      partial sums of x
//!             all-reduce(out)
//! ```
//!
//! Everything else (the embedding, the norms, Q/K-norm weights, the LM head) is whole on
//! every rank, so the residual stream, and the logits, are the same on each. A rank's
//! [`ModelConfig`] is the whole one with its heads and feed-forward width divided by
//! `world`: its workspace, KV pool (`n_kv_heads / world` heads a block) and K offset
//! follow from it, and the loader reads the rank's slices through a [`ShardSource`] under
//! the file's own names, checking their shapes against that config as it checks any.
//!
//! Rows move whole, so a row slice is zero-copy in any stored type. A column slice of a
//! quantized matrix takes whole blocks: its width must be a multiple of the type's block
//! length (32, or 256 for K-quants), or the model is refused for that `world`.
//!
//! Not split yet, and refused for `world > 1`: Gated DeltaNet layers and an output
//! projection with a bias (Qwen3.5), and fewer KV heads than ranks (which would need KV
//! heads replicated).

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use inferd_formats::{TensorSource, TensorView};

use super::config::ModelConfig;
use super::names::{Layer, Naming};
use crate::backend::SharedSource;
use crate::{Result, RuntimeError};

/// Rank `rank` of a tensor-parallel group of `world` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shard {
    pub rank: usize,
    pub world: usize,
}

impl Shard {
    /// The whole model on one backend.
    pub const WHOLE: Shard = Shard { rank: 0, world: 1 };

    pub fn new(rank: usize, world: usize) -> Result<Shard> {
        if world == 0 || rank >= world {
            return Err(RuntimeError::Other(format!(
                "tensor-parallel rank {rank} of a group of {world}"
            )));
        }
        Ok(Shard { rank, world })
    }

    pub fn is_whole(self) -> bool {
        self.world == 1
    }

    /// This rank's part of `0..n` split evenly (`n` a multiple of `world`).
    pub fn range(self, n: usize) -> Range<usize> {
        let part = n / self.world;
        self.rank * part..(self.rank + 1) * part
    }

    /// The rank's config: `whole`'s with heads, KV heads and feed-forward width divided by
    /// `world`; an error (naming the model at `path`) for a model this split cannot serve.
    pub fn config(self, whole: &ModelConfig, path: &Path) -> Result<ModelConfig> {
        if self.is_whole() {
            return Ok(whole.clone());
        }
        let refuse = |reason: String| RuntimeError::BadConfig {
            path: path.display().to_string(),
            reason: format!("tensor parallelism over {} ranks: {reason}", self.world),
        };
        if whole.state_layer_count() > 0 {
            return Err(refuse("Gated DeltaNet layers are not split yet".into()));
        }
        if whole.o_bias {
            return Err(refuse(
                "an output projection with a bias is not split yet".into(),
            ));
        }
        for (what, n) in [
            ("attention heads", whole.n_heads),
            ("KV heads", whole.n_kv_heads),
            ("the feed-forward width", whole.ffn_dim),
        ] {
            if !n.is_multiple_of(self.world) {
                return Err(refuse(format!("{what} ({n}) do not divide evenly")));
            }
        }
        Ok(ModelConfig {
            n_heads: whole.n_heads / self.world,
            n_kv_heads: whole.n_kv_heads / self.world,
            ffn_dim: whole.ffn_dim / self.world,
            ..whole.clone()
        })
    }
}

/// How a tensor splits across ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// Along its first dimension (a matrix's output rows, a bias's entries): zero-copy.
    Rows,
    /// Along a matrix's columns (its input): each row's slice, copied once.
    Cols,
}

/// One split tensor: its shape on this rank, and, for a column split, the rank's bytes.
struct Piece {
    split: Split,
    shape: Vec<usize>, // the rank's: [rows / world, cols] or [rows, cols / world]
    copy: OnceLock<Vec<u8>>,
}

/// A model file seen by one rank: the split tensors are the rank's slices (shapes and
/// bytes), every other tensor the file's own (see the module doc).
pub struct ShardSource {
    inner: SharedSource,
    shard: Shard,
    pieces: HashMap<String, Piece>,
}

impl ShardSource {
    /// The rank `shard`'s view of `inner`, a model of config `whole` named by `naming`.
    /// Checks every split tensor divides as it must (errors name the tensor).
    pub fn new(
        inner: SharedSource,
        whole: &ModelConfig,
        naming: Naming,
        shard: Shard,
    ) -> Result<Self> {
        use Layer::*;
        let mut pieces = HashMap::new();
        let parts = [
            (Q, Split::Rows),
            (K, Split::Rows),
            (V, Split::Rows),
            (QBias, Split::Rows),
            (KBias, Split::Rows),
            (VBias, Split::Rows),
            (O, Split::Cols),
            (Gate, Split::Rows),
            (Up, Split::Rows),
            (Down, Split::Cols),
        ];
        for layer in 0..whole.n_layers {
            for (t, split) in parts {
                let name = naming.layer(layer, t);
                if !inner.has(&name) {
                    continue; // biases a model lacks; the loader names what is missing
                }
                let v = inner.tensor(&name)?;
                let shape = split_shape(&v, split, shard.world).map_err(|reason| {
                    RuntimeError::BadConfig {
                        path: inner.path().display().to_string(),
                        reason: format!(
                            "tensor parallelism over {} ranks: '{name}' ({} {:?}) {reason}",
                            shard.world, v.dtype, v.shape
                        ),
                    }
                })?;
                let copy = OnceLock::new();
                pieces.insert(name, Piece { split, shape, copy });
            }
        }
        Ok(ShardSource {
            inner,
            shard,
            pieces,
        })
    }
}

/// The rank's shape of `v` split `split` ways `world`, or why it cannot be.
fn split_shape(
    v: &TensorView<'_>,
    split: Split,
    world: usize,
) -> std::result::Result<Vec<usize>, String> {
    let mut shape = v.shape.to_vec();
    match split {
        Split::Rows => {
            if shape.is_empty() || !shape[0].is_multiple_of(world) {
                return Err("has rows that do not divide evenly".into());
            }
            shape[0] /= world;
        }
        Split::Cols => {
            if shape.len() != 2 || !shape[1].is_multiple_of(world) {
                return Err("has columns that do not divide evenly".into());
            }
            shape[1] /= world;
            if !shape[1].is_multiple_of(v.dtype.block_len()) {
                return Err(format!(
                    "would split its {}-element blocks ({} columns a rank)",
                    v.dtype.block_len(),
                    shape[1]
                ));
            }
        }
    }
    Ok(shape)
}

/// Rank `shard`'s columns of every row of matrix `v`: whole blocks, in row order.
fn column_slice(v: &TensorView<'_>, shard: Shard) -> Vec<u8> {
    let cols = shard.range(v.shape[1]);
    let bytes = |n| v.dtype.bytes_for(n).expect("checked: whole blocks");
    let (from, to) = (bytes(cols.start), bytes(cols.end));
    let row_bytes = v.row_bytes();
    let mut out = Vec::with_capacity(v.shape[0] * (to - from));
    for row in v.data.chunks_exact(row_bytes) {
        out.extend_from_slice(&row[from..to]);
    }
    out
}

impl TensorSource for ShardSource {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn tensor(&self, name: &str) -> inferd_formats::Result<TensorView<'_>> {
        let v = self.inner.tensor(name)?;
        let Some(p) = self.pieces.get(name) else {
            return Ok(v);
        };
        let data: &[u8] = match p.split {
            Split::Rows => {
                let per_row = v.data.len() / v.shape[0];
                let rows = self.shard.range(v.shape[0]);
                &v.data[rows.start * per_row..rows.end * per_row]
            }
            Split::Cols => p.copy.get_or_init(|| column_slice(&v, self.shard)),
        };
        Ok(TensorView {
            name: v.name,
            dtype: v.dtype,
            shape: &p.shape,
            data,
            file: v.file,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.inner.has(name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.inner.tensor_names()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use inferd_formats::DType;

    use super::*;

    /// Named tensors in memory.
    struct Mem {
        path: PathBuf,
        tensors: Vec<(String, DType, Vec<usize>, Vec<u8>)>,
    }

    impl TensorSource for Mem {
        fn path(&self) -> &Path {
            &self.path
        }
        fn tensor(&self, name: &str) -> inferd_formats::Result<TensorView<'_>> {
            let (n, dtype, shape, data) =
                self.tensors.iter().find(|t| t.0 == name).ok_or_else(|| {
                    inferd_formats::FormatError::MissingTensor {
                        path: self.path.clone(),
                        tensor: name.to_string(),
                    }
                })?;
            Ok(TensorView {
                name: n,
                dtype: *dtype,
                shape,
                data,
                file: &self.path,
            })
        }
        fn has(&self, name: &str) -> bool {
            self.tensors.iter().any(|t| t.0 == name)
        }
        fn tensor_names(&self) -> Vec<&str> {
            self.tensors.iter().map(|t| t.0.as_str()).collect()
        }
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Q8_0 rows of `cols` values: per block an f16 scale then 32 i8s (value = scale·q).
    fn q8_0(rows: usize, cols: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for r in 0..rows {
            for b in 0..cols / 32 {
                out.extend(half::f16::from_f32(0.5 + (r * 7 + b) as f32).to_le_bytes());
                out.extend((0..32).map(|i| ((r * 31 + b * 5 + i) % 251) as u8));
            }
        }
        out
    }

    /// A matrix's rows as f32.  -> [rows][cols]
    fn dequant(v: &TensorView<'_>) -> Vec<Vec<f32>> {
        v.data
            .chunks_exact(v.row_bytes())
            .map(|raw| {
                let mut row = vec![0f32; v.shape[1]];
                inferd_quant::dequantize_row(v.dtype, raw, &mut row);
                row
            })
            .collect()
    }

    /// A one-layer model's Q (f32), its bias, O and down (Q8_0) split two ways: each
    /// rank's slices are the whole tensor's rows or columns, values and shapes; tensors
    /// that are not split come through as they are.
    #[test]
    fn slices_are_the_whole_tensors_rows_and_columns() {
        let n = |t| Naming::Hf.layer(0, t);
        let q: Vec<f32> = (0..8 * 6).map(|i| i as f32).collect(); // [8, 6]
        let mem = Mem {
            path: "mem".into(),
            tensors: vec![
                (n(Layer::Q), DType::F32, vec![8, 6], f32_bytes(&q)),
                (
                    n(Layer::QBias),
                    DType::F32,
                    vec![8],
                    f32_bytes(&[1., 2., 3., 4., 5., 6., 7., 8.]),
                ),
                (n(Layer::O), DType::Q8_0, vec![3, 128], q8_0(3, 128)),
                (n(Layer::Down), DType::Q8_0, vec![3, 64], q8_0(3, 64)),
                (
                    n(Layer::AttnNorm),
                    DType::F32,
                    vec![6],
                    f32_bytes(&[1.0; 6]),
                ),
            ],
        };
        let inner: SharedSource = Arc::new(mem);
        let cfg = ModelConfig {
            n_layers: 1,
            ..test_config()
        };
        let whole_o = dequant(&inner.tensor(&n(Layer::O)).unwrap());
        let whole_down = dequant(&inner.tensor(&n(Layer::Down)).unwrap());
        for rank in 0..2 {
            let s = ShardSource::new(
                inner.clone(),
                &cfg,
                Naming::Hf,
                Shard::new(rank, 2).unwrap(),
            )
            .unwrap();
            let qr = s.tensor(&n(Layer::Q)).unwrap();
            assert_eq!(qr.shape, &[4, 6]);
            assert_eq!(qr.to_f32_vec().unwrap(), q[rank * 24..(rank + 1) * 24]);
            let br = s.tensor(&n(Layer::QBias)).unwrap().to_f32_vec().unwrap();
            assert_eq!(br, [[1., 2., 3., 4.], [5., 6., 7., 8.]][rank]);
            for (t, whole, cols) in [(Layer::O, &whole_o, 64), (Layer::Down, &whole_down, 32)] {
                let v = s.tensor(&n(t)).unwrap();
                assert_eq!(v.shape, &[3, cols]);
                for (got, want) in dequant(&v).iter().zip(whole.iter()) {
                    assert_eq!(got[..], want[rank * cols..(rank + 1) * cols], "{t:?}");
                }
            }
            let norm = s.tensor(&n(Layer::AttnNorm)).unwrap();
            assert_eq!(norm.shape, &[6]);
        }
        // Three ranks: O's 128 columns do not divide evenly; four: 32 a rank of Q8_0 do,
        // but down's 64 columns give 16 a rank, half a block.
        let err = |world| {
            ShardSource::new(
                inner.clone(),
                &cfg,
                Naming::Hf,
                Shard::new(0, world).unwrap(),
            )
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
        };
        assert!(err(3).contains("rows that do not divide"), "{}", err(3));
        assert!(err(4).contains("32-element blocks"), "{}", err(4));
    }

    fn test_config() -> ModelConfig {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/qwen3");
        let hf = inferd_formats::HfConfig::from_file(dir.join("config.json")).unwrap();
        ModelConfig::from_hf(&hf, "qwen3").unwrap()
    }

    #[test]
    fn a_ranks_config_divides_heads_and_width() {
        let whole = test_config(); // 4 heads, 2 KV heads, ffn 128
        let c = Shard::new(1, 2)
            .unwrap()
            .config(&whole, Path::new("m"))
            .unwrap();
        assert_eq!((c.n_heads, c.n_kv_heads, c.ffn_dim), (2, 1, 64));
        assert_eq!(
            (c.hidden, c.head_dim, c.vocab_size),
            (whole.hidden, whole.head_dim, whole.vocab_size)
        );
        let e = Shard::new(0, 4)
            .unwrap()
            .config(&whole, Path::new("m"))
            .unwrap_err();
        assert!(e.to_string().contains("KV heads (2) do not divide"), "{e}");
        assert_eq!(Shard::WHOLE.config(&whole, Path::new("m")).unwrap(), whole);
        assert!(Shard::new(2, 2).is_err() && Shard::new(0, 0).is_err());
        assert_eq!(Shard::new(2, 3).unwrap().range(12), 8..12);
    }
}
