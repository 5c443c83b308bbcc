//! KV memory accounting (no tensors): the block pool, per-sequence block tables and
//! the prefix cache's keys. Block ids index the runtime's paged KV layout
//! (`inferd_runtime::kv`).

pub mod key;
mod manager;
mod pool;

pub use key::{block_key, chain_keys, root_key};
pub use manager::{BlockCopy, KvManager, SeqId};
pub use pool::{BlockId, BlockPool};
