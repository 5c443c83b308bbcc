//! The request's `tools` and `tool_choice`, read and checked as OpenAI does.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::error::ToolError;

/// The longest function name OpenAI accepts.
pub const MAX_NAME_LEN: usize = 64;

/// The most tools a request may offer, as OpenAI allows. Each is rendered into the
/// prompt and, when calls are forced, compiled into the reply's grammar: thousands of
/// them held a preparation thread for seconds to a minute.
pub const MAX_TOOLS: usize = 128;

/// One function the client offers (`tools[i]`, `{"type": "function", "function": {...}}`).
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// Matches `^[a-zA-Z0-9_-]{1,64}$`; unique within the request.
    pub name: String,
    pub description: Option<String>,
    /// The arguments' JSON Schema (an object), if given.
    pub parameters: Option<Value>,
    /// `strict` (schema adherence asked for); `false` when absent.
    pub strict: bool,
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default when tools are given).
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call one tool or more.
    Required,
    /// The model must call this function (a name among the tools).
    Function(String),
}

/// The checked `tools` and `tool_choice` of a request that offers tools.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRequest {
    /// In the order the client gave them.
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
}

impl ToolRequest {
    /// Reads `tools` and `tool_choice` (each `None` when the field is absent; JSON `null`
    /// counts as absent). `Ok(None)`: no tools and no `tool_choice`. A `tool_choice`
    /// without tools is an error, as with OpenAI, and so is an empty `tools` array.
    pub fn parse(
        tools: Option<&Value>,
        tool_choice: Option<&Value>,
    ) -> Result<Option<ToolRequest>, ToolError> {
        let tools = tools.filter(|v| !v.is_null());
        let tool_choice = tool_choice.filter(|v| !v.is_null());
        let Some(tools) = tools else {
            return match tool_choice {
                None => Ok(None),
                Some(_) => Err(ToolError::new(
                    "tool_choice",
                    "`tool_choice` is only allowed when `tools` are given",
                )),
            };
        };
        let tools = parse_tools(tools)?;
        let choice = match tool_choice {
            None => ToolChoice::Auto,
            Some(c) => parse_choice(c, &tools)?,
        };
        Ok(Some(ToolRequest { tools, choice }))
    }

    /// The tool of this name.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Whether the model may call tools (`tool_choice` is not `"none"`): only then is
    /// its reply parsed for calls and are the tools shown to the chat template.
    pub fn calls_allowed(&self) -> bool {
        self.choice != ToolChoice::None
    }
}

/// Whether `name` is a valid function name: 1 to 64 ASCII letters, digits, `_` or `-`.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn parse_tools(v: &Value) -> Result<Vec<Tool>, ToolError> {
    let Value::Array(list) = v else {
        return Err(ToolError::new(
            "tools",
            "`tools` must be an array of tool definitions",
        ));
    };
    if list.is_empty() {
        return Err(ToolError::new(
            "tools",
            "`tools` must hold at least one tool; leave it out to offer none",
        ));
    }
    if list.len() > MAX_TOOLS {
        return Err(ToolError::new(
            "tools",
            format!(
                "`tools` holds {} tools; at most {MAX_TOOLS} are supported",
                list.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let obj = object(t, &at)?;
        match obj.get("type") {
            Some(Value::String(s)) if s == "function" => {}
            Some(Value::String(s)) => {
                return Err(ToolError::new(
                    format!("{at}.type"),
                    format!("`{at}.type` is \"{s}\"; only \"function\" tools are supported"),
                ))
            }
            _ => {
                return Err(ToolError::new(
                    format!("{at}.type"),
                    format!("`{at}.type` must be \"function\""),
                ))
            }
        }
        let at = format!("{at}.function");
        let f = match obj.get("function") {
            Some(f) => object(f, &at)?,
            None => return Err(ToolError::new(at.clone(), format!("`{at}` is required"))),
        };
        let tool = parse_function(f, &at)?;
        if !seen.insert(tool.name.clone()) {
            return Err(ToolError::new(
                format!("{at}.name"),
                format!(
                    "`{at}.name`: the function name \"{}\" is given twice; names must be unique",
                    tool.name
                ),
            ));
        }
        out.push(tool);
    }
    Ok(out)
}

fn parse_function(f: &Map<String, Value>, at: &str) -> Result<Tool, ToolError> {
    let name = match f.get("name") {
        Some(Value::String(s)) if valid_name(s) => s.clone(),
        Some(Value::String(s)) => {
            return Err(ToolError::new(
                format!("{at}.name"),
                format!(
                    "`{at}.name` must be 1 to {MAX_NAME_LEN} letters, digits, underscores or \
                     dashes (^[a-zA-Z0-9_-]{{1,64}}$); got \"{s}\""
                ),
            ))
        }
        Some(_) => {
            return Err(ToolError::new(
                format!("{at}.name"),
                format!("`{at}.name` must be a string"),
            ))
        }
        None => {
            return Err(ToolError::new(
                format!("{at}.name"),
                format!("`{at}.name` is required"),
            ))
        }
    };
    let description = match f.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            return Err(ToolError::new(
                format!("{at}.description"),
                format!("`{at}.description` must be a string"),
            ))
        }
    };
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => None,
        Some(p) => {
            check_schema(p, &format!("{at}.parameters"))?;
            Some(p.clone())
        }
    };
    let strict = match f.get("strict") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(ToolError::new(
                format!("{at}.strict"),
                format!("`{at}.strict` must be a boolean"),
            ))
        }
    };
    Ok(Tool {
        name,
        description,
        parameters,
        strict,
    })
}

