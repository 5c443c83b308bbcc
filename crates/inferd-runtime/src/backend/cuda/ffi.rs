//! The C ABI of `kernels/inferd.h` (keep the two in step). Every function returns a
//! `cudaError_t` (0 = success) and queues its work on the given stream.

#![allow(dead_code)]

use std::ffi::{c_char, c_int, c_void};

pub type Stream = *mut c_void;

/// One layer's paged K/V planes, `[num_blocks, n_kv_heads, block_size, head_dim]` each.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IfdPaged {
    pub k: *mut c_void,
    pub v: *mut c_void,
    /// `IFD_KV_*` (inferd.h): 0 f32, 1 bf16, 2 q8, 3 fp8
    pub dtype: c_int,
    pub n_kv_heads: c_int,
    pub block_size: c_int,
    pub head_dim: c_int,
    /// 8-bit only: [num_blocks, n_kv_heads, block_size] f32
    pub k_scale: *mut f32,
    pub v_scale: *mut f32,
    /// 8-bit only, may be null: [n_kv_heads, head_dim] f32
    pub k_offset: *const f32,
}

/// A layer's planes as a block image orders them (inferd.h `IfdPieces`): how many, and
/// the bytes of one block of each.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IfdPieces {
    pub n: c_int,
    pub bytes: [usize; 4],
}

/// The `IFD_KV_*` code of a KV dtype.
pub fn kv_code(d: crate::kv::KvDtype) -> c_int {
    use crate::kv::KvDtype;
    match d {
        KvDtype::F32 => 0,
        KvDtype::Bf16 => 1,
        KvDtype::Q8 => 2,
        KvDtype::Fp8 => 3,
    }
}

