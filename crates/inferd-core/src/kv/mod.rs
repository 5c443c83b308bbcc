//! KV memory accounting (no tensors): the block pool and per-sequence block tables.
//! Block ids index the runtime's paged KV layout (`inferd_runtime::kv`).

mod manager;
mod pool;

pub use manager::{KvManager, SeqId};
pub use pool::{BlockId, BlockPool};
