//! What a reply must look like, and the llguidance grammar that says so.
//!
//! A reply is constrained to an answer (`response_format`), to tool calls (a forced
//! `tool_choice`), or to either (`response_format` with tools the model may call).
//! JSON is written the way models write it: `", "` between items, `": "` after keys,
//! no other whitespace (free whitespace lets a small model pad forever).

use inferd_tools::{Tool, ToolSyntax};
use llguidance::api::TopLevelGrammar;
use serde_json::{json, Map, Value};

use crate::GrammarError;

/// The answer's shape (`response_format`).
#[derive(Clone, Debug, PartialEq)]
pub enum AnswerFormat {
    /// `json_schema`: one JSON value valid against the schema.
    JsonSchema(Value),
    /// `json_object`: any JSON object.
    JsonObject,
}

/// Tool calls the reply must be made of.
#[derive(Clone, Debug, PartialEq)]
pub struct CallFormat {
    pub syntax: ToolSyntax,
    /// The functions that may be called (one for a named `tool_choice`).
    pub tools: Vec<Tool>,
    /// The prompt already opened the first call (the syntax's `call_open`), so the
    /// reply starts at the call object.
    pub opened: bool,
    /// More than one call may follow the first.
    pub parallel: bool,
}

/// Everything a reply is held to. At least one part is `Some`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplyFormat {
    pub answer: Option<AnswerFormat>,
    pub calls: Option<CallFormat>,
}

/// `x-guidance`: how llguidance writes JSON.
fn json_style() -> Value {
    json!({
        "item_separator": ", ",
        "key_separator": ": ",
        "whitespace_flexible": false,
    })
}

/// `schema` with inferd's JSON style, unless the schema sets its own.
fn styled(schema: &Value) -> Result<Value, GrammarError> {
    match schema {
        Value::Object(m) => {
            let mut m = m.clone();
            m.entry("x-guidance").or_insert_with(json_style);
            Ok(Value::Object(m))
        }
        // `true` accepts any JSON value; `false` none.
        Value::Bool(true) => Ok(json!({ "x-guidance": json_style() })),
        _ => Err(GrammarError::Invalid(
            "a JSON Schema must be an object (or `true`)".into(),
        )),
    }
}

impl AnswerFormat {
    fn schema(&self) -> Result<Value, GrammarError> {
        match self {
            AnswerFormat::JsonSchema(s) => styled(s),
            AnswerFormat::JsonObject => styled(&json!({ "type": "object" })),
        }
    }
}

impl CallFormat {
    /// The schema of one call object: `{"name": <const>, "arguments": <parameters>}`
    /// (`"parameters"` for Llama 3), one alternative per tool. Definitions of each
    /// parameter schema (`$defs`, `definitions`) move to the top, where their `#/...`
    /// references point.
    fn call_schema(&self) -> Result<Value, GrammarError> {
        let args_key = match self.syntax {
            ToolSyntax::Hermes => "arguments",
            ToolSyntax::Llama3Json => "parameters",
        };
        let mut defs: Vec<(String, Map<String, Value>)> = Vec::new();
        let mut alternatives = Vec::with_capacity(self.tools.len());
        for t in &self.tools {
            let mut params = match &t.parameters {
                None => {
                    json!({ "type": "object", "properties": {}, "additionalProperties": false })
                }
                Some(p) => p.clone(),
            };
            if let Value::Object(p) = &mut params {
                for key in ["$defs", "definitions"] {
                    if let Some(Value::Object(d)) = p.remove(key) {
                        let slot = match defs.iter().position(|(k, _)| k == key) {
                            Some(i) => &mut defs[i].1,
                            None => {
                                defs.push((key.to_string(), Map::new()));
                                &mut defs.last_mut().expect("just pushed").1
                            }
                        };
                        for (name, def) in d {
                            if slot.get(&name).is_some_and(|old| old != &def) {
                                return Err(GrammarError::Invalid(format!(
                                    "tools define `{key}/{name}` twice, differently; \
                                     give the definitions distinct names"
                                )));
                            }
                            slot.insert(name, def);
                        }
                    }
                }
            }
            alternatives.push(json!({
                "type": "object",
                "properties": { "name": { "const": t.name }, args_key: params },
                "required": ["name", args_key],
                "additionalProperties": false,
            }));
        }
        let mut schema = match alternatives.len() {
            0 => return Err(GrammarError::Invalid("no tools to call".into())),
            1 => alternatives.pop().unwrap_or_default(),
            _ => json!({ "anyOf": alternatives }),
        };
        if let Value::Object(m) = &mut schema {
            for (k, d) in defs {
                m.insert(k, Value::Object(d));
            }
        }
        styled(&schema)
    }

