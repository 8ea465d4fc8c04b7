// What a kernel's launch needs to know of the GPU it runs on, read once per
// device: the queries are cheap, but a launch should not pay them every time.
// Shared by the tensor-core kernels (grouped_mma.cu, gemm_filter.cu,
// depthwise.cu, pointwise_mma.cu, pointwise_filter.cu); inline, so every
// kernel file sees the same per-device cache.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

namespace torch_cudnn_algo::kernels {

struct DeviceTraits {
  int major = 0;          // compute capability; 0 when unknown
  int shared_optin = 0;   // shared memory a block may have, opted in
  int shared_per_sm = 0;
};

// The driver keeps this much shared memory per resident block for itself.
inline constexpr size_t kReservedSharedPerBlock = 1024;

// Blocks of `shared_bytes` shared memory an SM of `traits` holds at once, from
// 1 to `most` (`most` where the traits are unknown): a grid sized for more
// than fit runs a second, mostly idle wave.
inline int blocks_fitting_shared(const DeviceTraits& traits, size_t shared_bytes, int most) {
  if (traits.shared_per_sm <= 0) return most;
  const int64_t fit = traits.shared_per_sm / static_cast<int64_t>(shared_bytes + kReservedSharedPerBlock);
  return static_cast<int>(fit < 1 ? 1 : fit > most ? most : fit);
}

// Blocks of `kernel` an SM of the current device holds at once with `threads`
// threads and `shared` bytes of dynamic shared memory; 0 where the runtime
// cannot say. Remembered per device, kernel and launch shape: a configuration
// asks at every call, once to size its workspace and again to launch.
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads, size_t shared) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // leave no error behind for the launch to report
    return 0;
  }
  using Key = std::tuple<int, const void*, int, size_t>;
  static std::mutex mutex;
  static std::map<Key, int> known;
  const Key key{device, reinterpret_cast<const void*>(kernel), threads, shared};
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto found = known.find(key);
    if (found != known.end()) return found->second;
  }
  int resident = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, shared) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, resident);
  return resident;
}

// Devices whose traits are cached; a device index beyond is queried every time.
constexpr int kMaxCachedDevices = 64;

inline DeviceTraits query_device(int device) {
  DeviceTraits t;
  if (cudaDeviceGetAttribute(&t.major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&t.shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&t.shared_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess) {
    // Unknown means "not this kernel" (the generic kernels run); leave no error
    // behind for that launch's cudaGetLastError to report.
    cudaGetLastError();
    return DeviceTraits{};
  }
  return t;
}

// The current device (the launch's stream runs on it) and its traits; false if
// there is no current device.
inline bool current_device(int* device, DeviceTraits* traits) {
  if (cudaGetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (*device < 0 || *device >= kMaxCachedDevices) {
    *traits = query_device(*device);
    return true;
  }
  static std::once_flag queried[kMaxCachedDevices];
  static DeviceTraits cached[kMaxCachedDevices];
  const int d = *device;
  std::call_once(queried[d], [d] { cached[d] = query_device(d); });
  *traits = cached[d];
  return true;
}

// Lets `Kernel` have the GPU's whole opt-in shared memory, once per device:
// above 48 KB a kernel must opt in, and allowing the most once serves every
// later shape (it grants, it reserves nothing).
template <auto Kernel>
cudaError_t allow_all_shared(int device, const DeviceTraits& traits) {
  cudaError_t allowed = cudaSuccess;
  const auto allow = [&] {
    allowed = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, traits.shared_optin);
  };
  if (device >= 0 && device < kMaxCachedDevices) {
    static std::once_flag done[kMaxCachedDevices];
    std::call_once(done[device], allow);
  } else {
    allow();
  }
  return allowed;
}

}  // namespace torch_cudnn_algo::kernels
