//! What the stored bytes depend on besides the tokens: the model weights, the KV
//! layout and dtype, and the block size in bytes. Every file carries it in its
//! header and is only ever returned to a store opened with the same identity.

use crate::error::StoreError;

/// Longest `model` or `layout` string the format stores.
pub const MAX_IDENTITY_STR: usize = 4096;

/// The identity a store is opened under. Files written under another identity
/// are never returned (they are removed when found in this identity's directory).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreIdentity {
    /// Fingerprint of the model weights (e.g. hex of a hash of the files).
    pub model: String,
    /// The KV layout and dtype, e.g. `"q8 l30 h3 d64 bs16"`.
    pub layout: String,
    /// Size of one block's payload in bytes; every stored block has exactly this size.
    pub block_bytes: usize,
}

impl StoreIdentity {
    /// Checks that the identity fits the file format.
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        for (name, s) in [("model", &self.model), ("layout", &self.layout)] {
            if s.len() > MAX_IDENTITY_STR {
                return Err(StoreError::InvalidIdentity(format!(
                    "{name} is {} bytes, at most {MAX_IDENTITY_STR}",
                    s.len()
                )));
            }
        }
        if self.block_bytes == 0 {
            return Err(StoreError::InvalidIdentity("block_bytes is 0".into()));
        }
        Ok(())
    }

    /// The name of this identity's directory inside the store directory: 16 hex
    /// digits of a stable 64-bit FNV-1a hash of all three fields. Only a name: a
    /// collision is harmless because every header carries the full identity.
    pub fn dir_name(&self) -> String {
        let mut h = Fnv64::new();
        h.write(self.model.as_bytes());
        h.write(&[0xff]);
        h.write(self.layout.as_bytes());
        h.write(&[0xff]);
        h.write(&(self.block_bytes as u64).to_le_bytes());
        format!("{:016x}", h.0)
    }
}

/// FNV-1a, 64-bit: stable across Rust versions and platforms (unlike
/// `DefaultHasher`), so directory names survive upgrades.
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(model: &str, layout: &str, block_bytes: usize) -> StoreIdentity {
        StoreIdentity {
            model: model.into(),
            layout: layout.into(),
            block_bytes,
        }
    }

    #[test]
    fn dir_name_is_stable_and_distinguishes_fields() {
        let a = id("abc", "q8 l30", 1024);
        assert_eq!(a.dir_name(), a.clone().dir_name());
        assert_eq!(a.dir_name().len(), 16);
        assert_ne!(a.dir_name(), id("abd", "q8 l30", 1024).dir_name());
        assert_ne!(a.dir_name(), id("abc", "q8 l31", 1024).dir_name());
        assert_ne!(a.dir_name(), id("abc", "q8 l30", 1025).dir_name());
        // The separator keeps field boundaries apart.
        assert_ne!(id("ab", "c", 1).dir_name(), id("a", "bc", 1).dir_name());
    }

    #[test]
    fn validate_rejects_zero_block_bytes_and_long_strings() {
        assert!(id("m", "l", 0).validate().is_err());
        assert!(id(&"x".repeat(MAX_IDENTITY_STR + 1), "l", 1)
            .validate()
            .is_err());
        assert!(id("m", "l", 1).validate().is_ok());
    }
}
