//! One GPU: which device, its stream, and device memory owned by RAII buffers.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::ffi::{self, check};
use super::green::{GreenStream, SmShare};
use crate::{Result, RuntimeError};

/// What a GPU reports about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability (9.0 for Hopper).
    pub major: i32,
    pub minor: i32,
    pub multiprocessors: i32,
    pub total_bytes: usize,
}

/// The number of CUDA devices, or why there are none: no driver (a machine without a
/// GPU) is an error with a clear text, never a crash.
pub fn device_count() -> Result<usize> {
    // SAFETY: libcuda is probed by name before the runtime (static cudart) touches it.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(RuntimeError::Device(
            "no NVIDIA driver found (libcuda.so is not loadable): this machine has no usable GPU"
                .into(),
        ));
    }
    let mut n: c_int = 0;
    check(
        unsafe { ffi::ifd_device_count(&mut n) },
        "counting CUDA devices",
    )?;
    Ok(n as usize)
}

/// Properties of device `ordinal`.
pub fn device_info(ordinal: usize) -> Result<DeviceInfo> {
    let mut name = [0u8; 256];
    let (mut major, mut minor, mut sms, mut total) = (0, 0, 0, 0usize);
    check(
        unsafe {
            ffi::ifd_device_info(
                ordinal as c_int,
                name.as_mut_ptr().cast(),
                name.len() as c_int,
                &mut major,
                &mut minor,
                &mut sms,
                &mut total,
            )
        },
        "reading device properties",
    )?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(DeviceInfo {
        ordinal,
        name: String::from_utf8_lossy(&name[..end]).into_owned(),
        major,
        minor,
        multiprocessors: sms,
        total_bytes: total,
    })
}

/// A device and the one stream all of a backend's work is queued on (so work is
/// ordered without events; a host read waits for the stream). On a share of the
/// device's multiprocessors ([`SmShare`]) the stream is a green context's, and `info`
/// counts the share's multiprocessors.
pub struct Device {
    pub info: DeviceInfo,
    stream: ffi::Stream,
    /// The green context the stream is in, on a share (it owns the stream).
    green: Option<GreenStream>,
}

