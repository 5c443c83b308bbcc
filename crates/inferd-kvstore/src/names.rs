//! File names inside an identity directory:
//!
//! - blocks: `b-<key as 16 lowercase hex>.kvb`
//! - records: `r-<kind>-<id as lowercase hex of its UTF-8>.rec` (any id is safe)
//! - temp files: `.<final name>.<pid>.<counter>.tmp` (removed at open)
//!
//! Anything else in the directory is ignored.

use std::sync::atomic::{AtomicU64, Ordering};

/// Longest record kind (ASCII `a-z`, `0-9`, `_`).
pub const MAX_RECORD_KIND: usize = 32;

/// Longest record id in bytes (hex doubles it; file names are limited to 255 bytes).
pub const MAX_RECORD_ID_BYTES: usize = 100;

const TEMP_SUFFIX: &str = ".tmp";

/// The file name of block `key`.
pub(crate) fn block_name(key: u64) -> String {
    format!("b-{key:016x}.kvb")
}

/// The key of a block file name, if `name` is one.
pub(crate) fn parse_block_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("b-")?.strip_suffix(".kvb")?;
    if hex.len() != 16 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Checks a record kind.
pub(crate) fn check_kind(kind: &str) -> Result<(), &'static str> {
    if kind.is_empty() || kind.len() > MAX_RECORD_KIND {
        return Err("kind must be 1 to 32 characters");
    }
    if !kind
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
    {
        return Err("kind may only contain a-z, 0-9 and _");
    }
    Ok(())
}

/// The file name of record `kind`/`id`.
pub(crate) fn record_name(kind: &str, id: &str) -> Result<String, &'static str> {
    check_kind(kind)?;
    if id.is_empty() || id.len() > MAX_RECORD_ID_BYTES {
        return Err("id must be 1 to 100 bytes");
    }
    let mut name = format!("r-{kind}-");
    for b in id.bytes() {
        name.push_str(&format!("{b:02x}"));
    }
    name.push_str(".rec");
    Ok(name)
}

/// The id of a record file name of kind `kind`, if `name` is one.
pub(crate) fn parse_record_name(name: &str, kind: &str) -> Option<String> {
    let hex = name
        .strip_prefix("r-")?
        .strip_prefix(kind)?
        .strip_prefix('-')?
        .strip_suffix(".rec")?;
    if hex.is_empty() || hex.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            let pair = hex.get(i..i + 2)?;
            if !pair.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return None;
            }
            u8::from_str_radix(pair, 16).ok()
        })
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// True for the names of temp files (left behind by a crash when found at open).
pub(crate) fn is_temp(name: &str) -> bool {
    name.ends_with(TEMP_SUFFIX)
}

/// A fresh temp file name for writing `final_name`, unique within this process
/// and across processes sharing the directory.
pub(crate) fn temp_name(final_name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(".{final_name}.{}.{n}{TEMP_SUFFIX}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_names_round_trip() {
        for key in [0, 1, 0xdead_beef, u64::MAX] {
            assert_eq!(parse_block_name(&block_name(key)), Some(key));
        }
        assert_eq!(parse_block_name("b-00000000000000ZZ.kvb"), None);
        assert_eq!(parse_block_name("b-0000000000000000A.kvb"), None);
        assert_eq!(parse_block_name("b-00000000000000AB.kvb"), None);
        assert_eq!(parse_block_name("x-0000000000000000.kvb"), None);
    }

    #[test]
    fn record_names_round_trip_any_id() {
        for id in ["a", "agent/../../etc", "séance 1", "x\0y", &"z".repeat(100)] {
            let name = record_name("session", id).unwrap();
            assert!(name.len() < 255);
            assert!(!name.contains('/'));
            assert_eq!(parse_record_name(&name, "session").as_deref(), Some(id));
            assert_eq!(parse_record_name(&name, "context"), None);
        }
        // A kind that is a prefix of another kind does not match its files.
        let name = record_name("ses_x", "a").unwrap();
        assert_eq!(parse_record_name(&name, "ses"), None);
    }

    #[test]
    fn bad_record_names_are_refused() {
        assert!(record_name("", "a").is_err());
        assert!(record_name("Session", "a").is_err());
        assert!(record_name("a-b", "a").is_err());
        assert!(record_name("session", "").is_err());
        assert!(record_name("session", &"z".repeat(101)).is_err());
    }

    #[test]
    fn temp_names_are_unique_and_recognised() {
        let a = temp_name(&block_name(1));
        let b = temp_name(&block_name(1));
        assert_ne!(a, b);
        assert!(is_temp(&a));
        assert!(!is_temp(&block_name(1)));
        assert_eq!(parse_block_name(&a), None);
    }
}
