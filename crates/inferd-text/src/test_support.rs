//! Test helpers: fixture and model-file locations, a tiny byte-level BPE vocabulary in a GGUF.

use std::path::{Path, PathBuf};

use inferd_formats::{GgufFile, GgufWriter};

use crate::gguf_vocab::token_type;

/// `fixtures/text/` of the repository.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/text")
}

/// Reads a JSON fixture.
pub fn fixture_json(name: &str) -> serde_json::Value {
    let path = fixtures_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `$INFERD_CACHE_DIR/models` (default `~/.cache/inferd/models`).
fn models_dir() -> PathBuf {
    let cache = std::env::var_os("INFERD_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/inferd")
        });
    cache.join("models")
}

/// A model file for a test, or `None` (with a note) when absent. With `INFERD_REQUIRE_MODELS=1`
/// a missing file fails the test instead.
fn model_path(env_override: &str, default_rel: &str, is_dir: bool) -> Option<PathBuf> {
    let path = std::env::var_os(env_override)
        .map(PathBuf::from)
        .unwrap_or_else(|| models_dir().join(default_rel));
    let present = if is_dir {
        path.is_dir()
    } else {
        path.is_file()
    };
    if present {
        return Some(path);
    }
    let required = std::env::var("INFERD_REQUIRE_MODELS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "INFERD_REQUIRE_MODELS=1 but {} is missing (set {env_override})",
        path.display()
    );
    eprintln!(
        "note: skipping, {} not found (set {env_override})",
        path.display()
    );
    None
}

/// SmolLM2-135M-Instruct GGUF.
pub fn smollm2_gguf() -> Option<PathBuf> {
    model_path(
        "INFERD_SMOLLM2_GGUF",
        "smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf",
        false,
    )
}

/// Directory with the Qwen3 tokenizer.json + tokenizer_config.json.
pub fn qwen3_tokenizer_dir() -> Option<PathBuf> {
    model_path("INFERD_QWEN3_TOKENIZER_DIR", "qwen3-tokenizer", true)
}

/// GPT-2's byte -> printable char table, written from its definition: printable Latin-1 bytes
/// map to themselves, the others to U+0100 onwards in byte order.
pub fn byte_char(b: u8) -> char {
    let printable = |x: u32| {
        (0x21..=0x7e).contains(&x) || (0xa1..=0xac).contains(&x) || (0xae..=0xff).contains(&x)
    };
    let x = b as u32;
    if printable(x) {
        return char::from_u32(x).unwrap();
    }
    let rank = (0..x).filter(|&y| !printable(y)).count() as u32;
    char::from_u32(256 + rank).unwrap()
}

/// Ids of the tiny vocabulary beyond the 256 byte tokens (id = byte value).
#[allow(dead_code)] // every merged token is listed, not all are asserted on
pub mod tiny {
    pub const HE: u32 = 256;
    pub const LL: u32 = 257;
    pub const HELL: u32 = 258;
    pub const HELLO: u32 = 259;
    pub const G_W: u32 = 260;
    pub const OR: u32 = 261;
    pub const G_WOR: u32 = 262;
    pub const G_WORL: u32 = 263;
    pub const G_WORLD: u32 = 264;
    pub const IM_START: u32 = 265;
    pub const IM_END: u32 = 266;
    pub const ENDOFTEXT: u32 = 267;
    pub const TOOL_CALL: u32 = 268;
    pub const TWELVE: u32 = 269;
    pub const VOCAB: usize = 270;
}

/// A GGUF holding a tiny byte-level BPE: 256 byte tokens, merges spelling "hello", " world"
/// and "12", three control tokens and one user-defined token.
pub fn tiny_gguf(pre: &str, add_bos: bool) -> GgufFile {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let merged = [
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        ("Ġ", "w"),
        ("o", "r"),
        ("Ġw", "or"),
        ("Ġwor", "l"),
        ("Ġworl", "d"),
    ];
    let mut merges: Vec<String> = Vec::new();
    for (a, b) in merged {
        tokens.push(format!("{a}{b}"));
        merges.push(format!("{a} {b}"));
    }
    tokens.extend(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>"].map(String::from));
    tokens.push("12".into());
    merges.push("1 2".into());
    let mut types = vec![token_type::NORMAL as i32; tokens.len()];
    for id in [tiny::IM_START, tiny::IM_END, tiny::ENDOFTEXT] {
        types[id as usize] = token_type::CONTROL as i32;
    }
    types[tiny::TOOL_CALL as usize] = token_type::USER_DEFINED as i32;

    let mut w = GgufWriter::new();
    w.add_meta("general.architecture", "llama")
        .add_meta("tokenizer.ggml.model", "gpt2")
        .add_meta("tokenizer.ggml.pre", pre)
        .add_meta("tokenizer.ggml.tokens", tokens)
        .add_meta("tokenizer.ggml.token_type", types)
        .add_meta("tokenizer.ggml.merges", merges)
        .add_meta("tokenizer.ggml.bos_token_id", tiny::ENDOFTEXT)
        .add_meta("tokenizer.ggml.eos_token_id", tiny::IM_END)
        .add_meta("tokenizer.ggml.add_bos_token", add_bos)
        .add_meta(
            "tokenizer.chat_template",
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor %}",
        );
    let bytes = w.to_bytes().expect("GGUF image");
    GgufFile::from_bytes("tiny.gguf", bytes).expect("parse tiny GGUF")
}

/// A small deterministic PRNG (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Qwen2.5-Coder-0.5B-Instruct GGUF (its tokenizer metadata; `INFERD_QWEN25_GGUF` overrides).
pub fn qwen25_gguf() -> Option<PathBuf> {
    model_path(
        "INFERD_QWEN25_GGUF",
        "qwen2.5-coder-0.5b-instruct/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        false,
    )
}
