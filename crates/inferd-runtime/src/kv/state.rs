//! The recurrent-state pool of hybrid models, shared by every backend.
//!
//! A linear-attention (Gated DeltaNet) layer keeps no per-token KV: it keeps a
//! fixed-size running state per sequence. The pool holds `slots` such states; a slot
//! holds, for every linear layer, the convolution's last inputs and the delta rule's
//! matrix state, in f32. A sequence runs in one slot (`SeqChunk::state_slot`): a chunk
//! starting at position 0 starts from zero, any other from the slot's contents, and
//! the pass leaves the state after its last token there. Copying a slot snapshots it
//! (running → snapshot) or restores it (snapshot → running); which slot is what is the
//! engine's business, as block ownership is.
//!
//! Dense models have no linear layers: their layout is empty (`n_layers` 0, 0 bytes).

use crate::model::LinearAttnConfig;
use crate::{Result, RuntimeError};

/// Geometry of the state pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateLayout {
    /// Linear-attention layers (decoder layers with a state, in order).
    pub n_layers: usize,
    /// States in the pool.
    pub slots: usize,
    /// Convolution state values per layer and slot: `[conv_kernel - 1, conv_dim]`.
    pub conv_elems: usize,
    /// Delta-rule state values per layer and slot: `[n_v_heads, k_head_dim, v_head_dim]`.
    pub delta_elems: usize,
}

impl StateLayout {
    /// `slot` as an index, if it lies in the pool; `what` names it in the error.
    pub fn check_slot(&self, slot: u32, what: &str) -> Result<usize> {
        if (slot as usize) < self.slots {
            Ok(slot as usize)
        } else {
            Err(RuntimeError::Kv(format!(
                "{what} state slot {slot} is outside the pool ({} slots)",
                self.slots
            )))
        }
    }

    /// Checks `slots` and that `len` bytes hold exactly their images; one image's length.
    pub fn check_images(&self, slots: &[u32], len: usize) -> Result<usize> {
        for &s in slots {
            self.check_slot(s, "exported or imported")?;
        }
        let one = self.slot_bytes();
        if len != one * slots.len() {
            return Err(RuntimeError::Kv(format!(
                "{} state slot images are {} bytes, not {len}",
                slots.len(),
                one * slots.len()
            )));
        }
        Ok(one)
    }

    /// The pool of `slots` states for `n_layers` layers of DeltaNet `la`.
    pub fn new(n_layers: usize, la: &LinearAttnConfig, slots: usize) -> StateLayout {
        StateLayout {
            n_layers,
            slots,
            conv_elems: la.conv_state_elems(),
            delta_elems: la.delta_state_elems(),
        }
    }

    /// Whether the model has any state at all (a hybrid model).
    pub fn is_stateful(&self) -> bool {
        self.n_layers > 0
    }

    /// Bytes of one slot: the size of [`crate::Backend::export_state_slots`]'s image of
    /// it, and the unit of a state memory budget.
    ///
    /// The image is little-endian f32, no header, in this order:
    ///
    /// ```text
    /// for layer in 0..n_layers:
    ///     conv state   [conv_kernel - 1, conv_dim]           oldest input row first
    ///     delta state  [n_v_heads, k_head_dim, v_head_dim]   S of each value head
    /// ```
    ///
    /// An image is only meaningful for the same model (`Model::identity`).
    pub fn slot_bytes(&self) -> usize {
        self.n_layers * (self.conv_elems + self.delta_elems) * 4
    }

    /// Bytes of the whole pool.
    pub fn total_bytes(&self) -> usize {
        self.slot_bytes() * self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_bytes_count_both_states_of_every_layer() {
        let la = LinearAttnConfig {
            n_k_heads: 2,
            n_v_heads: 4,
            k_head_dim: 8,
            v_head_dim: 6,
            conv_kernel: 4,
        };
        let l = StateLayout::new(3, &la, 5);
        assert!(l.is_stateful());
        assert_eq!(l.conv_elems, 3 * (2 * 16 + 24));
        assert_eq!(l.delta_elems, 4 * 8 * 6);
        assert_eq!(l.slot_bytes(), 3 * (l.conv_elems + l.delta_elems) * 4);
        assert_eq!(l.total_bytes(), 5 * l.slot_bytes());
        assert_eq!(StateLayout::default().slot_bytes(), 0);
        assert!(!StateLayout::default().is_stateful());
    }
}
