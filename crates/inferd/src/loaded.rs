//! A model with its tokenizer and chat template, resolved from a name or path.

use std::path::Path;

use anyhow::{bail, Context, Result};
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
        // Model errors name their file.
        let model = Model::load(backend, &path).with_context(|| {
            if crate::pull::is_builtin(name_or_path) {
                format!(
                    "the model could not be loaded (its cached files may be damaged: \
                     `inferd pull {name_or_path}` checks them and fetches them again)"
                )
            } else {
                "the model could not be loaded".to_string()
            }
        })?;
        let (tokenizer, template) = match &model.gguf {
            Some(g) => {
                let file = || format!("{}: the tokenizer in its metadata", g.path().display());
                let tok = Tokenizer::from_gguf(g).with_context(file)?;
                let tpl = ChatTemplate::from_gguf(g, &tok).with_context(file)?;
                (tok, tpl)
            }
            None => {
                let dir: &Path = &model.path;
                let json = dir.join("tokenizer.json");
                if !json.is_file() {
                    bail!(
                        "{}: a safetensors model needs tokenizer.json",
                        dir.display()
                    );
                }
                let tok = Tokenizer::from_tokenizer_json(&json)?;
                let cfg = dir.join("tokenizer_config.json");
                let tpl = if cfg.exists() {
                    ChatTemplate::from_tokenizer_config(&cfg)?
                } else {
                    None
                };
                (tok, tpl)
            }
        };
        let ids = tokenizer.vocab_size();
        if ids > model.cfg.vocab_size {
            bail!(
                "{}: the tokenizer has {ids} tokens, more than the model's {} embeddings",
                path.display(),
                model.cfg.vocab_size
            );
        }
        Ok(Loaded {
            model,
            tokenizer,
            template,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of the hybrid fixture's safetensors model (256 tokens) in a fresh directory.
    fn fixture_copy(name: &str) -> std::path::PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/qwen35_hybrid");
        let dir = std::env::temp_dir().join(format!("inferd-loaded-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["config.json", "model.safetensors", "tokenizer.json"] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
        dir
    }

    fn open(dir: &Path) -> Result<Loaded> {
        Loaded::open(dir.to_str().unwrap())
    }

    #[test]
    fn a_tokenizer_config_without_a_template_loads_as_no_file_does() {
        let dir = fixture_copy("no-template");
        std::fs::write(dir.join("tokenizer_config.json"), r#"{"eos_token": "a"}"#).unwrap();
        assert!(open(&dir).unwrap().template.is_none());
        // Malformed, it is named as what is wrong (not as a missing tokenizer.json).
        std::fs::write(dir.join("tokenizer_config.json"), "{").unwrap();
        let e = format!("{:#}", open(&dir).err().unwrap());
        assert!(e.contains("tokenizer_config.json is not valid JSON"), "{e}");
        assert!(!e.contains("needs tokenizer.json"), "{e}");
        std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
        let e = format!("{:#}", open(&dir).err().unwrap());
        assert!(e.contains("needs tokenizer.json"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tokenizer_past_the_models_embeddings_is_refused() {
        let dir = fixture_copy("big-tokenizer");
        let path = dir.join("tokenizer.json");
        let mut j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        j["added_tokens"] = serde_json::json!([{"id": 300, "content": "<extra>",
            "single_word": false, "lstrip": false, "rstrip": false, "normalized": false,
            "special": true}]);
        std::fs::write(&path, j.to_string()).unwrap();
        let e = format!("{:#}", open(&dir).err().unwrap());
        assert!(
            e.contains("tokens, more than the model's 256 embeddings"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
