//! A bounds-checked little-endian reader over the file bytes. Every read
//! either succeeds or returns `Truncated`, naming what was being read.

use std::path::Path;

use crate::{FormatError, Result};

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
    /// What is being read now ("metadata 'general.name'"), for messages.
    context: String,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], path: &'a Path) -> Cursor<'a> {
        Cursor {
            buf,
            pos: 0,
            path,
            context: String::from("header"),
        }
    }

    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn set_context(&mut self, context: String) {
        self.context = context;
    }

    pub(crate) fn context(&self) -> &str {
        &self.context
    }

    /// A `Truncated` error for a read of `needed` bytes at the current position.
    pub(crate) fn truncated(&self, what: &str, needed: u64) -> FormatError {
        FormatError::Truncated {
            path: self.path.to_path_buf(),
            what: format!("{} ({what})", self.context),
            offset: self.pos as u64,
            needed,
            available: self.remaining() as u64,
        }
    }

    /// Fails unless `count` items of at least `min_each` bytes could still fit;
    /// guards allocations against absurd counts from a corrupt file.
    pub(crate) fn check_count(&self, what: &str, count: u64, min_each: u64) -> Result<usize> {
        let needed = count.saturating_mul(min_each);
        if needed > self.remaining() as u64 {
            return Err(self.truncated(&format!("{count} {what}"), needed));
        }
        // needed <= remaining, so count fits a usize.
        Ok(count as usize)
    }

    pub(crate) fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() as u64 {
            return Err(self.truncated(what, n));
        }
        let n = n as usize;
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let b = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: u64 byte length, then UTF-8 bytes.
    pub(crate) fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(&format!("{what} length"))?;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(FormatError::malformed(
                self.path,
                format!("{} ({what}) is not valid UTF-8: {e}", self.context),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_reports_truncation() {
        let bytes = [1u8, 0, 0, 0, 2, 0];
        let mut c = Cursor::new(&bytes, Path::new("f.gguf"));
        assert_eq!(c.u32("a").unwrap(), 1);
        let err = c.u32("b").unwrap_err();
        match err {
            FormatError::Truncated {
                offset,
                needed,
                available,
                ..
            } => assert_eq!((offset, needed, available), (4, 4, 2)),
            e => panic!("unexpected {e}"),
        }
        assert_eq!(c.u16("c").unwrap(), 2);
    }

    #[test]
    fn absurd_count_is_rejected_without_allocating() {
        let bytes = [0u8; 16];
        let c = Cursor::new(&bytes, Path::new("f.gguf"));
        assert!(c.check_count("items", u64::MAX, 8).is_err());
        assert_eq!(c.check_count("items", 2, 8).unwrap(), 2);
    }
}
