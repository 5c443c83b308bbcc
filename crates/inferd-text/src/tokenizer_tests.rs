//! Tokenizer tests: a tiny GGUF vocabulary (no files) and the committed references for
//! SmolLM2 (GGUF-built) and Qwen3 (tokenizer.json), which need the model files.

use inferd_formats::GgufFile;
use serde_json::Value;

use super::*;
use crate::test_support::{
    byte_char, fixture_json, qwen3_tokenizer_dir, smollm2_gguf, tiny, tiny_gguf,
};

fn tiny_tok(pre: &str, add_bos: bool) -> Tokenizer {
    Tokenizer::from_gguf(&tiny_gguf(pre, add_bos)).expect("tiny tokenizer")
}

#[test]
fn tiny_bpe_encodes_with_merges_and_specials() {
    let tok = tiny_tok("smollm", false);
    assert_eq!(tok.vocab_size(), tiny::VOCAB);
    assert_eq!(
        tok.encode("hello world", true).unwrap(),
        vec![tiny::HELLO, tiny::G_WORLD]
    );
    // "hi" has no merge: two byte tokens; "é" is two bytes C3 A9.
    assert_eq!(tok.encode("hi", false).unwrap(), vec![104, 105]);
    assert_eq!(tok.encode("é", false).unwrap(), vec![0xC3, 0xA9]);
    // Control and user-defined tokens written in the text are matched whole.
    assert_eq!(
        tok.encode("<|im_start|>hello<|im_end|><tool_call>", false)
            .unwrap(),
        vec![tiny::IM_START, tiny::HELLO, tiny::IM_END, tiny::TOOL_CALL]
    );
    assert_eq!(tok.token_to_id("Ġworld"), Some(tiny::G_WORLD));
    assert_eq!(tok.id_to_token(tiny::HELLO).as_deref(), Some("hello"));
    assert_eq!(tok.id_to_token(32).as_deref(), Some("Ġ"));
}

#[test]
fn tiny_bpe_decodes_bytes_and_skips_only_special() {
    let tok = tiny_tok("smollm", false);
    let ids = [
        tiny::IM_START,
        tiny::HELLO,
        tiny::G_WORLD,
        tiny::TOOL_CALL,
        0xC3,
        0xA9,
        tiny::IM_END,
    ];
    assert_eq!(
        tok.decode(&ids, false).unwrap(),
        "<|im_start|>hello world<tool_call>é<|im_end|>"
    );
    // <tool_call> is user-defined, not special: it stays.
    assert_eq!(tok.decode(&ids, true).unwrap(), "hello world<tool_call>é");
    // A lone lead byte decodes to U+FFFD.
    assert_eq!(tok.decode(&[0xC3], false).unwrap(), "\u{FFFD}");
    assert!(matches!(
        tok.decode(&[tiny::VOCAB as u32], false),
        Err(TextError::UnknownId { .. })
    ));
    assert!(tok.is_special(tiny::IM_END));
    assert!(!tok.is_special(tiny::TOOL_CALL));
}

#[test]
fn tiny_bpe_special_ids_and_bos() {
    let tok = tiny_tok("smollm", false);
    assert_eq!(
        tok.bos_token(),
        Some((tiny::ENDOFTEXT, "<|endoftext|>".to_string()))
    );
    assert_eq!(
        tok.eos_token(),
        Some((tiny::IM_END, "<|im_end|>".to_string()))
    );
    assert!(!tok.add_bos());
    assert_eq!(tok.stop_ids(), &[tiny::IM_END, tiny::ENDOFTEXT]);

    let tok = tiny_tok("smollm", true);
    assert!(tok.add_bos());
    assert_eq!(
        tok.encode("hello", true).unwrap(),
        vec![tiny::ENDOFTEXT, tiny::HELLO]
    );
    assert_eq!(tok.encode("hello", false).unwrap(), vec![tiny::HELLO]);
}

#[test]
fn pre_tokenizer_choice_changes_digit_splits() {
    // "a 12": GPT-2 keeps " 12" together (merge "1 2" applies), `smollm` and `qwen2` split
    // digits one by one, Llama 3 groups up to three digits.
    let cases = [
        ("gpt-2", vec![97, 32, tiny::TWELVE]),
        ("smollm", vec![97, 32, 49, 50]),
        ("qwen2", vec![97, 32, 49, 50]),
        ("llama-bpe", vec![97, 32, tiny::TWELVE]),
    ];
    for (pre, want) in cases {
        assert_eq!(
            tiny_tok(pre, false).encode("a 12", false).unwrap(),
            want,
            "pre = {pre}"
        );
    }
    // The Qwen2/Llama 3 split keeps a single leading non-letter with a word: " hello" -> Ġ + hello
    // under every split here, since no "Ġh" merge exists.
    assert_eq!(
        tiny_tok("qwen2", false).encode(" hello", false).unwrap(),
        vec![32, tiny::HELLO]
    );
}

