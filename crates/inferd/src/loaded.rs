//! A model with its tokenizer and chat template, resolved from a name or path.

use std::path::Path;

use anyhow::{Context, Result};
use inferd_runtime::{Backend, CpuBackend, Model};
use inferd_text::{ChatTemplate, Tokenizer};

pub struct Loaded<B: Backend = CpuBackend> {
    pub model: Model<B>,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
}

impl Loaded {
    /// `name_or_path`: a built-in model name (pulled on first use) or a path, on the CPU.
    pub fn open(name_or_path: &str) -> Result<Loaded> {
        Loaded::open_on(CpuBackend::new(), name_or_path)
    }
}

impl<B: Backend> Loaded<B> {
    /// [`Loaded::open`] on `backend`.
    pub fn open_on(backend: B, name_or_path: &str) -> Result<Loaded<B>> {
        let path = crate::pull::resolve(name_or_path)?;
        let model =
            Model::load(backend, &path).with_context(|| format!("loading {}", path.display()))?;
        let (tokenizer, template) = match &model.gguf {
            Some(g) => {
                let tok = Tokenizer::from_gguf(g)?;
                let tpl = ChatTemplate::from_gguf(g, &tok)?;
                (tok, tpl)
            }
            None => {
                let dir: &Path = &model.path;
                let tok = Tokenizer::from_tokenizer_json(&dir.join("tokenizer.json"))
                    .with_context(|| {
                        format!(
                            "{}: a safetensors model needs tokenizer.json",
                            dir.display()
                        )
                    })?;
                let cfg = dir.join("tokenizer_config.json");
                let tpl = if cfg.exists() {
                    Some(ChatTemplate::from_tokenizer_config(&cfg)?)
                } else {
                    None
                };
                (tok, tpl)
            }
        };
        Ok(Loaded {
            model,
            tokenizer,
            template,
        })
    }
}
