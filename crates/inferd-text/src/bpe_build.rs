//! Builds a `tokenizers::Tokenizer` (byte-level BPE) from a GGUF vocabulary.
//!
//! The tokenizer is described as a `tokenizer.json` document and deserialized, so every piece
//! (model, pre-tokenizer, added tokens, decoder) uses the documented HF format.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use crate::gguf_vocab::{token_type, GgufVocab};
use crate::pretok::PreTokenizerKind;
use crate::TextError;

/// Builds the tokenizer for a `tokenizer.ggml.model == "gpt2"` vocabulary.
pub(crate) fn build_bpe_tokenizer(v: &GgufVocab) -> Result<tokenizers::Tokenizer, TextError> {
    if v.model != "gpt2" {
        return Err(TextError::UnsupportedModel(v.model.clone()));
    }
    let kind = v.pre_tokenizer();
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_tokens_json(v),
        "normalizer": kind.normalizer_json(),
        "pre_tokenizer": kind.pre_tokenizer_json(),
        "post_processor": post_processor_json(v),
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": model_json(v, kind)?,
    });
    serde_json::from_value(doc).map_err(|e| {
        TextError::Tokenizer(format!(
            "building the BPE tokenizer from GGUF metadata: {e}"
        ))
    })
}

/// The BPE model: vocab (first id wins for duplicate strings) and merges as pairs.
fn model_json(v: &GgufVocab, kind: PreTokenizerKind) -> Result<Value, TextError> {
    let mut vocab = Map::with_capacity(v.tokens.len());
    for (id, tok) in v.tokens.iter().enumerate() {
        if !vocab.contains_key(tok) {
            vocab.insert(tok.clone(), Value::from(id as u32));
        }
    }
    let merges = v
        .merges
        .iter()
        .enumerate()
        .map(|(i, m)| match m.split_once(' ') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok(json!([a, b])),
            _ => Err(TextError::meta(
                "tokenizer.ggml.merges",
                format!("entry {i} ({m:?}) is not two tokens separated by a space"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json!({
        "type": "BPE",
        "dropout": null,
        "unk_token": null,
        "continuing_subword_prefix": null,
        "end_of_word_suffix": null,
        "fuse_unk": false,
        "byte_fallback": false,
        // Llama 3's tokenizer takes a whole pre-token from the vocab before merging.
        "ignore_merges": kind == PreTokenizerKind::Llama3,
        "vocab": vocab,
        "merges": merges,
    }))
}

/// Control/unknown tokens become special added tokens, user-defined ones plain added tokens.
/// bos/eos/unk/pad are special whatever their type says.
fn added_tokens_json(v: &GgufVocab) -> Vec<Value> {
    let forced: HashSet<u32> = [v.bos_id, v.eos_id, v.unk_id, v.pad_id]
        .into_iter()
        .flatten()
        .collect();
    let mut out = Vec::new();
    for (id, (tok, &ty)) in v.tokens.iter().zip(&v.token_types).enumerate() {
        let id = id as u32;
        let special =
            ty == token_type::CONTROL || ty == token_type::UNKNOWN || forced.contains(&id);
        if !special && ty != token_type::USER_DEFINED {
            continue;
        }
        if tok.is_empty() {
            continue;
        }
        out.push(json!({
            "id": id,
            "content": tok,
            "single_word": false,
            "lstrip": false,
            "rstrip": false,
            "normalized": false,
            "special": special,
        }));
    }
    out
}

/// Prepends BOS / appends EOS when the GGUF asks for it; none otherwise.
fn post_processor_json(v: &GgufVocab) -> Value {
    let bos = v.bos_id.filter(|_| v.add_bos);
    let eos = v.eos_id.filter(|_| v.add_eos);
    if bos.is_none() && eos.is_none() {
        return Value::Null;
    }
    let mut special_tokens = Map::new();
    let mut piece = |id: u32| {
        let tok = v.tokens[id as usize].clone();
        special_tokens.insert(
            tok.clone(),
            json!({"id": tok, "ids": [id], "tokens": [tok]}),
        );
        json!({"SpecialToken": {"id": v.tokens[id as usize], "type_id": 0}})
    };
    let (bos_piece, eos_piece) = (bos.map(&mut piece), eos.map(&mut piece));
    let seq = |name: &str| json!({"Sequence": {"id": name, "type_id": 0}});
    let mut single = Vec::new();
    let mut pair = Vec::new();
    for (name, out) in [("A", &mut single), ("B", &mut pair)] {
        out.extend(bos_piece.clone());
        out.push(seq(name));
        out.extend(eos_piece.clone());
    }
    let pair: Vec<Value> = single.iter().cloned().chain(pair).collect();
    json!({
        "type": "TemplateProcessing",
        "single": single,
        "pair": pair,
        "special_tokens": special_tokens,
    })
}
