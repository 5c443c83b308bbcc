//! Models: configuration, weight loading and the decoder architectures.

mod config;
mod decoder;
pub mod names;
mod weights;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use inferd_formats::{GgufFile, HfConfig, SafetensorsModel};

pub use config::{Arch, ModelConfig};
pub use decoder::Decoder;
pub use weights::Weights;

use crate::backend::{Backend, SharedSource};
use crate::batch::ForwardBatch;
use crate::kv::{KvDtype, KvLayout};
use crate::{Result, RuntimeError};
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
}

impl<B: Backend> Model<B> {
    /// Loads a `.gguf` file, or a directory (or a file inside it) with `config.json` and safetensors.
    pub fn load(backend: B, path: &Path) -> Result<Self> {
        let is_gguf =
            path.is_file() && path.extension().is_some_and(|e| e == "gguf") || sniff_gguf(path);
        if is_gguf {
            let g = Arc::new(GgufFile::open(path)?);
            let tied = !g.has(&Naming::Gguf.global(Global::LmHead));
            let cfg = ModelConfig::from_gguf(&g, tied)?;
            let src: SharedSource = g.clone();
            let weights = Weights::load(&backend, &src, Naming::Gguf, &cfg)?;
            return Ok(Model {
                cfg,
                backend,
                weights,
                gguf: Some(g),
                path: path.to_path_buf(),
            });
        }
        let dir = if path.is_dir() {
            path.to_path_buf()
        } else {
            path.parent().unwrap_or(Path::new(".")).to_path_buf()
        };
        let config_path = dir.join("config.json");
        let hf = HfConfig::from_file(&config_path)?;
        let st = Arc::new(SafetensorsModel::open(&dir)?);
        let mut cfg = ModelConfig::from_hf(&hf, &config_path.display().to_string())?;
        cfg.tied_embeddings |= !st.has(&Naming::Hf.global(Global::LmHead));
        let src: SharedSource = st;
        let weights = Weights::load(&backend, &src, Naming::Hf, &cfg)?;
        Ok(Model {
            cfg,
            backend,
            weights,
            gguf: None,
            path: dir,
        })
    }

    /// A KV layout for this model with `num_blocks` blocks of `block_size` tokens.
    pub fn kv_layout(&self, num_blocks: usize, block_size: usize, dtype: KvDtype) -> KvLayout {
        KvLayout {
            n_layers: self.cfg.n_layers,
            n_kv_heads: self.cfg.n_kv_heads,
            head_dim: self.cfg.head_dim,
            block_size,
            num_blocks,
            dtype,
        }
    }

    pub fn alloc_kv(&self, layout: &KvLayout) -> Result<B::Kv> {
        self.backend.alloc_kv(layout)
    }

    /// One forward pass. Returns the logits of `batch.logits_rows`, row-major.  -> [n_logits, vocab]
    pub fn forward(
        &self,
        kv: &mut B::Kv,
        layout: &KvLayout,
        batch: &ForwardBatch,
    ) -> Result<Vec<f32>> {
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
        if batch.tokens.is_empty() {
            return Ok(Vec::new());
        }
        let b = self.backend.prepare_batch(batch, &self.cfg.rope, layout)?;
        let dec = Decoder {
            backend: &self.backend,
            cfg: &self.cfg,
            weights: &self.weights,
        };
        Ok(self
            .backend
            .run(|| self.backend.into_host(dec.forward(kv, &b))))
    }
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