#[test]
fn qwen35_split_keeps_combining_marks_in_words() {
    // "x" + U+0301 (no precomposed form, so NFC keeps it; UTF-8 CC 81) with merges
    // spelling it as one token: Qwen3.5's split keeps the mark with its letter, so the
    // merges apply; Qwen2's puts the mark in a piece of its own.
    let (cc, x81) = (byte_char(0xCC), byte_char(0x81));
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.push(format!("x{cc}"));
    tokens.push(format!("x{cc}{x81}"));
    let merges = vec![format!("x {cc}"), format!("x{cc} {x81}")];
    let tok = |pre: &str| {
        let mut w = inferd_formats::GgufWriter::new();
        w.add_meta("tokenizer.ggml.model", "gpt2")
            .add_meta("tokenizer.ggml.pre", pre)
            .add_meta("tokenizer.ggml.tokens", tokens.clone())
            .add_meta("tokenizer.ggml.merges", merges.clone());
        let g = GgufFile::from_bytes("x.gguf", w.to_bytes().unwrap()).unwrap();
        Tokenizer::from_gguf(&g).unwrap()
    };
    assert_eq!(tok("qwen35").encode("x\u{301}", false).unwrap(), vec![257]);
    assert_eq!(
        tok("qwen2").encode("x\u{301}", false).unwrap(),
        vec![120, 0xCC, 0x81]
    );
    // Both NFC-normalize first: "e" + U+0301 becomes "é" (C3 A9).
    assert_eq!(
        tok("qwen35").encode("e\u{301}", false).unwrap(),
        vec![0xC3, 0xA9]
    );
}

#[test]
fn missing_or_bad_gguf_keys_are_errors() {
    let mut w = inferd_formats::GgufWriter::new();
    w.add_meta("tokenizer.ggml.model", "llama");
    w.add_meta("tokenizer.ggml.tokens", vec!["a".to_string()]);
    let gguf = GgufFile::from_bytes("x.gguf", w.to_bytes().unwrap()).unwrap();
    assert!(
        matches!(Tokenizer::from_gguf(&gguf), Err(TextError::UnsupportedModel(m)) if m == "llama")
    );

    let mut w = inferd_formats::GgufWriter::new();
    w.add_meta("tokenizer.ggml.model", "gpt2");
    let gguf = GgufFile::from_bytes("x.gguf", w.to_bytes().unwrap()).unwrap();
    let err = Tokenizer::from_gguf(&gguf).err().expect("no tokens");
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");

    let mut w = inferd_formats::GgufWriter::new();
    w.add_meta("tokenizer.ggml.model", "gpt2")
        .add_meta("tokenizer.ggml.tokens", vec!["a".to_string()])
        .add_meta("tokenizer.ggml.eos_token_id", 5u32);
    let gguf = GgufFile::from_bytes("x.gguf", w.to_bytes().unwrap()).unwrap();
    let err = Tokenizer::from_gguf(&gguf).err().expect("bad eos");
    assert!(err.to_string().contains("eos_token_id"), "{err}");
}

