//! How a vocabulary spells bytes in its pieces, and so the exact bytes a token stands
//! for (what logprobs' `bytes` and a grammar's token trie need; decoding one id alone is
//! not it: a decoder may strip a leading space or replace a partial character).
//!
//! - a special token (`<|im_end|>`): no text bytes (its name is not reply text);
//! - any other added token (`<tool_call>` in Qwen2.5): its content as written;
//! - a byte-level BPE piece (GPT-2 style, `Ġthe`): each char mapped back to its byte;
//! - a SentencePiece piece with byte fallback (`▁the`, `<0x0A>`): `▁` is a space and
//!   `<0xNN>` the byte NN, anything else its UTF-8.

use crate::byte_level;

/// How the tokenizer writes bytes in its pieces, told from its decoder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PieceKind {
    /// GPT-2 byte-to-unicode: every byte is one printable char.
    ByteLevel,
    /// SentencePiece: `▁` for space, `<0xNN>` for raw bytes.
    ByteFallback,
    /// Neither: the decoder as JSON (no exact bytes for a piece).
    Other(String),
}

impl PieceKind {
    pub fn of(inner: &tokenizers::Tokenizer) -> PieceKind {
        let decoder = inner
            .get_decoder()
            .map(|d| serde_json::to_value(d).unwrap_or_default())
            .unwrap_or_default()
            .to_string();
        if decoder.contains("\"ByteLevel\"") {
            PieceKind::ByteLevel
        } else if decoder.contains("\"ByteFallback\"") {
            PieceKind::ByteFallback
        } else {
            PieceKind::Other(decoder)
        }
    }

    /// The bytes `piece` spells (`None`: not a piece of this kind).
    pub fn bytes(&self, piece: &str) -> Option<Vec<u8>> {
        match self {
            PieceKind::ByteLevel => byte_level::piece_bytes(piece),
            PieceKind::ByteFallback => Some(sentencepiece_bytes(piece)),
            PieceKind::Other(_) => None,
        }
    }
}

/// `▁` is a space, `<0xNN>` the byte NN, anything else its UTF-8.
fn sentencepiece_bytes(piece: &str) -> Vec<u8> {
    if piece.len() == 6 && piece.starts_with("<0x") && piece.ends_with('>') {
        if let Ok(b) = u8::from_str_radix(&piece[3..5], 16) {
            return vec![b];
        }
    }
    piece.replace('\u{2581}', " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentencepiece_pieces() {
        let k = PieceKind::ByteFallback;
        assert_eq!(k.bytes("\u{2581}the").unwrap(), b" the");
        assert_eq!(k.bytes("<0x0A>").unwrap(), b"\n");
        assert_eq!(k.bytes("<0xZZ>").unwrap(), b"<0xZZ>");
        assert_eq!(k.bytes("\u{e8}").unwrap(), "\u{e8}".as_bytes());
    }

    #[test]
    fn byte_level_pieces() {
        let k = PieceKind::ByteLevel;
        assert_eq!(k.bytes("\u{120}the").unwrap(), b" the");
        assert_eq!(k.bytes("\u{e8}").unwrap(), vec![0xE8]);
        assert_eq!(PieceKind::Other("{}".into()).bytes("the"), None);
    }
}
