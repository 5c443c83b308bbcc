//! Reading chat templates from an HF `tokenizer_config.json` (and a sibling `chat_template.jinja`).

use std::path::Path;

use serde_json::Value;

use crate::special::token_name;
use crate::tokenizer::read_json;
use crate::TextError;

/// Templates (by name) and special token names found in a tokenizer_config.json.
#[derive(Debug, Default)]
pub struct TemplateConfig {
    /// `(name, source)`; a single unnamed template is called "default".
    pub templates: Vec<(String, String)>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

impl TemplateConfig {
    /// Reads `path` (a tokenizer_config.json). When it has no `chat_template`, a
    /// `chat_template.jinja` next to it is used (the newer HF layout).
    pub fn read(path: &Path) -> Result<Self, TextError> {
        let cfg = read_json(path)?;
        let mut templates = parse_templates(cfg.get("chat_template"))?;
        if templates.is_empty() {
            if let Some(jinja) = path.parent().map(|d| d.join("chat_template.jinja")) {
                if jinja.is_file() {
                    let source =
                        std::fs::read_to_string(&jinja).map_err(|cause| TextError::Io {
                            path: jinja.clone(),
                            cause,
                        })?;
                    templates.push(("default".to_string(), source));
                }
            }
        }
        Ok(TemplateConfig {
            templates,
            bos_token: token_name(cfg.get("bos_token")),
            eos_token: token_name(cfg.get("eos_token")),
        })
    }
}

/// `chat_template`: a string, or a list of `{"name": .., "template": ..}`.
fn parse_templates(v: Option<&Value>) -> Result<Vec<(String, String)>, TextError> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![("default".to_string(), s.clone())]),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let name = item.get("name").and_then(Value::as_str);
                let source = item.get("template").and_then(Value::as_str);
                match (name, source) {
                    (Some(n), Some(s)) => Ok((n.to_string(), s.to_string())),
                    _ => Err(TextError::TemplateConfig(format!(
                        "chat_template entry {i} needs string fields `name` and `template`"
                    ))),
                }
            })
            .collect(),
        Some(_) => Err(TextError::TemplateConfig(
            "chat_template must be a string or a list of {name, template}".into(),
        )),
    }
}
