//! A named record's file (the engine's session and context manifests): the same
//! envelope as a block file with magic `INFDREC1`, and the kind and id in the
//! header instead of key, parent and tokens.

use std::io::Read;
use std::path::Path;

use crate::atomic;
use crate::codec::{self, HeaderReader, HeaderWriter, ReadFailure, CRC_LEN};
use crate::identity::StoreIdentity;

/// Magic bytes at the start of every record file.
pub(crate) const RECORD_MAGIC: &[u8; 8] = b"INFDREC1";

/// Largest record payload accepted (records are small manifests).
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// The header bytes for record `kind`/`id` under `identity`.
pub(crate) fn encode_header(
    identity: &StoreIdentity,
    kind: &str,
    id: &str,
    payload_len: usize,
) -> Vec<u8> {
    let mut w = HeaderWriter::new(RECORD_MAGIC);
    w.identity(identity);
    w.bytes(kind.as_bytes());
    w.bytes(id.as_bytes());
    w.finish(payload_len)
}

/// Reads the record file at `path` and verifies magic, version, identity, kind,
/// id (when the file name spells it: `Some`), lengths and checksum; returns the id its
/// header holds and the payload.
pub(crate) fn read_verified(
    path: &Path,
    identity: &StoreIdentity,
    kind: &str,
    id: Option<&str>,
) -> Result<(String, Vec<u8>), ReadFailure> {
    let mut file = atomic::open_read(path).map_err(|e| ReadFailure::io("open", e))?;
    let file_len = file
        .metadata()
        .map_err(|e| ReadFailure::io("stat", e))?
        .len();
    let limit = (codec::MAX_HEADER_LEN + MAX_RECORD_BYTES + CRC_LEN) as u64;
    if file_len > limit {
        return Err(format!("file of {file_len} bytes is larger than any record").into());
    }
    let mut all = Vec::with_capacity(file_len as usize);
    file.read_to_end(&mut all)
        .map_err(|e| ReadFailure::io("read", e))?;
    if all.len() < codec::PREFIX_LEN + CRC_LEN {
        return Err(format!("file of {} bytes is too short", all.len()).into());
    }
    let header_len = codec::parse_prefix(&all, RECORD_MAGIC)?;
    if header_len + CRC_LEN > all.len() {
        return Err(format!("header of {header_len} bytes in a {} byte file", all.len()).into());
    }
    let mut r = HeaderReader::new(&all[..header_len]);
    r.expect_identity(identity)?;
    if r.bytes()? != kind.as_bytes() {
        return Err(ReadFailure::Invalid(
            "record kind differs from its file name".into(),
        ));
    }
    let stored_id = r.bytes()?;
    if id.is_some_and(|id| stored_id != id.as_bytes()) {
        return Err(ReadFailure::Invalid(
            "record id differs from its file name".into(),
        ));
    }
    let stored_id =
        String::from_utf8(stored_id.to_vec()).map_err(|_| "record id is not UTF-8".to_string())?;
    let payload_len = r.finish()?;
    let expected_len = header_len as u64 + payload_len + CRC_LEN as u64;
    if all.len() as u64 != expected_len {
        return Err(format!(
            "file is {} bytes, its header says {expected_len} (truncated or extended)",
            all.len()
        )
        .into());
    }
    let body_end = all.len() - CRC_LEN;
    let stored = u32::from_le_bytes(all[body_end..].try_into().unwrap());
    let actual = codec::crc32(&[&all[..body_end]]);
    if stored != actual {
        return Err(
            format!("checksum mismatch (stored {stored:08x}, computed {actual:08x})").into(),
        );
    }
    all.truncate(body_end);
    all.drain(..header_len);
    Ok((stored_id, all))
}
