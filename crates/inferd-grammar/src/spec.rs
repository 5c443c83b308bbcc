//! What a reply must look like, and the llguidance grammar that says so.
//!
//! A reply is constrained to an answer (`response_format`), to tool calls (a forced
//! `tool_choice`), or to either (`response_format` with tools the model may call).
//! JSON is written the way models write it: `", "` between items, `": "` after keys,
//! no other whitespace (free whitespace lets a small model pad forever). A schema that is
//! not `strict` is compiled leniently: keywords llguidance cannot enforce (`uniqueItems`,
//! an unknown `format`, ...) are ignored instead of refused, as OpenAI accepts them there.

use inferd_tools::{Tool, ToolSyntax};
use llguidance::api::TopLevelGrammar;
use serde_json::{json, Value};

use crate::limits::{SchemaLimits, Tally};
use crate::GrammarError;

/// The answer's shape (`response_format`).
#[derive(Clone, Debug, PartialEq)]
pub enum AnswerFormat {
    /// `json_schema`: one JSON value valid against the schema. With `strict`, a keyword
    /// that cannot be enforced is an error; without, it is ignored.
    JsonSchema { schema: Value, strict: bool },
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

/// `x-guidance`: how llguidance writes JSON, and whether it refuses what it cannot enforce.
fn json_style(strict: bool) -> Value {
    json!({
        "item_separator": ", ",
        "key_separator": ": ",
        "whitespace_flexible": false,
        "lenient": !strict,
    })
}

/// `schema` with inferd's JSON style, unless the schema sets its own.
fn styled(schema: &Value, strict: bool) -> Result<Value, GrammarError> {
    match schema {
        Value::Object(m) => {
            let mut m = m.clone();
            m.entry("x-guidance").or_insert_with(|| json_style(strict));
            Ok(Value::Object(m))
        }
        // `true` accepts any JSON value; `false` none.
        Value::Bool(true) => Ok(json!({ "x-guidance": json_style(strict) })),
        _ => Err(GrammarError::Invalid(
            "a JSON Schema must be an object (or `true`)".into(),
        )),
    }
}

impl AnswerFormat {
    fn schema(&self) -> Result<Value, GrammarError> {
        match self {
            AnswerFormat::JsonSchema { schema, strict } => styled(schema, *strict),
            AnswerFormat::JsonObject => styled(&json!({ "type": "object" }), true),
        }
    }
}

impl AnswerFormat {
    /// One schema accepting the answer or one call object of `calls` (`anyOf`). Each
    /// alternative's definitions (`$defs`, `definitions`) move to the root, where their
    /// `#/...` references point; two alternatives defining a name differently are refused.
    fn union_with_calls(&self, calls: &CallFormat) -> Result<Value, GrammarError> {
        let (answer, mut strict) = match self {
            AnswerFormat::JsonSchema { schema, strict } => (schema.clone(), *strict),
            AnswerFormat::JsonObject => (json!({ "type": "object" }), true),
        };
        let mut alternatives = vec![answer];
        for t in &calls.tools {
            strict &= t.strict;
            let params = t.parameters.clone().unwrap_or_else(
                || json!({ "type": "object", "properties": {}, "additionalProperties": false }),
            );
            alternatives.push(json!({
                "type": "object",
                "properties": { "name": { "const": t.name }, "parameters": params },
                "required": ["name", "parameters"],
                "additionalProperties": false,
            }));
        }
        let mut root = serde_json::Map::new();
        for alt in &mut alternatives {
            hoist_definitions(alt, &mut root)?;
            if let Some(Value::Object(params)) = alt.pointer_mut("/properties/parameters") {
                let mut p = Value::Object(std::mem::take(params));
                hoist_definitions(&mut p, &mut root)?;
                *alt.pointer_mut("/properties/parameters").expect("present") = p;
            }
        }
        root.insert("anyOf".into(), Value::Array(alternatives));
        styled(&Value::Object(root), strict)
    }
}

/// Moves `schema`'s `$defs` / `definitions` into `root`'s.
fn hoist_definitions(
    schema: &mut Value,
    root: &mut serde_json::Map<String, Value>,
) -> Result<(), GrammarError> {
    let Value::Object(m) = schema else {
        return Ok(());
    };
    for key in ["$defs", "definitions"] {
        let Some(Value::Object(defs)) = m.remove(key) else {
            continue;
        };
        let slot = root
            .entry(key)
            .or_insert_with(|| Value::Object(Default::default()));
        let Value::Object(slot) = slot else {
            continue;
        };
        for (name, def) in defs {
            if slot.get(&name).is_some_and(|old| old != &def) {
                return Err(GrammarError::Invalid(format!(
                    "`{key}/{name}` is defined twice, differently (the answer's schema and a \
                     tool's parameters share a reply); give the definitions distinct names"
                )));
            }
            slot.insert(name, def);
        }
    }
    Ok(())
}

impl CallFormat {
    /// Lark rules `calls` (one call or more, in the syntax's framing), `call` (any of
    /// the tools) and `call_i` per tool: the literal `{"name": "NAME", "arguments": `
    /// (`"parameters"` for Llama 3), the tool's `parameters` as a JSON Schema of its own
    /// (so its `#/...` references resolve against itself), then `}`.
    fn lark(&self) -> Result<String, GrammarError> {
        if self.tools.is_empty() {
            return Err(GrammarError::Invalid("no tools to call".into()));
        }
        let args_key = match self.syntax {
            ToolSyntax::Hermes => "arguments",
            ToolSyntax::Llama3Json => "parameters",
        };
        let mut rules = String::new();
        let mut alternatives = Vec::with_capacity(self.tools.len());
        for (i, t) in self.tools.iter().enumerate() {
            let params = match &t.parameters {
                None => {
                    json!({ "type": "object", "properties": {}, "additionalProperties": false })
                }
                Some(p) => p.clone(),
            };
            let head = format!(
                "{{\"name\": {}, \"{args_key}\": ",
                Value::from(t.name.as_str())
            );
            rules.push_str(&format!(
                "call_{i}: {} %json {} \"}}\"\n",
                lit(&head),
                styled(&params, t.strict)?
            ));
            alternatives.push(format!("call_{i}"));
        }
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
        Ok(format!(
            "calls: {first}{more}\ncall: {}\n{rules}",
            alternatives.join(" | ")
        ))
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
    /// The grammar llguidance compiles, once every schema in the format passed `limits`
    /// (all of them counted together).
    pub fn grammar(&self, limits: &SchemaLimits) -> Result<TopLevelGrammar, GrammarError> {
        let mut tally = Tally::default();
        if let Some(AnswerFormat::JsonSchema { schema, .. }) = &self.answer {
            tally.add(schema, limits)?;
        }
        for t in self.calls.iter().flat_map(|c| &c.tools) {
            if let Some(p) = &t.parameters {
                tally.add(p, limits)?;
            }
        }
        match (&self.answer, &self.calls) {
            (None, None) => Err(GrammarError::Invalid("nothing to constrain".into())),
            (Some(a), None) => Ok(TopLevelGrammar::from_json_schema(a.schema()?)),
            (None, Some(c)) => Ok(TopLevelGrammar::from_lark(format!(
                "start: calls\n{}",
                c.lark()?
            ))),
            // Llama 3 calls start with `{` like the answer: one JSON Schema for both
            // (llguidance's lexer cannot choose between a literal and a JSON value that
            // start alike), so here the reply is the answer or a single call.
            (Some(a), Some(c)) if c.syntax == ToolSyntax::Llama3Json => {
                Ok(TopLevelGrammar::from_json_schema(a.union_with_calls(c)?))
            }
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
        let a = AnswerFormat::JsonSchema {
            schema: json!({"type": "integer"}),
            strict: true,
        };
        assert_eq!(a.schema().unwrap()["x-guidance"], json_style(true));
        let own = json!({"type": "integer", "x-guidance": {"whitespace_flexible": true}});
        let a = AnswerFormat::JsonSchema {
            schema: own.clone(),
            strict: false,
        };
        assert_eq!(a.schema().unwrap(), own);
        let bad = AnswerFormat::JsonSchema {
            schema: json!(3),
            strict: true,
        };
        assert!(bad.schema().is_err());
    }

    #[test]
    fn each_tool_is_its_own_schema_root() {
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
        let l = c.lark().unwrap();
        assert!(l.contains("call: call_0 | call_1"), "{l}");
        assert!(
            l.contains(r#"call_0: "{\"name\": \"a\", \"arguments\": " %json {"#),
            "{l}"
        );
        // the definitions stay inside their tool's schema
        assert!(l.contains(r#""$defs":{"X":{"type":"integer"}}"#), "{l}");
        assert!(l.contains(r#""lenient":true"#), "{l}");
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
