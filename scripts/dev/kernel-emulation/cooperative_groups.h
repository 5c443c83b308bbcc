// Host stand-in for CUDA's cooperative_groups.h, for the one thing the kernels take from
// it: a thread-block cluster (decode.cu's cluster form). Blocks run one at a time here
// (common.cuh), so a block cannot read another's shared memory while that one runs:
// ifd::launch_cluster runs the grid three times (the first finds which shared objects
// blocks read of others, the second keeps each block's copy of them as it ended), and in
// the last a block's reads of the other blocks of its cluster come from those copies
// (emu::cluster_map). That is what the kernel would read after its barrier, provided a
// block does not change those objects after it, which decode.cu's does not.
#pragma once
#include "common.cuh"

namespace cooperative_groups {
struct cluster_group {
  // The cluster's barrier: the block's own (the others' writes are read from copies).
  void sync() const { __syncthreads(); }
  unsigned block_rank() const { return static_cast<unsigned>(blockIdx.x) % emu::cluster_size; }
  template <typename T>
  T* map_shared_rank(T* p, unsigned rank) const {
    return emu::cluster_map(p, rank);
  }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups
