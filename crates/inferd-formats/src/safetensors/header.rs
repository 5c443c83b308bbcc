//! One safetensors file: 8-byte little-endian header length, a JSON header
//! mapping tensor names to {dtype, shape, data_offsets}, then the data.
//! Every entry is validated against the file size here.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::{DType, FormatError, Result};

/// Largest JSON header accepted (the reference implementation's limit).
const MAX_HEADER_BYTES: u64 = 100 << 20;

/// One tensor of a safetensors file, validated to lie inside it.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub name: String,
    /// The type, or the safetensors dtype string when inferd cannot read it.
    pub dtype: std::result::Result<DType, String>,
    /// Row-major, outermost first.
    pub shape: Vec<usize>,
    /// Absolute file offset.
    pub start: usize,
    pub nbytes: usize,
}

/// The parsed header of one file.
pub(crate) struct Header {
    /// Tensors sorted by data offset.
    pub entries: Vec<Entry>,
    /// The `__metadata__` string map, if any.
    pub metadata: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

/// Bytes per element of a safetensors dtype; `None` for unknown strings.
fn elem_size(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" => 1,
        "I16" | "U16" | "F16" | "BF16" => 2,
        "I32" | "U32" | "F32" => 4,
        "I64" | "U64" | "F64" => 8,
        _ => return None,
    })
}

fn readable(dtype: &str) -> Option<DType> {
    Some(match dtype {
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        _ => return None,
    })
}

/// Parses and validates the header of `buf`, the whole file at `path`.
pub(crate) fn parse(buf: &[u8], path: &Path) -> Result<Header> {
    let truncated = |what: &str, offset: u64, needed: u64| FormatError::Truncated {
        path: path.to_path_buf(),
        what: what.to_string(),
        offset,
        needed,
        available: (buf.len() as u64).saturating_sub(offset),
    };
    let Some(len_bytes) = buf.get(..8) else {
        return Err(truncated("safetensors header length", 0, 8));
    };
    let mut len8 = [0u8; 8];
    len8.copy_from_slice(len_bytes);
    let header_len = u64::from_le_bytes(len8);
    if header_len > MAX_HEADER_BYTES {
        return Err(FormatError::malformed(
            path,
            format!("safetensors header claims {header_len} bytes (limit {MAX_HEADER_BYTES})"),
        ));
    }
    let data_start = 8 + header_len as usize;
    let Some(json) = buf.get(8..data_start) else {
        return Err(truncated("safetensors JSON header", 8, header_len));
    };
    let map: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| FormatError::Json {
            path: path.to_path_buf(),
            reason: format!("safetensors header: {e}"),
        })?;

    let mut metadata = BTreeMap::new();
    let mut entries = Vec::with_capacity(map.len());
    for (name, value) in map {
        if name == "__metadata__" {
            metadata = serde_json::from_value(value).map_err(|e| FormatError::Json {
                path: path.to_path_buf(),
                reason: format!("safetensors __metadata__: {e}"),
            })?;
            continue;
        }
        let raw: RawEntry = serde_json::from_value(value).map_err(|e| FormatError::Json {
            path: path.to_path_buf(),
            reason: format!("safetensors entry for tensor '{name}': {e}"),
        })?;
        entries.push(validate(name, raw, data_start, buf.len(), path)?);
    }
    entries.sort_by_key(|e| e.start);
    Ok(Header { entries, metadata })
}

fn validate(
    name: String,
    raw: RawEntry,
    data_start: usize,
    file_len: usize,
    path: &Path,
) -> Result<Entry> {
    let Some(size) = elem_size(&raw.dtype) else {
        return Err(FormatError::UnsupportedType {
            path: path.to_path_buf(),
            tensor: name,
            dtype: raw.dtype,
        });
    };
    let bad = |reason: String| FormatError::invalid_tensor(path, &name, reason);
    let expected = raw
        .shape
        .iter()
        .try_fold(size, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad(format!("byte size of shape {:?} overflows", raw.shape)))?;
    let [begin, end] = raw.data_offsets;
    if begin > end {
        return Err(bad(format!("data_offsets [{begin}, {end}] are reversed")));
    }
    let nbytes = end - begin;
    if nbytes != expected as u64 {
        return Err(bad(format!(
            "data_offsets [{begin}, {end}] hold {nbytes} bytes, {} shape {:?} needs {expected}",
            raw.dtype, raw.shape
        )));
    }
    let start = (data_start as u64).saturating_add(begin);
    if start.saturating_add(nbytes) > file_len as u64 {
        return Err(FormatError::TensorOutOfBounds {
            path: path.to_path_buf(),
            tensor: name,
            offset: start,
            nbytes,
            file_len: file_len as u64,
        });
    }
    Ok(Entry {
        dtype: readable(&raw.dtype).ok_or(raw.dtype),
        name,
        shape: raw.shape,
        // start + nbytes <= file_len, so both fit a usize.
        start: start as usize,
        nbytes: nbytes as usize,
    })
}
