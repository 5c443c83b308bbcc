//! The conversation preprocessing transformers' `apply_chat_template` does before rendering:
//! keys whose value is null are dropped, and a message's reasoning (`reasoning_content`,
//! `thinking` or `reasoning`) is made available as both `thinking` and `reasoning_content`.

use serde_json::{Map, Value};

use crate::TextError;

/// Names a message's reasoning may come under; the first is what chat templates read.
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// Normalizes an OpenAI-style message array for a template.
pub fn normalize_messages(messages: &Value) -> Result<Value, TextError> {
    let list = messages.as_array().ok_or_else(|| {
        TextError::TemplateRender("`messages` must be an array of message objects".into())
    })?;
    let mut out = Vec::with_capacity(list.len());
    for (i, msg) in list.iter().enumerate() {
        let obj = msg.as_object().ok_or_else(|| {
            TextError::TemplateRender(format!(
                "message {i} must be an object, found {}",
                kind_name(msg)
            ))
        })?;
        let dropped: Map<String, Value> = obj
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push(Value::Object(alias_reasoning(dropped)));
    }
    Ok(Value::Array(out))
}

/// `{"thinking": r, **message, "reasoning_content": r}` when the message carries reasoning.
fn alias_reasoning(msg: Map<String, Value>) -> Map<String, Value> {
    let Some(reasoning) = REASONING_FIELDS.iter().find_map(|k| msg.get(*k)).cloned() else {
        return msg;
    };
    let mut out = Map::with_capacity(msg.len() + 2);
    out.insert("thinking".into(), reasoning.clone());
    for (k, v) in msg {
        out.insert(k, v);
    }
    out.insert("reasoning_content".into(), reasoning);
    out
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drops_nulls_and_aliases_reasoning_in_python_order() {
        let msgs = json!([
            {"role": "assistant", "content": null, "reasoning": "r1", "tool_calls": [{"id": 1}]},
            {"role": "user", "content": "hi"}
        ]);
        let got = normalize_messages(&msgs).unwrap();
        let keys: Vec<&str> = got[0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // Python: {"thinking": r, **message, "reasoning_content": r} after dropping None values.
        assert_eq!(
            keys,
            [
                "thinking",
                "role",
                "reasoning",
                "tool_calls",
                "reasoning_content"
            ]
        );
        assert_eq!(got[0]["reasoning_content"], "r1");
        assert_eq!(got[0]["thinking"], "r1");
        assert_eq!(got[1], json!({"role": "user", "content": "hi"}));
    }

    #[test]
    fn rejects_non_arrays() {
        assert!(normalize_messages(&json!({"role": "user"})).is_err());
        assert!(normalize_messages(&json!(["text"])).is_err());
    }
}