/// Checks every case of a tokenize_*.json fixture; collects all mismatches before failing.
fn check_reference(tok: &Tokenizer, fixture: &Value) {
    let mut failures = Vec::new();
    let cases = fixture["cases"].as_array().expect("cases");
    for case in cases {
        let text = case["text"].as_str().unwrap();
        // `ids_hub`: where transformers' GGUF loader (which ignores tokenizer.ggml.pre) differs
        // from the model's own tokenizer, the latter is expected (no BOS either way).
        let ids_of = |key: &str| -> Vec<u32> {
            serde_json::from_value(case.get("ids_hub").unwrap_or(&case[key]).clone()).unwrap()
        };
        let want = ids_of("ids");
        let want_plain = ids_of("ids_no_special");
        let got = tok.encode(text, true).unwrap();
        if got != want {
            failures.push(format!(
                "encode({text:?}, true): got {got:?}, want {want:?}"
            ));
        }
        let got_plain = tok.encode(text, false).unwrap();
        if got_plain != want_plain {
            failures.push(format!(
                "encode({text:?}, false): got {got_plain:?}, want {want_plain:?}"
            ));
        }
        let ref_ids: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        for (skip, key) in [(false, "decoded"), (true, "decoded_skip_special")] {
            let got = tok.decode(&ref_ids, skip).unwrap();
            if got != case[key].as_str().unwrap() {
                failures.push(format!(
                    "decode({ref_ids:?}, {skip}): got {got:?}, want {:?}",
                    case[key]
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(cases.len() >= 30);
}

#[test]
fn smollm2_gguf_tokenizer_matches_reference() {
    let Some(path) = smollm2_gguf() else { return };
    let gguf = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let fixture = fixture_json("tokenize_smollm2.json");
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_token(), Some((1, "<|im_start|>".to_string())));
    assert_eq!(tok.eos_token(), Some((2, "<|im_end|>".to_string())));
    assert_eq!(fixture["bos_token"], "<|im_start|>");
    assert!(!tok.add_bos(), "SmolLM2's GGUF says add_bos_token = false");
    assert_eq!(tok.stop_ids(), &[2, 0]);
    check_reference(&tok, &fixture);
}

#[test]
fn qwen3_tokenizer_json_matches_reference() {
    let Some(dir) = qwen3_tokenizer_dir() else {
        return;
    };
    let tok = Tokenizer::from_tokenizer_json(&dir.join("tokenizer.json")).unwrap();
    assert_eq!(tok.vocab_size(), 151_669);
    assert_eq!(tok.bos_token(), None);
    assert_eq!(tok.eos_token(), Some((151_645, "<|im_end|>".to_string())));
    assert!(!tok.add_bos());
    assert_eq!(tok.stop_ids(), &[151_645, 151_643]);
    check_reference(&tok, &fixture_json("tokenize_qwen3.json"));
}

#[test]
fn missing_tokenizer_json_is_an_io_error() {
    let err = Tokenizer::from_tokenizer_json(Path::new("/nonexistent/tokenizer.json"))
        .err()
        .unwrap();
    assert!(matches!(err, TextError::Io { .. }), "{err}");
}

#[test]
fn qwen25_gguf_tokenizer_matches_qwen3_reference() {
    // Qwen2.5's GGUF vocabulary has the same BPE merges and first special tokens as Qwen3's
    // tokenizer.json, so the `qwen2` pre-tokenizer must reproduce the Qwen3 reference ids.
    let Some(path) = crate::test_support::qwen25_gguf() else {
        return;
    };
    let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    assert_eq!(tok.eos_token(), Some((151_645, "<|im_end|>".to_string())));
    assert_eq!(tok.stop_ids(), &[151_645, 151_643]);
    check_reference(&tok, &fixture_json("tokenize_qwen3.json"));
}

#[test]
fn shared_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Tokenizer>();
    check::<crate::ChatTemplate>();
}

/// A token's exact bytes, whatever its vocabulary's spelling: byte-level pieces (each
/// char a byte), added tokens as written, and SentencePiece with byte fallback (`▁` a
/// space, `<0xNN>` a byte, other chars their UTF-8), where decoding the id alone would
/// strip the leading space. Special tokens have none.
#[test]
fn token_bytes_follow_the_vocabularys_spelling() {
    let tok = tiny_tok("smollm", false);
    assert_eq!(tok.piece_kind(), &PieceKind::ByteLevel);
    assert_eq!(tok.token_bytes(tiny::G_WORLD).unwrap(), b" world");
    assert_eq!(tok.token_bytes(0xC3).unwrap(), [0xC3]);
    assert_eq!(tok.token_bytes(tiny::TOOL_CALL).unwrap(), b"<tool_call>");
    assert_eq!(tok.token_bytes(tiny::IM_END), None);

    // A SentencePiece vocabulary as Llama's tokenizer.json writes it.
    let special = |id: u32, content: &str| {
        serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                           "rstrip": false, "normalized": false, "special": true})
    };
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": null, "pre_tokenizer": null, "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xC3>": 3, "\u{2581}the": 4,
                            "\u{e8}": 5, "\u{2581}": 6},
                  "merges": []},
    });
    let dir = std::env::temp_dir().join(format!("inferd-spm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, json.to_string()).unwrap();
    let tok = Tokenizer::from_tokenizer_json(&path).expect("the SentencePiece tokenizer");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(tok.piece_kind(), &PieceKind::ByteFallback);
    assert_eq!(tok.token_bytes(4).unwrap(), b" the");
    assert_eq!(
        tok.decode(&[4], false).unwrap(),
        "the",
        "decoding alone strips it"
    );
    assert_eq!(tok.token_bytes(5).unwrap(), "\u{e8}".as_bytes());
    assert_eq!(tok.token_bytes(3).unwrap(), [0xC3]);
    assert_eq!(tok.token_bytes(2), None);
}
