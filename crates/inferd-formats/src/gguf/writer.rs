//! Builds GGUF v3 (or v2) files in memory: metadata of any type, tensors with
//! a dtype, a row-major shape and raw bytes, each tensor aligned. Used by
//! tests and fixture generators across the workspace.

use std::path::{Path, PathBuf};

use super::meta::{type_id, MetaValue};
use super::parse::{align_up, DEFAULT_ALIGNMENT, MAGIC};
use crate::{DType, FormatError, Result};

/// Label used as the "file" in errors raised while assembling.
const LABEL: &str = "<GgufWriter>";

struct PendingTensor {
    name: String,
    type_id: u32,
    /// GGML order: innermost first.
    ne: Vec<u64>,
    data: Vec<u8>,
}

/// An in-memory GGUF builder. Metadata keeps insertion order; adding a key
/// again replaces its value. The layout alignment is `general.alignment`
/// when it is set to a power of two, 32 otherwise.
pub struct GgufWriter {
    version: u32,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty GGUF v3 file.
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets the version written in the header (the layout of v2 and v3 is the same).
    pub fn set_version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Sets `general.alignment` (u32), which also drives the layout.
    pub fn set_alignment(&mut self, alignment: u32) -> &mut Self {
        self.add_meta("general.alignment", MetaValue::U32(alignment))
    }

    /// Adds (or replaces) a metadata entry.
    pub fn add_meta(&mut self, key: impl Into<String>, value: impl Into<MetaValue>) -> &mut Self {
        let key = key.into();
        let value = value.into();
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.metadata.push((key, value)),
        }
        self
    }

    /// Adds a tensor. `shape` is row-major, outermost first (as read back);
    /// `data` must be exactly `dtype.bytes_for(numel)` bytes with whole blocks per row.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: &[usize],
        data: impl Into<Vec<u8>>,
    ) -> Result<&mut Self> {
        let name = name.into();
        let data = data.into();
        let bad = |reason: String| FormatError::invalid_tensor(Path::new(LABEL), &name, reason);
        let inner = shape.last().copied().unwrap_or(1);
        if inner % dtype.block_len() != 0 {
            return Err(bad(format!(
                "rows of {inner} elements are not whole {dtype} blocks"
            )));
        }
        let numel = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        let want = dtype
            .bytes_for(numel)
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        if data.len() != want {
            return Err(bad(format!(
                "{} bytes given, {dtype} shape {shape:?} needs {want}",
                data.len()
            )));
        }
        let ne = shape.iter().rev().map(|&d| d as u64).collect();
        Ok(self.add_raw_tensor(name, dtype.ggml_id(), ne, data))
    }

    /// Adds an F32 tensor from values.
    pub fn add_f32_tensor(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        values: &[f32],
    ) -> Result<&mut Self> {
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, DType::F32, shape, data)
    }

    /// Adds a tensor with no checks at all: any type id, GGML-order `ne`
    /// (innermost first), any bytes. For building malformed files in tests.
    pub fn add_raw_tensor(
        &mut self,
        name: impl Into<String>,
        type_id: u32,
        ne: Vec<u64>,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors.push(PendingTensor {
            name: name.into(),
            type_id,
            ne,
            data,
        });
        self
    }

    fn alignment(&self) -> usize {
        self.metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .filter(|a| a.is_power_of_two() && *a <= 1 << 20)
            .map_or(DEFAULT_ALIGNMENT, |a| a as usize)
    }

    /// The complete file image.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let alignment = self.alignment();
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut out, key, value)?;
        }
        // Data offsets relative to the data section, each aligned.
        let mut offset = 0usize;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            offsets.push(offset);
            offset = align_up(offset + t.data.len(), alignment).unwrap_or(usize::MAX);
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.type_id.to_le_bytes());
            out.extend_from_slice(&(*off as u64).to_le_bytes());
        }
        let data_start = align_up(out.len(), alignment).unwrap_or(out.len());
        out.resize(data_start, 0);
        for (t, off) in self.tensors.iter().zip(&offsets) {
            out.resize(data_start + off, 0);
            out.extend_from_slice(&t.data);
        }
        Ok(out)
    }

    /// Writes the file image to `path`.
    pub fn write_to_file(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let path = path.as_ref();
        let bytes = self.to_bytes()?;
        std::fs::write(path, bytes).map_err(|e| FormatError::io(path, e))?;
        Ok(path.to_path_buf())
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, key: &str, v: &MetaValue) -> Result<()> {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::String(s) => put_string(out, s),
        MetaValue::Array(items) => {
            let elem = items.first().map_or(type_id::U8, MetaValue::type_id);
            if items.iter().any(|i| i.type_id() != elem) {
                return Err(FormatError::InvalidMetadata {
                    path: PathBuf::from(LABEL),
                    key: key.to_string(),
                    reason: "GGUF arrays must hold values of one type".into(),
                });
            }
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            // Nested arrays write their own element type and length.
            for item in items {
                put_value(out, key, item)?;
            }
        }
    }
    Ok(())
}
