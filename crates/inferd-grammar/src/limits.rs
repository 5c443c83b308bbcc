//! Bounds on the JSON Schemas a request may bring, checked before llguidance sees them.
//!
//! Compiling a schema costs time and stack that grow with its size (llguidance's JSON
//! compiler recurses; many optional properties cost quadratic time: 1000 of them about
//! 0.1 s, 5000 about 2 s, 7000 overflow a 2 MiB stack). So every schema of a reply is
//! walked first, without recursion, and refused with a clear error past
//! [`SchemaLimits`]. The walk also refuses schemas no finite JSON value can satisfy
//! through their references (a required property whose schema is the schema itself, a
//! `$ref` cycle): llguidance would accept those and then never let the reply end. And it
//! bounds the bytes a schema can force in a row ([`crate::forced`]), which every mask of
//! the reply would pay for.

use std::collections::HashMap;

use serde_json::Value;

use crate::GrammarError;

/// The most a reply's schemas may hold, all of them together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Object properties (entries of every `properties`).
    pub max_properties: usize,
    /// JSON values in the schema documents.
    pub max_nodes: usize,
    /// Nesting of JSON values (objects and arrays inside each other).
    pub max_depth: usize,
    /// Bytes of keys and strings.
    pub max_text_bytes: usize,
    /// Bytes one `pattern` (or `patternProperties` key) may force in a row, and the
    /// longest `const` or `enum` value (as JSON) and property name.
    pub max_forced_bytes: usize,
}

impl SchemaLimits {
    /// What inferd enforces: far above real agent schemas (OpenAI allows 5000 properties
    /// and 10 levels of nesting), below what costs more than about 0.1 s to compile.
    pub const DEFAULT: SchemaLimits = SchemaLimits {
        max_properties: 1000,
        max_nodes: 20_000,
        max_depth: 64,
        max_text_bytes: 256 << 10,
        max_forced_bytes: 1024,
    };
}

/// What the schemas seen so far add up to.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tally {
    properties: usize,
    nodes: usize,
    text_bytes: usize,
}

