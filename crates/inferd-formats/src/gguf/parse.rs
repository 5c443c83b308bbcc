//! Parsing of a GGUF v2/v3 file: header, metadata, tensor infos, and the
//! validation of every tensor's type, shape and byte range.
//!
//! Layout (little-endian): magic "GGUF", u32 version, u64 tensor count,
//! u64 metadata count, metadata entries (string key, u32 type, value),
//! tensor infos (string name, u32 n_dims, u64 ne[n_dims] innermost first,
//! u32 ggml type, u64 offset relative to the data section), padding to the
//! alignment, then the data section.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::cursor::Cursor;
use super::meta::{type_id, MetaValue};
use super::TensorInfo;
use crate::{DType, FormatError, Result};

pub(crate) const MAGIC: &[u8; 4] = b"GGUF";
/// Alignment of the data section and of each tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// GGML tensors have at most four dimensions.
const MAX_DIMS: u32 = 4;
/// Deepest array nesting accepted (real files nest at most once).
const MAX_ARRAY_DEPTH: usize = 8;
/// Largest `general.alignment` accepted.
const MAX_ALIGNMENT: u64 = 1 << 20;

/// Everything read from a GGUF file except the data itself.
pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: usize,
    /// Absolute file offset of the data section.
    pub data_start: usize,
    pub metadata: BTreeMap<String, MetaValue>,
    pub tensors: Vec<TensorInfo>,
    pub index: HashMap<String, usize>,
}

/// Parses and validates `buf`, the whole file at `path`.
pub(crate) fn parse(buf: &[u8], path: &Path) -> Result<Parsed> {
    let mut c = Cursor::new(buf, path);
    let version = read_header(&mut c)?;
    let tensor_count = c.u64("tensor count")?;
    let kv_count = c.u64("metadata count")?;

    // Smallest entry: u64 key length + u32 type + 1 byte of value.
    c.set_context("metadata".into());
    let n_kv = c.check_count("metadata entries", kv_count, 13)?;
    let metadata = read_metadata(&mut c, n_kv)?;
    let alignment = read_alignment(&metadata, path)?;

    // Smallest tensor info: u64 name length + u32 n_dims + u32 type + u64 offset.
    c.set_context("tensor infos".into());
    let n_tensors = c.check_count("tensor infos", tensor_count, 24)?;
    let mut raw = Vec::with_capacity(n_tensors);
    for i in 0..n_tensors {
        raw.push(read_tensor_info(&mut c, i)?);
    }

    let data_start = align_up(c.pos(), alignment)
        .ok_or_else(|| FormatError::malformed(path, "data section offset overflows".to_string()))?;
    let mut tensors = Vec::with_capacity(raw.len());
    let mut index = HashMap::with_capacity(raw.len());
    for r in raw {
        let info = validate_tensor(r, data_start, alignment, buf.len(), path)?;
        if index.insert(info.name.clone(), tensors.len()).is_some() {
            return Err(FormatError::invalid_tensor(
                path,
                &info.name,
                "name appears twice",
            ));
        }
        tensors.push(info);
    }
    Ok(Parsed {
        version,
        alignment,
        data_start,
        metadata,
        tensors,
        index,
    })
}

fn read_header(c: &mut Cursor<'_>) -> Result<u32> {
    let path = c.path();
    if c.remaining() < 4 {
        let head = c.take(c.remaining() as u64, "magic")?;
        if !MAGIC.starts_with(head) {
            return Err(FormatError::BadMagic {
                path: path.to_path_buf(),
                found: head.to_vec(),
            });
        }
        return Err(c.truncated("magic", 4));
    }
    let magic = c.take(4, "magic")?;
    if magic != MAGIC {
        return Err(FormatError::BadMagic {
            path: path.to_path_buf(),
            found: magic.to_vec(),
        });
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return Err(FormatError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
        });
    }
    Ok(version)
}

fn read_metadata(c: &mut Cursor<'_>, n_kv: usize) -> Result<BTreeMap<String, MetaValue>> {
    let mut metadata = BTreeMap::new();
    for i in 0..n_kv {
        c.set_context(format!("metadata entry #{i}"));
        let key = c.string("key")?;
        c.set_context(format!("metadata '{key}'"));
        let ty = c.u32("value type")?;
        let value = read_value(c, ty, 0)?;
        if metadata.contains_key(&key) {
            return Err(FormatError::InvalidMetadata {
                path: c.path().to_path_buf(),
                key,
                reason: "key appears twice".into(),
            });
        }
        metadata.insert(key, value);
    }
    Ok(metadata)
}

/// Smallest encoded size of one value of type `ty`; `None` for unknown types.
fn min_value_size(ty: u32) -> Option<u64> {
    Some(match ty {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 | type_id::STRING => 8,
        type_id::ARRAY => 12,
        _ => return None,
    })
}

