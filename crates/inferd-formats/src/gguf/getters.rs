//! Typed metadata getters. `meta_*` fail with `MissingMetadata` when the key
//! is absent; `opt_*` return `Ok(None)` then. Both fail with
//! `InvalidMetadata` (naming file and key) when the value has the wrong type.
//! Integer getters accept any integer type whose value fits; float getters
//! also accept integers.

use super::{GgufFile, MetaValue};
use crate::{FormatError, Result};

fn to_u32(v: &MetaValue) -> Option<u32> {
    v.as_u64().and_then(|x| u32::try_from(x).ok())
}
fn to_usize(v: &MetaValue) -> Option<usize> {
    v.as_u64().and_then(|x| usize::try_from(x).ok())
}
fn to_f32(v: &MetaValue) -> Option<f32> {
    v.as_f64().map(|x| x as f32)
}
fn to_i32(v: &MetaValue) -> Option<i32> {
    v.as_i64().and_then(|x| i32::try_from(x).ok())
}
fn array_of<'a, T>(v: &'a MetaValue, f: impl Fn(&'a MetaValue) -> Option<T>) -> Option<Vec<T>> {
    v.as_array()?.iter().map(f).collect()
}
fn str_array(v: &MetaValue) -> Option<Vec<&str>> {
    array_of(v, MetaValue::as_str)
}
fn i32_array(v: &MetaValue) -> Option<Vec<i32>> {
    array_of(v, to_i32)
}
fn u32_array(v: &MetaValue) -> Option<Vec<u32>> {
    array_of(v, to_u32)
}
fn f32_array(v: &MetaValue) -> Option<Vec<f32>> {
    array_of(v, to_f32)
}

/// A short description of a value for messages: type and, for scalars, value.
fn describe(v: &MetaValue) -> String {
    match v {
        MetaValue::Array(a) => match a.first() {
            Some(first) => format!("array of {} {}", a.len(), first.type_name()),
            None => "empty array".to_string(),
        },
        MetaValue::String(s) if s.len() > 40 => format!("string of {} bytes", s.len()),
        MetaValue::String(s) => format!("string {s:?}"),
        other => format!("{} {other:?}", other.type_name()),
    }
}

macro_rules! getters {
    ($($req:ident, $opt:ident -> $t:ty, $want:literal, $conv:expr;)*) => {$(
        #[doc = concat!("Metadata `key` as ", $want, "; `MissingMetadata` when absent.")]
        pub fn $req(&self, key: &str) -> Result<$t> {
            let v = self.$opt(key)?;
            self.required(key, v)
        }

        #[doc = concat!("Metadata `key` as ", $want, "; `Ok(None)` when absent.")]
        pub fn $opt(&self, key: &str) -> Result<Option<$t>> {
            self.typed(key, $want, $conv)
        }
    )*};
}

impl GgufFile {
    fn typed<'s, T>(
        &'s self,
        key: &str,
        want: &str,
        conv: impl FnOnce(&'s MetaValue) -> Option<T>,
    ) -> Result<Option<T>> {
        let Some(v) = self.metadata.get(key) else {
            return Ok(None);
        };
        match conv(v) {
            Some(t) => Ok(Some(t)),
            None => Err(FormatError::InvalidMetadata {
                path: self.path.clone(),
                key: key.to_string(),
                reason: format!("expected {want}, found {}", describe(v)),
            }),
        }
    }

    fn required<T>(&self, key: &str, v: Option<T>) -> Result<T> {
        v.ok_or_else(|| FormatError::MissingMetadata {
            path: self.path.clone(),
            key: key.to_string(),
        })
    }

    getters! {
        meta_u64, opt_u64 -> u64, "a non-negative integer", MetaValue::as_u64;
        meta_u32, opt_u32 -> u32, "an integer in u32 range", to_u32;
        meta_usize, opt_usize -> usize, "a non-negative integer", to_usize;
        meta_i64, opt_i64 -> i64, "an integer", MetaValue::as_i64;
        meta_f32, opt_f32 -> f32, "a number", to_f32;
        meta_f64, opt_f64 -> f64, "a number", MetaValue::as_f64;
        meta_str, opt_str -> &str, "a string", MetaValue::as_str;
        meta_bool, opt_bool -> bool, "a bool", MetaValue::as_bool;
        meta_str_array, opt_str_array -> Vec<&str>, "an array of strings", str_array;
        meta_i32_array, opt_i32_array -> Vec<i32>, "an array of integers in i32 range", i32_array;
        meta_u32_array, opt_u32_array -> Vec<u32>, "an array of integers in u32 range", u32_array;
        meta_f32_array, opt_f32_array -> Vec<f32>, "an array of numbers", f32_array;
    }
}