impl Tally {
    /// Adds `schema` and checks the total against `limits`; then checks that some finite
    /// value can satisfy it.
    pub(crate) fn add(
        &mut self,
        schema: &Value,
        limits: &SchemaLimits,
    ) -> Result<(), GrammarError> {
        let too = |what: String| {
            Err(GrammarError::Invalid(format!(
                "the schema is too large: {what} (inferd's limits: {} properties, {} JSON \
                 values, {} levels of nesting, {} KiB of text)",
                limits.max_properties,
                limits.max_nodes,
                limits.max_depth,
                limits.max_text_bytes >> 10
            )))
        };
        let forces = |what: &str, n: u64| {
            if n > limits.max_forced_bytes as u64 {
                Err(GrammarError::Invalid(format!(
                    "{what} forces {n} bytes in a row; inferd enforces at most {} (each token's \
                     mask would walk them all)",
                    limits.max_forced_bytes
                )))
            } else {
                Ok(())
            }
        };
        let pattern = |p: &str| match crate::forced::pattern_run(p) {
            Some(n) => forces(&format!("the pattern \"{}\"", abbreviate(p)), n),
            None => Ok(()),
        };
        let mut stack: Vec<(&Value, usize, Role)> = vec![(schema, 1, Role::Schema)];
        while let Some((v, depth, role)) = stack.pop() {
            self.nodes += 1;
            if self.nodes > limits.max_nodes {
                return too(format!("more than {} JSON values", limits.max_nodes));
            }
            if depth > limits.max_depth {
                return too(format!("nested more than {} levels", limits.max_depth));
            }
            match v {
                Value::String(s) => self.text_bytes += s.len(),
                Value::Array(items) => {
                    let role = if role == Role::Data {
                        Role::Data
                    } else {
                        Role::Schema
                    };
                    stack.extend(items.iter().map(|i| (i, depth + 1, role)))
                }
                Value::Object(m) => {
                    if role == Role::Properties {
                        self.properties += m.len();
                        if self.properties > limits.max_properties {
                            return too(format!("more than {} properties", limits.max_properties));
                        }
                    }
                    for (k, child) in m {
                        self.text_bytes += k.len();
                        let next = match role {
                            Role::Data => Role::Data,
                            Role::Properties => {
                                forces(
                                    &format!("the property name \"{}\"", abbreviate(k)),
                                    k.len() as u64,
                                )?;
                                Role::Schema
                            }
                            Role::PatternProperties => {
                                pattern(k)?;
                                Role::Schema
                            }
                            Role::Schema => match (k.as_str(), child) {
                                ("pattern", Value::String(p)) => {
                                    pattern(p)?;
                                    Role::Data
                                }
                                ("const", c) => {
                                    forces("a `const` value", json_len(c))?;
                                    Role::Data
                                }
                                ("enum", Value::Array(values)) => {
                                    for e in values {
                                        forces("an `enum` value", json_len(e))?;
                                    }
                                    Role::Data
                                }
                                ("default" | "examples", _) => Role::Data,
                                // A property *named* `properties` is a schema, not a map of them.
                                ("properties", _) => Role::Properties,
                                ("patternProperties", _) => Role::PatternProperties,
                                ("$defs" | "definitions" | "dependentSchemas", _) => {
                                    Role::Definitions
                                }
                                _ => Role::Schema,
                            },
                            Role::Definitions => Role::Schema,
                        };
                        stack.push((child, depth + 1, next));
                    }
                }
                _ => {}
            }
            if self.text_bytes > limits.max_text_bytes {
                return too(format!(
                    "more than {} KiB of keys and strings",
                    limits.max_text_bytes >> 10
                ));
            }
        }
        if !satisfiable(schema) {
            return Err(GrammarError::Invalid(
                "no finite JSON value satisfies the schema: it requires an instance of itself \
                 (a `$ref` cycle, or a required property whose schema refers back to it)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// What a JSON value of a schema document is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A schema, or a keyword's value holding schemas.
    Schema,
    /// The map under `properties`: names to schemas.
    Properties,
    /// The map under `patternProperties`: patterns to schemas.
    PatternProperties,
    /// A map of names to schemas (`$defs`, `definitions`, `dependentSchemas`): its keys
    /// are names, never keywords.
    Definitions,
    /// A value that is data, not schema (`const`, `enum`, `default`, `examples`): counted
    /// in the size, not read as keywords.
    Data,
}

/// Bytes of `v` written as JSON as llguidance forces it (a space after each `,` and `:`,
/// counted at every one, inside strings too: an upper bound).
fn json_len(v: &Value) -> u64 {
    serde_json::to_string(v).map_or(u64::MAX, |s| {
        (s.len() + s.bytes().filter(|&b| b == b',' || b == b':').count()) as u64
    })
}

/// At most 40 characters of `s`, for an error message.
fn abbreviate(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// What an instance of one schema must contain: every clause needs an instance of at
/// least one of its schemas (named by JSON pointer). No clauses: satisfiable as is; an
/// empty clause: never (`false`).
fn needs(s: &Value, at: &str) -> Vec<Vec<String>> {
    let m = match s {
        Value::Bool(false) => return vec![vec![]],
        Value::Object(m) => m,
        _ => return vec![],
    };
    let mut clauses = Vec::new();
    if let Some(Value::String(r)) = m.get("$ref") {
        // Local references only; others are llguidance's to refuse.
        if let Some(ptr) = r.strip_prefix('#') {
            clauses.push(vec![ptr.to_string()]);
        }
    }
    if let Some(Value::Array(all)) = m.get("allOf") {
        clauses.extend((0..all.len()).map(|i| vec![format!("{at}/allOf/{i}")]));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(any)) = m.get(key) {
            clauses.push((0..any.len()).map(|i| format!("{at}/{key}/{i}")).collect());
        }
    }
    if let (Some(Value::Object(props)), Some(Value::Array(req))) =
        (m.get("properties"), m.get("required"))
    {
        for name in req.iter().filter_map(Value::as_str) {
            if props.contains_key(name) {
                clauses.push(vec![format!("{at}/properties/{}", escape(name))]);
            }
        }
    }
    let min_items = m.get("minItems").and_then(Value::as_u64).unwrap_or(0);
    if min_items > 0 {
        let prefix = match m.get("prefixItems") {
            Some(Value::Array(p)) => p.len() as u64,
            _ => 0,
        };
        for i in 0..min_items.min(prefix) {
            clauses.push(vec![format!("{at}/prefixItems/{i}")]);
        }
        if min_items > prefix && m.get("items").is_some_and(Value::is_object) {
            clauses.push(vec![format!("{at}/items")]);
        }
    }
    clauses
}

/// A JSON pointer token for `name`.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Whether some finite value satisfies `root`, following what instances must contain:
/// the usual productivity fixpoint (a schema is satisfiable once each of its clauses
/// has a satisfiable member), in time linear in the schemas visited.
fn satisfiable(root: &Value) -> bool {
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut clauses: Vec<Vec<Vec<usize>>> = Vec::new();
    let mut todo = vec![String::new()];
    ids.insert(String::new(), 0);
    clauses.push(Vec::new());
    while let Some(ptr) = todo.pop() {
        let id = ids[&ptr];
        // A reference to nothing is llguidance's error to report; it holds nothing up.
        let Some(s) = root.pointer(&ptr) else {
            continue;
        };
        let mut cs = Vec::new();
        for clause in needs(s, &ptr) {
            let mut members = Vec::with_capacity(clause.len());
            for p in clause {
                let next = ids.len();
                let m = *ids.entry(p.clone()).or_insert_with(|| {
                    todo.push(p);
                    next
                });
                if m == clauses.len() {
                    clauses.push(Vec::new());
                }
                members.push(m);
            }
            cs.push(members);
        }
        clauses[id] = cs;
    }
    // Counters: clauses still unmet per schema; which (schema, clause) each schema is in.
    let n = clauses.len();
    let mut unmet: Vec<usize> = clauses.iter().map(Vec::len).collect();
    let mut met = vec![Vec::new(); n];
    let mut used_in: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for (s, cs) in clauses.iter().enumerate() {
        met[s] = vec![false; cs.len()];
        for (c, members) in cs.iter().enumerate() {
            for &m in members {
                used_in[m].push((s, c));
            }
        }
    }
    let mut ok = vec![false; n];
    let mut queue: Vec<usize> = (0..n).filter(|&s| unmet[s] == 0).collect();
    for &s in &queue {
        ok[s] = true;
    }
    while let Some(m) = queue.pop() {
        for &(s, c) in &used_in[m] {
            if !met[s][c] {
                met[s][c] = true;
                unmet[s] -= 1;
                if unmet[s] == 0 && !ok[s] {
                    ok[s] = true;
                    queue.push(s);
                }
            }
        }
    }
    ok[0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(s: Value) -> Result<(), GrammarError> {
        Tally::default().add(&s, &SchemaLimits::DEFAULT)
    }

    fn object_with(n: usize) -> Value {
        let props: serde_json::Map<String, Value> = (0..n)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        json!({"type": "object", "properties": props})
    }

    #[test]
    fn real_schemas_pass() {
        check(
            json!({"type": "object", "properties": {"name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
            "required": ["name", "tags"]}),
        )
        .unwrap();
        check(object_with(1000)).unwrap();
        // A recursive schema with a way out is fine: a tree whose children are optional.
        check(json!({"$defs": {"node": {"type": "object", "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["value", "children"]}}, "$ref": "#/$defs/node"}))
        .unwrap();
        // ... or an alternative that ends it.
        check(
            json!({"$defs": {"list": {"anyOf": [{"type": "null"}, {"type": "object",
            "properties": {"next": {"$ref": "#/$defs/list"}}, "required": ["next"]}]}},
            "$ref": "#/$defs/list"}),
        )
        .unwrap();
        // A property called `properties` is a schema like any other.
        check(
            json!({"type": "object", "properties": {"properties": {"type": "object",
            "properties": {"a": {"type": "string"}}}}}),
        )
        .unwrap();
    }

    #[test]
    fn too_large_schemas_are_refused_by_name() {
        let e = check(object_with(1001)).unwrap_err().to_string();
        assert!(e.contains("more than 1000 properties"), "{e}");
        let mut deep = json!({"type": "string"});
        for _ in 0..70 {
            deep = json!({"type": "array", "items": deep});
        }
        let e = check(deep).unwrap_err().to_string();
        assert!(e.contains("nested more than 64 levels"), "{e}");
        let e = check(json!({"enum": vec![0; 20_000]}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("JSON values"), "{e}");
        let e = check(json!({"type": "string", "pattern": "[ab]".repeat(80 << 10)}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("KiB of keys and strings"), "{e}");
    }

    #[test]
    fn long_forced_runs_are_refused_where_the_schema_makes_them() {
        let long = "k".repeat(1025);
        for (s, what) in [
            (
                json!({"type": "string", "pattern": "^0{4096}$"}),
                "the pattern \"^0{4096}$\"",
            ),
            (
                json!({"type": "string", "pattern": "^((ab){100}c){100}$"}),
                "the pattern",
            ),
            (
                json!({"type": "object", "patternProperties": {"^x{2000}$": {}}}),
                "the pattern",
            ),
            (json!({"const": long}), "a `const` value"),
            (json!({"const": {"k": "v".repeat(1020)}}), "a `const` value"),
            (json!({"enum": ["a", long]}), "an `enum` value"),
            (
                json!({"type": "object", "properties": {long.clone(): {}}}),
                "the property name",
            ),
        ] {
            let e = check(s.clone()).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("bytes in a row"), "{s}: {e}");
        }
        // Within the bound, or where nothing is forced, or in data rather than schema.
        for s in [
            json!({"type": "string", "pattern": "^0{1024}$"}),
            json!({"type": "string", "pattern": "^[a-z0-9]{1,100000}$"}),
            json!({"type": "string", "pattern": "(unparsed"}),
            json!({"const": {"pattern": "^0{99999}$"}}),
            json!({"type": "string", "default": long, "examples": [long]}),
            json!({"type": "object", "properties": {"pattern": {"type": "string"}}}),
            json!({"enum": ["k".repeat(1022)]}),
            json!({"$defs": {"const": {"type": "string", "description": long}}}),
        ] {
            check(s.clone()).unwrap_or_else(|e| panic!("{s}: {e}"));
        }
    }

    #[test]
    fn limits_count_every_schema_of_a_reply() {
        let mut t = Tally::default();
        t.add(&object_with(600), &SchemaLimits::DEFAULT).unwrap();
        assert!(t.add(&object_with(600), &SchemaLimits::DEFAULT).is_err());
    }

    #[test]
    fn schemas_that_require_themselves_are_refused() {
        for s in [
            json!({"$defs": {"a": {"type": "object", "properties": {"x": {"$ref": "#/$defs/a"}},
                "required": ["x"]}}, "$ref": "#/$defs/a"}),
            json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "$ref": "#/$defs/a"}),
            json!({"$ref": "#"}),
            json!({"type": "object", "properties": {"x": false}, "required": ["x"]}),
            json!({"type": "array", "minItems": 1, "items": {"$ref": "#"}}),
            json!({"allOf": [{"$ref": "#/$defs/x"}], "$defs": {"x": {"anyOf": [{"$ref": "#"}]}}}),
        ] {
            let e = check(s.clone()).unwrap_err().to_string();
            assert!(e.contains("no finite JSON value"), "{s}: {e}");
        }
    }
}
