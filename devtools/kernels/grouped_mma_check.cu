// Self-check of the grouped tensor-core kernel (csrc/kernels/grouped_mma.cu)
// through the public launcher (launch_direct_conv): forward and backward data
// against a float64 host reference, every output element compared, plus
// guard regions around the output (no write outside it) and a NaN prefill
// (every element written); then timings of the RegNetY shapes.
//
// Built and run on a GPU machine by devtools/kernels/run:
//   devtools/kernels/run grouped         # all cases
//   devtools/kernels/run grouped quick   # skip the large RegNetY references and timings
// Exit status 0 when every case passes.
#include "kernels/direct_conv.h"
#include "kernels/grouped_mma.h"

#include "check_common.h"
#include "grouped_ref.h"

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
#include <string>
#include <thread>
#include <vector>

using namespace torch_cudnn_algo::kernels;
using groupedref::reference_backward_data;
using groupedref::reference_forward;
using groupedref::shape_of;

struct Case {
  std::string name;
  int64_t n, c, h, w, k, r, s;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  bool weight_channels_last = false;  // weight strides of a channels_last weight (k, r, s, c/g in memory)
  bool expect_mma = true;             // the tensor-core kernel should take it (on an sm_80+ GPU)
  bool time_it = false;
  const char* cudnn_note = "";        // cuDNN's best, as measured on an H100 (for the timing table)
};

constexpr int64_t kGuard = 4096;  // elements before and after the output, which must stay untouched

struct Result {
  bool ok = true;
  double max_abs = 0, max_norm_rel = 0, worst_over_tol = 0;
  int64_t bad = 0;
};

template <typename T>
T* to_device(const std::vector<T>& host) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(16, host.size() * sizeof(T))));
  CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
Result compare(const std::vector<T>& out, const std::vector<double>& ref, const std::vector<double>& ref_abs) {
  // fp32 accumulation is near exact here; the error is the output's rounding
  // (half an ulp: 2^-11 fp16, 2^-8 bf16; allowed twice that) plus a little
  // accumulation error relative to the sum of |products|.
  const double eps = dtype_of<T>() == DirectDType::kHalf ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7);
  Result res;
  double ref_max = 0;
  for (double v : ref) ref_max = std::max(ref_max, std::fabs(v));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double o = to_float<T>(out[kGuard + i]);
    const double err = std::fabs(o - ref[i]);
    const double tol = eps * std::fabs(ref[i]) + 1e-5 * ref_abs[i] + 1e-6;
    if (!(err <= tol)) {  // NaN fails too: an element never written keeps the NaN prefill
      if (res.bad < 5)
        std::printf("      mismatch at %zu: got %.6g want %.6g (tol %.3g)\n", i, o, ref[i], tol);
      ++res.bad;
      res.ok = false;
    }
    if (std::isnan(err)) continue;
    res.max_abs = std::max(res.max_abs, err);
    res.worst_over_tol = std::max(res.worst_over_tol, err / tol);
  }
  res.max_norm_rel = ref_max > 0 ? res.max_abs / ref_max : res.max_abs;
  // The guards keep their 0xFFFF pattern (a NaN).
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(out.data());
  for (int64_t i = 0; i < kGuard; ++i) {
    if (bits[i] != 0xFFFF || bits[kGuard + ref.size() + i] != 0xFFFF) {
      std::printf("      write outside the output (guard element %lld)\n", static_cast<long long>(i));
      res.ok = false;
      break;
    }
  }
  return res;
}

int g_sm_count = 0;
cudaDeviceProp prop{};
int g_clock_khz = 2000000;

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
int g_failures = 0;

