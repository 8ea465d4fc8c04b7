// Self-check of the depthwise NHWC kernels (csrc/kernels/depthwise.cu) through
// the public launcher (prepare_direct_conv + launch_direct_conv): forward,
// backward data and backward filter against float64 host references
// (depthwise_ref.h), every output element, guard regions around the output (no
// write outside it), a NaN prefill (every element written), misaligned
// operands (the narrower vector paths), the filter's determinism (two runs
// bitwise equal); then a 64-bit-index case (full mode: tensors of 2^31+
// elements, sampled outputs); then timings of the zoo's depthwise layers
// against cuDNN's best (H100, benchmarks/results/kernels-h100-2026-11-27.md),
// the roofline bound, and the generic direct kernels (our dispatch off).
//
// Built and run on a GPU machine by devtools/kernels/run:
//   devtools/kernels/run depthwise         # everything
//   devtools/kernels/run depthwise quick   # odd shapes only, no wide case, no timings
//   devtools/kernels/run depthwise time    # timings only (and the timed layers' checks)
// Exit status 0 when every case passes.
//
// Variant sweep (devtools/kernels/depthwise_sweep.cuh): built with
// TORCH_CUDNN_ALGO_DW_SWEEP and the sweep's parts (devtools/kernels/run sweep
// builds and runs it), `sweep` checks every variant of the zoo's
// layers (fp16, and bf16 for ConvNeXt's 7x7) against the float64 reference,
// times the correct ones (median of 50) and prints the best per layer and
// direction against the configuration in use and cuDNN's best.
#include "kernels/depthwise.h"
#include "kernels/direct_conv.h"

#include "check_common.h"
#include "depthwise_ref.h"

#ifdef TORCH_CUDNN_ALGO_DW_SWEEP
#define DW_SWEEP_DECLARATIONS_ONLY
#include "depthwise_sweep.cuh"
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace torch_cudnn_algo::kernels;
using dwref::Case;

