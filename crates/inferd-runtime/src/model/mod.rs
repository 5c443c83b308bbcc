//! Models: configuration, weight loading and the decoder architectures.

mod config;
mod decoder;
mod delta_net;
mod gguf_qwen35;
mod gguf_qwen35_tensors;
mod identity;
mod kv_offset;
pub mod names;
mod shard;
mod weights;
mod workspace;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use inferd_formats::{GgufFile, HfConfig, SafetensorsModel};

pub use config::{Arch, LayerKind, LinearAttnConfig, ModelConfig};
pub use decoder::Decoder;
pub use shard::{Shard, ShardSource};
pub use weights::Weights;
pub use workspace::Workspace;

use inferd_core::sampling::Sampled;

use crate::backend::{Backend, DeviceTensor, SampleRow, SharedSource};
use crate::batch::ForwardBatch;
use crate::kv::{KvDtype, KvLayout, StateLayout};
use crate::{Result, RuntimeError};
use identity::WeightsFile;
use names::{Global, Naming};

/// A loaded model on one backend.
pub struct Model<B: Backend> {
    pub cfg: ModelConfig,
    pub backend: B,
    pub weights: Weights<B::Weight>,
    /// The GGUF file, when the model came from one (tokenizer and template live in its metadata).
    pub gguf: Option<Arc<GgufFile>>,
    /// The model file (GGUF) or directory (safetensors + config.json).
    pub path: PathBuf,
    /// See [`Model::identity`]; computed at load.
    identity: String,
    /// See [`Model::k_offset`]; computed at load.  // [kv_layers, n_kv_heads, head_dim]
    k_offset: Option<Vec<f32>>,
}

