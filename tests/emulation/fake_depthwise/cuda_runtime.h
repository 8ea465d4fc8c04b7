// Emulation stand-in for depthwise.cu: the grouped_mma one plus 2-d blocks,
// 3-d grids, blockDim/gridDim and the vector types.
#pragma once
#include "../fake/cuda_runtime.h"
#include <atomic>
#include <memory>

struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline thread_local dim3 blockDim, gridDim;
inline std::atomic<long> emu_threads_run{0};
#include <map>
#include <string>
inline std::mutex emu_note_mutex;
inline std::map<std::string, long> emu_notes;
inline void emu_note(const char* f) {
  if (threadIdx.x || threadIdx.y || blockIdx.x || blockIdx.y || blockIdx.z) return;
  std::lock_guard<std::mutex> lock(emu_note_mutex);
  ++emu_notes[f];
}
inline unsigned emu_max_grid_x = 0, emu_blocks = 0;

template <class K, class... A>
void emu_launch(K kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t, A... args) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads < 1 || threads > 1024) emu_fail("threads");
  if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535 || grid.z > 65535) emu_fail("grid");
  if (shared_bytes > 48 * 1024) emu_fail("shared memory over 48 KiB without opt-in");
  emu_max_grid_x = std::max(emu_max_grid_x, grid.x);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        ++emu_blocks;
        EmuBlock blk;
        blk.shared_size = shared_bytes;
        blk.shared = static_cast<unsigned char*>(std::aligned_alloc(128, (shared_bytes + 127) / 128 * 128 + 128));
        std::memset(blk.shared, 0xFF, shared_bytes);
        std::barrier<> block_barrier(threads);
        blk.block_barrier = &block_barrier;
        // Warps of 1-d blocks (the last one possibly partial), for __syncwarp.
        std::vector<std::unique_ptr<std::barrier<>>> warps;
        for (unsigned w = 0; w * 32 < threads && w < 32; ++w) {
          warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
          blk.warp_barriers[w] = warps.back().get();
        }
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t)
          pool.emplace_back([&, t] {
            threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            blockIdx = {bx, by, bz};
            blockDim = block;
            gridDim = grid;
            emu_block = &blk;
            kernel(args...);
            ++emu_threads_run;
          });
        for (auto& th : pool) th.join();
        std::free(blk.shared);
      }
}
