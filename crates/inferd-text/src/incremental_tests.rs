//! Incremental decoder tests: the streamed text equals a one-shot decode for random id
//! sequences, and multi-byte characters split over tokens are held back until complete.

use super::*;
use crate::test_support::{qwen3_tokenizer_dir, tiny, tiny_gguf, Rng};

/// Streams `ids` and checks: pieces concatenate to `decode(ids)`, and no piece ends in U+FFFD
/// unless the reference text has U+FFFD at that position (then it is final).
fn check_stream(tok: &Tokenizer, ids: &[u32], skip: bool) {
    let want = tok.decode(ids, skip).unwrap();
    let mut dec = IncrementalDecoder::new(tok, skip);
    let mut got = String::new();
    for &id in ids {
        let piece = dec.push(id).unwrap();
        got.push_str(&piece);
        assert!(
            want.starts_with(&got),
            "emitted text changed: {got:?} is not a prefix of {want:?} (ids {ids:?})"
        );
    }
    got.push_str(&dec.finish().unwrap());
    assert_eq!(got, want, "ids {ids:?}");
}

#[test]
fn multibyte_chars_wait_for_their_last_byte() {
    let tok = Tokenizer::from_gguf(&tiny_gguf("smollm", false)).unwrap();
    let mut dec = IncrementalDecoder::new(&tok, false);
    // "😀" = F0 9F 98 80, one byte token each, then "hello".
    assert_eq!(dec.push(0xF0).unwrap(), "");
    assert_eq!(dec.push(0x9F).unwrap(), "");
    assert_eq!(dec.push(0x98).unwrap(), "");
    assert_eq!(dec.push(0x80).unwrap(), "😀");
    assert_eq!(dec.push(tiny::HELLO).unwrap(), "hello");
    assert_eq!(dec.push(tiny::G_WORLD).unwrap(), " world");
    // A truncated sequence is flushed by finish() as decode() would render it.
    assert_eq!(dec.push(0xE2).unwrap(), "");
    assert_eq!(dec.finish().unwrap(), "\u{FFFD}");
    // An interrupted sequence becomes final U+FFFD as soon as the next char arrives.
    assert_eq!(dec.push(0xE2).unwrap(), "");
    assert_eq!(dec.push(b'a' as u32).unwrap(), "\u{FFFD}a");
    assert!(dec.push(tiny::VOCAB as u32).is_err());
}

#[test]
fn special_tokens_are_skipped_or_kept() {
    let tok = Tokenizer::from_gguf(&tiny_gguf("smollm", false)).unwrap();
    let ids = [tiny::IM_START, tiny::HELLO, tiny::IM_END];
    let mut dec = IncrementalDecoder::new(&tok, true);
    let text: String = ids.iter().map(|&id| dec.push(id).unwrap()).collect();
    assert_eq!(text + &dec.finish().unwrap(), "hello");
    check_stream(&tok, &ids, false);
}

/// Thousands of skipped special tokens in a row keep the window bounded (each push decodes
/// at most `MAX_PENDING` ids and their context), and text after them still comes out.
#[test]
fn a_long_run_without_text_keeps_the_window_bounded() {
    let tok = Tokenizer::from_gguf(&tiny_gguf("smollm", false)).unwrap();
    let mut dec = IncrementalDecoder::new(&tok, true);
    assert_eq!(dec.push(tiny::HELLO).unwrap(), "hello");
    for _ in 0..5000 {
        assert_eq!(dec.push(tiny::IM_END).unwrap(), "");
        assert!(dec.ids.len() <= 2 * MAX_PENDING, "{}", dec.ids.len());
    }
    assert_eq!(dec.push(tiny::G_WORLD).unwrap(), " world");
    // A character whose bytes straddle a flush comes out whole, at any place in the run.
    for run in 58..66 {
        let mut dec = IncrementalDecoder::new(&tok, true);
        let mut ids = vec![tiny::HELLO];
        ids.extend(std::iter::repeat_n(tiny::IM_END, run));
        ids.extend([0xE4, 0xB8, 0xAD, tiny::HELLO, tiny::G_WORLD]); // 中
        let text: String = ids.iter().map(|&id| dec.push(id).unwrap()).collect();
        // All of it as it came, nothing left for the end.
        assert_eq!(text, "hello中hello world", "run {run}");
        assert_eq!(dec.finish().unwrap(), "");
    }
    // A run of bytes that never completes a character comes out as U+FFFD, bounded too.
    let mut dec = IncrementalDecoder::new(&tok, false);
    let mut text = String::new();
    for _ in 0..1000 {
        text.push_str(&dec.push(0x80).unwrap());
        assert!(dec.ids.len() <= 2 * MAX_PENDING);
    }
    text.push_str(&dec.finish().unwrap());
    assert_eq!(text, tok.decode(&vec![0x80; 1000], false).unwrap());
}

#[test]
fn random_sequences_match_one_shot_decode_tiny() {
    let tok = Tokenizer::from_gguf(&tiny_gguf("smollm", false)).unwrap();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // Mostly UTF-8 lead/continuation bytes so characters are split and broken often.
    let pool: Vec<u32> = (0x80..0x100)
        .chain([0x41, 0x20, tiny::HELLO, tiny::IM_END])
        .collect();
    for _ in 0..500 {
        let n = 1 + rng.below(12);
        let ids: Vec<u32> = (0..n).map(|_| pool[rng.below(pool.len())]).collect();
        check_stream(&tok, &ids, rng.below(2) == 0);
    }
}

#[test]
fn random_sequences_match_one_shot_decode_qwen3() {
    let Some(dir) = qwen3_tokenizer_dir() else {
        return;
    };
    let tok = Tokenizer::from_tokenizer_json(&dir.join("tokenizer.json")).unwrap();
    let mut rng = Rng(42);
    // Real text with emoji, CJK and accents, streamed token by token.
    let texts = [
        "emoji: 😀🎉👍🏽 family 👨‍👩‍👧 done",
        "中文分词测试：你好，世界！日本語のテキストです。",
        "Café crème brûlée — naïve façade, Ångström. <|im_end|>",
    ];
    for text in texts {
        let ids = tok.encode(text, false).unwrap();
        check_stream(&tok, &ids, false);
        check_stream(&tok, &ids, true);
    }
    // Random ids from the whole vocabulary (many are partial UTF-8 pieces).
    let vocab = tok.vocab_size();
    for _ in 0..300 {
        let n = 1 + rng.below(16);
        let ids: Vec<u32> = (0..n).map(|_| rng.below(vocab) as u32).collect();
        check_stream(&tok, &ids, rng.below(2) == 0);
    }
    // Random ids among multi-byte pieces only (byte-level chars above U+00FF stand for bytes >= 0x80).
    let partial: Vec<u32> = (0..vocab as u32)
        .filter(|&id| {
            tok.id_to_token(id)
                .is_some_and(|t| t.chars().count() <= 2 && t.chars().all(|c| (c as u32) >= 0x80))
        })
        .collect();
    assert!(partial.len() > 100);
    for _ in 0..300 {
        let n = 1 + rng.below(10);
        let ids: Vec<u32> = (0..n).map(|_| partial[rng.below(partial.len())]).collect();
        check_stream(&tok, &ids, false);
    }
}
