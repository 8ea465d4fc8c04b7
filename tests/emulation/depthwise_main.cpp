// Runs csrc/kernels/depthwise.cu's own source (host plans and kernel bodies,
// rewritten by transform_dw.py) on the CPU against the float64 references of
// tests/references/depthwise_ref.h: every output element, guards around
// the output, NaN prefill (an element never written fails), misaligned
// operands (the narrower vector paths). Build and run: tests/emulation/run
// depthwise [thorough|sweep] [asan]; tests/test_kernel_emulation.py runs it.
#include DW_EMU_INC

#include "depthwise_ref.h"

#include <cstring>
#include <random>

using namespace torch_cudnn_algo::kernels;
using dwref::Case;

template <typename T> float to_f(T v);
template <> float to_f<__half>(__half v) { return __half2float(v); }
template <> float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> float to_f<float>(float v) { return v; }
template <typename T> T of_f(float v) { return T(v); }
template <typename T> DirectDType dt();
template <> DirectDType dt<__half>() { return DirectDType::kHalf; }
template <> DirectDType dt<__nv_bfloat16>() { return DirectDType::kBFloat16; }
template <> DirectDType dt<float>() { return DirectDType::kFloat; }
template <typename T> const char* dname() { return sizeof(T) == 4 ? "fp32" : dt<T>() == DirectDType::kHalf ? "fp16" : "bf16"; }

int failures = 0, runs = 0;
constexpr int64_t kGuard = 64;

// A variant of the sweep (nullptr: the production dispatch, launch_depthwise).
const DwVariant* g_variant = nullptr;

template <typename T>
void run(const Case& t, DirectDirection dir, int sm_count, int misalign) {
  const DirectConvShape s = dwref::shape_of(t);
  if (!g_variant && !depthwise_applies(s, dt<T>(), dir)) {
    std::printf("FAIL %s: not applied\n", t.name.c_str());
    ++failures;
    return;
  }
  std::mt19937 rng(7 + t.c * 3 + t.h * 5 + t.r * 11 + t.sw);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  // Inputs: exact-size heap blocks (ASan sees any read past them), offset by
  // `misalign` elements from an aligned start.
  auto make = [&](int64_t count, std::vector<float>& f) {
    T* buf = static_cast<T*>(std::aligned_alloc(64, ((count + misalign) * sizeof(T) + 63) / 64 * 64));
    f.resize(count);
    for (int64_t i = 0; i < count; ++i) { buf[misalign + i] = of_f<T>(dist(rng)); f[i] = to_f(buf[misalign + i]); }
    return buf;
  };
  std::vector<float> xf, dyf, wf;
  T* x = make(s.n * s.h * s.w * s.c, xf);
  T* dy = make(s.n * s.p * s.q * s.c, dyf);
  T* wt = make(s.c * s.r * s.s, wf);
  std::vector<double> ref, ref_abs;
  dwref::reference(s, dir, xf, dyf, wf, ref, ref_abs);
  std::vector<T> out(ref.size() + 2 * kGuard + misalign);
  std::memset(out.data(), 0xFF, out.size() * sizeof(T));
  T* o = out.data() + kGuard + misalign;
  const size_t ws_bytes =
      g_variant ? g_variant->workspace(s, sm_count) : depthwise_workspace_bytes(s, dt<T>(), dir, sm_count);
  std::vector<float> ws(ws_bytes / 4 + 1);
  std::memset(ws.data(), 0xFF, ws.size() * 4);
  const void* a = dir == DirectDirection::kBackwardData ? static_cast<const void*>(dy + misalign) : x + misalign;
  const void* b = dir == DirectDirection::kBackwardFilter ? static_cast<const void*>(dy + misalign) : wt + misalign;
  const int code = g_variant ? g_variant->launch(s, sm_count, a, b, o, ws_bytes ? ws.data() : nullptr, nullptr)
                             : launch_depthwise(s, dt<T>(), dir, sm_count, a, b, o, ws_bytes ? ws.data() : nullptr, nullptr);
  ++runs;
  const double eps = dwref::dtype_eps(dt<T>());
  auto [bad, worst] = convref::compare_with_reference(
      ref, [&](size_t i) { return static_cast<double>(to_f(o[i])); },
      [&](size_t i) { return dwref::element_tolerance(eps, ref[i], ref_abs[i]); });
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(out.data());
  for (size_t i = 0; i < (kGuard + misalign) * sizeof(T); ++i)
    if (bytes[i] != 0xFF) { ++bad; std::printf("   guard before written\n"); break; }
  const unsigned char* after = reinterpret_cast<const unsigned char*>(o + ref.size());
  for (size_t i = 0; i < kGuard * sizeof(T); ++i)
    if (after[i] != 0xFF) { ++bad; std::printf("   guard after written\n"); break; }
  // The workspace's last float (past workspace_bytes) stays untouched.
  if (ws_bytes && std::memcmp(&ws[ws_bytes / 4], "\xFF\xFF\xFF\xFF", 4) != 0) { ++bad; std::printf("   past workspace\n"); }
  const bool ok = code == 0 && bad == 0;
  std::printf("%s %-48s %s %s sm%-3d mis%d  err/tol %.3f  %s\n", ok ? "ok  " : "FAIL", t.name.c_str(), dname<T>(),
              dwref::direction_name(dir), sm_count, misalign, worst, g_variant ? g_variant->name : "");
  if (!ok) ++failures;
  std::free(x); std::free(dy); std::free(wt);
}

