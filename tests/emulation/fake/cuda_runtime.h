// Emulation stand-in (host only) for the CUDA runtime the kernel file uses: a
// launch runs every block in turn, its threads as real threads (so barriers,
// and races, are real), with shared memory prefilled with 0xFF (NaN in fp16,
// bf16 and fp32: a read of anything never written shows). cp.async lands either
// at issue ("early") or only at the wait that must land it ("late"), checking
// alignment and that every read is inside a registered source tensor.
#pragma once
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct EmuIndex3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local EmuIndex3 threadIdx, blockIdx;

using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorInvalidValue = 1;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
enum cudaDeviceAttr {
  cudaDevAttrComputeCapabilityMajor,
  cudaDevAttrMaxSharedMemoryPerBlockOptin,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

inline int emu_resident_blocks = 2;
inline int emu_shared_optin = 232448;
inline bool emu_land_early = false;

inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? emu_shared_optin : 233472;
  return cudaSuccess;
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "invalid argument"; }
template <class F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
// The host stands in for every GPU: the kernels' image is always there.
struct cudaFuncAttributes { int maxThreadsPerBlock = 1024; };
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes*, F) { return cudaSuccess; }
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) {
  *n = emu_resident_blocks;
  return cudaSuccess;
}

[[noreturn]] inline void emu_fail(const char* what) {
  std::fprintf(stderr, "EMULATION CHECK FAILED: %s (block %u,%u thread %u)\n", what, blockIdx.x, blockIdx.y,
               threadIdx.x);
  std::abort();
}

// Readable global ranges (the source tensor): cp.async may read only there.
inline std::vector<std::pair<const unsigned char*, const unsigned char*>> emu_readable;

struct EmuBlock {
  unsigned char* shared = nullptr;
  size_t shared_size = 0;
  std::barrier<>* block_barrier = nullptr;
  std::barrier<>* warp_barriers[32] = {};
};
inline thread_local EmuBlock* emu_block = nullptr;

inline unsigned char* emu_shared() { return emu_block->shared; }

inline void emu_check_shared_tile(const void* p, unsigned ldm, size_t element, const char* what) {
  const auto at = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(emu_block->shared);
  if (at % 32 != 0) emu_fail(what);  // 256-bit aligned
  if ((ldm * element) % 16 != 0) emu_fail(what);  // ldm: 8 16-bit or 4 32-bit elements
  if (at < base || at + (15 * ldm + 16) * element > base + emu_block->shared_size) emu_fail(what);
}

inline void __syncthreads() { emu_block->block_barrier->arrive_and_wait(); }
inline void __syncwarp() { emu_block->warp_barriers[threadIdx.x / 32]->arrive_and_wait(); }

struct EmuCopy {
  void* to;
  const void* from;
  bool live;
};
inline void emu_do(const EmuCopy& c) {
  if (c.live)
    std::memcpy(c.to, c.from, 16);
  else
    std::memset(c.to, 0, 16);
}
inline thread_local std::vector<EmuCopy> emu_open_group;
inline thread_local std::deque<std::vector<EmuCopy>> emu_committed;

inline void emu_cp_async(void* shared, const void* global, bool live) {
  const auto to = reinterpret_cast<uintptr_t>(shared), base = reinterpret_cast<uintptr_t>(emu_block->shared);
  if (to % 16 != 0 || reinterpret_cast<uintptr_t>(global) % 16 != 0) emu_fail("cp.async alignment");
  if (to < base || to + 16 > base + emu_block->shared_size) emu_fail("cp.async outside shared memory");
  bool inside = false;
  const auto* g = static_cast<const unsigned char*>(global);
  for (const auto& r : emu_readable) inside = inside || (g >= r.first && g + 16 <= r.second);
  if (!inside) emu_fail(live ? "cp.async reads outside the source" : "cp.async zero-fill with an invalid address");
  const EmuCopy c{shared, global, live};
  if (emu_land_early)
    emu_do(c);
  else
    emu_open_group.push_back(c);
}
inline void emu_commit() {
  emu_committed.push_back(std::move(emu_open_group));
  emu_open_group.clear();
}
inline void emu_wait(int pending) {
  while (static_cast<int>(emu_committed.size()) > pending) {
    for (const auto& c : emu_committed.front()) emu_do(c);
    emu_committed.pop_front();
  }
}

template <class K, class... A>
void emu_launch(K kernel, dim3 grid, int threads, size_t shared_bytes, cudaStream_t, A... args) {
  if (threads % 32 != 0) emu_fail("threads");
  if (grid.x < 1 || grid.y < 1 || grid.y > 65535) emu_fail("grid");
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      EmuBlock block;
      block.shared_size = shared_bytes;
      block.shared = static_cast<unsigned char*>(std::aligned_alloc(128, (shared_bytes + 127) / 128 * 128));
      std::memset(block.shared, 0xFF, shared_bytes);
      std::barrier<> block_barrier(threads);
      std::vector<std::barrier<>*> warps;
      for (int w = 0; w < threads / 32; ++w) warps.push_back(new std::barrier<>(32));
      block.block_barrier = &block_barrier;
      for (int w = 0; w < threads / 32; ++w) block.warp_barriers[w] = warps[w];
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          threadIdx = {static_cast<unsigned>(t), 0, 0};
          blockIdx = {bx, by, 0};
          emu_block = &block;
          kernel(args...);
          if (!emu_open_group.empty() || !emu_committed.empty()) emu_fail("copies never waited for");
        });
      for (auto& th : pool) th.join();
      for (auto* w : warps) delete w;
      std::free(block.shared);
    }
}
