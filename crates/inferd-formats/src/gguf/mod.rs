//! GGUF v2/v3: a memory-mapped reader with zero-copy tensor views, and a
//! small writer for building files in tests and fixtures.

mod cursor;
mod getters;
mod meta;
mod parse;
mod writer;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::bytes::FileBytes;
use crate::{DType, FormatError, Result, TensorSource, TensorView};

pub use meta::MetaValue;
pub use parse::DEFAULT_ALIGNMENT;
pub use writer::GgufWriter;

/// Where one tensor lives in a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// Row-major, outermost first: the reverse of GGML's `ne`. A linear
    /// weight stored with ne = [in, out] has shape [out, in].
    pub shape: Vec<usize>,
    /// Absolute offset of the first byte in the file.
    pub offset: usize,
    /// Size in bytes (`dtype.bytes_for(numel)`), checked to lie within the file.
    pub nbytes: usize,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// An open, validated GGUF file. All tensors were checked at open time to
/// have a supported type, whole blocks per row, and bytes inside the file.
pub struct GgufFile {
    bytes: FileBytes,
    path: PathBuf,
    version: u32,
    alignment: usize,
    data_start: usize,
    metadata: BTreeMap<String, MetaValue>,
    tensors: Vec<TensorInfo>,
    /// Tensor name -> index into `tensors`.
    index: HashMap<String, usize>,
}

impl GgufFile {
    /// Memory-maps and validates the GGUF file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let bytes = FileBytes::map(path)?;
        GgufFile::from_file_bytes(bytes, path.to_path_buf())
    }

    /// Parses a GGUF image held in memory; `label` stands for the path in
    /// error messages.
    pub fn from_bytes(label: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile> {
        GgufFile::from_file_bytes(FileBytes::Owned(bytes), label.into())
    }

    fn from_file_bytes(bytes: FileBytes, path: PathBuf) -> Result<GgufFile> {
        let p = parse::parse(&bytes, &path)?;
        Ok(GgufFile {
            bytes,
            path,
            version: p.version,
            alignment: p.alignment,
            data_start: p.data_start,
            metadata: p.metadata,
            tensors: p.tensors,
            index: p.index,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> usize {
        self.data_start
    }

    /// Size of the file in bytes.
    pub fn file_len(&self) -> usize {
        self.bytes.len()
    }

    pub fn metadata(&self) -> &BTreeMap<String, MetaValue> {
        &self.metadata
    }

    pub fn meta(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    /// `general.architecture` (e.g. "llama", "qwen2").
    pub fn architecture(&self) -> Result<&str> {
        self.meta_str("general.architecture")
    }

    /// Tensor infos in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Whether a tensor called `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// A zero-copy view of tensor `name`; `MissingTensor` naming the file if absent.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| FormatError::MissingTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
            })?;
        Ok(TensorView {
            name: &info.name,
            dtype: info.dtype,
            shape: &info.shape,
            // In bounds: checked when the file was parsed.
            data: &self.bytes[info.offset..info.offset + info.nbytes],
            file: &self.path,
        })
    }
}

impl TensorSource for GgufFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn tensor(&self, name: &str) -> Result<TensorView<'_>> {
        GgufFile::tensor(self, name)
    }

    fn has(&self, name: &str) -> bool {
        GgufFile::has(self, name)
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}
