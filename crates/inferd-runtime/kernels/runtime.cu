// Devices, memory and streams through the CUDA runtime (linked statically: it loads the
// driver at first use, so a binary with these in it starts on a machine with no GPU).
#include <cstring>

// cuda_profiler_api.h is not in the PyPI runtime wheel; the functions are in cudart.
extern "C" cudaError_t cudaProfilerStart(void);
extern "C" cudaError_t cudaProfilerStop(void);

#include "common.cuh"

namespace {
// Test support (ifd_test_fault): a store to an address no allocation holds.
__global__ void fault_kernel(int* p) { *p = 1; }
}  // namespace

namespace ifd {
// fi_sms.h: the multiprocessors of the calling thread's share of the device (0: all).
thread_local int g_lane_sms = 0;
}  // namespace ifd

extern "C" {

void ifd_set_lane_sms(int sms) { ifd::g_lane_sms = sms; }

int ifd_device_count(int* n) {
  *n = 0;
  return static_cast<int>(cudaGetDeviceCount(n));
}

int ifd_set_device(int dev) { return static_cast<int>(cudaSetDevice(dev)); }

int ifd_device_info(int dev, char* name, int len, int* major, int* minor, int* sms,
                    size_t* total_bytes) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, dev);
  if (e != cudaSuccess) return static_cast<int>(e);
  if (len > 0) {
    std::strncpy(name, p.name, static_cast<size_t>(len) - 1);
    name[len - 1] = 0;
  }
  *major = p.major;
  *minor = p.minor;
  *sms = p.multiProcessorCount;
  *total_bytes = p.totalGlobalMem;
  return 0;
}

int ifd_mem_info(size_t* free_bytes, size_t* total_bytes) {
  return static_cast<int>(cudaMemGetInfo(free_bytes, total_bytes));
}

int ifd_stream_create(void** stream) {
  return static_cast<int>(
      cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(stream), cudaStreamNonBlocking));
}

int ifd_stream_destroy(void* stream) {
  return static_cast<int>(cudaStreamDestroy(ifd::as_stream(stream)));
}

int ifd_stream_query(void* stream) {
  return static_cast<int>(cudaStreamQuery(ifd::as_stream(stream)));
}

int ifd_stream_sync(void* stream) {
  return static_cast<int>(cudaStreamSynchronize(ifd::as_stream(stream)));
}

int ifd_malloc(void** ptr, size_t bytes) { return static_cast<int>(cudaMalloc(ptr, bytes)); }

int ifd_free(void* ptr) { return static_cast<int>(cudaFree(ptr)); }

int ifd_host_alloc(void** ptr, size_t bytes) {
  return static_cast<int>(cudaHostAlloc(ptr, bytes, cudaHostAllocDefault));
}

int ifd_host_free(void* ptr) { return static_cast<int>(cudaFreeHost(ptr)); }

int ifd_copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return 0;
  return static_cast<int>(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ifd::as_stream(stream)));
}

int ifd_event_create(void** event) {
  return static_cast<int>(cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(event),
                                                   cudaEventDisableTiming));
}

int ifd_event_record(void* event, void* stream) {
  return static_cast<int>(
      cudaEventRecord(static_cast<cudaEvent_t>(event), ifd::as_stream(stream)));
}

int ifd_event_sync(void* event) {
  return static_cast<int>(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

int ifd_event_destroy(void* event) {
  return static_cast<int>(cudaEventDestroy(static_cast<cudaEvent_t>(event)));
}

int ifd_memset(void* ptr, int value, size_t bytes, void* stream) {
  if (bytes == 0) return 0;
  return static_cast<int>(cudaMemsetAsync(ptr, value, bytes, ifd::as_stream(stream)));
}

int ifd_last_error() { return static_cast<int>(cudaGetLastError()); }

int ifd_test_fault(void* stream) {
  fault_kernel<<<1, 1, 0, ifd::as_stream(stream)>>>(reinterpret_cast<int*>(16));
  return static_cast<int>(cudaGetLastError());
}

void ifd_test_break_capture(void* stream) {
  (void)cudaStreamQuery(ifd::as_stream(stream));
}

int ifd_capture_begin(void* stream) {
  return static_cast<int>(
      cudaStreamBeginCapture(ifd::as_stream(stream), cudaStreamCaptureModeThreadLocal));
}

int ifd_capture_end(void* stream, void** exec) {
  *exec = nullptr;
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(ifd::as_stream(stream), &g);
  if (e != cudaSuccess) return static_cast<int>(e);
  cudaGraphExec_t x = nullptr;
  e = cudaGraphInstantiate(&x, g, 0);
  cudaGraphDestroy(g);
  if (e != cudaSuccess) return static_cast<int>(e);
  *exec = x;
  return 0;
}

int ifd_graph_launch(void* exec, void* stream) {
  return static_cast<int>(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), ifd::as_stream(stream)));
}

int ifd_graph_destroy(void* exec) {
  return static_cast<int>(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)));
}

const char* ifd_error_string(int err) {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}

int ifd_profiler(int on) {
  return static_cast<int>(on ? cudaProfilerStart() : cudaProfilerStop());
}

}  // extern "C"
