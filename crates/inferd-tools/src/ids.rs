//! Tool-call ids: `call_` and 24 letters and digits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// 62^8 < 2^48: eight characters per 64-bit draw keeps the modulo bias negligible.
const CHARS_PER_DRAW: usize = 8;
const ID_CHARS: usize = 24;

/// Makes tool-call ids: `call_` followed by 24 ASCII letters and digits (about 143
/// random-looking bits), from a SplitMix64 sequence. Not cryptographic: ids only need to
/// be unique, and two generators made by [`CallIds::new`] start from different seeds
/// (time, process id and a process-wide counter). [`CallIds::seeded`] gives a fixed
/// sequence, for tests.
#[derive(Clone, Debug)]
pub struct CallIds {
    state: u64,
}

impl CallIds {
    /// A generator with a fresh seed.
    pub fn new() -> CallIds {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let pid = u64::from(std::process::id());
        let mut g = CallIds {
            state: t ^ pid.rotate_left(32) ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03),
        };
        CallIds::seeded(g.draw())
    }

    /// A generator whose ids depend only on `seed`.
    pub fn seeded(seed: u64) -> CallIds {
        CallIds { state: seed }
    }

    /// The next id.
    pub fn next_id(&mut self) -> String {
        let mut id = String::with_capacity(5 + ID_CHARS);
        id.push_str("call_");
        while id.len() < 5 + ID_CHARS {
            let mut x = self.draw();
            for _ in 0..CHARS_PER_DRAW {
                id.push(ALPHABET[(x % 62) as usize] as char);
                x /= 62;
            }
        }
        id
    }

    /// SplitMix64.
    fn draw(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Default for CallIds {
    fn default() -> Self {
        CallIds::new()
    }
}
