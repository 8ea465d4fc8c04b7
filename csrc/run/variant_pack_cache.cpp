#include "run/variant_pack_cache.h"

#include "base/common.h"
#include "base/conv_key.h"

#include <array>
#include <cstdint>
#include <unordered_map>

namespace torch_cudnn_algo {
namespace {

constexpr int64_t kUids[3] = {kUidX, kUidW, kUidY};

// More distinct call sites than any network has convolution calls per step;
// reached only when addresses keep changing, and then the packs are stale anyway.
constexpr size_t kMaxPacks = 2048;

using PackKey = std::array<void*, 4>;  // x, w, y, workspace

struct PackKeyHash {
  size_t operator()(const PackKey& key) const { return hash_key_words(key.data(), sizeof(key)); }
};

struct ThreadPacks {
  std::unordered_map<PackKey, cudnnBackendDescriptor_t, PackKeyHash> packs;

  void clear() {
    for (const auto& entry : packs) cudnnBackendDestroyDescriptor(entry.second);
    packs.clear();
  }
};

// Leaked per thread, like the selection memo: destroying descriptors in a
// thread-exit destructor could run after cuDNN has been unloaded.
ThreadPacks& thread_packs() {
  thread_local ThreadPacks* packs = new ThreadPacks();
  return *packs;
}

cudnnBackendDescriptor_t make_variant_pack(void* const pointers[3], void* workspace) {
  cudnnBackendDescriptor_t pack = nullptr;
  TORCH_CUDNN_ALGO_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
  void* data[3] = {pointers[0], pointers[1], pointers[2]};
  const cudnnStatus_t status = [&] {
    cudnnStatus_t s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                               CUDNN_TYPE_VOID_PTR, 3, data);
    if (s == CUDNN_STATUS_SUCCESS) {
      s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3,
                                   kUids);
    }
    if (s == CUDNN_STATUS_SUCCESS) {
      s = cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                   &workspace);
    }
    return s == CUDNN_STATUS_SUCCESS ? cudnnBackendFinalize(pack) : s;
  }();
  if (status != CUDNN_STATUS_SUCCESS) {
    cudnnBackendDestroyDescriptor(pack);
    TORCH_CUDNN_ALGO_CHECK(status);
  }
  return pack;
}

}  // namespace

cudnnBackendDescriptor_t cached_variant_pack(void* const pointers[3], void* workspace) {
  ThreadPacks& cache = thread_packs();
  const PackKey key{pointers[0], pointers[1], pointers[2], workspace};
  if (const auto it = cache.packs.find(key); it != cache.packs.end()) {
    return it->second;
  }
  if (cache.packs.size() >= kMaxPacks) cache.clear();
  const cudnnBackendDescriptor_t pack = make_variant_pack(pointers, workspace);
  cache.packs.emplace(key, pack);
  return pack;
}

}  // namespace torch_cudnn_algo