// SAFETY: a CUDA stream may be used from any thread; the runtime serializes its queue.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// Device `ordinal`, its work on `share` of its multiprocessors (all: `None`).
    pub fn open(ordinal: usize, share: Option<SmShare>) -> Result<Arc<Device>> {
        let n = device_count()?;
        if ordinal >= n {
            return Err(RuntimeError::Device(format!(
                "CUDA device {ordinal} requested; {n} present"
            )));
        }
        let mut info = device_info(ordinal)?;
        if info.major < 9 {
            return Err(RuntimeError::Device(format!(
                "{} (compute capability {}.{}): inferd's kernels are built for sm_90a (Hopper)",
                info.name, info.major, info.minor
            )));
        }
        check(
            unsafe { ffi::ifd_set_device(ordinal as c_int) },
            "selecting the device",
        )?;
        let (stream, green) = match share {
            Some(share) => {
                let g = GreenStream::new(ordinal, share)?;
                info.multiprocessors = g.sms as i32;
                (g.stream, Some(g))
            }
            None => {
                let mut stream = std::ptr::null_mut();
                check(
                    unsafe { ffi::ifd_stream_create(&mut stream) },
                    "creating a stream",
                )?;
                (stream, None)
            }
        };
        let dev = Device {
            info,
            stream,
            green,
        };
        dev.bind()?;
        Ok(Arc::new(dev))
    }

    /// Whether the work runs on a share of the device's multiprocessors.
    pub fn shared(&self) -> bool {
        self.green.is_some()
    }

    /// Makes this device current on the calling thread (each host thread has its own),
    /// and tells FlashInfer's planners the multiprocessors its work runs on.
    pub fn bind(&self) -> Result<()> {
        let sms = if self.green.is_some() {
            self.info.multiprocessors
        } else {
            0
        };
        // SAFETY: sets a thread-local count.
        unsafe { ffi::ifd_set_lane_sms(sms as c_int) };
        check(
            unsafe { ffi::ifd_set_device(self.info.ordinal as c_int) },
            "selecting the device",
        )
    }

    pub fn stream(&self) -> ffi::Stream {
        self.stream
    }

    /// Waits for all queued work; its first error.
    pub fn sync(&self) -> Result<()> {
        check(unsafe { ffi::ifd_stream_sync(self.stream) }, "device work")
    }

    /// Free and total device memory.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        let (mut free, mut total) = (0, 0);
        check(
            unsafe { ffi::ifd_mem_info(&mut free, &mut total) },
            "reading memory",
        )?;
        Ok((free, total))
    }

    /// `bytes` of device memory (contents undefined).
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuffer> {
        let mut ptr = std::ptr::null_mut();
        if bytes > 0 {
            check(
                unsafe { ffi::ifd_malloc(&mut ptr, bytes) },
                &format!("allocating {bytes} bytes"),
            )?;
        }
        Ok(DeviceBuffer {
            ptr,
            bytes,
            device: self.clone(),
        })
    }

    /// `bytes` of zeroed device memory.
    pub fn alloc_zeroed(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuffer> {
        let b = self.alloc(bytes)?;
        check(
            unsafe { ffi::ifd_memset(b.ptr, 0, bytes, self.stream) },
            "zeroing memory",
        )?;
        Ok(b)
    }

    /// Queues a copy of host bytes to `dst + offset` (the host slice may be dropped on
    /// return: pageable memory is staged by the driver before the call returns).
    pub fn upload(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<()> {
        dst.check_range(offset, src.len())?;
        check(
            unsafe {
                ffi::ifd_copy(
                    dst.ptr.cast::<u8>().add(offset).cast(),
                    src.as_ptr().cast(),
                    src.len(),
                    self.stream,
                )
            },
            "copying to the device",
        )
    }

    /// Copies `dst.len()` bytes from `src + offset` to the host, waiting for them.
    pub fn download(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
        src.check_range(offset, dst.len())?;
        check(
            unsafe {
                ffi::ifd_copy(
                    dst.as_mut_ptr().cast(),
                    src.ptr.cast::<u8>().add(offset).cast(),
                    dst.len(),
                    self.stream,
                )
            },
            "copying from the device",
        )?;
        self.sync()
    }

    /// Queues a copy of `n` bytes from `src + offset` into pinned host memory, not waited
    /// for: the bytes are there once an [`Event`] recorded after it has completed.
    pub fn read_async(
        &self,
        src: &DeviceBuffer,
        offset: usize,
        dst: &mut PinnedBuffer,
        n: usize,
    ) -> Result<()> {
        src.check_range(offset, n)?;
        if n > dst.bytes {
            return Err(RuntimeError::Device(format!(
                "a read-back of {n} bytes into {} pinned bytes",
                dst.bytes
            )));
        }
        check(
            unsafe {
                ffi::ifd_copy(
                    dst.ptr,
                    src.ptr.cast::<u8>().add(offset).cast(),
                    n,
                    self.stream,
                )
            },
            "copying from the device",
        )
    }

    /// Queues a device-to-device copy of `bytes` between raw device addresses (within
    /// buffers the caller keeps alive until the copy has run).
    pub fn copy_raw(&self, dst: usize, src: usize, bytes: usize) -> Result<()> {
        check(
            unsafe { ffi::ifd_copy(dst as *mut c_void, src as *const c_void, bytes, self.stream) },
            "copying on the device",
        )
    }

    /// Queues a device-to-device copy of `bytes`.
    pub fn copy_within(
        &self,
        src: &DeviceBuffer,
        src_off: usize,
        dst: &DeviceBuffer,
        dst_off: usize,
        bytes: usize,
    ) -> Result<()> {
        src.check_range(src_off, bytes)?;
        dst.check_range(dst_off, bytes)?;
        check(
            unsafe {
                ffi::ifd_copy(
                    dst.ptr.cast::<u8>().add(dst_off).cast(),
                    src.ptr.cast::<u8>().add(src_off).cast(),
                    bytes,
                    self.stream,
                )
            },
            "copying on the device",
        )
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        unsafe {
            ffi::ifd_stream_sync(self.stream);
            if self.green.is_none() {
                ffi::ifd_stream_destroy(self.stream);
            } // else the green context's own drop destroys it
        }
    }
}

/// Device memory, freed on drop (after the stream's queued work, which may use it).
pub struct DeviceBuffer {
    ptr: *mut c_void,
    bytes: usize,
    device: Arc<Device>,
}

// SAFETY: a device pointer is an address valid from any host thread.
unsafe impl Send for DeviceBuffer {}
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    pub fn ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// `ptr + offset` bytes, typed (the caller keeps within the buffer).
    pub fn at<T>(&self, offset: usize) -> *mut T {
        debug_assert!(offset <= self.bytes);
        unsafe { self.ptr.cast::<u8>().add(offset).cast() }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.bytes) {
            return Err(RuntimeError::Device(format!(
                "a copy of {len} bytes at {offset} past a buffer of {}",
                self.bytes
            )));
        }
        Ok(())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // cudaFree waits for the device to finish work that may use the memory.
            let _ = self.device.bind();
            unsafe { ffi::ifd_free(self.ptr) };
        }
    }
}