    /// Lark rules `calls` (and `call`): one call or more, in the syntax's framing.
    fn lark(&self) -> Result<String, GrammarError> {
        let call = format!("call: %json {}\n", self.call_schema()?);
        let (open, close) = (self.syntax.call_open(), self.syntax.call_close());
        let framed = seq(&[lit(open), "call".into(), lit(close)]);
        let first = if self.opened {
            seq(&["call".into(), lit(close)])
        } else {
            framed.clone()
        };
        let more = match (self.parallel, self.syntax) {
            (false, _) => String::new(),
            (true, ToolSyntax::Hermes) => format!(" (\"\\n\" {framed})*"),
            (true, ToolSyntax::Llama3Json) => " (\"; \" call)*".to_string(),
        };
        Ok(format!("calls: {first}{more}\n{call}"))
    }
}

/// A Lark string literal for `s` (JSON string escapes are Lark's); empty for `""`.
fn lit(s: &str) -> String {
    if s.is_empty() {
        String::new()
    } else {
        Value::from(s).to_string()
    }
}

/// Lark items in sequence, empty ones left out.
fn seq(items: &[String]) -> String {
    items
        .iter()
        .filter(|i| !i.is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join(" ")
}

impl ReplyFormat {
    /// The grammar llguidance compiles.
    pub fn grammar(&self) -> Result<TopLevelGrammar, GrammarError> {
        match (&self.answer, &self.calls) {
            (None, None) => Err(GrammarError::Invalid("nothing to constrain".into())),
            (Some(a), None) => Ok(TopLevelGrammar::from_json_schema(a.schema()?)),
            (None, Some(c)) => Ok(TopLevelGrammar::from_lark(format!(
                "start: calls\n{}",
                c.lark()?
            ))),
            (Some(a), Some(c)) => Ok(TopLevelGrammar::from_lark(format!(
                "start: answer | calls\nanswer: %json {}\n{}",
                a.schema()?,
                c.lark()?
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, params: Option<Value>) -> Tool {
        Tool {
            name: name.into(),
            description: None,
            parameters: params,
            strict: false,
        }
    }

    #[test]
    fn answer_schema_gets_the_json_style_unless_it_has_its_own() {
        let a = AnswerFormat::JsonSchema(json!({"type": "integer"}));
        assert_eq!(a.schema().unwrap()["x-guidance"], json_style());
        let own = json!({"type": "integer", "x-guidance": {"whitespace_flexible": true}});
        let a = AnswerFormat::JsonSchema(own.clone());
        assert_eq!(a.schema().unwrap(), own);
        assert!(AnswerFormat::JsonSchema(json!(3)).schema().is_err());
    }

    #[test]
    fn call_schema_hoists_definitions_and_names_each_tool() {
        let c = CallFormat {
            syntax: ToolSyntax::Hermes,
            tools: vec![
                tool(
                    "a",
                    Some(
                        json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/X"}},
                                "$defs": {"X": {"type": "integer"}}}),
                    ),
                ),
                tool("b", None),
            ],
            opened: true,
            parallel: false,
        };
        let s = c.call_schema().unwrap();
        assert_eq!(s["$defs"]["X"], json!({"type": "integer"}));
        assert_eq!(s["anyOf"][0]["properties"]["name"]["const"], "a");
        assert!(s["anyOf"][0]["properties"]["arguments"]
            .get("$defs")
            .is_none());
        assert_eq!(
            s["anyOf"][1]["properties"]["arguments"]["additionalProperties"],
            false
        );
    }

    #[test]
    fn conflicting_definitions_are_refused() {
        let p = |t: &str| Some(json!({"type": "object", "$defs": {"X": {"type": t}}}));
        let c = CallFormat {
            syntax: ToolSyntax::Llama3Json,
            tools: vec![tool("a", p("integer")), tool("b", p("string"))],
            opened: true,
            parallel: true,
        };
        assert!(c.call_schema().is_err());
    }

    #[test]
    fn lark_frames_calls_in_the_syntax() {
        let c = CallFormat {
            syntax: ToolSyntax::Hermes,
            tools: vec![tool("f", None)],
            opened: false,
            parallel: true,
        };
        let l = c.lark().unwrap();
        assert!(
            l.starts_with(r#"calls: "<tool_call>\n" call "\n</tool_call>" ("\n" "<tool_call>\n" call "\n</tool_call>")*"#),
            "{l}"
        );
        let c = CallFormat {
            syntax: ToolSyntax::Llama3Json,
            opened: true,
            ..c
        };
        assert!(c.lark().unwrap().starts_with(r#"calls: call ("; " call)*"#));
    }
}
