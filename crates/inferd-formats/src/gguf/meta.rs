//! GGUF metadata values and their on-disk type ids.

/// One metadata value. Arrays are homogeneous on disk and may nest.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<MetaValue>),
}

/// GGUF value type ids (`gguf_type`).
pub(crate) mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

impl MetaValue {
    /// The GGUF type id of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            MetaValue::U8(_) => type_id::U8,
            MetaValue::I8(_) => type_id::I8,
            MetaValue::U16(_) => type_id::U16,
            MetaValue::I16(_) => type_id::I16,
            MetaValue::U32(_) => type_id::U32,
            MetaValue::I32(_) => type_id::I32,
            MetaValue::U64(_) => type_id::U64,
            MetaValue::I64(_) => type_id::I64,
            MetaValue::F32(_) => type_id::F32,
            MetaValue::F64(_) => type_id::F64,
            MetaValue::Bool(_) => type_id::BOOL,
            MetaValue::String(_) => type_id::STRING,
            MetaValue::Array(_) => type_id::ARRAY,
        }
    }

    /// A short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F32(_) => "f32",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::String(_) => "string",
            MetaValue::Array(_) => "array",
        }
    }

    /// Any integer type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type whose value fits an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => i64::try_from(v).ok(),
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v),
            _ => None,
        }
    }

    /// A float, or an integer converted to a float.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[MetaValue]> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl From<&str> for MetaValue {
    fn from(s: &str) -> MetaValue {
        MetaValue::String(s.to_string())
    }
}

impl From<String> for MetaValue {
    fn from(s: String) -> MetaValue {
        MetaValue::String(s)
    }
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for MetaValue {
            fn from(x: $t) -> MetaValue {
                MetaValue::$v(x)
            }
        }
    )*};
}
from_scalar!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64, bool => Bool);

impl<T: Into<MetaValue>> From<Vec<T>> for MetaValue {
    fn from(v: Vec<T>) -> MetaValue {
        MetaValue::Array(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        assert_eq!(MetaValue::I32(-1).as_u64(), None);
        assert_eq!(MetaValue::I32(7).as_u64(), Some(7));
        assert_eq!(MetaValue::U64(u64::MAX).as_i64(), None);
        assert_eq!(MetaValue::U16(9).as_f64(), Some(9.0));
        assert_eq!(MetaValue::F32(0.5).as_f64(), Some(0.5));
        assert_eq!(MetaValue::String("x".into()).as_u64(), None);
        assert_eq!(MetaValue::Bool(true).as_u64(), None);
        assert_eq!(MetaValue::from(vec!["a", "b"]).as_array().unwrap().len(), 2);
    }
}