/// Page-locked host memory (copies to and from it run at full PCIe speed, asynchronously),
/// freed on drop.
pub struct PinnedBuffer {
    ptr: *mut c_void,
    bytes: usize,
}

// SAFETY: plain host memory, owned.
unsafe impl Send for PinnedBuffer {}
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    pub fn new(bytes: usize) -> Result<PinnedBuffer> {
        let mut ptr = std::ptr::null_mut();
        check(
            unsafe { ffi::ifd_host_alloc(&mut ptr, bytes.max(1)) },
            &format!("allocating {bytes} bytes of pinned host memory"),
        )?;
        Ok(PinnedBuffer { ptr, bytes })
    }

    pub fn ptr(&self) -> *mut c_void {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The first `n` bytes (the caller has synchronized with any copy into them).
    pub fn slice(&self, n: usize) -> &[u8] {
        assert!(n <= self.bytes);
        unsafe { std::slice::from_raw_parts(self.ptr.cast(), n) }
    }

    /// The first `n` bytes, to fill (no copy from them may be in flight).
    pub fn slice_mut(&mut self, n: usize) -> &mut [u8] {
        assert!(n <= self.bytes);
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast(), n) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        unsafe { ffi::ifd_host_free(self.ptr) };
    }
}

/// A point in the stream's queue: [`Event::wait`] returns once the work queued before
/// the last [`Event::record`] has run, whatever was queued after it.
pub struct Event {
    ev: *mut c_void,
    device: Arc<Device>,
}

// SAFETY: a CUDA event handle may be used from any host thread.
unsafe impl Send for Event {}
unsafe impl Sync for Event {}

impl Event {
    pub fn new(device: &Arc<Device>) -> Result<Event> {
        device.bind()?;
        let mut ev = std::ptr::null_mut();
        check(
            unsafe { ffi::ifd_event_create(&mut ev) },
            "creating an event",
        )?;
        Ok(Event {
            ev,
            device: device.clone(),
        })
    }

    /// Marks the work queued on the device's stream so far.
    pub fn record(&self, device: &Device) -> Result<()> {
        check(
            unsafe { ffi::ifd_event_record(self.ev, device.stream) },
            "recording an event",
        )
    }

    /// Waits for the work queued before the last `record`; its first error, if any.
    pub fn wait(&self) -> Result<()> {
        check(
            unsafe { ffi::ifd_event_sync(self.ev) },
            "waiting for the device",
        )
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.device.bind();
        unsafe { ffi::ifd_event_destroy(self.ev) };
    }
}