/// A light check of a function's JSON Schema: an object whose `type`, `properties` and
/// `required`, where present, have the shapes JSON Schema gives them. A full schema
/// check belongs to whatever enforces the schema.
fn check_schema(p: &Value, at: &str) -> Result<(), ToolError> {
    let obj = match p {
        Value::Object(o) => o,
        _ => {
            return Err(ToolError::new(
                at,
                format!("`{at}` must be a JSON Schema object"),
            ))
        }
    };
    // A call's arguments are one JSON object, so its schema describes an object.
    match obj.get("type") {
        None => {}
        Some(Value::String(t)) if t == "object" => {}
        Some(Value::Array(a)) if a.iter().any(|t| t == "object") => {}
        Some(t) => {
            return Err(ToolError::new(
                format!("{at}.type"),
                format!(
                    "`{at}.type` must be \"object\" (a call's arguments are an object); got {t}"
                ),
            ))
        }
    }
    match obj.get("properties") {
        None => {}
        Some(Value::Object(props)) => {
            for (k, v) in props {
                if !(v.is_object() || v.is_boolean()) {
                    return Err(ToolError::new(
                        format!("{at}.properties.{k}"),
                        format!("`{at}.properties.{k}` must be a schema (an object)"),
                    ));
                }
            }
        }
        Some(_) => {
            return Err(ToolError::new(
                format!("{at}.properties"),
                format!("`{at}.properties` must be an object"),
            ))
        }
    }
    match obj.get("required") {
        None => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(_) => {
            return Err(ToolError::new(
                format!("{at}.required"),
                format!("`{at}.required` must be an array of property names"),
            ))
        }
    }
    Ok(())
}

fn parse_choice(c: &Value, tools: &[Tool]) -> Result<ToolChoice, ToolError> {
    const WHAT: &str = "`tool_choice` must be \"auto\", \"none\", \"required\" or \
                        {\"type\": \"function\", \"function\": {\"name\": ...}}";
    match c {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            _ => Err(ToolError::new(
                "tool_choice",
                format!("{WHAT}; got \"{s}\""),
            )),
        },
        Value::Object(o) => {
            match o.get("type") {
                Some(Value::String(s)) if s == "function" => {}
                _ => {
                    return Err(ToolError::new(
                        "tool_choice.type",
                        "`tool_choice.type` must be \"function\"",
                    ))
                }
            }
            let name = o
                .get("function")
                .and_then(Value::as_object)
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str);
            let Some(name) = name else {
                return Err(ToolError::new(
                    "tool_choice.function.name",
                    "`tool_choice.function.name` is required (a string)",
                ));
            };
            if !tools.iter().any(|t| t.name == name) {
                return Err(ToolError::new(
                    "tool_choice.function.name",
                    format!(
                        "`tool_choice.function.name` is \"{name}\", which is not among `tools`"
                    ),
                ));
            }
            Ok(ToolChoice::Function(name.to_string()))
        }
        _ => Err(ToolError::new("tool_choice", WHAT)),
    }
}

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, ToolError> {
    v.as_object()
        .ok_or_else(|| ToolError::new(at, format!("`{at}` must be an object")))
}