impl<B: Backend> Model<B> {
    /// Loads a `.gguf` file, or a directory (or a file inside it) with `config.json` and safetensors.
    pub fn load(backend: B, path: &Path) -> Result<Self> {
        let is_gguf =
            path.is_file() && path.extension().is_some_and(|e| e == "gguf") || sniff_gguf(path);
        if is_gguf {
            let g = Arc::new(GgufFile::open(path)?);
            let tied = !g.has(&Naming::Gguf.global(Global::LmHead));
            let whole = ModelConfig::from_gguf(&g, tied)?;
            check_backend(&backend, &whole, path)?;
            // A Qwen3.5 file's DeltaNet tensors are read back into HF layout.
            let (src, naming): (SharedSource, Naming) = if whole.arch == Arch::Qwen35 {
                let t = gguf_qwen35_tensors::Qwen35Tensors::new(g.clone(), &whole)?;
                (Arc::new(t), Naming::GgufQwen35)
            } else {
                (g.clone(), Naming::Gguf)
            };
            let (cfg, src) = shard_of(&backend, &whole, src, naming, path)?;
            let weights = Weights::load(&backend, &src, naming, &cfg)?;
            let k_offset = kv_offset::k_offset(&cfg, &src, naming)?;
            let file = WeightsFile {
                path,
                header_end: Some(g.data_offset() as u64),
            };
            let identity =
                identity::of_shard(identity::fingerprint(&whole, &[file])?, backend.shard());
            return Ok(Model {
                cfg,
                backend,
                weights,
                gguf: Some(g),
                path: path.to_path_buf(),
                identity,
                k_offset,
            });
        }
        let safetensors = path.extension().is_some_and(|e| e == "safetensors");
        let what = "a model is a .gguf file, or a directory (or a .safetensors file in one) \
                    holding config.json and safetensors weights";
        let not_a_model = |path: &Path, reason: &str| RuntimeError::NotAModel {
            path: path.display().to_string(),
            reason: format!("{reason}; {what}"),
        };
        if path.is_file() && !safetensors {
            return Err(not_a_model(path, "not a GGUF file"));
        }
        if !path.is_file() && !path.is_dir() {
            let reason = if path.exists() {
                "neither a regular file nor a directory"
            } else {
                "no such file or directory"
            };
            return Err(not_a_model(path, reason));
        }
        let dir = if path.is_dir() {
            path.to_path_buf()
        } else {
            path.parent().unwrap_or(Path::new(".")).to_path_buf()
        };
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(not_a_model(&dir, "no config.json in it"));
        }
        let hf = HfConfig::from_file(&config_path)?;
        let st = Arc::new(SafetensorsModel::open(&dir)?);
        let mut whole = ModelConfig::from_hf(&hf, &config_path.display().to_string())?;
        check_backend(&backend, &whole, &config_path)?;
        // A multimodal wrapper's checkpoint names its language model's tensors so.
        let naming = if st.has(&Naming::HfLanguageModel.global(Global::Embed)) {
            Naming::HfLanguageModel
        } else {
            Naming::Hf
        };
        whole.tied_embeddings |= !st.has(&naming.global(Global::LmHead));
        let files: Vec<WeightsFile<'_>> = st
            .shard_paths()
            .into_iter()
            .map(|path| WeightsFile {
                path,
                header_end: None,
            })
            .collect();
        let identity = identity::of_shard(identity::fingerprint(&whole, &files)?, backend.shard());
        let (cfg, src) = shard_of(&backend, &whole, st, naming, &config_path)?;
        let weights = Weights::load(&backend, &src, naming, &cfg)?;
        let k_offset = kv_offset::k_offset(&cfg, &src, naming)?;
        Ok(Model {
            cfg,
            backend,
            weights,
            gguf: None,
            path: dir,
            identity,
            k_offset,
        })
    }

    /// A stable fingerprint of the loaded weights (64 hex digits of SHA-256 over the
    /// config, the file sizes and headers, and the first and last MiB of each weights
    /// file): equal for the same files wherever they lie, different for different
    /// models. Keys on-disk KV blocks (which also depend on the KV dtype and block
    /// size, not part of this).
    pub fn identity(&self) -> String {
        self.identity.clone()
    }

    /// A KV layout for this model with `num_blocks` blocks of `block_size` tokens (and no
    /// recurrent-state slots: see [`Model::kv_layout_with_states`] for hybrid models).
    pub fn kv_layout(&self, num_blocks: usize, block_size: usize, dtype: KvDtype) -> KvLayout {
        self.kv_layout_with_states(num_blocks, block_size, dtype, 0)
    }

    /// A KV layout with `state_slots` recurrent-state slots beside the blocks (each
    /// [`StateLayout::slot_bytes`] large; a dense model's state layout is empty whatever
    /// `state_slots` says).
    pub fn kv_layout_with_states(
        &self,
        num_blocks: usize,
        block_size: usize,
        dtype: KvDtype,
        state_slots: usize,
    ) -> KvLayout {
        let state = match &self.cfg.linear {
            Some(la) if self.cfg.state_layer_count() > 0 => {
                StateLayout::new(self.cfg.state_layer_count(), la, state_slots)
            }
            _ => StateLayout::default(),
        };
        KvLayout {
            n_layers: self.cfg.kv_layer_count(),
            n_kv_heads: self.cfg.n_kv_heads,
            head_dim: self.cfg.head_dim,
            block_size,
            num_blocks,
            dtype,
            state,
        }
    }

    /// Copies recurrent-state slots, `(src, dst)` in order ([`Backend::copy_state_slots`]):
    /// a snapshot (running → snapshot slot) or a restore (the reverse).
    pub fn copy_state_slots(&self, kv: &mut B::Kv, copies: &[(u32, u32)]) -> Result<()> {
        self.backend.copy_state_slots(kv, copies)
    }

    /// The images of state `slots` ([`Backend::export_state_slots`]).
    pub fn export_state_slots(&self, kv: &B::Kv, slots: &[u32], out: &mut [u8]) -> Result<()> {
        self.backend.export_state_slots(kv, slots, out)
    }

    /// Overwrites state `slots` from their images ([`Backend::import_state_slots`]).
    pub fn import_state_slots(&self, kv: &mut B::Kv, slots: &[u32], data: &[u8]) -> Result<()> {
        self.backend.import_state_slots(kv, slots, data)
    }

    /// What 8-bit (Q8, Fp8) K rows are stored minus, per (layer, kv head):
    /// `[kv_layers, n_kv_heads, head_dim]` (one per attention layer), `None` = zero. A
    /// pure function of the weights
    /// (see the `kv_offset` module); [`Model::alloc_kv`] hands it to the backend.
    pub fn k_offset(&self) -> Option<&[f32]> {
        self.k_offset.as_deref()
    }

    /// A zeroed KV pool of `layout` with this model's K offset ([`Backend::alloc_kv`]).
    pub fn alloc_kv(&self, layout: &KvLayout) -> Result<B::Kv> {
        self.backend.alloc_kv(layout, self.k_offset())
    }

    /// Copies block `src` over `dst` in every layer ([`Backend::copy_blocks`]).
    pub fn copy_block(&self, kv: &mut B::Kv, src: u32, dst: u32) -> Result<()> {
        self.backend.copy_blocks(kv, &[(src, dst)])
    }

    /// Block copies in order, in one call ([`Backend::copy_blocks`]).
    pub fn copy_blocks(&self, kv: &mut B::Kv, copies: &[(u32, u32)]) -> Result<()> {
        self.backend.copy_blocks(kv, copies)
    }

    /// The image of one block, `layout.block_bytes()` long ([`Backend::export_blocks`]).
    pub fn export_block(&self, kv: &B::Kv, block: u32, out: &mut [u8]) -> Result<()> {
        self.backend.export_blocks(kv, &[block], out)
    }

    /// Overwrites one block from its image ([`Backend::import_blocks`]).
    pub fn import_block(&self, kv: &mut B::Kv, block: u32, data: &[u8]) -> Result<()> {
        self.backend.import_blocks(kv, &[block], data)
    }

    /// A workspace for passes of up to `tokens` tokens and `logit_rows` logits rows.
    pub fn workspace(&self, tokens: usize, logit_rows: usize) -> Result<Workspace<B>> {
        Workspace::new(&self.backend, &self.cfg, tokens, logit_rows)
    }

    /// One forward pass in a throwaway workspace. Returns the logits of
    /// `batch.logits_rows`, row-major.  -> [n_logits, vocab]
    pub fn forward(
        &self,
        kv: &mut B::Kv,
        layout: &KvLayout,
        batch: &ForwardBatch,
    ) -> Result<Vec<f32>> {
        let mut ws = self.workspace(batch.n_tokens(), batch.logits_rows.len())?;
        let mut logits = Vec::new();
        self.forward_into(&mut ws, kv, layout, batch, &mut logits)?;
        Ok(logits)
    }

    /// One forward pass in `ws` (grown first if the pass is larger than it holds); the
    /// logits of `batch.logits_rows` are copied into `logits`.  -> [n_logits, vocab]
    pub fn forward_into(
        &self,
        ws: &mut Workspace<B>,
        kv: &mut B::Kv,
        layout: &KvLayout,
        batch: &ForwardBatch,
        logits: &mut Vec<f32>,
    ) -> Result<()> {
        if let Some(t) = batch
            .tokens
            .iter()
            .find(|&&t| t as usize >= self.cfg.vocab_size)
        {
            return Err(RuntimeError::BadBatch(format!(
                "token id {t} is outside the vocabulary ({})",
                self.cfg.vocab_size
            )));
        }
        logits.clear();
        if !self.forward_in(ws, kv, layout, batch)? {
            return Ok(());
        }
        self.backend.run(|| {
            self.backend.to_host(ws.logits(), logits)?;
            self.backend.synchronize()
        })?;
        Ok(())
    }

    /// One forward pass in `ws` (grown first if the pass is larger than it holds), its
    /// logits left there for [`Model::sample`]; `false` for an empty batch.
    pub fn forward_in(
        &self,
        ws: &mut Workspace<B>,
        kv: &mut B::Kv,
        layout: &KvLayout,
        batch: &ForwardBatch,
    ) -> Result<bool> {
        if batch.tokens.is_empty() {
            return Ok(false);
        }
        let (tokens, logit_rows) = self
            .backend
            .pass_rows(batch, &self.cfg.attn_config(), layout);
        ws.ensure(&self.backend, &self.cfg, tokens, logit_rows)?;
        let b = self.backend.prepare_batch(
            batch,
            &self.cfg.rope,
            &self.cfg.attn_config(),
            layout,
            kv,
        )?;
        let dec = Decoder {
            backend: &self.backend,
            cfg: &self.cfg,
            weights: &self.weights,
        };
        let generation = ws.generation();
        self.backend.run(|| {
            self.backend
                .run_pass(&b, kv, generation, |kv| dec.forward(ws, kv, &b))
        })?;
        // The logits hold the pass's own rows: a replayed graph runs none of the host code
        // that shapes the tensors, so they would keep the shape of the last pass that ran
        // eagerly, and a bucket's padding rows (after the pass's own) are no rows to read
        // or sample from.
        let cols = ws.logits().cols();
        ws.logits_mut().set_shape(batch.logits_rows.len(), cols)?;
        Ok(true)
    }

    /// Each of `rows` draws its next token from its row of the last pass's logits in
    /// `ws`, on the device ([`Backend::sample`]); `out[i]` is `rows[i]`'s. Only ids and
    /// logprobs come back.
    pub fn sample(
        &self,
        ws: &Workspace<B>,
        rows: &mut [SampleRow<'_>],
        out: &mut Vec<Sampled>,
    ) -> Result<()> {
        self.backend.run(|| {
            self.backend.sample(ws.logits(), rows, out)?;
            self.backend.synchronize()
        })
    }

    /// [`Model::sample`]'s first half ([`Backend::sample_start`]): the draws queued; per
    /// row its token where the host has it already.
    pub fn sample_start(
        &self,
        ws: &Workspace<B>,
        rows: &mut [SampleRow<'_>],
    ) -> Result<Vec<Option<u32>>> {
        self.backend
            .run(|| self.backend.sample_start(ws.logits(), rows))
    }

    /// [`Model::sample`]'s second half ([`Backend::sample_finish`]): waits for the draws
    /// queued by `sample_start`, and for nothing queued after them (a next pass);
    /// `out[i]` is row `i`'s.
    pub fn sample_finish(&self, out: &mut Vec<Sampled>) -> Result<()> {
        self.backend.run(|| self.backend.sample_finish(out))
    }
}

/// The config and tensors of the slice of the model `backend` computes
/// ([`Backend::shard`]): the whole model's on a backend alone.
fn shard_of<B: Backend>(
    backend: &B,
    whole: &ModelConfig,
    src: SharedSource,
    naming: Naming,
    path: &Path,
) -> Result<(ModelConfig, SharedSource)> {
    let shard = backend.shard();
    if shard.is_whole() {
        return Ok((whole.clone(), src));
    }
    let cfg = shard.config(whole, path)?;
    let src: SharedSource = Arc::new(ShardSource::new(src, whole, naming, shard)?);
    Ok((cfg, src))
}

/// Refuses a hybrid model on a backend without linear-attention layers.
fn check_backend<B: Backend>(backend: &B, cfg: &ModelConfig, path: &Path) -> Result<()> {
    if cfg.state_layer_count() > 0 && !backend.supports_linear_attention() {
        return Err(RuntimeError::BadConfig {
            path: path.display().to_string(),
            reason: format!(
                "a hybrid model ({} Gated DeltaNet layers): the {} backend does not run \
                 linear-attention layers yet",
                cfg.state_layer_count(),
                backend.name()
            ),
        });
    }
    Ok(())
}

/// True when the file starts with the GGUF magic.
fn sniff_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut m = [0u8; 4];
    path.is_file()
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut m))
            .is_ok()
        && &m == b"GGUF"
}