// Every sweep variant (depthwise_sweep.cuh) on small shapes of its window,
// several SM counts (grid sizes, slices).
void run_sweep() {
  for (const DwVariant& v : dw_sweep_variants()) {
    g_variant = &v;
    const int64_t k = v.ks, sw = v.sw, pad = v.ks / 2;
    const std::vector<Case> cases = {
        dwref::make("sweep n2 24x11x13 pad k/2", 2, 24, 11, 13, k, k, sw, sw, pad, pad),
        dwref::make("sweep n1 72x9x10 pad k/2", 1, 72, 9, 10, k, k, sw, sw, pad, pad),
        dwref::make("sweep n3 16x(k+3)x(k+6) pad 0", 3, 16, k + 3, k + 6, k, k, sw, sw, 0, 0),
        dwref::make("sweep n1 40x7x(k+9) pad 1", 1, 40, 7, k + 9, k, k, sw, sw, 1, 1),
    };
    for (size_t i = 0; i < cases.size(); ++i) {
      const int sm = i % 2 ? 132 : 3;
      if (v.dtype == DirectDType::kHalf) run<__half>(cases[i], v.direction, sm, 0);
      else run<__nv_bfloat16>(cases[i], v.direction, sm, 0);
    }
  }
  g_variant = nullptr;
  std::printf("sweep: %zu variants\n", dw_sweep_variants().size());
}

// The tensor-core filter gradient's grid fits one wave: the zoo's layers on
// an H100/H200-sized GPU (132 SMs, the fake runtime's 228 KB a Hopper SM
// has) launch no more blocks than the SMs hold at once by shared memory.
void check_mma_filter_waves() {
  constexpr int kSms = 132;
  for (const Case& t : {dwref::make("ConvNeXt 96x56x56 7x7", 64, 96, 56, 56, 7, 7, 1, 1, 3, 3),
                        dwref::make("ConvNeXt 192x28x28 7x7", 64, 192, 28, 28, 7, 7, 1, 1, 3, 3),
                        dwref::make("ConvNeXt 384x14x14 7x7", 64, 384, 14, 14, 7, 7, 1, 1, 3, 3)}) {
    ++runs;
    MmaFilterGeom g;
    if (!mma_filter_geom(dwref::shape_of(t), kSms, g)) {
      std::printf("FAIL %s: the tensor-core filter gradient does not apply\n", t.name.c_str());
      ++failures;
      continue;
    }
    int device = 0;
    DeviceTraits traits;
    current_device(&device, &traits);
    const int64_t resident =
        traits.shared_per_sm / static_cast<int64_t>(mma_filter_shared_bytes(g) + kReservedSharedPerBlock);
    const int64_t blocks = mma_filter_slices(g) * (t.c / kMmaChannels);
    const bool ok = blocks <= kSms * resident;
    std::printf("%-4s %-30s waves: %ld blocks, %ld an SM fit (%zu B)\n", ok ? "ok" : "FAIL", t.name.c_str(),
                static_cast<long>(blocks), static_cast<long>(resident), mma_filter_shared_bytes(g));
    if (!ok) ++failures;
  }
}