fn read_value(c: &mut Cursor<'_>, ty: u32, depth: usize) -> Result<MetaValue> {
    Ok(match ty {
        type_id::U8 => MetaValue::U8(c.u8("u8")?),
        type_id::I8 => MetaValue::I8(c.u8("i8")? as i8),
        type_id::U16 => MetaValue::U16(c.u16("u16")?),
        type_id::I16 => MetaValue::I16(c.u16("i16")? as i16),
        type_id::U32 => MetaValue::U32(c.u32("u32")?),
        type_id::I32 => MetaValue::I32(c.u32("i32")? as i32),
        type_id::U64 => MetaValue::U64(c.u64("u64")?),
        type_id::I64 => MetaValue::I64(c.u64("i64")? as i64),
        type_id::F32 => MetaValue::F32(c.f32("f32")?),
        type_id::F64 => MetaValue::F64(c.f64("f64")?),
        type_id::BOOL => match c.u8("bool")? {
            0 => MetaValue::Bool(false),
            1 => MetaValue::Bool(true),
            b => {
                return Err(FormatError::malformed(
                    c.path(),
                    format!("{}: bool byte is {b}, expected 0 or 1", c.context()),
                ))
            }
        },
        type_id::STRING => MetaValue::String(c.string("string")?),
        type_id::ARRAY => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(FormatError::malformed(
                    c.path(),
                    format!(
                        "{}: arrays nested deeper than {MAX_ARRAY_DEPTH}",
                        c.context()
                    ),
                ));
            }
            let elem_ty = c.u32("array element type")?;
            let len = c.u64("array length")?;
            let min = min_value_size(elem_ty).ok_or_else(|| unknown_value_type(c, elem_ty))?;
            let n = c.check_count("array elements", len, min)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_value(c, elem_ty, depth + 1)?);
            }
            MetaValue::Array(items)
        }
        other => return Err(unknown_value_type(c, other)),
    })
}

fn unknown_value_type(c: &Cursor<'_>, ty: u32) -> FormatError {
    FormatError::malformed(
        c.path(),
        format!("{}: unknown value type id {ty}", c.context()),
    )
}

fn read_alignment(metadata: &BTreeMap<String, MetaValue>, path: &Path) -> Result<usize> {
    const KEY: &str = "general.alignment";
    let Some(v) = metadata.get(KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    match v.as_u64() {
        Some(a) if a.is_power_of_two() && a <= MAX_ALIGNMENT => Ok(a as usize),
        _ => Err(FormatError::InvalidMetadata {
            path: path.to_path_buf(),
            key: KEY.into(),
            reason: format!("expected a power of two up to {MAX_ALIGNMENT}, found {v:?}"),
        }),
    }
}

/// A tensor info as stored, before validation.
struct RawTensorInfo {
    name: String,
    /// GGML order: innermost first.
    ne: Vec<u64>,
    type_id: u32,
    /// Relative to the data section.
    offset: u64,
}

fn read_tensor_info(c: &mut Cursor<'_>, i: usize) -> Result<RawTensorInfo> {
    c.set_context(format!("tensor info #{i}"));
    let name = c.string("name")?;
    c.set_context(format!("tensor info '{name}'"));
    let n_dims = c.u32("n_dims")?;
    if n_dims > MAX_DIMS {
        return Err(FormatError::invalid_tensor(
            c.path(),
            &name,
            format!("{n_dims} dimensions (at most {MAX_DIMS})"),
        ));
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        ne.push(c.u64("dimension")?);
    }
    let type_id = c.u32("type")?;
    let offset = c.u64("offset")?;
    Ok(RawTensorInfo {
        name,
        ne,
        type_id,
        offset,
    })
}

fn validate_tensor(
    r: RawTensorInfo,
    data_start: usize,
    alignment: usize,
    file_len: usize,
    path: &Path,
) -> Result<TensorInfo> {
    let dtype = match DType::from_ggml_id(r.type_id) {
        Some(d) => d,
        None => {
            return Err(match ggml_type_name(r.type_id) {
                Some(known) => FormatError::UnsupportedType {
                    path: path.to_path_buf(),
                    tensor: r.name,
                    dtype: format!("{known} (ggml type {})", r.type_id),
                },
                None => FormatError::UnknownType {
                    path: path.to_path_buf(),
                    tensor: r.name,
                    type_id: r.type_id,
                },
            })
        }
    };
    // Row-major, outermost first.
    let mut shape = Vec::with_capacity(r.ne.len());
    for &d in r.ne.iter().rev() {
        let d = usize::try_from(d).map_err(|_| {
            FormatError::invalid_tensor(path, &r.name, format!("dimension {d} is too large"))
        })?;
        shape.push(d);
    }
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            FormatError::invalid_tensor(
                path,
                &r.name,
                format!("element count of shape {shape:?} overflows"),
            )
        })?;
    let inner = shape.last().copied().unwrap_or(1);
    if inner % dtype.block_len() != 0 {
        return Err(FormatError::invalid_tensor(
            path,
            &r.name,
            format!(
                "rows of {inner} elements are not a whole number of {dtype} blocks ({} elements each)",
                dtype.block_len()
            ),
        ));
    }
    let nbytes = dtype.bytes_for(numel).ok_or_else(|| {
        FormatError::invalid_tensor(
            path,
            &r.name,
            format!("byte size of shape {shape:?} overflows"),
        )
    })?;
    if r.offset % alignment as u64 != 0 {
        return Err(FormatError::invalid_tensor(
            path,
            &r.name,
            format!(
                "data offset {} is not a multiple of the alignment {alignment}",
                r.offset
            ),
        ));
    }
    let start = (data_start as u64).saturating_add(r.offset);
    let end = start.saturating_add(nbytes as u64);
    if end > file_len as u64 {
        return Err(FormatError::TensorOutOfBounds {
            path: path.to_path_buf(),
            tensor: r.name,
            offset: start,
            nbytes: nbytes as u64,
            file_len: file_len as u64,
        });
    }
    Ok(TensorInfo {
        name: r.name,
        dtype,
        shape,
        // start < end <= file_len, so it fits a usize.
        offset: start as usize,
        nbytes,
    })
}

pub(crate) fn align_up(pos: usize, alignment: usize) -> Option<usize> {
    Some(pos.checked_add(alignment - 1)? / alignment * alignment)
}

/// Names of GGML types inferd does not read, for clearer messages.
fn ggml_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        6 => "Q5_0",
        7 => "Q5_1",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}
