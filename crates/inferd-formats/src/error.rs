//! The one error type of this crate. Every variant carries the file it is
//! about, and the tensor or metadata key where one is involved, so a message
//! alone tells the user which file to fix.

use std::path::{Path, PathBuf};

/// `bytes` as space-separated hex (`47 47 55 46`).
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Errors from reading (or, for the writer, assembling) model files.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    // The cause is in the message and not a `source`, so a chain of causes printed
    // whole does not say it twice.
    #[error("{}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },

    #[error("{}: not a GGUF file (its first bytes are {}, where a GGUF file has \"GGUF\")", path.display(), hex(found))]
    BadMagic { path: PathBuf, found: Vec<u8> },

    #[error("{}: unsupported GGUF version {version} (supported: 2 and 3)", path.display())]
    UnsupportedVersion { path: PathBuf, version: u32 },

    #[error("{}: file truncated while reading {what} at offset {offset}: need {needed} bytes, only {available} left", path.display())]
    Truncated {
        path: PathBuf,
        what: String,
        offset: u64,
        needed: u64,
        available: u64,
    },

    #[error("{}: tensor '{tensor}' runs past the end of the file (offset {offset} + {nbytes} bytes > file size {file_len})", path.display())]
    TensorOutOfBounds {
        path: PathBuf,
        tensor: String,
        offset: u64,
        nbytes: u64,
        file_len: u64,
    },

    #[error("{}: tensor '{tensor}' has unknown type id {type_id}", path.display())]
    UnknownType {
        path: PathBuf,
        tensor: String,
        type_id: u32,
    },

    #[error("{}: tensor '{tensor}' has unsupported type {dtype}", path.display())]
    UnsupportedType {
        path: PathBuf,
        tensor: String,
        dtype: String,
    },

    #[error("{}: tensor '{tensor}' is invalid: {reason}", path.display())]
    InvalidTensor {
        path: PathBuf,
        tensor: String,
        reason: String,
    },

    #[error("{}: tensor '{tensor}' not found", path.display())]
    MissingTensor { path: PathBuf, tensor: String },

    /// `expected` and `found` are descriptions: a shape like "[2, 3]" or a
    /// phrase like "a matrix".
    #[error("{}: tensor '{tensor}' has shape {found}, expected {expected}", path.display())]
    BadShape {
        path: PathBuf,
        tensor: String,
        expected: String,
        found: String,
    },

    #[error("{}: metadata key '{key}' is missing", path.display())]
    MissingMetadata { path: PathBuf, key: String },

    #[error("{}: metadata key '{key}' is invalid: {reason}", path.display())]
    InvalidMetadata {
        path: PathBuf,
        key: String,
        reason: String,
    },

    #[error("{}: malformed file: {reason}", path.display())]
    Malformed { path: PathBuf, reason: String },

    #[error("{}: invalid JSON: {reason}", path.display())]
    Json { path: PathBuf, reason: String },
}

impl FormatError {
    /// The file this error is about.
    pub fn path(&self) -> &Path {
        match self {
            FormatError::Io { path, .. }
            | FormatError::BadMagic { path, .. }
            | FormatError::UnsupportedVersion { path, .. }
            | FormatError::Truncated { path, .. }
            | FormatError::TensorOutOfBounds { path, .. }
            | FormatError::UnknownType { path, .. }
            | FormatError::UnsupportedType { path, .. }
            | FormatError::InvalidTensor { path, .. }
            | FormatError::MissingTensor { path, .. }
            | FormatError::BadShape { path, .. }
            | FormatError::MissingMetadata { path, .. }
            | FormatError::InvalidMetadata { path, .. }
            | FormatError::Malformed { path, .. }
            | FormatError::Json { path, .. } => path,
        }
    }

    pub(crate) fn io(path: &Path, cause: std::io::Error) -> FormatError {
        FormatError::Io {
            path: path.to_path_buf(),
            cause,
        }
    }

    pub(crate) fn malformed(path: &Path, reason: impl Into<String>) -> FormatError {
        FormatError::Malformed {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid_tensor(
        path: &Path,
        tensor: &str,
        reason: impl Into<String>,
    ) -> FormatError {
        FormatError::InvalidTensor {
            path: path.to_path_buf(),
            tensor: tensor.to_string(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_file_and_tensor() {
        let e = FormatError::TensorOutOfBounds {
            path: PathBuf::from("model.gguf"),
            tensor: "blk.0.attn_q.weight".into(),
            offset: 1234,
            nbytes: 4096,
            file_len: 2048,
        };
        assert_eq!(
            e.to_string(),
            "model.gguf: tensor 'blk.0.attn_q.weight' runs past the end of the file \
             (offset 1234 + 4096 bytes > file size 2048)"
        );
        assert_eq!(e.path(), Path::new("model.gguf"));
    }
}
