//! Prefix keys: a block's key hashes its chain parent's key and its own tokens, so
//! equal keys mean equal prefixes up to and including the block (modulo a 64-bit
//! collision, which the pool rules out by comparing the parent and the tokens on
//! every hit). The chain starts from a root key that names what the KV depends on
//! besides the tokens (model weights, KV layout and dtype), so two models never
//! share blocks. Keys are stable across runs and machines: on-disk block files
//! are named by them.

/// SplitMix64's finalizer: a bijective 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key of a block holding `tokens` after the block keyed `parent` (the root key
/// for the first block). Partial blocks get keys too (the length is hashed in).
pub fn block_key(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = mix(parent ^ 0x9E37_79B9_7F4A_7C15);
    for (i, &t) in tokens.iter().enumerate() {
        h = mix(h ^ t as u64 ^ ((i as u64) << 32));
    }
    mix(h ^ ((tokens.len() as u64) << 40) ^ 0x5851_F42D_4C95_7F2D)
}

/// The root of every chain for KV computed under `identity` (e.g. the model's
/// fingerprint, the KV dtype and the block size).
pub fn root_key(identity: &str) -> u64 {
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    for chunk in identity.as_bytes().chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = mix(h ^ u64::from_le_bytes(w));
    }
    mix(h ^ identity.len() as u64)
}

/// Keys of the full blocks of `tokens`, in order.
pub fn chain_keys(root: u64, tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut parent = root;
    tokens
        .chunks_exact(block_size)
        .map(|b| {
            parent = block_key(parent, b);
            parent
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: u64 = 0x374e_8881_2438_8cd0;

    #[test]
    fn keys_depend_on_chain_tokens_order_and_length() {
        let r = root_key("model-a");
        assert_ne!(r, root_key("model-b"));
        let a = block_key(r, &[1, 2, 3, 4]);
        assert_eq!(a, block_key(r, &[1, 2, 3, 4]), "deterministic");
        assert_ne!(a, block_key(r, &[2, 1, 3, 4]));
        assert_ne!(a, block_key(root_key("model-b"), &[1, 2, 3, 4]));
        assert_ne!(block_key(r, &[1, 2]), block_key(r, &[1, 2, 0]));
        // a chain: the same block after different parents differs
        let b1 = block_key(a, &[5, 6, 7, 8]);
        let b2 = block_key(block_key(r, &[9, 9, 9, 9]), &[5, 6, 7, 8]);
        assert_ne!(b1, b2);
        assert_eq!(chain_keys(r, &[1, 2, 3, 4, 5, 6, 7, 8, 9], 4), vec![a, b1]);
        // pinned value: keys name files on disk, so they must never change
        assert_eq!(block_key(root_key("inferd"), &[1, 2, 3]), PINNED);
    }
}
