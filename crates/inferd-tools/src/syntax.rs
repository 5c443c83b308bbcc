//! How a model writes tool calls in its reply, and how to tell which one a model uses.

/// A model family's tool-call syntax. The rules below are what [`crate::parse()`] and
/// [`crate::ToolStream`] implement; both read each call object the same way:
///
/// - a JSON object with a string `"name"` (non-empty) and an object `"arguments"`, or
///   `"parameters"` (the first of these keys wins; later `name`/`arguments`/`parameters`
///   keys and any other keys are checked as JSON and ignored);
/// - its `arguments` become the object's compact JSON text (see [`crate::ToolCall`]).
///
/// Whitespace next to a call (the end of the text before it, the start of the text
/// after it, the gap between two calls) is not content. Text that does not form a
/// call is content, kept as written.
///
/// Adding a syntax: a variant here, its rules in [`crate::parse()`] and
/// [`crate::ToolStream`] (one file each), and a case in the tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolSyntax {
    /// Hermes / Qwen2.5 / Qwen3: each call is
    /// `<tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>`. Calls may follow
    /// each other and text (a Qwen3 `<think>...</think>` block included) may come before
    /// or between them. The closing tag may be missing at the end of the reply. A
    /// `<tool_call>` not followed by a valid call object is content.
    Hermes,
    /// Llama 3.1 / 3.2 JSON calls: the whole reply is calls, optionally after
    /// `<|python_tag|>`: `{"name": "...", "parameters": {...}}`, several separated by
    /// `;`. A reply that does not start (after whitespace) with `{` or `<|python_tag|>`
    /// is plain content; from the first element that is not a valid call on, the rest
    /// of the reply is content.
    Llama3Json,
}

impl ToolSyntax {
    /// Every syntax, for help texts.
    pub const ALL: [ToolSyntax; 2] = [ToolSyntax::Hermes, ToolSyntax::Llama3Json];

    /// Recognises the syntax from the chat template's source: a template that writes
    /// `<tool_call>` is [`Hermes`](ToolSyntax::Hermes); one with `<|python_tag|>`, or
    /// with `"parameters"` and the `ipython` role (Llama 3.1 / 3.2), is
    /// [`Llama3Json`](ToolSyntax::Llama3Json); otherwise `None` (the model shows no
    /// tool syntax; serve requests with tools as plain text or refuse them).
    ///
    /// `arch` (the model's architecture name) is not consulted today: both syntaxes are
    /// told from the template alone. It is part of the signature so that a syntax the
    /// template cannot reveal can be added without changing callers.
    pub fn detect(template_source: &str, arch: &str) -> Option<ToolSyntax> {
        let _ = arch;
        let t = template_source;
        if t.contains("<tool_call>") {
            Some(ToolSyntax::Hermes)
        } else if t.contains("<|python_tag|>")
            || (t.contains("\"parameters\"") && t.contains("ipython"))
        {
            Some(ToolSyntax::Llama3Json)
        } else {
            None
        }
    }

    /// The syntax for a name given on the command line: `hermes` or `qwen`;
    /// `llama3_json` or `llama3` (ASCII case ignored).
    pub fn from_name(name: &str) -> Option<ToolSyntax> {
        match name.to_ascii_lowercase().as_str() {
            "hermes" | "qwen" => Some(ToolSyntax::Hermes),
            "llama3_json" | "llama3" => Some(ToolSyntax::Llama3Json),
            _ => None,
        }
    }

    /// The canonical name ([`from_name`](ToolSyntax::from_name) accepts it).
    pub fn name(self) -> &'static str {
        match self {
            ToolSyntax::Hermes => "hermes",
            ToolSyntax::Llama3Json => "llama3_json",
        }
    }

    /// The text that opens a call, up to the call object: what a server writes (or
    /// forces the model to write) before constraining the call's JSON. `"<tool_call>\n"`
    /// for Hermes, empty for Llama3Json.
    pub fn call_open(self) -> &'static str {
        match self {
            ToolSyntax::Hermes => "<tool_call>\n",
            ToolSyntax::Llama3Json => "",
        }
    }

    /// The text that closes a call after its object: `"\n</tool_call>"` for Hermes,
    /// empty for Llama3Json (the end of the reply closes it; `;` would start another).
    pub fn call_close(self) -> &'static str {
        match self {
            ToolSyntax::Hermes => "\n</tool_call>",
            ToolSyntax::Llama3Json => "",
        }
    }
}

impl std::fmt::Display for ToolSyntax {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Hermes: the tag that opens a call.
pub(crate) const HERMES_OPEN: &str = "<tool_call>";
/// Hermes: the tag that closes a call.
pub(crate) const HERMES_CLOSE: &str = "</tool_call>";
/// Llama 3: the tag that may start a reply of calls.
pub(crate) const PYTHON_TAG: &str = "<|python_tag|>";

/// Whitespace as JSON defines it (inside the call region: around call objects, `;`
/// and the closing tag).
pub(crate) fn json_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}
