//! File names inside an identity directory:
//!
//! - blocks: `b-<key as 16 lowercase hex>.kvb`; snapshots (a store of snapshots):
//!   `s-<key as 16 lowercase hex>.kvs`
//! - records: `r-<kind>-<id as lowercase hex of its UTF-8>.rec` for ids of up to
//!   [`HEX_ID_BYTES`] bytes, `r-<kind>-h<SHA-256 of the id, 64 lowercase hex>.rec` for
//!   longer ones (whose id is then read from the header); any id is safe
//! - temp files: `.<final name>.<pid>.<counter>.tmp` (removed at open)
//!
//! Anything else in the directory is ignored.

use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use crate::block_file::BlobKind;

/// Longest record kind (ASCII `a-z`, `0-9`, `_`).
pub const MAX_RECORD_KIND: usize = 32;

/// Longest record id in bytes.
pub const MAX_RECORD_ID_BYTES: usize = 256;

/// Longest id spelled out in its file name (hex doubles it; file names are limited to
/// 255 bytes); longer ids are named by their hash.
pub const HEX_ID_BYTES: usize = 100;

const TEMP_SUFFIX: &str = ".tmp";

/// The file name of block `key`.
pub(crate) fn block_name(key: u64) -> String {
    format!("b-{key:016x}.kvb")
}

/// The file name of blob `key` of `kind` (snapshots: `s-<key>.kvs`).
pub(crate) fn blob_name(kind: BlobKind, key: u64) -> String {
    match kind {
        BlobKind::Block => block_name(key),
        BlobKind::Snapshot => format!("s-{key:016x}.kvs"),
    }
}

/// The key of a blob file name of `kind`, if `name` is one.
pub(crate) fn parse_blob_name(kind: BlobKind, name: &str) -> Option<u64> {
    match kind {
        BlobKind::Block => parse_block_name(name),
        BlobKind::Snapshot => parse_hex_name(name, "s-", ".kvs"),
    }
}

/// The key of a block file name, if `name` is one.
pub(crate) fn parse_block_name(name: &str) -> Option<u64> {
    parse_hex_name(name, "b-", ".kvb")
}

fn parse_hex_name(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let hex = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
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
        return Err("id must be 1 to 256 bytes");
    }
    let mut name = format!("r-{kind}-");
    if id.len() <= HEX_ID_BYTES {
        push_hex(&mut name, id.as_bytes());
    } else {
        name.push('h');
        push_hex(&mut name, &Sha256::digest(id.as_bytes()));
    }
    name.push_str(".rec");
    Ok(name)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
}

/// What a record file name says about its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RecordId {
    /// The id itself.
    Spelled(String),
    /// A long id, known only by its hash: read it from the header, then check that it
    /// names this file.
    Hashed,
}

/// The id of a record file name of kind `kind`, if `name` is one.
pub(crate) fn parse_record_name(name: &str, kind: &str) -> Option<RecordId> {
    let hex = name
        .strip_prefix("r-")?
        .strip_prefix(kind)?
        .strip_prefix('-')?
        .strip_suffix(".rec")?;
    if let Some(h) = hex.strip_prefix('h') {
        return (h.len() == 64 && is_lower_hex(h)).then_some(RecordId::Hashed);
    }
    if hex.is_empty() || hex.len() % 2 != 0 || hex.len() > 2 * HEX_ID_BYTES || !is_lower_hex(hex) {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok().map(RecordId::Spelled)
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
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
        let s = blob_name(BlobKind::Snapshot, 42);
        assert_eq!(parse_blob_name(BlobKind::Snapshot, &s), Some(42));
        assert_eq!(parse_blob_name(BlobKind::Block, &s), None);
        assert_eq!(parse_blob_name(BlobKind::Snapshot, &block_name(42)), None);
    }

    #[test]
    fn record_names_round_trip_any_id() {
        for id in ["a", "agent/../../etc", "séance 1", "x\0y", &"z".repeat(100)] {
            let name = record_name("session", id).unwrap();
            assert!(name.len() < 255);
            assert!(!name.contains('/'));
            assert_eq!(
                parse_record_name(&name, "session"),
                Some(RecordId::Spelled(id.to_string()))
            );
            assert_eq!(parse_record_name(&name, "context"), None);
        }
        for id in ["z".repeat(101), "é".repeat(128), "/".repeat(256)] {
            let name = record_name("session", &id).unwrap();
            assert!(name.len() < 255, "{name}");
            assert!(!name.contains('/'));
            assert_eq!(parse_record_name(&name, "session"), Some(RecordId::Hashed));
            assert_ne!(
                name,
                record_name("session", &format!("{id}x")).unwrap_or_default()
            );
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
        assert!(record_name("session", &"z".repeat(257)).is_err());
        assert_eq!(parse_record_name("r-session-hab.rec", "session"), None);
        assert_eq!(parse_record_name("r-session-0G.rec", "session"), None);
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
