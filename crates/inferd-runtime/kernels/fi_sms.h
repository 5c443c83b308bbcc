// FlashInfer's planners and persistent grids size themselves to the device's
// multiprocessors (cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount)). A backend
// whose work runs on a share of them (a green context: backend/cuda/green.rs) tells the
// calling host thread how many (ifd_set_lane_sms), and the FlashInfer units, which include
// this header before FlashInfer's own, read that count instead: a persistent grid of the
// whole device's size would run its last blocks in a second wave on a share.
#pragma once
#include <cuda_runtime.h>

namespace ifd {
// The multiprocessors of the calling thread's share; 0: the whole device.
extern thread_local int g_lane_sms;
}  // namespace ifd

inline cudaError_t ifd_device_attribute(int* value, cudaDeviceAttr attr, int device) {
  if (attr == cudaDevAttrMultiProcessorCount && ifd::g_lane_sms > 0) {
    *value = ifd::g_lane_sms;
    return cudaSuccess;
  }
  return cudaDeviceGetAttribute(value, attr, device);
}
#define cudaDeviceGetAttribute ifd_device_attribute
