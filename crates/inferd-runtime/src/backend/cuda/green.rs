//! A share of the GPU's multiprocessors: a CUDA green context, whose stream runs every
//! kernel queued on it (ours, cuBLASLt's, FlashInfer's, and graphs captured on it) on
//! that share alone. Two backends on complementary shares run side by side, e.g. a pass's
//! decode rows (bound by memory) beside its prompt chunk (bound by the tensor cores),
//! where one stream runs them one after the other.
//!
//! Device memory is one address space for all of a device's contexts, so weights, pools
//! and workspaces need nothing special; only the stream is made in the green context.
//! Hopper splits its multiprocessors in groups of 8 (`minSmPartitionSize`). FlashInfer's
//! planners and grids read the share's SM count from the calling thread (kernels/fi_sms.h),
//! which [`super::device::Device::bind`] sets: the backend binds before it plans or
//! launches (`prepare_batch` first), so a pass's plan and its grid agree.
//!
//! Measured (H100, session 28, `cuda_check lanes`): a mixed pass's decode rows on 8-32 SMs
//! beside its prompt chunk on the rest gained -11% to +8% over today's mixed pass (the
//! chunk lost more than its share of SMs), so the engine does not split passes this way;
//! this stays for measurement.

use cudarc::driver::sys;

use super::ffi;
use crate::{Result, RuntimeError};

/// Which share of the device's multiprocessors a backend runs its work on: the device's
/// multiprocessors split into one group of `sms` (rounded up to the device's partition
/// size) and the rest; `rest` takes the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmShare {
    pub sms: u32,
    pub rest: bool,
}

/// A green context and a stream in it; destroyed on drop.
pub struct GreenStream {
    ctx: sys::CUgreenCtx,
    pub stream: ffi::Stream,
    /// The multiprocessors of the share.
    pub sms: u32,
}

// SAFETY: the handles are used from any thread, as a stream is.
unsafe impl Send for GreenStream {}
unsafe impl Sync for GreenStream {}

fn driver(r: sys::CUresult, what: &str) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(RuntimeError::Device(format!(
            "green context: {what}: {r:?} (needs a CUDA 12.4+ driver)"
        )))
    }
}

impl GreenStream {
    /// A stream on `share` of device `ordinal`'s multiprocessors.
    pub fn new(ordinal: usize, share: SmShare) -> Result<GreenStream> {
        if share.sms == 0 {
            return Err(RuntimeError::Device("a share of 0 multiprocessors".into()));
        }
        // SAFETY: plain driver calls on zeroed out-parameters of their documented types.
        unsafe {
            driver(sys::cuInit(0), "cuInit")?;
            let mut dev: sys::CUdevice = 0;
            driver(sys::cuDeviceGet(&mut dev, ordinal as i32), "cuDeviceGet")?;
            let mut all: sys::CUdevResource = std::mem::zeroed();
            driver(
                sys::cuDeviceGetDevResource(
                    dev,
                    &mut all,
                    sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM,
                ),
                "reading the device's multiprocessors",
            )?;
            let mut group: sys::CUdevResource = std::mem::zeroed();
            let mut rest: sys::CUdevResource = std::mem::zeroed();
            let mut groups = 1u32;
            driver(
                sys::cuDevSmResourceSplitByCount(
                    &mut group,
                    &mut groups,
                    &all,
                    &mut rest,
                    0,
                    share.sms,
                ),
                &format!("splitting off {} multiprocessors", share.sms),
            )?;
            if groups != 1 {
                return Err(RuntimeError::Device(format!(
                    "green context: {} multiprocessors do not split off this device",
                    share.sms
                )));
            }
            let mut chosen = if share.rest { rest } else { group };
            let sms = chosen.__bindgen_anon_1.sm.smCount;
            if sms == 0 {
                return Err(RuntimeError::Device(
                    "green context: the share has no multiprocessors".into(),
                ));
            }
            let mut desc: sys::CUdevResourceDesc = std::ptr::null_mut();
            driver(
                sys::cuDevResourceGenerateDesc(&mut desc, &mut chosen, 1),
                "describing the share",
            )?;
            let mut ctx: sys::CUgreenCtx = std::ptr::null_mut();
            driver(
                sys::cuGreenCtxCreate(
                    &mut ctx,
                    desc,
                    dev,
                    sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
                ),
                "creating the context",
            )?;
            let mut stream: sys::CUstream = std::ptr::null_mut();
            let made = driver(
                sys::cuGreenCtxStreamCreate(
                    &mut stream,
                    ctx,
                    sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                    0,
                ),
                "creating its stream",
            );
            if let Err(e) = made {
                let _ = sys::cuGreenCtxDestroy(ctx);
                return Err(e);
            }
            Ok(GreenStream {
                ctx,
                stream: stream.cast(),
                sms,
            })
        }
    }
}

impl Drop for GreenStream {
    fn drop(&mut self) {
        // SAFETY: the stream and context were made by `new` and are dropped once.
        unsafe {
            let _ = ffi::ifd_stream_destroy(self.stream);
            let _ = sys::cuGreenCtxDestroy(self.ctx);
        }
    }
}