extern "C" {
    pub fn ifd_device_count(n: *mut c_int) -> c_int;
    pub fn ifd_set_device(dev: c_int) -> c_int;
    /// The multiprocessors of the calling thread's share of the device, which FlashInfer's
    /// planners and grids size themselves to (kernels/fi_sms.h); 0: the whole device.
    pub fn ifd_set_lane_sms(sms: c_int);
    pub fn ifd_device_info(
        dev: c_int,
        name: *mut c_char,
        len: c_int,
        major: *mut c_int,
        minor: *mut c_int,
        sms: *mut c_int,
        total_bytes: *mut usize,
    ) -> c_int;
    pub fn ifd_mem_info(free_bytes: *mut usize, total_bytes: *mut usize) -> c_int;
    pub fn ifd_stream_create(stream: *mut Stream) -> c_int;
    pub fn ifd_stream_destroy(stream: Stream) -> c_int;
    pub fn ifd_stream_query(stream: Stream) -> c_int;
    pub fn ifd_stream_sync(stream: Stream) -> c_int;
    pub fn ifd_malloc(ptr: *mut *mut c_void, bytes: usize) -> c_int;
    pub fn ifd_free(ptr: *mut c_void) -> c_int;
    pub fn ifd_host_alloc(ptr: *mut *mut c_void, bytes: usize) -> c_int;
    pub fn ifd_host_free(ptr: *mut c_void) -> c_int;
    pub fn ifd_copy(dst: *mut c_void, src: *const c_void, bytes: usize, stream: Stream) -> c_int;
    pub fn ifd_event_create(event: *mut *mut c_void) -> c_int;
    pub fn ifd_event_record(event: *mut c_void, stream: Stream) -> c_int;
    pub fn ifd_event_sync(event: *mut c_void) -> c_int;
    pub fn ifd_event_destroy(event: *mut c_void) -> c_int;
    pub fn ifd_memset(ptr: *mut c_void, value: c_int, bytes: usize, stream: Stream) -> c_int;
    /// kernels/tables.cu (declared here only, as the events: inferd.h, which every cached
    /// kernel object is keyed by, stays as it was).
    pub fn ifd_table_scatter(table: *mut i32, pairs: *const i32, n: c_int, stream: Stream)
        -> c_int;
    pub fn ifd_last_error() -> c_int;
    pub fn ifd_capture_begin(stream: Stream) -> c_int;
    pub fn ifd_capture_end(stream: Stream, exec: *mut *mut c_void) -> c_int;
    pub fn ifd_graph_launch(exec: *mut c_void, stream: Stream) -> c_int;
    pub fn ifd_graph_destroy(exec: *mut c_void) -> c_int;
    pub fn ifd_error_string(err: c_int) -> *const c_char;
    pub fn ifd_profiler(on: c_int) -> c_int;

    pub fn ifd_gemv(
        x: *const c_void,
        w: *const c_void,
        bias: *const f32,
        y: *mut f32,
        n: c_int,
        k: c_int,
        out: c_int,
        loads: c_int,
        add: c_int,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_gemv_swiglu(
        x: *const c_void,
        w: *const c_void,
        bias: *const f32,
        out: *mut c_void,
        n: c_int,
        k: c_int,
        f: c_int,
        loads: c_int,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_qkv_prep(
        qkv: *const c_void,
        qkv_bf16: c_int,
        rows: c_int,
        hq: c_int,
        hkv: c_int,
        head_dim: c_int,
        q_norm: *const f32,
        k_norm: *const f32,
        eps: f32,
        half: c_int,
        neox: c_int,
        pos: *const i32,
        cos_tab: *const f32,
        sin_tab: *const f32,
        q: *mut c_void,
        q_bf16: c_int,
        k: *mut f32,
        v: *mut f32,
        kv: *const IfdPaged,
        slot: *const i32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_swiglu(
        gate_up: *const c_void,
        in_bf16: c_int,
        rows: c_int,
        f: c_int,
        out: *mut c_void,
        stream: Stream,
    ) -> c_int;

    pub fn ifd_embed(
        table: *const c_void,
        tokens: *const i32,
        n: c_int,
        cols: c_int,
        out: *mut f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_silu_mul(
        gate: *const f32,
        up: *const f32,
        n: usize,
        out: *mut c_void,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_add(x: *mut f32, y: *const f32, n: usize, stream: Stream) -> c_int;
    pub fn ifd_copy_cols(
        x: *const f32,
        rows: c_int,
        x_cols: c_int,
        col0: c_int,
        width: c_int,
        out: *mut f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_gather_rows(
        x: *const f32,
        idx: *const i32,
        n: c_int,
        cols: c_int,
        out: *mut f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_rms_norm(
        x: *const f32,
        w: *const f32,
        rows: c_int,
        cols: c_int,
        eps: f32,
        out: *mut c_void,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_add_rms_norm(
        x: *mut f32,
        y: *const f32,
        w: *const f32,
        rows: c_int,
        cols: c_int,
        eps: f32,
        out: *mut c_void,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_head_rms_norm(
        x: *mut f32,
        w: *const f32,
        slices: c_int,
        head_dim: c_int,
        eps: f32,
        stream: Stream,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_rope(
        x: *mut f32,
        rows: c_int,
        cols: c_int,
        head_dim: c_int,
        half: c_int,
        neox: c_int,
        pos: *const i32,
        cos_tab: *const f32,
        sin_tab: *const f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_kv_append(
        kv: IfdPaged,
        k: *const f32,
        v: *const f32,
        slot: *const i32,
        n: c_int,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_kv_dequant_pages(
        kv: IfdPaged,
        src: *const i32,
        n: c_int,
        k_out: *mut c_void,
        v_out: *mut c_void,
        stream: Stream,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_kv_gather(
        kv: IfdPaged,
        page_indptr: *const i32,
        pages: *const i32,
        last_page_len: *const i32,
        tok_indptr: *const i32,
        n_seqs: c_int,
        n_pages: c_int,
        k_out: *mut c_void,
        v_out: *mut c_void,
        stream: Stream,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_attention(
        kv: IfdPaged,
        q: *const f32,
        n: c_int,
        n_heads: c_int,
        scale: f32,
        seq: *const i32,
        pos: *const i32,
        bt_off: *const i32,
        bt: *const i32,
        out: *mut c_void,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_gather_blocks(
        planes: *const *mut c_void,
        n_layers: c_int,
        pieces: IfdPieces,
        ids: *const i32,
        n: c_int,
        image: *mut c_void,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_scatter_blocks(
        planes: *const *mut c_void,
        n_layers: c_int,
        pieces: IfdPieces,
        ids: *const i32,
        n: c_int,
        image: *const c_void,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_decode_supported(head_dim: c_int, group: c_int) -> c_int;
    pub fn ifd_test_fault(stream: Stream) -> c_int;
    pub fn ifd_test_break_capture(stream: Stream);
    pub fn ifd_attention_stub(out: *mut c_void, n: usize, stream: Stream) -> c_int;
    pub fn ifd_decode_probe(buf: *mut c_void) -> c_int;
    pub fn ifd_kernel_probe_gemv(region: *mut c_void) -> c_int;
    pub fn ifd_kernel_probe_norm(region: *mut c_void) -> c_int;
    pub fn ifd_kernel_probe_fused(region: *mut c_void) -> c_int;
    pub fn ifd_kernel_probe_decode(region: *mut c_void) -> c_int;
    pub fn ifd_decode_mma_supported(kv_dtype: c_int, head_dim: c_int, group: c_int) -> c_int;
    pub fn ifd_decode_mma_blocks_per_sm(head_dim: c_int, group: c_int) -> c_int;
    pub fn ifd_decode_cluster_capacity(
        head_dim: c_int,
        group: c_int,
        splits: c_int,
        warps: c_int,
    ) -> c_int;
    pub fn ifd_decode_attention(
        kv: IfdPaged,
        q: *const c_void,
        rows: c_int,
        n_heads: c_int,
        scale: f32,
        seq: *const i32,
        pos: *const i32,
        chunks: *const i32,
        bt_off: *const i32,
        bt: *const i32,
        splits: c_int,
        part: *mut f32,
        done: *mut i32,
        mma: c_int,
        out: *mut c_void,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_copy_state_slots(
        planes: *const *mut f32,
        n_layers: c_int,
        conv_elems: usize,
        delta_elems: usize,
        pairs: *const i32,
        n: c_int,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_gather_state_slots(
        planes: *const *mut f32,
        n_layers: c_int,
        conv_elems: usize,
        delta_elems: usize,
        ids: *const i32,
        n: c_int,
        image: *mut f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_scatter_state_slots(
        planes: *const *mut f32,
        n_layers: c_int,
        conv_elems: usize,
        delta_elems: usize,
        ids: *const i32,
        n: c_int,
        image: *const f32,
        stream: Stream,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_causal_conv1d_silu(
        x: *const f32,
        w: *const f32,
        state: *mut f32,
        chunks: *const i32,
        n_chunks: c_int,
        seq: *const i32,
        n_tokens: c_int,
        dim: c_int,
        taps: c_int,
        out: *mut f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_l2_norm_heads(
        x: *mut f32,
        slices: c_int,
        d: c_int,
        eps: f32,
        scale: f32,
        stream: Stream,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_delta_gates(
        a: *const f32,
        b: *const f32,
        a_log: *const f32,
        dt_bias: *const f32,
        rows: c_int,
        heads: c_int,
        g: *mut f32,
        beta: *mut f32,
        stream: Stream,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_gated_rms_norm(
        x: *const f32,
        z: *const f32,
        w: *const f32,
        slices: c_int,
        d: c_int,
        eps: f32,
        out: *mut c_void,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_split_head_pairs(
        x: *const f32,
        rows: c_int,
        heads: c_int,
        d: c_int,
        a: *mut f32,
        b: *mut f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_sigmoid_mul(
        x: *mut c_void,
        x_bf16: c_int,
        gate: *const f32,
        n: usize,
        stream: Stream,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_delta_rule_recurrent(
        q: *const f32,
        k: *const f32,
        v: *const f32,
        g: *const f32,
        beta: *const f32,
        state: *mut f32,
        chunks: *const i32,
        n_chunks: c_int,
        nk: c_int,
        nv: c_int,
        dk: c_int,
        dv: c_int,
        out: *mut f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_delta_rule_chunked_supported(dk: c_int) -> c_int;
    pub fn ifd_delta_pieces_supported(dk: c_int, dv: c_int) -> c_int;
    pub fn ifd_delta_pieces_ws_floats(n_pieces: c_int, nv: c_int, dk: c_int, dv: c_int) -> usize;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_delta_rule_pieces(
        q: *const f32,
        k: *const f32,
        v: *const f32,
        g: *const f32,
        beta: *const f32,
        state: *mut f32,
        chunks: *const i32,
        n_chunks: c_int,
        pieces: *const i32,
        piece_base: *const i32,
        n_pieces: c_int,
        nk: c_int,
        nv: c_int,
        dk: c_int,
        dv: c_int,
        ws: *mut f32,
        out: *mut f32,
        stream: Stream,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn ifd_delta_rule_chunked(
        q: *const f32,
        k: *const f32,
        v: *const f32,
        g: *const f32,
        beta: *const f32,
        state: *mut f32,
        chunks: *const i32,
        n_chunks: c_int,
        nk: c_int,
        nv: c_int,
        dk: c_int,
        dv: c_int,
        out: *mut f32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_argmax_rows(
        logits: *const f32,
        vocab: c_int,
        rows: *const i32,
        n: c_int,
        out: *mut i32,
        stream: Stream,
    ) -> c_int;
    pub fn ifd_sample_plans(
        logits: *const f32,
        vocab: c_int,
        plans: *const std::ffi::c_void,
        words: *const u32,
        pens: *const u32,
        n: c_int,
        scratch: *mut f32,
        out: *mut std::ffi::c_void,
        stream: Stream,
    ) -> c_int;
}

/// The CUDA error's name and text, e.g. "out of memory".
pub fn error_string(code: c_int) -> String {
    // SAFETY: cudaGetErrorString returns a static NUL-terminated string for any code.
    unsafe { std::ffi::CStr::from_ptr(ifd_error_string(code)) }
        .to_string_lossy()
        .into_owned()
}

/// `Ok` for 0, else a `RuntimeError::Device` naming `what`, or `DeviceLost` for an error
/// after which the process can run no more CUDA work ([`is_sticky`]).
pub fn check(code: c_int, what: &str) -> crate::Result<()> {
    if code == 0 {
        return Ok(());
    }
    let msg = format!("{what}: CUDA error {code} ({})", error_string(code));
    Err(if is_sticky(code) {
        crate::RuntimeError::DeviceLost(msg)
    } else {
        crate::RuntimeError::Device(msg)
    })
}

/// The CUDA runtime's errors that leave the process "in an inconsistent state": every
/// later CUDA call returns the same error, and only a new process can use the device
/// (driver_types.h says so of each): a contained error (226), an illegal address (700), a
/// kernel timeout (702), a device-side assert (710), a hardware stack error, an illegal
/// instruction, a misaligned address, an invalid address space or PC (714-718), a launch
/// failure (719), a tensor-memory leak (721), an MPS client terminated (810), an external
/// device's error (911); and an uncorrectable ECC or NVLink error (214, 220), after which
/// the device's memory cannot be trusted.
pub fn is_sticky(code: c_int) -> bool {
    matches!(
        code,
        214 | 220 | 226 | 700 | 702 | 710 | 714..=719 | 721 | 810 | 911
    )
}

#[cfg(test)]
mod tests {
    use super::is_sticky;

    #[test]
    fn sticky_errors_are_the_ones_that_end_the_process() {
        for code in [
            214, 220, 226, 700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 810, 911,
        ] {
            assert!(is_sticky(code), "{code}");
        }
        // Out of memory, an invalid value, too many resources for a launch, not supported,
        // not ready: the call failed, the device goes on.
        for code in [0, 1, 2, 98, 209, 701, 720, 801, 600] {
            assert!(!is_sticky(code), "{code}");
        }
    }
}
