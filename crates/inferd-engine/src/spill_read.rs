//! Reads from the SSD tier, off the engine thread: a read job names an owner's blocks
//! (and, for hybrid models, where its snapshots are), the reader thread reads and
//! verifies what is not in memory, and sends the bytes back to the engine's inbox as
//! [`Msg::Loaded`]; the engine imports them (`load.rs`). A block that fails to read or
//! verify ends the read there: the rest is recomputed.

use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inferd_core::kv::SeqId;
use inferd_kvstore::{BlockMeta, SpillStore};

use crate::handle::Msg;
use crate::spill::{lock, refresh_view, warn, TierView};

/// What to read for one owner.
#[derive(Debug)]
pub(crate) struct ReadJob {
    pub owner: SeqId,
    /// Tokens per block.
    pub bs: usize,
    /// The owner's blocks in order (full ones, then a partly filled last one).
    pub metas: Vec<BlockMeta>,
    /// Per block: in memory (in the prefix cache) when the job was made, so not read.
    pub resident: Vec<bool>,
    /// Hybrid models: per full block, whether the snapshot ending at it is in memory.
    pub snaps_resident: Option<Vec<bool>>,
    /// Hybrid models: the most full blocks the snapshot may cover (what the asking
    /// request shares: a deeper one would not serve it).
    pub snap_blocks: usize,
    /// When the job was made.
    pub since: Instant,
}

/// What the reader found.
#[derive(Debug)]
pub(crate) struct ReadDone {
    pub owner: SeqId,
    pub metas: Vec<BlockMeta>,
    /// Per block up to the first that could not be read: its verified bytes, `None` for
    /// one that was in memory.
    pub blocks: Vec<Option<Vec<u8>>>,
    /// Hybrid models: the deepest usable snapshot (in memory, or read and verified) as
    /// the number of full blocks it covers, with its bytes when read from disk.
    pub snapshot: Option<(usize, Option<Vec<u8>>)>,
    pub since: Instant,
}

/// Starts the reader thread: jobs in, [`Msg::Loaded`] out to `inbox`.
pub(crate) fn start(
    store: Arc<Mutex<SpillStore>>,
    snapshots: Option<Arc<Mutex<SpillStore>>>,
    view: Arc<Mutex<TierView>>,
    inbox: mpsc::Sender<Msg>,
    delay: Duration,
) -> Result<(mpsc::Sender<ReadJob>, JoinHandle<()>), String> {
    let (tx, rx) = mpsc::channel::<ReadJob>();
    let reader = std::thread::Builder::new()
        .name("inferd-spill-read".into())
        .spawn(move || {
            for job in rx {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                let done = read(job, &store, snapshots.as_deref());
                refresh_view(&view, &lock(&store), snapshots.as_deref(), None);
                if inbox.send(Msg::Loaded(Box::new(done))).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok((tx, reader))
}

/// Runs one job (on the reader thread, or on the engine thread at startup).
pub(crate) fn read(
    job: ReadJob,
    store: &Mutex<SpillStore>,
    snapshots: Option<&Mutex<SpillStore>>,
) -> ReadDone {
    let mut blocks = Vec::new();
    let bs_full = job.bs;
    {
        let mut st = lock(store);
        let bytes = st.identity().block_bytes;
        for (m, &resident) in job.metas.iter().zip(&job.resident) {
            if resident {
                blocks.push(None);
                continue;
            }
            let mut data = vec![0u8; bytes];
            if !matches!(st.get_into(m.key, m.parent, &m.tokens, &mut data), Ok(true)) {
                break;
            }
            let partial = m.tokens.len() < bs_full;
            blocks.push(Some(data));
            if partial {
                break;
            }
        }
        for w in st.take_warnings() {
            warn(w);
        }
    }
    let snapshot = job.snaps_resident.as_ref().map(|resident| {
        // The deepest full block restored whose snapshot is in memory or verifies.
        let full = job
            .metas
            .iter()
            .take(blocks.len())
            .take_while(|m| m.tokens.len() == bs_full)
            .count();
        for j in (0..full.min(resident.len()).min(job.snap_blocks)).rev() {
            if resident[j] {
                return (j + 1, None);
            }
            let Some(ss) = snapshots else { break };
            let mut ss = lock(ss);
            let m = &job.metas[j];
            let mut data = vec![0u8; ss.identity().block_bytes];
            let ok = matches!(ss.get_into(m.key, m.parent, &m.tokens, &mut data), Ok(true));
            for w in ss.take_warnings() {
                warn(w);
            }
            if ok {
                return (j + 1, Some(data));
            }
        }
        (0, None)
    });
    ReadDone {
        owner: job.owner,
        metas: job.metas,
        blocks,
        snapshot,
        since: job.since,
    }
}
