//! One KV block's file: its header (identity, key, parent, tokens), the payload
//! and the checksum. Encoding, header-only reads (for rebuilding the index) and
//! fully verified reads (for `get`). The layout is documented in the crate docs.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::atomic;
use crate::codec::{self, HeaderReader, HeaderWriter, ReadFailure, CRC_LEN, PREFIX_LEN};
use crate::identity::StoreIdentity;

/// Magic bytes at the start of every block file.
pub(crate) const BLOCK_MAGIC: &[u8; 8] = b"INFDKVB1";

/// Magic bytes at the start of every recurrent-state snapshot file.
pub(crate) const SNAPSHOT_MAGIC: &[u8; 8] = b"INFDKVS1";

/// What a store's blobs are: KV blocks, or recurrent-state snapshots (hybrid models).
/// Same envelope and checks; their own magic and file names, so neither is ever read
/// as the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobKind {
    /// `b-<key>.kvb`, magic `INFDKVB1`: the KV of the block keyed `key`.
    Block,
    /// `s-<key>.kvs`, magic `INFDKVS1`: the recurrent state after the block keyed
    /// `key` (its parent and tokens in the header, as for the block).
    Snapshot,
}

impl BlobKind {
    pub(crate) fn magic(self) -> &'static [u8; 8] {
        match self {
            BlobKind::Block => BLOCK_MAGIC,
            BlobKind::Snapshot => SNAPSHOT_MAGIC,
        }
    }
}

/// Most tokens one block's header may list.
pub const MAX_BLOCK_TOKENS: usize = 1 << 16;

/// What a block is, as the caller describes it and as its header records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockMeta {
    /// The block's hash-chain key (hash of the parent key, the tokens and the model).
    pub key: u64,
    /// The key of the previous block in the chain (the root key for the first block).
    pub parent: u64,
    /// The tokens whose KV the block holds (fewer than the block size for a tail block).
    pub tokens: Vec<u32>,
}

/// The header bytes for `meta` under `id`, for a payload of `payload_len` bytes.
pub(crate) fn encode_header(
    kind: BlobKind,
    id: &StoreIdentity,
    meta: &BlockMeta,
    payload_len: usize,
) -> Vec<u8> {
    let mut w = HeaderWriter::new(kind.magic());
    w.identity(id);
    w.u64(meta.key);
    w.u64(meta.parent);
    w.u32(meta.tokens.len() as u32);
    for &t in &meta.tokens {
        w.u32(t);
    }
    w.finish(payload_len)
}

/// A block file's header, read and checked against the identity and the file size.
pub(crate) struct BlockHeader {
    /// The header bytes (covered by the checksum).
    pub bytes: Vec<u8>,
    /// Key, parent and tokens from the header.
    pub meta: BlockMeta,
    /// Payload bytes after the header.
    pub payload_len: usize,
    /// Total file size: header, payload, checksum.
    pub file_len: u64,
}

/// Reads only the header of the block file `file`, checks magic, version,
/// identity and that the file is exactly as long as the header says.
pub(crate) fn read_header(
    kind: BlobKind,
    file: &mut File,
    id: &StoreIdentity,
) -> Result<BlockHeader, ReadFailure> {
    let file_len = file
        .metadata()
        .map_err(|e| ReadFailure::io("stat", e))?
        .len();
    let mut bytes = vec![0u8; PREFIX_LEN];
    file.read_exact(&mut bytes)
        .map_err(|e| ReadFailure::io("reading the prefix", e))?;
    let header_len = codec::parse_prefix(&bytes, kind.magic())?;
    if header_len as u64 > file_len {
        return Err(format!("header of {header_len} bytes in a {file_len} byte file").into());
    }
    bytes.resize(header_len, 0);
    file.read_exact(&mut bytes[PREFIX_LEN..])
        .map_err(|e| ReadFailure::io("reading the header", e))?;

    let mut r = HeaderReader::new(&bytes);
    r.expect_identity(id)?;
    let key = r.u64()?;
    let parent = r.u64()?;
    let n_tokens = r.u32()? as usize;
    if n_tokens > MAX_BLOCK_TOKENS {
        return Err(format!("{n_tokens} tokens in one block").into());
    }
    let tokens = r.u32s(n_tokens)?;
    let payload_len = r.finish()?;
    if payload_len != id.block_bytes as u64 {
        return Err(format!(
            "payload of {payload_len} bytes, blocks are {}",
            id.block_bytes
        )
        .into());
    }
    let expected_len = header_len as u64 + payload_len + CRC_LEN as u64;
    if file_len != expected_len {
        return Err(format!(
            "file is {file_len} bytes, its header says {expected_len} (truncated or extended)"
        )
        .into());
    }
    Ok(BlockHeader {
        bytes,
        meta: BlockMeta {
            key,
            parent,
            tokens,
        },
        payload_len: payload_len as usize,
        file_len,
    })
}

/// What a verified read must find.
pub(crate) struct Expected<'a> {
    pub key: u64,
    pub parent: u64,
    pub tokens: &'a [u32],
}

/// Reads the block file at `path` into `out` and verifies everything: magic,
/// version, identity, key, parent, tokens, lengths and the checksum. On `Err`
/// the contents of `out` are unspecified (the caller must not use them).
pub(crate) fn read_verified(
    kind: BlobKind,
    path: &Path,
    id: &StoreIdentity,
    expected: &Expected<'_>,
    out: &mut [u8],
) -> Result<(), ReadFailure> {
    let mut file = atomic::open_read(path).map_err(|e| ReadFailure::io("open", e))?;
    let header = read_header(kind, &mut file, id)?;
    let meta = &header.meta;
    if meta.key != expected.key {
        return Err(format!("header key {:016x}", meta.key).into());
    }
    if meta.parent != expected.parent {
        return Err(format!(
            "parent {:016x}, expected {:016x}",
            meta.parent, expected.parent
        )
        .into());
    }
    if meta.tokens != expected.tokens {
        return Err("tokens differ from the expected tokens".into());
    }
    if header.payload_len != out.len() {
        return Err(format!(
            "payload of {} bytes, buffer of {}",
            header.payload_len,
            out.len()
        )
        .into());
    }
    file.read_exact(out)
        .map_err(|e| ReadFailure::io("reading the payload", e))?;
    let mut stored = [0u8; CRC_LEN];
    file.read_exact(&mut stored)
        .map_err(|e| ReadFailure::io("reading the checksum", e))?;
    let stored = u32::from_le_bytes(stored);
    let actual = codec::crc32(&[&header.bytes, out]);
    if stored != actual {
        return Err(
            format!("checksum mismatch (stored {stored:08x}, computed {actual:08x})").into(),
        );
    }
    Ok(())
}
