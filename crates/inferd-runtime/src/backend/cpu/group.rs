//! A tensor-parallel group of CPU backends in one process: the all-reduce over host
//! memory. Each rank posts its buffer, waits for the others, then adds every rank's
//! buffer in rank order, so each rank computes the same sum to the bit, and the sum
//! does not depend on which rank arrived first.
//!
//! The reference for a GPU group's all-reduce (NCCL), and what tests split models with.
//! Like any collective, it waits for every rank: a rank that stops calling leaves the
//! others waiting, so a group's driver hands every rank the same passes.

use std::sync::{Arc, Barrier, Mutex};

use crate::model::Shard;
use crate::{Result, RuntimeError};

/// The state the ranks of one group share.
struct Group {
    /// Each rank's posted values.  // [world][rows · cols]
    posted: Vec<Mutex<Vec<f32>>>,
    barrier: Barrier,
}

/// One rank's handle on its group (given to `CpuBackend::in_group`).
#[derive(Clone)]
pub struct HostGroup {
    shard: Shard,
    group: Arc<Group>,
}

impl HostGroup {
    /// The `world` members of a new group, rank 0 first.
    pub fn new(world: usize) -> Vec<HostGroup> {
        let group = Arc::new(Group {
            posted: (0..world).map(|_| Mutex::new(Vec::new())).collect(),
            barrier: Barrier::new(world),
        });
        (0..world)
            .map(|rank| HostGroup {
                shard: Shard { rank, world },
                group: group.clone(),
            })
            .collect()
    }

    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// `x` summed over the group, in place (see the module doc). Every rank must pass as
    /// many values; otherwise each rank gets the same error.
    pub fn all_reduce(&self, x: &mut [f32]) -> Result<()> {
        let g = &self.group;
        {
            let mut mine = g.posted[self.shard.rank].lock().expect("group lock");
            mine.clear();
            mine.extend_from_slice(x);
        }
        g.barrier.wait(); // every rank has posted
        let mut result = Ok(());
        for (r, posted) in g.posted.iter().enumerate() {
            let p = posted.lock().expect("group lock");
            if p.len() != x.len() {
                result = Err(RuntimeError::Other(format!(
                    "all-reduce: rank {r} posted {} values, rank {} {}",
                    p.len(),
                    self.shard.rank,
                    x.len()
                )));
                break;
            }
            if r == 0 {
                x.copy_from_slice(&p);
            } else {
                x.iter_mut().zip(p.iter()).for_each(|(a, b)| *a += b);
            }
        }
        g.barrier.wait(); // every rank has read: the next call may post
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_gets_the_sum_in_rank_order() {
        let members = HostGroup::new(3);
        let out: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = members
                .iter()
                .map(|m| {
                    s.spawn(move || {
                        let r = m.shard().rank as f32;
                        let mut all = Vec::new();
                        for round in 0..50 {
                            // 1e8 + 1 + (-1e8): the order of the adds shows in the result
                            let big = [1e8, 1.0, -1e8][m.shard().rank];
                            let mut x = vec![big, r + round as f32];
                            m.all_reduce(&mut x).unwrap();
                            all.extend(x);
                        }
                        all
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (round, pair) in out[0].chunks(2).enumerate() {
            // (1e8 + 1) rounds to 1e8 in f32, then − 1e8: 0, in rank order on every rank
            assert_eq!(pair, [0.0, 3.0 + 3.0 * round as f32]);
        }
        assert!(out.iter().all(|o| *o == out[0]));
    }

    #[test]
    fn unequal_lengths_are_an_error_on_every_rank() {
        let members = HostGroup::new(2);
        let errs: Vec<bool> = std::thread::scope(|s| {
            let h: Vec<_> = members
                .iter()
                .map(|m| s.spawn(move || m.all_reduce(&mut vec![1.0; 2 + m.shard().rank]).is_err()))
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(errs, [true, true]);
    }
}
