//! Little-endian field encoding shared by the block and record formats, and the
//! common envelope: magic, version, header length, fields, payload length,
//! payload, CRC-32 of everything before it. Decoding never panics: every read is
//! bounds-checked and reports what was wrong as a `String` (the store turns it
//! into a warning).

use crate::identity::StoreIdentity;

/// Format version written into every file.
pub(crate) const FORMAT_VERSION: u32 = 1;

/// Bytes before the fields: magic (8), version (4), header length (4).
pub(crate) const PREFIX_LEN: usize = 16;

/// Bytes of the trailing checksum.
pub(crate) const CRC_LEN: usize = 4;

/// Largest header accepted when reading, so a corrupt length cannot make us
/// allocate gigabytes.
pub(crate) const MAX_HEADER_LEN: usize = 4 << 20;

/// Builds a header: prefix first, the header length patched in by `finish`.
pub(crate) struct HeaderWriter {
    buf: Vec<u8>,
}

impl HeaderWriter {
    /// Starts a header with `magic` and the current format version.
    pub(crate) fn new(magic: &[u8; 8]) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(magic);
        buf.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes()); // header length, patched in finish
        HeaderWriter { buf }
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A length-prefixed (u32) byte string.
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.buf.extend_from_slice(b);
    }

    /// The identity: model, layout, block_bytes.
    pub(crate) fn identity(&mut self, id: &StoreIdentity) {
        self.bytes(id.model.as_bytes());
        self.bytes(id.layout.as_bytes());
        self.u64(id.block_bytes as u64);
    }

    /// Appends the payload length and patches the header length in.
    pub(crate) fn finish(mut self, payload_len: usize) -> Vec<u8> {
        self.u64(payload_len as u64);
        let len = self.buf.len() as u32;
        self.buf[12..16].copy_from_slice(&len.to_le_bytes());
        self.buf
    }
}

/// The fixed prefix of a file: which format, and how long the header is.
pub(crate) fn parse_prefix(prefix: &[u8], magic: &[u8; 8]) -> Result<usize, String> {
    if prefix.len() < PREFIX_LEN {
        return Err(format!("file shorter than its {PREFIX_LEN} byte prefix"));
    }
    if &prefix[..8] != magic {
        return Err("bad magic".into());
    }
    let version = u32::from_le_bytes(prefix[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, expected {FORMAT_VERSION}"
        ));
    }
    let header_len = u32::from_le_bytes(prefix[12..16].try_into().unwrap()) as usize;
    if !(PREFIX_LEN..=MAX_HEADER_LEN).contains(&header_len) {
        return Err(format!("implausible header length {header_len}"));
    }
    Ok(header_len)
}

/// Reads header fields after the prefix, with bounds checks.
pub(crate) struct HeaderReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> HeaderReader<'a> {
    /// Reads the fields of `header` (the whole header, prefix included).
    pub(crate) fn new(header: &'a [u8]) -> Self {
        HeaderReader {
            buf: header,
            pos: PREFIX_LEN.min(header.len()),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err("header ends early".into()),
        }
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    /// A length-prefixed (u32) byte string.
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// `n` little-endian u32 values.
    pub(crate) fn u32s(&mut self, n: usize) -> Result<Vec<u32>, String> {
        let raw = self.take(n.checked_mul(4).ok_or("token count overflows")?)?;
        Ok(raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }

    /// Reads the identity and compares it with `expected`.
    pub(crate) fn expect_identity(&mut self, expected: &StoreIdentity) -> Result<(), String> {
        let model = self.bytes()?;
        let layout = self.bytes()?;
        let block_bytes = self.u64()?;
        if model != expected.model.as_bytes() {
            return Err(format!(
                "written for model {:?}, not {:?}",
                String::from_utf8_lossy(model),
                expected.model
            ));
        }
        if layout != expected.layout.as_bytes() {
            return Err(format!(
                "written for KV layout {:?}, not {:?}",
                String::from_utf8_lossy(layout),
                expected.layout
            ));
        }
        if block_bytes != expected.block_bytes as u64 {
            return Err(format!(
                "written for {block_bytes} byte blocks, not {}",
                expected.block_bytes
            ));
        }
        Ok(())
    }

    /// Reads the payload length (the last field) and checks that the fields
    /// filled the header exactly.
    pub(crate) fn finish(mut self) -> Result<u64, String> {
        let payload_len = self.u64()?;
        if self.pos != self.buf.len() {
            return Err(format!(
                "header length says {} bytes, fields end at {}",
                self.buf.len(),
                self.pos
            ));
        }
        Ok(payload_len)
    }
}

/// CRC-32 (IEEE) of the given parts in order.
pub(crate) fn crc32(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// Why a file could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadFailure {
    /// The file could not be read (permissions, an IO error): it may be intact, so it
    /// is skipped and kept.
    Io(String),
    /// The file was read and is corrupt, truncated or foreign: it is removed.
    Invalid(String),
}

impl From<String> for ReadFailure {
    fn from(why: String) -> Self {
        ReadFailure::Invalid(why)
    }
}

impl From<&str> for ReadFailure {
    fn from(why: &str) -> Self {
        ReadFailure::Invalid(why.to_string())
    }
}

impl ReadFailure {
    /// `what` failed with `e`: a file that ends early is truncated, and one that is not
    /// there is gone (both invalid); any other error says nothing about the file's bytes.
    pub(crate) fn io(what: &str, e: std::io::Error) -> Self {
        use std::io::ErrorKind::{NotADirectory, NotFound, UnexpectedEof};
        let why = format!("{what}: {e}");
        if matches!(e.kind(), UnexpectedEof | NotFound | NotADirectory) {
            ReadFailure::Invalid(why)
        } else {
            ReadFailure::Io(why)
        }
    }
}
