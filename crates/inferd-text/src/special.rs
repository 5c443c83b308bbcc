//! Special-token bookkeeping: end-of-turn tokens and bos/eos names from tokenizer_config.json.

use serde_json::Value;

/// Control tokens that end a turn or a document in common chat models.
pub const END_OF_TURN_TOKENS: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
    "<|END_OF_TURN_TOKEN|>",
    "<|return|>",
];

/// A token name from tokenizer_config.json: a string, or an AddedToken object `{"content": ..}`.
pub(crate) fn token_name(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Stop ids: eos first, then every end-of-turn token the vocabulary has as an added token.
pub(crate) fn stop_ids(eos: Option<u32>, added: &dyn Fn(&str) -> Option<u32>) -> Vec<u32> {
    let mut ids: Vec<u32> = eos.into_iter().collect();
    for name in END_OF_TURN_TOKENS {
        if let Some(id) = added(name) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn token_name_accepts_string_and_object() {
        assert_eq!(token_name(Some(&json!("<s>"))).as_deref(), Some("<s>"));
        assert_eq!(
            token_name(Some(&json!({"content": "</s>", "lstrip": false}))).as_deref(),
            Some("</s>")
        );
        assert_eq!(token_name(Some(&json!(null))), None);
        assert_eq!(token_name(None), None);
    }

    #[test]
    fn stop_ids_put_eos_first_without_duplicates() {
        let lookup = |t: &str| match t {
            "<|im_end|>" => Some(7),
            "<|endoftext|>" => Some(3),
            _ => None,
        };
        assert_eq!(stop_ids(Some(7), &lookup), vec![7, 3]);
        assert_eq!(stop_ids(None, &lookup), vec![7, 3]);
        assert_eq!(stop_ids(Some(1), &|_| None), vec![1]);
    }
}
