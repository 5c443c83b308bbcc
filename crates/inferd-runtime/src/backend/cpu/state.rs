//! The CPU recurrent-state pool: per linear layer, every slot's conv state and delta
//! state as f32 (the layout of [`crate::kv::state`]), and the slot operations (copy,
//! export, import) of the `Backend` trait. Allocated with `vec![0; n]`, so untouched
//! slots cost no RAM.

use crate::kv::StateLayout;
use crate::Result;

pub struct StatePool {
    pub layout: StateLayout,
    /// Per layer: `[slots, conv_kernel - 1, conv_dim]`.
    pub conv: Vec<Vec<f32>>,
    /// Per layer: `[slots, n_v_heads, k_head_dim, v_head_dim]`.
    pub delta: Vec<Vec<f32>>,
}

impl StatePool {
    /// A zeroed pool of `layout`.
    pub fn new(layout: &StateLayout) -> StatePool {
        StatePool {
            layout: *layout,
            conv: (0..layout.n_layers)
                .map(|_| vec![0.0; layout.slots * layout.conv_elems])
                .collect(),
            delta: (0..layout.n_layers)
                .map(|_| vec![0.0; layout.slots * layout.delta_elems])
                .collect(),
        }
    }

    /// Copies slot `src` over `dst` for each pair in order, once every id is checked.
    pub fn copy_slots(&mut self, copies: &[(u32, u32)]) -> Result<()> {
        for &(src, dst) in copies {
            self.layout.check_slot(src, "source")?;
            self.layout.check_slot(dst, "destination")?;
        }
        let (c, d) = (self.layout.conv_elems, self.layout.delta_elems);
        for &(src, dst) in copies {
            let (src, dst) = (src as usize, dst as usize);
            if src == dst {
                continue;
            }
            for plane in &mut self.conv {
                plane.copy_within(src * c..(src + 1) * c, dst * c);
            }
            for plane in &mut self.delta {
                plane.copy_within(src * d..(src + 1) * d, dst * d);
            }
        }
        Ok(())
    }

    /// The images of `slots`, one after the other, into `out`.
    pub fn export_slots(&self, slots: &[u32], out: &mut [u8]) -> Result<()> {
        let one = self.layout.check_images(slots, out.len())?;
        if one == 0 {
            return Ok(());
        }
        let (c, d) = (self.layout.conv_elems, self.layout.delta_elems);
        for (&s, image) in slots.iter().zip(out.chunks_exact_mut(one)) {
            let s = s as usize;
            let mut at = 0;
            for (conv, delta) in self.conv.iter().zip(&self.delta) {
                for part in [&conv[s * c..(s + 1) * c], &delta[s * d..(s + 1) * d]] {
                    for (o, v) in image[at..at + 4 * part.len()].chunks_exact_mut(4).zip(part) {
                        o.copy_from_slice(&v.to_le_bytes());
                    }
                    at += 4 * part.len();
                }
            }
        }
        Ok(())
    }

    /// Overwrites `slots` from their images in `data` (nothing is written unless every
    /// id and the length check).
    pub fn import_slots(&mut self, slots: &[u32], data: &[u8]) -> Result<()> {
        let one = self.layout.check_images(slots, data.len())?;
        if one == 0 {
            return Ok(());
        }
        let (c, d) = (self.layout.conv_elems, self.layout.delta_elems);
        for (&s, image) in slots.iter().zip(data.chunks_exact(one)) {
            let s = s as usize;
            let mut at = 0;
            for (conv, delta) in self.conv.iter_mut().zip(self.delta.iter_mut()) {
                for part in [
                    &mut conv[s * c..(s + 1) * c],
                    &mut delta[s * d..(s + 1) * d],
                ] {
                    let bytes = &image[at..at + 4 * part.len()];
                    for (v, b) in part.iter_mut().zip(bytes.chunks_exact(4)) {
                        *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    }
                    at += 4 * part.len();
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> StatePool {
        let mut p = StatePool::new(&StateLayout {
            n_layers: 2,
            slots: 3,
            conv_elems: 5,
            delta_elems: 7,
        });
        for (i, v) in p
            .conv
            .iter_mut()
            .chain(p.delta.iter_mut())
            .flat_map(|plane| plane.iter_mut())
            .enumerate()
        {
            *v = i as f32 * 0.5 - 3.0;
        }
        p
    }

    #[test]
    fn copy_export_import_round_trip() {
        let mut p = pool();
        let one = p.layout.slot_bytes();
        assert_eq!(one, 2 * 12 * 4);
        let mut img = vec![0u8; 2 * one];
        p.export_slots(&[2, 0], &mut img).unwrap();
        // The image is per layer conv then delta, little-endian.
        let first = f32::from_le_bytes(img[0..4].try_into().unwrap());
        assert_eq!(first, p.conv[0][2 * 5]);
        let delta0 = f32::from_le_bytes(img[20..24].try_into().unwrap());
        assert_eq!(delta0, p.delta[0][2 * 7]);
        let mut q = StatePool::new(&p.layout);
        q.import_slots(&[1, 2], &img).unwrap();
        let mut back = vec![0u8; 2 * one];
        q.export_slots(&[1, 2], &mut back).unwrap();
        assert_eq!(back, img);
        // copy 0 -> 1, then slot 1's image equals slot 0's
        p.copy_slots(&[(0, 1)]).unwrap();
        let (mut a, mut b) = (vec![0u8; one], vec![0u8; one]);
        p.export_slots(&[0], &mut a).unwrap();
        p.export_slots(&[1], &mut b).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn bad_slots_and_lengths_change_nothing() {
        let mut p = pool();
        let before = (p.conv.clone(), p.delta.clone());
        let e = p.copy_slots(&[(0, 1), (0, 3)]).unwrap_err().to_string();
        assert!(e.contains("destination state slot 3"), "{e}");
        let one = p.layout.slot_bytes();
        assert!(p.import_slots(&[0], &vec![0u8; one - 4]).is_err());
        assert!(p.import_slots(&[5], &vec![0u8; one]).is_err());
        assert_eq!((p.conv.clone(), p.delta.clone()), before);
        assert!(p.export_slots(&[0], &mut vec![0u8; one + 1]).is_err());
    }
}
