//! Tokenizers, incremental detokenization and chat templates.
//!
//! - [`Tokenizer`]: HF `tokenizer.json` or a byte-level BPE built from GGUF metadata.
//! - [`IncrementalDecoder`]: streaming ids -> text that is complete UTF-8 and never changes.
//! - [`ChatTemplate`]: Jinja chat templates rendered like HF transformers does.

mod bpe_build;
pub mod byte_level;
pub mod chat;
mod error;
pub mod gguf_vocab;
mod incremental;
pub mod pieces;
pub mod pretok;
pub mod special;
mod tokenizer;

pub use chat::{ChatInput, ChatTemplate};
pub use error::TextError;
pub use gguf_vocab::GgufVocab;
pub use incremental::IncrementalDecoder;
pub use pieces::PieceKind;
pub use pretok::PreTokenizerKind;
pub use tokenizer::Tokenizer;

#[cfg(test)]
mod test_support;
