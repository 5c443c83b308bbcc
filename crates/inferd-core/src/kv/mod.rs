//! KV memory accounting (no tensors): the block pool, per-sequence block tables,
//! the prefix cache's keys and, for hybrid models, the recurrent-state pool
//! (running slots and snapshots). Block ids index the runtime's paged KV layout
//! (`inferd_runtime::kv`).

pub mod key;
mod manager;
mod pool;
mod state;

pub use key::{block_key, chain_keys, root_key};
pub use manager::{BlockCopy, KvManager, SeqId, StateCopy};
pub use pool::{BlockId, BlockPool};
pub use state::{SlotId, StatePool};