// The CUDA-core filter gradient's grid, where an SM holds fewer of its blocks
// than the configuration's slices_per_sm, fills the waves it runs in: the 5x5
// stride-1 configuration (3 slices an SM, 2 blocks of it resident) ran 396-420
// blocks on an H100's 264 places (1.5-1.6 waves) on EfficientNet's 7x7 and
// 14x14 and MobileNetV3's 7x7 layers.
// The rule is checked at 2 and 1 blocks an SM; the extension's sizing, which
// asks the runtime (the stand-in answers emu_resident_blocks), must agree with it.
void check_filter_waves() {
  constexpr int kSms = 132;
  using Choice = FilterChoice<5, 1, 2>;
  for (const int resident : {2, 1}) {
    for (const Case& t : {dwref::make("EfficientNet 1152x7x7 5x5", 64, 1152, 7, 7, 5, 5, 1, 1, 2, 2),
                          dwref::make("MobileNetV3 960x7x7 5x5", 64, 960, 7, 7, 5, 5, 1, 1, 2, 2),
                          dwref::make("EfficientNet 672x14x14 5x5", 64, 672, 14, 14, 5, 5, 1, 1, 2, 2),
                          dwref::make("480x14x14 5x5", 64, 480, 14, 14, 5, 5, 1, 1, 2, 2),
                          dwref::make("EfficientNet 240x28x28 5x5", 64, 240, 28, 28, 5, 5, 1, 1, 2, 2),
                          dwref::make("MobileNetV3 120x28x28 5x5", 64, 120, 28, 28, 5, 5, 1, 1, 2, 2)}) {
      ++runs;
      const DirectConvShape shape = dwref::shape_of(t);
      const FilterBlock fb = filter_block(shape, 5, Choice::kTune, Choice::kLaunch.max_tx);
      const int64_t slices = filter_slices_of(shape, kSms, 5, Choice::kTune, Choice::kLaunch, resident);
      if (resident == emu_resident_blocks && filter_slices<__half>(shape, kSms) != slices) {
        std::printf("FAIL %s: the extension sizes %ld slices, the rule %ld\n", t.name.c_str(),
                    static_cast<long>(filter_slices<__half>(shape, kSms)), static_cast<long>(slices));
        ++failures;
      }
      const int64_t blocks = slices * fb.b.tiles * fb.groups;
      const int64_t places = int64_t{kSms} * resident;
      // The waves the grid runs in at least 90% full (the old sizing: 75% and 80%).
      const int64_t waves = (blocks + places - 1) / places;
      const bool ok = 10 * blocks >= 9 * waves * places;
      std::printf("%-4s %-30s filter waves: %ld blocks in %ld waves of %ld places (%d an SM)\n", ok ? "ok" : "FAIL",
                  t.name.c_str(), static_cast<long>(blocks), static_cast<long>(waves), static_cast<long>(places), resident);
      if (!ok) ++failures;
    }
  }
}

int main(int argc, char** argv) {
  const bool thorough = argc > 1 && std::string(argv[1]) == "thorough";
  if (argc > 1 && std::string(argv[1]) == "sweep") {
    run_sweep();
    for (const auto& [name, count] : emu_notes) std::printf("launched %4ld x %s\n", count, name.c_str());
    std::printf(failures ? "%d FAILURES in %d runs\n" : "ALL PASS (%d failures, %d runs)\n", failures, runs);
    return failures ? 1 : 0;
  }
  check_mma_filter_waves();
  check_filter_waves();
  const auto cases = dwref::correctness_cases();
  for (const auto& t : cases)
    for (const DirectDirection dir : {DirectDirection::kForward, DirectDirection::kBackwardData,
                                      DirectDirection::kBackwardFilter}) {
      run<__half>(t, dir, 3, 0);
      run<float>(t, dir, 3, 0);
      run<__half>(t, dir, 132, 1);
      run<__nv_bfloat16>(t, dir, 132, 0);
      if (thorough) {
        run<__half>(t, dir, 132, 2);
        run<float>(t, dir, 1, 1);
        run<float>(t, dir, 132, 2);
      }
    }
  for (const auto& [name, count] : emu_notes) std::printf("launched %4ld x %s\n", count, name.c_str());
  std::printf("threads run %ld, blocks %u, widest grid.x %u\n", emu_threads_run.load(), emu_blocks, emu_max_grid_x);
  std::printf(failures ? "%d FAILURES in %d runs\n" : "ALL PASS (%d failures, %d runs)\n", failures, runs);
  return failures ? 1 : 0;
}