template <typename T>
void run_case(const Case& t, bool timing) {
  const DirectConvShape s = shape_of(t);
  std::mt19937 rng(1234 + static_cast<unsigned>(t.n * 7 + t.c * 13 + t.k * 17 + t.h * 19 + t.r * 23 + t.groups));
  const int64_t cpg_in = t.c / t.groups;
  std::vector<float> xf, dyf, wf;
  const std::vector<T> x = rounded_random<T>(s.n * s.h * s.w * s.c, rng, xf);
  const std::vector<T> dy = rounded_random<T>(s.n * s.p * s.q * s.k, rng, dyf);
  // The weight buffer holds k * cpg_in * r * s elements in the order its strides say.
  const std::vector<T> wt = rounded_random<T>(s.k * cpg_in * s.r * s.s, rng, wf);
  T* d_x = to_device(x);
  T* d_dy = to_device(dy);
  T* d_w = to_device(wt);

  for (const DirectDirection dir : {DirectDirection::kForward, DirectDirection::kBackwardData}) {
    const bool backward = dir == DirectDirection::kBackwardData;
    const int64_t out_count = backward ? s.n * s.h * s.w * s.c : s.n * s.p * s.q * s.k;
    std::vector<double> ref, ref_abs;
    if (backward)
      reference_backward_data(s, dyf, wf, ref, ref_abs);
    else
      reference_forward(s, xf, wf, ref, ref_abs);

    T* d_out_guarded = nullptr;
    const size_t guarded_bytes = (out_count + 2 * kGuard) * sizeof(T);
    CUDA_CHECK(cudaMalloc(&d_out_guarded, guarded_bytes));
    T* d_out = d_out_guarded + kGuard;  // 8192 bytes in: still 16-byte aligned

    DirectLaunch l = prepare_direct_conv(s, dtype_of<T>(), dir, g_sm_count);
    const bool mma = grouped_mma_applies(s, dtype_of<T>(), dir, true);
    const char* dname = backward ? "bwd-data" : "forward ";
    if (!l.refusal.empty()) {
      std::printf("  %-44s %s %s  REFUSED: %s\n", t.name.c_str(), dtype_name<T>(), dname, l.refusal.c_str());
      ++g_failures;
      CUDA_CHECK(cudaFree(d_out_guarded));
      continue;
    }
    const void* a = backward ? static_cast<const void*>(d_dy) : static_cast<const void*>(d_x);
    // Both index widths: int (unless the sizes need int64) and forced int64.
    for (const bool wide : {false, true}) {
      if (!wide && l.wide_index) continue;
      DirectLaunch lw = l;
      lw.wide_index = wide;
      CUDA_CHECK(cudaMemset(d_out_guarded, 0xFF, guarded_bytes));
      const int code = launch_direct_conv(lw, a, d_w, d_out, nullptr, nullptr);
      if (code != 0) {
        std::printf("  %-44s %s %s  LAUNCH FAILED: %s\n", t.name.c_str(), dtype_name<T>(), dname,
                    direct_conv_error_string(code));
        ++g_failures;
        continue;
      }
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<T> out(out_count + 2 * kGuard);
      CUDA_CHECK(cudaMemcpy(out.data(), d_out_guarded, guarded_bytes, cudaMemcpyDeviceToHost));
      const Result res = compare(out, ref, ref_abs);
      const bool path_ok = mma == t.expect_mma;
      std::printf("  %-44s %s %s %s idx%-2d  max_abs_err %.3g  max_rel_err(normwise) %.3g  err/tol %.3f  %s%s\n",
                  t.name.c_str(), dtype_name<T>(), dname, mma ? "mma   " : "gather", wide ? 64 : 32, res.max_abs,
                  res.max_norm_rel, res.worst_over_tol, res.ok ? "ok" : "FAIL",
                  path_ok ? "" : "  (UNEXPECTED PATH)");
      if (!res.ok || !path_ok) ++g_failures;
    }

    if (timing && t.time_it) {
      // Event pairs around each launch, enqueued behind a 2 ms spin so the GPU
      // is never waiting for the host: each pair times the kernel alone, not
      // the host's launch latency.
      constexpr int kRuns = 50;
      std::vector<cudaEvent_t> start(kRuns), stop(kRuns);
      for (int i = 0; i < kRuns; ++i) {
        CUDA_CHECK(cudaEventCreate(&start[i]));
        CUDA_CHECK(cudaEventCreate(&stop[i]));
      }
      for (int i = 0; i < 5; ++i) launch_direct_conv(l, a, d_w, d_out, nullptr, nullptr);
      spin<<<1, 1>>>(static_cast<long long>(g_clock_khz) * 2);  // kHz: 2 ms
      for (int i = 0; i < kRuns; ++i) {
        CUDA_CHECK(cudaEventRecord(start[i]));
        launch_direct_conv(l, a, d_w, d_out, nullptr, nullptr);
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
      std::printf("  TIME %-39s %s %s %s  median %.4f ms  (min %.4f)  %s\n", t.name.c_str(), dtype_name<T>(), dname,
                  mma ? "mma   " : "gather", ms[ms.size() / 2], ms.front(), t.cudnn_note);
    }
    CUDA_CHECK(cudaFree(d_out_guarded));
  }
  CUDA_CHECK(cudaFree(d_x));
  CUDA_CHECK(cudaFree(d_dy));
  CUDA_CHECK(cudaFree(d_w));
}

Case make(const std::string& name, int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s,
          int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  Case t;
  t.name = name;
  t.n = n; t.c = c; t.h = h; t.w = w; t.k = k; t.r = r; t.s = s;
  t.sh = sh; t.sw = sw; t.ph = ph; t.pw = pw; t.dh = dh; t.dw = dw; t.groups = groups;
  return t;
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  g_sm_count = prop.multiProcessorCount;
  CUDA_CHECK(cudaDeviceGetAttribute(&g_clock_khz, cudaDevAttrClockRate, device));
  std::printf("device %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, g_sm_count);
  const bool tensor_cores = prop.major >= 8;

  std::vector<Case> regnet = {
      make("regnety 64x120x28x28 k120 3x3 s1 p1 g5", 64, 120, 28, 28, 120, 3, 3, 1, 1, 1, 1, 1, 1, 5),
      make("regnety 64x888x14x14 k888 3x3 s2 p1 g37", 64, 888, 14, 14, 888, 3, 3, 2, 2, 1, 1, 1, 1, 37),
      make("regnety 64x48x112x112 k48 3x3 s2 p1 g2", 64, 48, 112, 112, 48, 3, 3, 2, 2, 1, 1, 1, 1, 2),
      make("regnety 64x336x14x14 k336 3x3 s1 p1 g14", 64, 336, 14, 14, 336, 3, 3, 1, 1, 1, 1, 1, 1, 14),
  };
  regnet[0].cudnn_note = "cuDNN best fwd 0.078 ms";
  regnet[1].cudnn_note = "cuDNN best bwd-data 0.239 ms";
  regnet[2].cudnn_note = "cuDNN best bwd-data 0.429 ms";
  // The runner hands the kernels channels_last weights for channels_last convolutions.
  for (auto& t : regnet) {
    t.time_it = true;
    t.weight_channels_last = true;
  }

  std::vector<Case> odd = {
      make("n1 8x7x7 k8 3x3 p1 g1 (cpg 8, dense)", 1, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1),
      make("n2 64x9x11 k64 3x3 s2 p1 g4 (cpg 16)", 2, 64, 9, 11, 64, 3, 3, 2, 2, 1, 1, 1, 1, 4),
      make("n3 96x13x10 k64 3x3 p2 d2 g2 (48->32)", 3, 96, 13, 10, 64, 3, 3, 1, 1, 2, 2, 2, 2, 2),
      make("n1 128x7x7 k128 1x1 g2 (cpg 64)", 1, 128, 7, 7, 128, 1, 1, 1, 1, 0, 0, 1, 1, 2),
      make("n2 40x15x15 k80 5x5 s2 p0 g5 (8->16)", 2, 40, 15, 15, 80, 5, 5, 2, 2, 0, 0, 1, 1, 5),
      make("n4 56x1x50 k56 1x3 s1x2 p0x1 g1 (1-d, 56)", 4, 56, 1, 50, 56, 1, 3, 1, 2, 0, 1, 1, 1, 1),
      make("n1 24x1x1 k24 1x1 g3 (cpg 8, one pixel)", 1, 24, 1, 1, 24, 1, 1, 1, 1, 0, 0, 1, 1, 3),
      make("n2 32x17x19 k64 3x3 s2 p0 d2 g2 (16->32)", 2, 32, 17, 19, 64, 3, 3, 2, 2, 0, 0, 2, 2, 2),
      make("n2 64x10x12 k32 3x1 s1x2 p1x0 g4 (16->8)", 2, 64, 10, 12, 32, 3, 1, 1, 2, 1, 0, 1, 1, 4),
      make("n2 80x9x9 k80 3x3 p1 g2 (cpg 40)", 2, 80, 9, 9, 80, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      make("n3 48x33x35 k48 3x3 p1 g2 (many tiles)", 3, 48, 33, 35, 48, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      make("n2 32x20x20 k32 3x3 s3 p1 g2 (stride 3)", 2, 32, 20, 20, 32, 3, 3, 3, 3, 1, 1, 1, 1, 2),
      make("n1 64x7x7 k64 3x3 s2 p0 g1 (cpg 64, dense)", 1, 64, 7, 7, 64, 3, 3, 2, 2, 0, 0, 1, 1, 1),
      make("n2 24x7x7 k48 3x3 s2 p1 g1 (24->48)", 2, 24, 7, 7, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1),
      make("n2 48x9x9 k48 7x7 p3 g2 (49 taps)", 2, 48, 9, 9, 48, 7, 7, 1, 1, 3, 3, 1, 1, 2),
      make("n1 16x5x5 k16 3x3 p3 d3 g1 (big pad)", 1, 16, 5, 5, 16, 3, 3, 1, 1, 3, 3, 3, 3, 1),
      make("n2 32x8x9 k32 3x3 s2 p0 g2 (dx rows no tap)", 2, 32, 8, 9, 32, 3, 3, 2, 2, 0, 0, 1, 1, 2),
      make("n5 112x6x5 k48 3x3 p1 g2 (56->24)", 5, 112, 6, 5, 48, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      make("n2 32x11x13 k64 3x2 s2x3 p1x2 d2x1 g4 (8->16)", 2, 32, 11, 13, 64, 3, 2, 2, 3, 1, 2, 2, 1, 4),
      make("n2 16x8x8 k16 3x3 p1 g4 (cpg 4: gather)", 2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 4),
      make("n2 144x6x6 k144 3x3 p1 g2 (cpg 72: gather)", 2, 144, 6, 6, 144, 3, 3, 1, 1, 1, 1, 1, 1, 2),
  };
  for (auto& t : odd)
    if (t.name.find("gather") != std::string::npos) t.expect_mma = false;
  // Every odd case with both weight layouts: channels_last (the runner's, staged
  // by 16-byte vectors) and contiguous (staged element by element).
  std::vector<Case> layouts = odd;
  for (auto& t : layouts) {
    t.weight_channels_last = true;
    t.name += " w-NHWC";
  }
  if (!tensor_cores)
    for (auto* list : {&regnet, &odd, &layouts})
      for (auto& t : *list) t.expect_mma = false;

  std::printf("-- odd shapes, fp16\n");
  for (const auto& t : odd) run_case<__half>(t, false);
  std::printf("-- odd shapes, bf16\n");
  for (const auto& t : odd) run_case<__nv_bfloat16>(t, false);
  std::printf("-- odd shapes, channels_last weights, fp16 and bf16\n");
  for (const auto& t : layouts) {
    run_case<__half>(t, false);
    run_case<__nv_bfloat16>(t, false);
  }
  if (!quick) {
    std::printf("-- RegNetY shapes, fp16 (checked in full, then timed: median of 50)\n");
    for (const auto& t : regnet) run_case<__half>(t, true);
    std::printf("-- RegNetY shapes, bf16\n");
    for (const auto& t : regnet) run_case<__nv_bfloat16>(t, true);
  }
  std::printf(g_failures == 0 ? "ALL PASS\n" : "%d FAILURES\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