int g_sm_count = 0, g_clock_khz = 2000000, g_failures = 0;
constexpr int64_t kGuard = 4096;  // elements before and after the output, which must stay untouched
const DirectDirection kDirections[] = {DirectDirection::kForward, DirectDirection::kBackwardData,
                                       DirectDirection::kBackwardFilter};

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// A device copy of host, `offset` elements past a 256-byte aligned start.
template <typename T>
T* to_device(const std::vector<T>& host, int offset, T** base) {
  CUDA_CHECK(cudaMalloc(base, (host.size() + offset + 16) * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(*base + offset, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return *base + offset;
}

struct Operands {
  const void* a;
  const void* b;
  int64_t out_count;
};

template <typename T>
Operands operands_of(const DirectConvShape& s, DirectDirection dir, const T* x, const T* dy, const T* w) {
  if (dir == DirectDirection::kForward) return {x, w, s.n * s.p * s.q * s.c};
  if (dir == DirectDirection::kBackwardData) return {dy, w, s.n * s.h * s.w * s.c};
  return {x, dy, s.c * s.r * s.s};
}

// Median ms of 50 launches, each between its own events, queued behind a 2 ms
// spin so the GPU never waits for the host.
double time_launch(const DirectLaunch& l, const Operands& ops, void* out, void* ws) {
  constexpr int kRuns = 50;
  std::vector<cudaEvent_t> start(kRuns), stop(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    CUDA_CHECK(cudaEventCreate(&start[i]));
    CUDA_CHECK(cudaEventCreate(&stop[i]));
  }
  for (int i = 0; i < 5; ++i) launch_direct_conv(l, ops.a, ops.b, out, ws, nullptr);
  spin<<<1, 1>>>(static_cast<long long>(g_clock_khz) * 2);
  for (int i = 0; i < kRuns; ++i) {
    CUDA_CHECK(cudaEventRecord(start[i]));
    launch_direct_conv(l, ops.a, ops.b, out, ws, nullptr);
    CUDA_CHECK(cudaEventRecord(stop[i]));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> ms;
  for (int i = 0; i < kRuns; ++i) {
    float v = 0;
    CUDA_CHECK(cudaEventElapsedTime(&v, start[i], stop[i]));
    ms.push_back(v);
    CUDA_CHECK(cudaEventDestroy(start[i]));
    CUDA_CHECK(cudaEventDestroy(stop[i]));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Timing {
  const char* cudnn[3];  // cuDNN's best ms by direction, as measured
  double bound_ms;
};

// Checks one case in every direction; with `timing`, also times ours and the
// generic kernels.
template <typename T>
void run_case(const Case& t, int misalign, const Timing* timing) {
  const DirectConvShape s = dwref::shape_of(t);
  std::mt19937 rng(1234 + static_cast<unsigned>(t.n * 7 + t.c * 13 + t.h * 19 + t.r * 23 + t.sw));
  std::vector<float> xf, dyf, wf;
  const std::vector<T> x = rounded_random<T>(s.n * s.h * s.w * s.c, rng, xf);
  const std::vector<T> dy = rounded_random<T>(s.n * s.p * s.q * s.c, rng, dyf);
  const std::vector<T> wt = rounded_random<T>(s.c * s.r * s.s, rng, wf);
  T *xb, *dyb, *wb;
  const T* d_x = to_device(x, misalign, &xb);
  const T* d_dy = to_device(dy, misalign, &dyb);
  const T* d_w = to_device(wt, misalign, &wb);
  for (const DirectDirection dir : kDirections) {
    const Operands ops = operands_of<T>(s, dir, d_x, d_dy, d_w);
    std::vector<double> ref, ref_abs;
    dwref::reference(s, dir, xf, dyf, wf, ref, ref_abs);
    T* d_out_guarded = nullptr;
    const size_t guarded_bytes = (ops.out_count + 2 * kGuard + misalign) * sizeof(T);
    CUDA_CHECK(cudaMalloc(&d_out_guarded, guarded_bytes));
    T* d_out = d_out_guarded + kGuard + misalign;
    const DirectLaunch l = prepare_direct_conv(s, dtype_of<T>(), dir, g_sm_count);
    const char* dname = dwref::direction_name(dir);
    if (!l.refusal.empty() || !l.depthwise) {
      std::printf("  %-46s %s %s  NOT OURS: %s\n", t.name.c_str(), dtype_name<T>(), dname,
                  l.refusal.empty() ? "depthwise_applies refused" : l.refusal.c_str());
      ++g_failures;
      CUDA_CHECK(cudaFree(d_out_guarded));
      continue;
    }
    // The workspace with a 0xFF tail that must stay untouched.
    unsigned char* ws = nullptr;
    CUDA_CHECK(cudaMalloc(&ws, l.workspace_bytes + 256));
    CUDA_CHECK(cudaMemset(ws, 0xFF, l.workspace_bytes + 256));
    std::vector<T> first;
    bool ok = true;
    for (int round = 0; round < 2; ++round) {
      CUDA_CHECK(cudaMemset(d_out_guarded, 0xFF, guarded_bytes));
      const int code = launch_direct_conv(l, ops.a, ops.b, d_out, ws, nullptr);
      if (code != 0) {
        std::printf("  %-46s %s %s  LAUNCH FAILED: %s\n", t.name.c_str(), dtype_name<T>(), dname,
                    direct_conv_error_string(code));
        ok = false;
        break;
      }
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<T> out(ops.out_count + 2 * kGuard + misalign);
      CUDA_CHECK(cudaMemcpy(out.data(), d_out_guarded, guarded_bytes, cudaMemcpyDeviceToHost));
      if (round == 1) {
        if (std::memcmp(out.data(), first.data(), guarded_bytes) != 0) {
          std::printf("      second run differs bitwise (not deterministic)\n");
          ok = false;
        }
        break;
      }
      first = out;
      const double eps = dwref::dtype_eps(dtype_of<T>());
      double max_abs = 0, ref_max = 0, worst = 0;
      int64_t bad = 0;
      const T* o = out.data() + kGuard + misalign;
      for (int64_t i = 0; i < ops.out_count; ++i) {
        const double v = to_float<T>(o[i]);
        const double err = std::fabs(v - ref[i]);
        const double tol = dwref::element_tolerance(eps, ref[i], ref_abs[i]);
        ref_max = std::max(ref_max, std::fabs(ref[i]));
        if (!(err <= tol)) {  // NaN fails too: an element never written keeps the NaN prefill
          if (bad < 5) std::printf("      mismatch at %lld: got %.6g want %.6g (tol %.3g)\n", (long long)i, v, ref[i], tol);
          ++bad;
          continue;
        }
        max_abs = std::max(max_abs, err);
        worst = std::max(worst, err / tol);
      }
      const unsigned char* bytes = reinterpret_cast<const unsigned char*>(out.data());
      for (size_t i = 0; i < (kGuard + misalign) * sizeof(T); ++i)
        if (bytes[i] != 0xFF) { std::printf("      write before the output\n"); ++bad; break; }
      const unsigned char* after = reinterpret_cast<const unsigned char*>(o + ops.out_count);
      for (size_t i = 0; i < kGuard * sizeof(T); ++i)
        if (after[i] != 0xFF) { std::printf("      write after the output\n"); ++bad; break; }
      std::vector<unsigned char> tail(256);
      CUDA_CHECK(cudaMemcpy(tail.data(), ws + l.workspace_bytes, 256, cudaMemcpyDeviceToHost));
      for (unsigned char c : tail)
        if (c != 0xFF) { std::printf("      write past the workspace\n"); ++bad; break; }
      const double normwise = ref_max > 0 ? max_abs / ref_max : max_abs;
      const bool tuner_ok = normwise <= dwref::tuner_floor(dtype_of<T>());
      ok = bad == 0 && tuner_ok;
      std::printf("  %-46s %s %s mis%d  max_abs %.3g  normwise_rel %.3g (tuner floor %.0e)  err/tol %.3f  ws %zu B  %s\n",
                  t.name.c_str(), dtype_name<T>(), dname, misalign, max_abs, normwise,
                  dwref::tuner_floor(dtype_of<T>()), worst, l.workspace_bytes, bad == 0 && tuner_ok ? "ok" : "FAIL");
      if (dir != DirectDirection::kBackwardFilter) break;  // determinism: the filter's reduction only
    }
    if (!ok) ++g_failures;
    if (timing) {
      const double ours = time_launch(l, ops, d_out, ws);
      // The CUDA-core kernels alone (the tensor-core ones off).
      set_depthwise_mma_enabled(false);
      const double cuda_core = time_launch(l, ops, d_out, ws);
      set_depthwise_mma_enabled(true);
      set_depthwise_enabled(false);
      const DirectLaunch generic = prepare_direct_conv(s, dtype_of<T>(), dir, g_sm_count);
      set_depthwise_enabled(true);
      double old_ms = -1;
      if (generic.refusal.empty()) {
        unsigned char* gws = nullptr;
        CUDA_CHECK(cudaMalloc(&gws, generic.workspace_bytes + 16));
        old_ms = time_launch(generic, ops, d_out, gws);
        CUDA_CHECK(cudaFree(gws));
      }
      const int di = dir == DirectDirection::kForward ? 0 : dir == DirectDirection::kBackwardData ? 1 : 2;
      const double cudnn = std::atof(timing->cudnn[di]);
      // Bytes each operand crosses once: x or dx, y or dy (the weight is small).
      const double bytes = double(s.n * s.h * s.w * s.c + s.n * s.p * s.q * s.c) * sizeof(T);
      std::printf("  TIME %-41s %s %s ours %.4f ms  cuDNN best %.3f (%.2fx ours)  bound %.3f (ours %.2fx it)  "
                  "%.2f TB/s  cuda-core %.4f ms (%.2fx ours)  generic %.4f ms (%.2fx ours)\n",
                  t.name.c_str(), dtype_name<T>(), dname, ours, cudnn, cudnn / ours, timing->bound_ms,
                  ours / timing->bound_ms, bytes / (ours * 1e-3) / 1e12, cuda_core, cuda_core / ours, old_ms,
                  old_ms / ours);
    }
    CUDA_CHECK(cudaFree(ws));
    CUDA_CHECK(cudaFree(d_out_guarded));
  }
  CUDA_CHECK(cudaFree(xb));
  CUDA_CHECK(cudaFree(dyb));
  CUDA_CHECK(cudaFree(wb));
}

// ---------------------------------------------------------------- 64-bit indexing
// Tensors of 2^31+ elements are filled on the device from a hash of the index;
// the host evaluates the same hash, so references need no host copy.
__host__ __device__ inline float hash_value(uint64_t i) {
  uint64_t z = (i + 0x1234567ull) * 0x9E3779B97F4A7C15ull;
  z ^= z >> 29;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 32;
  return static_cast<float>(static_cast<int>((z >> 56) & 0xFF) - 128) / 128.0f;  // exact in fp16 and bf16
}
__global__ void fill_hash(__half* p, uint64_t count, uint64_t salt) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < count; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = __float2half(hash_value(i + salt));
}

void run_wide() {
  // 16 x 11600 x 11600 = 2,152,960,000 elements per image tensor (> 2^31).
  const Case t = dwref::make("wide n1 16x11600x11600 3x3 s1 p1", 1, 16, 11600, 11600, 3, 3, 1, 1, 1, 1);
  const DirectConvShape s = dwref::shape_of(t);
  const uint64_t count = s.n * s.h * s.w * s.c;
  const uint64_t kSaltX = 0, kSaltDy = 1ull << 40;
  __half *d_a = nullptr, *d_b = nullptr, *d_w = nullptr;
  if (cudaMalloc(&d_a, count * 2) != cudaSuccess || cudaMalloc(&d_b, (count + 2 * kGuard) * 2) != cudaSuccess) {
    std::printf("  %s: SKIPPED (not enough GPU memory)\n", t.name.c_str());
    cudaGetLastError();
    return;
  }
  std::vector<__half> wt(s.c * s.r * s.s);
  std::vector<float> wf(wt.size());
  for (size_t i = 0; i < wt.size(); ++i) { wt[i] = __float2half(hash_value(i + (3ull << 40))); wf[i] = __half2float(wt[i]); }
  CUDA_CHECK(cudaMalloc(&d_w, wt.size() * 2));
  CUDA_CHECK(cudaMemcpy(d_w, wt.data(), wt.size() * 2, cudaMemcpyHostToDevice));
  auto xv = [&](int64_t n, int64_t h, int64_t w, int64_t c) -> double {
    if (h < 0 || h >= s.h || w < 0 || w >= s.w) return 0;
    return hash_value(uint64_t(((n * s.h + h) * s.w + w) * s.c + c) + kSaltX);
  };
  std::mt19937_64 rng(5);
  // Sampled pixels: random ones, the corners, and the last rows (beyond 2^31).
  std::vector<std::pair<int64_t, int64_t>> pixels = {{0, 0}, {0, s.w - 1}, {s.h - 1, 0}, {s.h - 1, s.w - 1}, {s.h - 2, s.w - 2}};
  for (int i = 0; i < 3000; ++i) pixels.push_back({int64_t(rng() % s.h), int64_t(rng() % s.w)});
  for (int i = 0; i < 500; ++i) pixels.push_back({s.h - 1 - int64_t(rng() % 200), int64_t(rng() % s.w)});
  for (const DirectDirection dir : {DirectDirection::kForward, DirectDirection::kBackwardData}) {
    // Forward: a = x; backward data: a = dy (stride 1, same extent as x), same hash with its salt.
    const uint64_t salt = dir == DirectDirection::kForward ? kSaltX : kSaltDy;
    fill_hash<<<4096, 256>>>(d_a, count, salt);
    CUDA_CHECK(cudaMemset(d_b, 0xFF, (count + 2 * kGuard) * 2));
    const DirectLaunch l = prepare_direct_conv(s, DirectDType::kHalf, dir, g_sm_count);
    if (!l.depthwise) { std::printf("  %s: NOT OURS\n", t.name.c_str()); ++g_failures; continue; }
    const int code = launch_direct_conv(l, d_a, d_w, d_b + kGuard, nullptr, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    int64_t bad = code != 0;
    double worst = 0;
    std::vector<__half> got(s.c);
    for (const auto& [y, xx] : pixels) {
      CUDA_CHECK(cudaMemcpy(got.data(), d_b + kGuard + (y * s.w + xx) * s.c, s.c * 2, cudaMemcpyDeviceToHost));
      for (int64_t c = 0; c < s.c; ++c) {
        double acc = 0, acc_abs = 0;
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t q = 0; q < 3; ++q) {
            // Forward: x[y - 1 + r][x - 1 + q] * w[r][q]; backward data (stride 1, pad 1): dy[y + 1 - r][x + 1 - q] * w[r][q].
            const int64_t sy = dir == DirectDirection::kForward ? y - 1 + r : y + 1 - r;
            const int64_t sx = dir == DirectDirection::kForward ? xx - 1 + q : xx + 1 - q;
            const double v = (sy < 0 || sy >= s.h || sx < 0 || sx >= s.w)
                                 ? 0.0 : hash_value(uint64_t((sy * s.w + sx) * s.c + c) + salt);
            const double prod = v * wf[c * 9 + r * 3 + q];
            acc += prod;
            acc_abs += std::fabs(prod);
          }
        const double err = std::fabs(__half2float(got[c]) - acc);
        const double tol = dwref::element_tolerance(std::ldexp(1.0, -10), acc, acc_abs);
        if (!(err <= tol)) { if (bad < 5) std::printf("      mismatch at (%lld,%lld,%lld): got %g want %g\n", (long long)y, (long long)xx, (long long)c, __half2float(got[c]), acc); ++bad; }
        else worst = std::max(worst, err / tol);
      }
    }
    std::vector<uint16_t> guard(kGuard);
    CUDA_CHECK(cudaMemcpy(guard.data(), d_b, kGuard * 2, cudaMemcpyDeviceToHost));
    for (uint16_t g : guard) if (g != 0xFFFF) { ++bad; std::printf("      write before the output\n"); break; }
    CUDA_CHECK(cudaMemcpy(guard.data(), d_b + kGuard + count, kGuard * 2, cudaMemcpyDeviceToHost));
    for (uint16_t g : guard) if (g != 0xFFFF) { ++bad; std::printf("      write after the output\n"); break; }
    std::printf("  %-46s fp16 %s (%zu pixels sampled)  err/tol %.3f  %s\n", t.name.c_str(), dwref::direction_name(dir),
                pixels.size(), worst, bad ? "FAIL" : "ok");
    if (bad) ++g_failures;
  }
  (void)xv;
  // Backward filter: x hashed everywhere, dy zero but at a few pixels (some past
  // 2^31 elements), so the float64 reference is a short sum.
  {
    fill_hash<<<4096, 256>>>(d_a, count, kSaltX);
    CUDA_CHECK(cudaMemset(d_b, 0, count * 2));
    std::vector<std::pair<int64_t, int64_t>> hot = {{s.h - 1, s.w - 1}, {s.h - 3, 17}, {0, 0}, {5000, 9000}};
    for (int i = 0; i < 60; ++i) hot.push_back({int64_t(rng() % s.h), int64_t(rng() % s.w)});
    std::sort(hot.begin(), hot.end());
    hot.erase(std::unique(hot.begin(), hot.end()), hot.end());
    std::vector<__half> g(s.c);
    std::vector<std::vector<float>> gval;
    for (size_t i = 0; i < hot.size(); ++i) {
      std::vector<float> gv(s.c);
      for (int64_t c = 0; c < s.c; ++c) { g[c] = __float2half(hash_value(i * 64 + c + kSaltDy)); gv[c] = __half2float(g[c]); }
      gval.push_back(gv);
      CUDA_CHECK(cudaMemcpy(d_b + (hot[i].first * s.w + hot[i].second) * s.c, g.data(), s.c * 2, cudaMemcpyHostToDevice));
    }
    const DirectLaunch l = prepare_direct_conv(s, DirectDType::kHalf, DirectDirection::kBackwardFilter, g_sm_count);
    void* ws = nullptr;
    CUDA_CHECK(cudaMalloc(&ws, l.workspace_bytes + 16));
    __half* d_dw = nullptr;
    CUDA_CHECK(cudaMalloc(&d_dw, wt.size() * 2));
    const int code = launch_direct_conv(l, d_a, d_b, d_dw, ws, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<__half> got(wt.size());
    CUDA_CHECK(cudaMemcpy(got.data(), d_dw, wt.size() * 2, cudaMemcpyDeviceToHost));
    int64_t bad = (code != 0) || !l.depthwise;
    double worst = 0;
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t q = 0; q < 3; ++q) {
          double acc = 0, acc_abs = 0;
          for (size_t i = 0; i < hot.size(); ++i) {
            const double prod = xv(0, hot[i].first - 1 + r, hot[i].second - 1 + q, c) * gval[i][c];
            acc += prod;
            acc_abs += std::fabs(prod);
          }
          const double v = __half2float(got[c * 9 + r * 3 + q]);
          const double err = std::fabs(v - acc), tol = dwref::element_tolerance(std::ldexp(1.0, -10), acc, acc_abs);
          if (!(err <= tol)) { if (bad < 5) std::printf("      mismatch dw[%lld,%lld,%lld]: got %g want %g\n", (long long)c, (long long)r, (long long)q, v, acc); ++bad; }
          else worst = std::max(worst, err / tol);
        }
    std::printf("  %-46s fp16 %s (%zu hot dy pixels)  err/tol %.3f  %s\n", t.name.c_str(),
                dwref::direction_name(DirectDirection::kBackwardFilter), hot.size(), worst, bad ? "FAIL" : "ok");
    if (bad) ++g_failures;
    CUDA_CHECK(cudaFree(ws));
    CUDA_CHECK(cudaFree(d_dw));
  }
  CUDA_CHECK(cudaFree(d_a));
  CUDA_CHECK(cudaFree(d_b));
  CUDA_CHECK(cudaFree(d_w));
}

// The zoo's depthwise layers with cuDNN's best (H100, fp16) and the roofline bound.
struct Layer {
  Case c;
  Timing t;
};
std::vector<Layer> zoo_layers() {
  return {
      {dwref::make("effnet 64x672x14x14 5x5 s2 p2", 64, 672, 14, 14, 5, 5, 2, 2, 2, 2), {{"0.019", "0.072", "0.025"}, 0.006}},
    {dwref::make("effnet 64x144x56x56 5x5 s2 p2", 64, 144, 56, 56, 5, 5, 2, 2, 2, 2), {{"0.046", "0.233", "0.063"}, 0.022}},
    {dwref::make("effnet 64x96x112x112 3x3 s2 p1", 64, 96, 112, 112, 3, 3, 2, 2, 1, 1), {{"0.073", "0.274", "0.078"}, 0.058}},
    {dwref::make("mobilenet 64x72x56x56 3x3 s1 p1", 64, 72, 56, 56, 3, 3, 1, 1, 1, 1), {{"0.035", "0.038", "0.044"}, 0.017}},
    {dwref::make("mobilenet 64x960x7x7 5x5 s1 p2", 64, 960, 7, 7, 5, 5, 1, 1, 2, 2), {{"0.018", "0.020", "0.022"}, 0.004}},
    // Small planes with many channels (cuDNN's best not measured here: 0).
    {dwref::make("effnet 64x1152x7x7 5x5 s1 p2", 64, 1152, 7, 7, 5, 5, 1, 1, 2, 2), {{"0", "0", "0"}, 0.003}},
    {dwref::make("effnet 64x672x14x14 5x5 s1 p2", 64, 672, 14, 14, 5, 5, 1, 1, 2, 2), {{"0", "0", "0"}, 0.007}},
    {dwref::make("effnet 64x240x28x28 5x5 s1 p2", 64, 240, 28, 28, 5, 5, 1, 1, 2, 2), {{"0", "0", "0"}, 0.010}},
    {dwref::make("mobilenet 64x480x14x14 3x3 s1 p1", 64, 480, 14, 14, 3, 3, 1, 1, 1, 1), {{"0", "0", "0"}, 0.005}},
    {dwref::make("convnext 64x96x56x56 7x7 s1 p3", 64, 96, 56, 56, 7, 7, 1, 1, 3, 3), {{"0", "0", "0"}, 0.016}},
    {dwref::make("convnext 64x192x28x28 7x7 s1 p3", 64, 192, 28, 28, 7, 7, 1, 1, 3, 3), {{"0", "0", "0"}, 0.008}},
    {dwref::make("convnext 64x768x7x7 7x7 s1 p3", 64, 768, 7, 7, 7, 7, 1, 1, 3, 3), {{"0", "0", "0"}, 0.002}},
    {dwref::make("convnext 64x384x14x14 7x7 s1 p3", 64, 384, 14, 14, 7, 7, 1, 1, 3, 3), {{"0.045", "0.085", "0.043"}, 0.006}},
  };
}

#ifdef TORCH_CUDNN_ALGO_DW_SWEEP
// ---------------------------------------------------------------- variant sweep
// Median ms of 50 launches of `launch`, as time_launch.
double time_fn(const std::function<int()>& launch) {
  constexpr int kRuns = 50;
  std::vector<cudaEvent_t> start(kRuns), stop(kRuns);
  for (int i = 0; i < kRuns; ++i) {
    CUDA_CHECK(cudaEventCreate(&start[i]));
    CUDA_CHECK(cudaEventCreate(&stop[i]));
  }
  for (int i = 0; i < 5; ++i) launch();
  spin<<<1, 1>>>(static_cast<long long>(g_clock_khz) * 2);
  for (int i = 0; i < kRuns; ++i) {
    CUDA_CHECK(cudaEventRecord(start[i]));
    launch();
    CUDA_CHECK(cudaEventRecord(stop[i]));
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> ms;
  for (int i = 0; i < kRuns; ++i) {
    float v = 0;
    CUDA_CHECK(cudaEventElapsedTime(&v, start[i], stop[i]));
    ms.push_back(v);
    CUDA_CHECK(cudaEventDestroy(start[i]));
    CUDA_CHECK(cudaEventDestroy(stop[i]));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct SweepBest {
  std::string layer, dtype, dir, variant;
  double default_ms = -1, best_ms = -1, cudnn = 0, bound = 0;
  int wrong = 0, tried = 0;
};
std::vector<SweepBest> g_sweep_best;

template <typename T>
void sweep_layer(const Case& t, const Timing& timing) {
  const DirectConvShape s = dwref::shape_of(t);
  std::mt19937 rng(1234 + static_cast<unsigned>(t.n * 7 + t.c * 13 + t.h * 19 + t.r * 23 + t.sw));
  std::vector<float> xf, dyf, wf;
  const std::vector<T> x = rounded_random<T>(s.n * s.h * s.w * s.c, rng, xf);
  const std::vector<T> dy = rounded_random<T>(s.n * s.p * s.q * s.c, rng, dyf);
  const std::vector<T> wt = rounded_random<T>(s.c * s.r * s.s, rng, wf);
  T *xb, *dyb, *wb;
  const T* d_x = to_device(x, 0, &xb);
  const T* d_dy = to_device(dy, 0, &dyb);
  const T* d_w = to_device(wt, 0, &wb);
  const double eps = dwref::dtype_eps(dtype_of<T>());
  for (const DirectDirection dir : kDirections) {
    const Operands ops = operands_of<T>(s, dir, d_x, d_dy, d_w);
    std::vector<double> ref, ref_abs;
    dwref::reference(s, dir, xf, dyf, wf, ref, ref_abs);
    T* d_out_guarded = nullptr;
    const size_t guarded_bytes = (ops.out_count + 2 * kGuard) * sizeof(T);
    CUDA_CHECK(cudaMalloc(&d_out_guarded, guarded_bytes));
    T* d_out = d_out_guarded + kGuard;
    std::vector<T> out(ops.out_count + 2 * kGuard);
    const char* dname = dwref::direction_name(dir);
    const int di = dir == DirectDirection::kForward ? 0 : dir == DirectDirection::kBackwardData ? 1 : 2;
    SweepBest best;
    best.layer = t.name; best.dtype = dtype_name<T>(); best.dir = dname;
    best.cudnn = std::atof(timing.cudnn[di]); best.bound = timing.bound_ms;
    for (const DwVariant& v : dw_sweep_variants()) {
      if (v.dtype != dtype_of<T>() || v.direction != dir || v.ks != t.s || v.sw != t.sw) continue;
      ++best.tried;
      const size_t ws_bytes = v.workspace(s, g_sm_count);
      unsigned char* ws = nullptr;
      CUDA_CHECK(cudaMalloc(&ws, ws_bytes + 256));
      CUDA_CHECK(cudaMemset(ws, 0xFF, ws_bytes + 256));
      CUDA_CHECK(cudaMemset(d_out_guarded, 0xFF, guarded_bytes));
      auto launch = [&] { return v.launch(s, g_sm_count, ops.a, ops.b, d_out, ws, nullptr); };
      const int code = launch();
      const cudaError_t synced = cudaDeviceSynchronize();
      std::string status = "ok";
      double worst = 0;
      if (code != 0 || synced != cudaSuccess) {
        status = code == -1 ? "n/a (shape or pointers)" : std::string("LAUNCH FAILED: ") +
                 cudaGetErrorString(synced != cudaSuccess ? synced : static_cast<cudaError_t>(code));
        if (synced != cudaSuccess) {  // a sticky error ends the sweep: report what ran
          std::printf("  %-34s %s %s %-26s %s\n", t.name.c_str(), dtype_name<T>(), dname, v.name, status.c_str());
          std::exit(3);
        }
      } else {
        CUDA_CHECK(cudaMemcpy(out.data(), d_out_guarded, guarded_bytes, cudaMemcpyDeviceToHost));
        const T* o = out.data() + kGuard;
        constexpr int64_t kChunks = 256;
        std::vector<int64_t> bad(kChunks, 0);
        std::vector<double> worst_of(kChunks, 0), max_abs_of(kChunks, 0), ref_max_of(kChunks, 0);
        const int64_t per = (ops.out_count + kChunks - 1) / kChunks;
        dwref::parallel_for(kChunks, [&](int64_t c) {
          for (int64_t i = c * per; i < std::min<int64_t>(ops.out_count, (c + 1) * per); ++i) {
            const double got = to_float<T>(o[i]);
            const double err = std::fabs(got - ref[i]);
            const double tol = dwref::element_tolerance(eps, ref[i], ref_abs[i]);
            ref_max_of[c] = std::max(ref_max_of[c], std::fabs(ref[i]));
            if (!(err <= tol)) { ++bad[c]; continue; }
            max_abs_of[c] = std::max(max_abs_of[c], err);
            worst_of[c] = std::max(worst_of[c], err / tol);
          }
        });
        int64_t wrong = 0;
        double max_abs = 0, ref_max = 0;
        for (int64_t c = 0; c < kChunks; ++c) {
          wrong += bad[c]; worst = std::max(worst, worst_of[c]);
          max_abs = std::max(max_abs, max_abs_of[c]); ref_max = std::max(ref_max, ref_max_of[c]);
        }
        const unsigned char* bytes = reinterpret_cast<const unsigned char*>(out.data());
        for (size_t i = 0; i < kGuard * sizeof(T); ++i)
          if (bytes[i] != 0xFF) { ++wrong; break; }
        const unsigned char* after = reinterpret_cast<const unsigned char*>(o + ops.out_count);
        for (size_t i = 0; i < kGuard * sizeof(T); ++i)
          if (after[i] != 0xFF) { ++wrong; break; }
        std::vector<unsigned char> tail(256);
        CUDA_CHECK(cudaMemcpy(tail.data(), ws + ws_bytes, 256, cudaMemcpyDeviceToHost));
        for (unsigned char c : tail)
          if (c != 0xFF) { ++wrong; break; }
        const bool tuner_ok = (ref_max > 0 ? max_abs / ref_max : max_abs) <= dwref::tuner_floor(dtype_of<T>());
        if (wrong || !tuner_ok) {
          status = "WRONG (" + std::to_string(wrong) + " elements or guards)";
          ++best.wrong;
          ++g_failures;
        }
      }
      double ms = -1;
      if (status == "ok") {
        ms = time_fn(launch);
        if (best.default_ms < 0 && v.instantiation == 1) best.default_ms = ms;  // the first variant is the one in use
        if (best.best_ms < 0 || ms < best.best_ms) { best.best_ms = ms; best.variant = v.name; }
      }
      std::printf("  %-34s %s %s %-26s %8.4f ms  %5.2fx in use  cuDNN/it %5.2f  ws %8zu B  err/tol %.3f  %s\n",
                  t.name.c_str(), dtype_name<T>(), dname, v.name, ms, ms > 0 && best.default_ms > 0 ? best.default_ms / ms : 0.0,
                  ms > 0 ? best.cudnn / ms : 0.0, ws_bytes, worst, status.c_str());
      CUDA_CHECK(cudaFree(ws));
    }
    g_sweep_best.push_back(best);
    CUDA_CHECK(cudaFree(d_out_guarded));
  }
  CUDA_CHECK(cudaFree(xb));
  CUDA_CHECK(cudaFree(dyb));
  CUDA_CHECK(cudaFree(wb));
}
#endif

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool quick = mode == "quick", time_only = mode == "time";
  int device = 0;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  g_sm_count = prop.multiProcessorCount;
  CUDA_CHECK(cudaDeviceGetAttribute(&g_clock_khz, cudaDevAttrClockRate, device));
  std::printf("device %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, g_sm_count);
  if (mode == "sweep") {
#ifdef TORCH_CUDNN_ALGO_DW_SWEEP
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line out before a fault could end the run
    const auto t0 = std::chrono::steady_clock::now();
    std::set<std::pair<int, int>> insts;
    for (const DwVariant& v : dw_sweep_variants()) insts.insert({static_cast<int>(v.dtype) * 1000 + static_cast<int>(v.direction) * 100 + v.ks * 10 + v.sw, v.instantiation});
    std::printf("-- sweep: %zu variants, %zu kernel instantiations (check each in full, time the correct ones: median of 50)\n",
                dw_sweep_variants().size(), insts.size());
    const std::vector<Layer> layers = zoo_layers();
    for (const auto& L : layers) sweep_layer<__half>(L.c, L.t);
    sweep_layer<__nv_bfloat16>(layers.back().c, layers.back().t);  // ConvNeXt 7x7 (bf16 fwd was 1.4x fp16's)
    std::printf("-- best per layer and direction (ms; cuDNN/best > 1: we win)\n");
    std::printf("  %-34s %-4s %-7s %8s %8s %6s %8s %7s %6s  %s\n", "layer", "type", "dir", "in use", "best", "gain", "cuDNN",
                "cuDNN/b", "wrong", "best variant");
    for (const SweepBest& b : g_sweep_best) {
      if (b.tried == 0) continue;  // a direction whose part was not built (PARTS) has no variant
      std::printf("  %-34s %-4s %-7s %8.4f %8.4f %5.2fx %8.3f %7.2f %3d/%-2d  %s\n", b.layer.c_str(), b.dtype.c_str(),
                  b.dir.c_str(), b.default_ms, b.best_ms, b.best_ms > 0 ? b.default_ms / b.best_ms : 0.0, b.cudnn,
                  b.best_ms > 0 ? b.cudnn / b.best_ms : 0.0, b.wrong, b.tried, b.variant.c_str());
    }
    std::printf("sweep took %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::printf(g_failures == 0 ? "ALL VARIANTS CORRECT\n" : "%d WRONG VARIANTS (never picked)\n", g_failures);
    return g_failures == 0 ? 0 : 1;
#else
    std::printf("sweep: build with -DTORCH_CUDNN_ALGO_DW_SWEEP and the sweep parts (devtools/kernels/run sweep)\n");
    return 2;
#endif
  }

  if (!time_only) {
    const auto cases = dwref::correctness_cases();
    std::printf("-- odd shapes: fp16, bf16, fp32, aligned; fp16 and fp32 misaligned by one element\n");
    for (const auto& t : cases) {
      run_case<__half>(t, 0, nullptr);
      run_case<__nv_bfloat16>(t, 0, nullptr);
      run_case<float>(t, 0, nullptr);
      run_case<__half>(t, 1, nullptr);
      run_case<float>(t, 1, nullptr);
    }
    if (!quick) {
      std::printf("-- 64-bit indexing (2^31+ element tensors, sampled)\n");
      run_wide();
    }
  }
  if (!quick) {
    const std::vector<Layer> layers = zoo_layers();
    std::printf("-- zoo layers, fp16 (checked in full, then timed: median of 50; cuDNN best and bound from the H100 table)\n");
    for (const auto& L : layers) run_case<__half>(L.c, 0, &L.t);
    std::printf("-- zoo layers, bf16 and fp32 (timed; cuDNN numbers are fp16's)\n");
    for (const auto& L : layers) run_case<__nv_bfloat16>(L.c, 0, &L.t);
    for (const auto& L : layers) run_case<float>(L.c, 0, &L.t);
  }
  std::printf(g_failures == 0 ? "ALL PASS\n" : "%d FAILURES\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
