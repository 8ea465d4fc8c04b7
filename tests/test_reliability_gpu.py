"""GPU reliability: concurrency, several devices, CUDA graphs, torch.compile,
memory exhaustion and misuse.

- 8 threads, each with its own configuration, run forward + backward at once with
  every direction pinned: results equal one thread's, every call ran our plan; and
  again while a 9th thread flips the flags (1, 0, "eng0", None): results match stock.
- Two GPUs: a model on each device, pinned and with "fastest", matches stock; plan
  caches and policy decisions are per device.
- CUDA graph capture and replay (forward, forward + backward) with pinned legacy
  algorithms and engine configurations matches eager; under "fastest" a
  configuration first met during capture is never profiled. torch.compile of a CNN
  with pinned choices matches eager and runs our plans.
- Out of memory (torch.cuda.set_per_process_memory_fraction): a pinned algorithm
  whose workspace cannot be allocated warns once and runs stock, or raises under
  strict; profile() marks it "out of memory"; allocated memory returns to baseline.
- Misuse of the aten ops (wrong list lengths, dtypes, devices, shapes): a Python
  exception with a clear message, never a crash.

Tests that could take the process down (threads, misuse) run their body in a
subprocess, so a crash fails one test instead of ending the session.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torch_cudnn_algo
from conv_cases import ConvForm, DtypeCase, make_inputs, relative_error
from torch_cudnn_algo import _graph_capture, _ops, diagnostics
from torch_cudnn_algo._algorithms import DIRECTIONS

pytestmark = pytest.mark.gpu

cudnn = torch.backends.cudnn
TESTS_DIR = Path(__file__).resolve().parent
FLAG = {key: spec.flag for key, spec in DIRECTIONS.items()}
ALL_PINNED_1 = dict(conv_fwd_algo=1, conv_bwd_data_algo=1, conv_bwd_filter_algo=1)
FASTEST = dict(conv_fwd_algo="fastest", conv_bwd_data_algo="fastest", conv_bwd_filter_algo="fastest")
# Relative (Frobenius) error allowed between two valid algorithms' results.
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


# -- helpers ----------------------------------------------------------------------

def ran_since(before: dict[str, int]) -> dict[str, int]:
    """Convolution calls per direction that ran one of our plans since `before`."""
    now = diagnostics.pinned_run_counts()
    return {d: now[d] - before[d] for d in now}


def run_child(code: str, *args: str, timeout: int = 300) -> dict:
    """Runs `code` in a fresh interpreter (tests/ on sys.path, no TORCH_CUDNN_* from
    the environment) and returns the JSON it printed on its `RESULT ` line. A crash
    (signal), a hang or a Python error fails the test with the child's output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_CUDNN_")}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
    try:
        result = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                                text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"child timed out after {timeout} s; stdout tail:\n{out[-3000:]}")
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    context = (f"child exited with {result.returncode} (negative = killed by that signal)\n"
               f"--- stdout (tail)\n{result.stdout[-3000:]}\n--- stderr (tail)\n{result.stderr[-6000:]}")
    assert result.returncode == 0 and lines, context
    return json.loads(lines[-1][len("RESULT "):])


def make_cnn(dtype=torch.float32, fmt=torch.contiguous_format, device="cuda", seed=0) -> torch.nn.Module:
    """Two convolutions of one configuration (16 -> 16 channels, 3x3, padding 1)."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3, padding=1))
    return model.to(device=device, dtype=dtype, memory_format=fmt)


def cnn_input(dtype=torch.float32, fmt=torch.contiguous_format, device="cuda", seed=1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(4, 16, 12, 12, generator=gen).to(device=device, dtype=dtype).contiguous(memory_format=fmt)


def eager_step(model: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    """[output, input gradient, parameter gradients...] of one forward + backward."""
    x = x.detach().clone().requires_grad_()
    out = model(x)
    grads = torch.autograd.grad(out, [x, *model.parameters()], grad)
    return [out.detach(), *grads]


def assert_close_all(got: list[torch.Tensor], expected: list[torch.Tensor], tol: float, what: str) -> None:
    assert len(got) == len(expected), what
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a.shape == b.shape and a.dtype == b.dtype, (what, i, a.shape, b.shape)
        err = relative_error(a, b)
        assert err <= tol, f"{what}: tensor {i} relative error {err:.3e} > {tol}"


# -- 8 threads ------------------------------------------------------------------

THREADS_CHILD = r'''
import json, os, sys, threading, time, warnings
import torch
import torch_cudnn_algo
from conv_cases import ConvForm, memory_format, reaches_cudnn, relative_error

MODE = sys.argv[1]  # "pinned": every direction pinned to 1; "flip": a 9th thread flips the flags
warnings.simplefilter("ignore")
cudnn = torch.backends.cudnn
FLAGS = ("conv_fwd_algo", "conv_bwd_data_algo", "conv_bwd_filter_algo")
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
N_THREADS = 8
ITERS = 12
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}
# One configuration per thread; the spares replace any that cuDNN's algorithm 1
# cannot run in some direction ("pinned" mode runs strict).
POOL = [
    (ConvForm("conv2d_fp32", (4, 16, 20, 20), (32, 16, 3, 3), padding=1), torch.float32, "contiguous"),
    (ConvForm("conv2d_fp16_nhwc", (4, 16, 20, 20), (32, 16, 3, 3), padding=1), torch.float16, "channels_last"),
    (ConvForm("conv2d_bf16_nhwc_stride2", (2, 32, 14, 14), (32, 32, 3, 3), stride=2, padding=1),
     torch.bfloat16, "channels_last"),
    (ConvForm("conv3d_fp32", (2, 8, 6, 8, 8), (16, 8, 3, 3, 3), padding=1), torch.float32, "contiguous"),
    (ConvForm("conv1d_fp32", (4, 16, 50), (32, 16, 5), padding=2), torch.float32, "contiguous"),
    (ConvForm("conv_transpose2d_fp32", (2, 16, 9, 10), (16, 8, 3, 3), stride=2, padding=1, transposed=True,
              output_padding=1), torch.float32, "contiguous"),
    (ConvForm("conv2d_groups2_fp32", (2, 16, 15, 17), (32, 8, 3, 3), padding=1, groups=2), torch.float32,
     "contiguous"),
    (ConvForm("conv2d_1x1_fp16", (4, 32, 16, 16), (64, 32, 1, 1)), torch.float16, "contiguous"),
    (ConvForm("conv2d_dilation2_fp32", (2, 8, 17, 19), (16, 8, 3, 3), padding=2, dilation=2), torch.float32,
     "contiguous"),
    (ConvForm("conv2d_5x5_fp16_nhwc", (2, 8, 32, 32), (16, 8, 5, 5), padding=2), torch.float16, "channels_last"),
    (ConvForm("conv3d_fp16_nhwc", (2, 8, 6, 8, 8), (16, 8, 3, 3, 3), padding=1), torch.float16, "channels_last"),
    (ConvForm("conv2d_stride2_fp32", (2, 8, 17, 19), (16, 8, 3, 3), stride=2), torch.float32, "contiguous"),
]
# Flag states the flipper cycles through (fwd, bwd_data, bwd_filter): legacy,
# engine, stock (all None deregisters the overrides) and mixtures.
STATES = [(1, 1, 1), (0, 0, 0), ("eng0", "eng0", "eng0"), (None, None, None),
          (1, None, 0), (None, "eng0", 1), ("eng0", 1, None), (0, 1, "eng0")]
MIN_FLIPS = 2 * len(STATES)
MAX_ITERS = 400


def set_flags(values):
    for name, value in zip(FLAGS, values):
        setattr(cudnn, name, value)


def make(seed, form, dtype, layout):
    gen = torch.Generator().manual_seed(seed)
    fmt = memory_format(layout, form.spatial_dims)
    x = torch.randn(form.input_shape, generator=gen).to(dtype).cuda().contiguous(memory_format=fmt)
    w = torch.randn(form.weight_shape, generator=gen).to(dtype).cuda().contiguous(memory_format=fmt)
    out = form.conv(x, w)
    g = torch.empty_like(out).copy_(torch.randn(out.shape, generator=gen))
    return x, w, g


def algo1_runs_it(form, x, w):
    if not reaches_cudnn(form, x, w):
        return False
    sizes = torch_cudnn_algo.diagnostics.legacy_workspace_sizes
    return all(sizes(d, x, w, **form.kwargs(), allow_tf32=False)[1] is not None for d in DIRECTIONS)


def step(config):
    form, x, w, g = config
    out = form.conv(x, w)
    gx, gw = torch.autograd.grad(out, (x, w), g)
    return out.detach(), gx, gw


def main():
    summary = {"mode": MODE, "errors": [], "mismatches": []}
    with cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        configs = []
        for seed, (form, dtype, layout) in enumerate(POOL):
            x, w, g = make(100 + seed, form, dtype, layout)
            if MODE == "flip" or algo1_runs_it(form, x, w):
                configs.append((form, x.requires_grad_(), w.requires_grad_(), g))
            if len(configs) == N_THREADS:
                break
        summary["configs"] = [c[0].name for c in configs]
        assert len(configs) == N_THREADS, f"only {len(configs)} configurations run algorithm 1: {summary}"
        stock = [step(c) for c in configs]

        if MODE == "pinned":
            set_flags((1, 1, 1))
            cudnn.conv_algo_strict = True
            expected, per_iter = [], []
            for config, ref in zip(configs, stock):
                before = torch_cudnn_algo.diagnostics.pinned_run_counts()
                expected.append(step(config))
                after = torch_cudnn_algo.diagnostics.pinned_run_counts()
                per_iter.append({d: after[d] - before[d] for d in DIRECTIONS})
                for name, a, b in zip(("out", "grad_input", "grad_weight"), expected[-1], ref):
                    err = relative_error(a, b)
                    if not err <= TOL[a.dtype]:
                        summary["mismatches"].append(f"one thread, {config[0].name} {name} vs stock: {err:.2e}")
            summary["per_iter"] = per_iter
            summary["expected_counts"] = {d: ITERS * sum(p[d] for p in per_iter) for d in DIRECTIONS}
        else:
            expected = stock
        torch.cuda.synchronize()

        results = [[] for _ in configs]
        errors = summary["errors"]
        stop = threading.Event()
        flips = [0]
        barrier = threading.Barrier(N_THREADS + (MODE == "flip"))

        def worker(i):
            try:
                stream = torch.cuda.Stream()
                barrier.wait(timeout=120)
                with torch.cuda.stream(stream):
                    it = 0
                    while it < ITERS or (MODE == "flip" and flips[0] < MIN_FLIPS and it < MAX_ITERS):
                        results[i].append(step(configs[i]))
                        it += 1
                stream.synchronize()
            except BaseException as exc:  # reported by the parent
                errors.append(f"thread {i} ({configs[i][0].name}): {type(exc).__name__}: {exc}"[:2000])
                barrier.abort()

        def flipper():
            try:
                barrier.wait(timeout=120)
                while not stop.is_set():
                    set_flags(STATES[flips[0] % len(STATES)])
                    flips[0] += 1
                    time.sleep(0.0005)
            except BaseException as exc:
                errors.append(f"flipper: {type(exc).__name__}: {exc}"[:2000])
                barrier.abort()

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(N_THREADS)]
        if MODE == "flip":
            threads.append(threading.Thread(target=flipper, daemon=True))
        before = torch_cudnn_algo.diagnostics.pinned_run_counts()
        for t in threads:
            t.start()
        for t in threads[:N_THREADS]:
            t.join(timeout=240)
        stop.set()
        for t in threads[N_THREADS:]:
            t.join(timeout=60)
        hung = [i for i, t in enumerate(threads) if t.is_alive()]
        if hung:
            summary["hung"] = hung
            print("RESULT " + json.dumps(summary), flush=True)
            os._exit(3)
        torch.cuda.synchronize()
        after = torch_cudnn_algo.diagnostics.pinned_run_counts()
        summary["counts"] = {d: after[d] - before[d] for d in DIRECTIONS}
        summary["flips"] = flips[0]
        summary["min_flips"] = MIN_FLIPS
        summary["iterations"] = [len(r) for r in results]
        set_flags((None, None, None))
        cudnn.conv_algo_strict = False

        for i, runs in enumerate(results):
            for k, got in enumerate(runs):
                for name, a, b in zip(("out", "grad_input", "grad_weight"), got, expected[i]):
                    if a.shape != b.shape or a.dtype != b.dtype:
                        summary["mismatches"].append(f"{configs[i][0].name} iter {k} {name}: shape/dtype")
                        continue
                    err = relative_error(a, b)
                    if not err <= TOL[a.dtype]:
                        summary["mismatches"].append(f"{configs[i][0].name} iter {k} {name}: {err:.2e}")
        summary["mismatches"] = summary["mismatches"][:30]
    print("RESULT " + json.dumps(summary), flush=True)


main()
'''


def test_eight_threads_with_pinned_choices_match_one_thread():
    """8 configurations (dtypes, layouts, 1-d/2-d/3-d, transposed, groups) at once,
    each on its own stream, every direction pinned (strict): each thread's results
    equal the one-thread results and every call ran our plan."""
    summary = run_child(THREADS_CHILD, "pinned")
    assert not summary["errors"], summary["errors"]
    assert not summary["mismatches"], summary["mismatches"]
    assert all(n == 12 for n in summary["iterations"]), summary
    assert all(summary["expected_counts"][d] > 0 for d in DIRECTIONS), summary
    assert summary["counts"] == summary["expected_counts"], summary


def test_eight_threads_while_the_flags_flip_match_stock():
    """A 9th thread cycles the three flags through 1, 0, "eng0" and None (registering
    and deregistering the overrides) while 8 threads convolve: no crash, no error,
    every result within tolerance of stock (any setting is a valid algorithm)."""
    summary = run_child(THREADS_CHILD, "flip")
    assert not summary["errors"], summary["errors"]
    assert not summary["mismatches"], summary["mismatches"]
    assert summary["flips"] >= summary["min_flips"], summary


# -- two GPUs ---------------------------------------------------------------------

@pytest.fixture
def two_devices() -> list[torch.device]:
    """Tests that take it are marked multi_gpu: they run where two GPUs are."""
    return [torch.device("cuda", 0), torch.device("cuda", 1)]


def same_cnn_on_each(devices: list[torch.device]) -> list[torch.nn.Module]:
    """One CNN and exact copies of it, one per device."""
    model = make_cnn(device=devices[0])
    return [model] + [copy.deepcopy(model).to(d) for d in devices[1:]]


@pytest.mark.multi_gpu
def test_two_devices_pinned_choices_match_stock_with_a_plan_cache_per_device(two_devices):
    models = same_cnn_on_each(two_devices)
    x, grad = cnn_input(device="cpu", seed=1), cnn_input(device="cpu", seed=2)
    with cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        stock = [eager_step(m, x.to(d), grad.to(d)) for m, d in zip(models, two_devices)]
        with torch_cudnn_algo.flags(conv_algo_strict=True, **ALL_PINNED_1):
            assert _ops.runner_cache_size() == 0
            before = diagnostics.pinned_run_counts()
            pinned0 = eager_step(models[0], x.to(two_devices[0]), grad.to(two_devices[0]))
            ran0 = ran_since(before)
            size0 = _ops.runner_cache_size()
            before = diagnostics.pinned_run_counts()
            # cuda:1 while cuda:0 is the current device: the override must follow the tensors.
            assert torch.cuda.current_device() == 0
            pinned1 = eager_step(models[1], x.to(two_devices[1]), grad.to(two_devices[1]))
            ran1 = ran_since(before)
            size1 = _ops.runner_cache_size()
    torch.cuda.synchronize(two_devices[0])
    torch.cuda.synchronize(two_devices[1])
    assert all(t.device == two_devices[1] for t in pinned1)
    assert_close_all(pinned0, stock[0], TOL[torch.float32], "cuda:0 pinned vs stock")
    assert_close_all(pinned1, stock[1], TOL[torch.float32], "cuda:1 pinned vs stock")
    assert_close_all(pinned1, pinned0, 1e-6, "cuda:1 vs cuda:0, same algorithm")
    assert all(ran0[d] > 0 for d in DIRECTIONS), ran0
    assert ran1 == ran0
    assert size0 > 0 and size1 == 2 * size0, (size0, size1)


@pytest.mark.multi_gpu
def test_two_devices_fastest_matches_stock_with_decisions_per_device(two_devices):
    models = same_cnn_on_each(two_devices)
    x, grad = cnn_input(device="cpu", seed=3), cnn_input(device="cpu", seed=4)
    with cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        stock = [eager_step(m, x.to(d), grad.to(d)) for m, d in zip(models, two_devices)]
        with torch_cudnn_algo.flags(**FASTEST):
            picked0 = eager_step(models[0], x.to(two_devices[0]), grad.to(two_devices[0]))
            decisions0 = _ops.profile_decision_count()
            before = diagnostics.pinned_run_counts()
            picked1 = eager_step(models[1], x.to(two_devices[1]), grad.to(two_devices[1]))
            decisions1 = _ops.profile_decision_count()
            ran1 = ran_since(before)
            again1 = eager_step(models[1], x.to(two_devices[1]), grad.to(two_devices[1]))
            assert _ops.profile_decision_count() == decisions1  # cached per device
    # One configuration per direction (both layers share it): 3 decisions per device.
    assert decisions0 == 3 and decisions1 == 6, (decisions0, decisions1)
    assert sum(ran1.values()) > 0, ran1  # cuda:1 ran its own picks
    assert all(t.device == two_devices[1] for t in picked1)
    # "fastest" picks within 1e-4 max relative error of float64: 2e-4 vs stock.
    assert_close_all(picked0, stock[0], 2e-4, "cuda:0 fastest vs stock")
    assert_close_all(picked1, stock[1], 2e-4, "cuda:1 fastest vs stock")
    assert_close_all(again1, stock[1], 2e-4, "cuda:1 fastest (cached) vs stock")


# -- CUDA graphs ------------------------------------------------------------------

GRAPH_CASES = {
    "fp32": (torch.float32, torch.contiguous_format, 1e-5),
    "fp16_nhwc": (torch.float16, torch.channels_last, 1e-3),
}


def warm_up(model, static_x, static_grad, backward: bool) -> None:
    def step() -> None:
        out = model(static_x)
        if backward:
            out.backward(static_grad)

    _graph_capture.warm_up(step, 3)
    torch.cuda.synchronize()


def capture(model, static_x, static_grad, backward: bool):
    """Captures one forward (+ backward) pass; returns the graph and its static
    results [output, (input gradient, parameter gradients...)]."""
    static_x.grad = None
    for p in model.parameters():
        p.grad = None
    outputs = []

    def body() -> None:
        if backward:
            outputs.append(model(static_x))
            outputs[0].backward(static_grad)
        else:
            with torch.no_grad():
                outputs.append(model(static_x))

    graph = _graph_capture.capture(body)
    (static_out,) = outputs
    if not backward:
        return graph, [static_out]
    return graph, [static_out, static_x.grad, *[p.grad for p in model.parameters()]]


def replay(graph, static_x, new_x) -> None:
    with torch.no_grad():
        static_x.copy_(new_x)
    graph.replay()
    torch.cuda.synchronize()


def engine_choices(x: torch.Tensor, w: torch.Tensor) -> dict[str, str]:
    """Per direction, the first engine configuration cuDNN offers that may run here."""
    choices = {}
    for direction in DIRECTIONS:
        configs = diagnostics.engine_configs(direction, x, w, padding=1, allow_tf32=False, deterministic=False)
        usable = [c for c in configs if c.refusal is None and c.workspace is not None]
        if not usable:
            pytest.fail(f"cuDNN offers no usable {direction} engine configuration for the test's CNN layer "
                        f"({len(configs)} listed); the test needs one")
        choices[FLAG[direction]] = usable[0].name
    return choices


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "forward_backward"])
@pytest.mark.parametrize("case", list(GRAPH_CASES))
@pytest.mark.parametrize("kind", ["legacy", "engine"])
def test_cuda_graph_replay_with_pinned_choices_matches_eager(kind, case, backward):
    dtype, fmt, tol = GRAPH_CASES[case]
    model = make_cnn(dtype, fmt)
    static_x = cnn_input(dtype, fmt, seed=5).requires_grad_(backward)
    static_grad = cnn_input(dtype, fmt, seed=6)
    new_x = cnn_input(dtype, fmt, seed=7)
    with cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        stock = eager_step(model, new_x, static_grad)
        choices = ALL_PINNED_1 if kind == "legacy" else engine_choices(static_x.detach(), model[0].weight.detach())
        with torch_cudnn_algo.flags(conv_algo_strict=True, **choices):
            warm_up(model, static_x, static_grad, backward)
            before = diagnostics.pinned_run_counts()
            graph, static_results = capture(model, static_x, static_grad, backward)
            captured = ran_since(before)
            replay(graph, static_x, new_x)
            eager = eager_step(model, new_x, static_grad)
    # Our plans were captured: two convolutions forward, and both backward directions.
    assert captured["fwd"] == 2, captured
    if backward:
        assert captured["bwd_data"] == 2 and captured["bwd_filter"] == 2, captured
    n = len(static_results)
    assert_close_all(static_results, eager[:n], tol, f"{kind} graph replay vs eager")
    assert_close_all(static_results, stock[:n], TOL[dtype], f"{kind} graph replay vs stock")
    # A second replay with other data still follows eager.
    replay(graph, static_x, static_x.detach() * 0.5)
    with cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False), \
            torch_cudnn_algo.flags(conv_algo_strict=True, **choices):
        eager_half = eager_step(model, static_x.detach().clone(), static_grad)
    assert_close_all(static_results, eager_half[:n], tol, f"{kind} second replay vs eager")


def test_cuda_graph_capture_never_profiles_under_fastest():
    """Forward + backward of a configuration the policy first meets during capture:
    no profiling, no error, the stock path is captured and replays like eager. Once
    profiled outside capture, a new capture runs the cached picks."""
    model = make_cnn()
    static_x = cnn_input(seed=8).requires_grad_()
    static_grad = cnn_input(seed=9)
    new_x = cnn_input(seed=10)
    with cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        stock = eager_step(model, new_x, static_grad)
        warm_up(model, static_x, static_grad, backward=True)  # flags None: the policy has not met it
        with torch_cudnn_algo.flags(**FASTEST):
            before = diagnostics.pinned_run_counts()
            graph, static_results = capture(model, static_x, static_grad, backward=True)
            assert _ops.profile_decision_count() == 0
            assert sum(ran_since(before).values()) == 0  # stock was captured
            replay(graph, static_x, new_x)
            assert_close_all(static_results, stock, 1e-5, "graph captured under fastest vs stock eager")

            # Outside capture the configuration is profiled (once per direction)...
            picked = eager_step(model, new_x, static_grad)
            assert _ops.profile_decision_count() == 3
            # ...and a new capture runs the cached picks, without profiling again.
            before = diagnostics.pinned_run_counts()
            graph2, static_results2 = capture(model, static_x, static_grad, backward=True)
            captured = ran_since(before)
            assert _ops.profile_decision_count() == 3
            replay(graph2, static_x, new_x)
    assert all(captured[d] > 0 for d in DIRECTIONS), captured
    assert_close_all(picked, stock, 2e-4, "fastest eager vs stock")
    assert_close_all(static_results2, picked, 1e-5, "graph of cached picks vs eager")


# -- torch.compile ------------------------------------------------------------------

def _inductor_unavailable(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return "triton" in text


def test_torch_compile_with_pinned_choices_matches_eager(record_property):
    """Inductor calls aten convolution / convolution_backward as extern kernels, which
    reach our overrides: the compiled CNN matches eager and its calls run our plans.
    (Falls back to backend="aot_eager", with a warning, if inductor cannot compile
    here for lack of a working triton.)"""
    torch._dynamo.reset()
    model = make_cnn()
    x, grad = cnn_input(seed=11), cnn_input(seed=12)
    backend = "inductor"
    try:
        with cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False), \
                torch_cudnn_algo.flags(**ALL_PINNED_1):
            eager = eager_step(model, x, grad)
            # layout_optimization would turn the convolutions channels-last, which
            # is a different configuration; keep the eager one.
            with torch._inductor.config.patch(layout_optimization=False, compile_threads=1):
                try:
                    compiled = torch.compile(model, backend=backend)
                    first = eager_step(compiled, x, grad)  # compiles
                except Exception as exc:  # noqa: BLE001 - only a missing triton is tolerated
                    if not _inductor_unavailable(exc):
                        raise
                    backend = "aot_eager"
                    warnings.warn(f"inductor cannot compile here ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0][:200]}); tested backend='aot_eager'")
                    torch._dynamo.reset()
                    compiled = torch.compile(model, backend=backend)
                    first = eager_step(compiled, x, grad)
            before = diagnostics.pinned_run_counts()
            second = eager_step(compiled, x, grad)  # the compiled code only
            ran = ran_since(before)
    finally:
        torch._dynamo.reset()
    record_property("backend", backend)
    assert ran["fwd"] == 2 and ran["bwd_data"] >= 1 and ran["bwd_filter"] == 2, (backend, ran)
    assert_close_all(first, eager, 1e-5, f"compiled ({backend}) vs eager")
    assert_close_all(second, eager, 1e-5, f"compiled ({backend}) second call vs eager")


# -- out of memory ----------------------------------------------------------------

# One of PyTorch's test_Conv2d_large_workspace sizes: FFT asks for gigabytes of
# workspace (the weight's 256 x 256 transforms; a few GB by extrapolating the
# 198 MiB measured for [32, 64, 56, 56] (*) [64, 64, 3, 3]), stock needs next to
# none. The test reads the real size and skips if it is under 2 * MIN_HEADROOM.
OOM_FORM = ConvForm("large_workspace", (1, 256, 80, 128), (256, 256, 3, 3), padding=1)
OOM_CASE = DtypeCase("float32", torch.float32, allow_tf32=False, tolerance=2e-5)
FFT = {"fwd": 4, "bwd_data": 2, "bwd_filter": 2}
MIN_HEADROOM = 512 << 20


def run_direction(direction: str, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    if direction == "fwd":
        return F.conv2d(x, w, padding=1)
    mask = [direction == "bwd_data", direction == "bwd_filter", False]
    out = torch.ops.aten.convolution_backward(grad, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)
    return out[0] if direction == "bwd_data" else out[1]


@contextlib.contextmanager
def squeezed_memory(device: torch.device, headroom: int):
    """Caps this process's allocator at what is reserved now plus `headroom` bytes
    (the cap counts reserved segments, so the cache is emptied first)."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    total = torch.cuda.mem_get_info(device)[1]
    limit = torch.cuda.memory_reserved(device) + headroom
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total), device)
    try:
        yield limit
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        torch.cuda.empty_cache()


def oom_messages(caught) -> list[str]:
    return [str(w.message) for w in caught if "out of memory" in str(w.message)]


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_pinned_workspace_out_of_memory_follows_the_refusal_rule(direction):
    algo = FFT[direction]
    name = DIRECTIONS[direction].names[algo]
    device = torch.device("cuda", torch.cuda.current_device())
    with cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        x, w = make_inputs(OOM_FORM, OOM_CASE, torch.contiguous_format, seed=13)
        grad = torch.randn(1, 256, 80, 128, device=device, generator=torch.Generator(device).manual_seed(14))
        workspace = diagnostics.legacy_workspace_sizes(direction, x, w, padding=1, allow_tf32=False)[algo]
        if workspace is None:
            pytest.fail(f"cuDNN does not support {direction} {name} for the test's convolution; the test needs an "
                        "algorithm whose workspace it can make unallocatable")
        headroom = workspace // 2  # stock and profile() fit easily, the pinned workspace never does
        if headroom < MIN_HEADROOM:
            pytest.fail(f"{direction} {name} needs only {workspace} bytes of workspace for the test's convolution; "
                        f"the test needs more than {2 * MIN_HEADROOM}")
        expected = run_direction(direction, x, w, grad)
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated(device)

        # Default: one warning per configuration, then stock runs.
        with squeezed_memory(device, headroom):
            before = diagnostics.pinned_run_counts()
            with warnings.catch_warnings(record=True) as caught, \
                    torch_cudnn_algo.flags(**{FLAG[direction]: algo}):
                warnings.simplefilter("always")
                out = run_direction(direction, x, w, grad)
                again = run_direction(direction, x, w, grad)
            torch.cuda.synchronize()
            ran = ran_since(before)[direction]
        assert ran == 0, "the pinned plan ran although its workspace cannot be allocated"
        messages = oom_messages(caught)
        assert len(messages) == 1, [str(m.message) for m in caught]
        assert "cannot run this convolution" in messages[0]
        assert f"{FLAG[direction]} = {algo} ({name})" in messages[0]
        assert relative_error(out, expected) <= 4e-5 and relative_error(again, expected) <= 4e-5
        del out, again
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated(device) == baseline

        # Strict: a RuntimeError naming the reason, never torch.OutOfMemoryError.
        with squeezed_memory(device, headroom):
            with torch_cudnn_algo.flags(**{FLAG[direction]: algo, "conv_algo_strict": True}):
                with pytest.raises(RuntimeError) as info:
                    run_direction(direction, x, w, grad)
            torch.cuda.synchronize()
        assert not isinstance(info.value, torch.OutOfMemoryError), info.value
        assert "cannot run this convolution" in str(info.value) and "out of memory" in str(info.value)
        del info
        assert torch.cuda.memory_allocated(device) == baseline

        # profile(): the candidate is marked, profiling goes on, memory comes back.
        with squeezed_memory(device, headroom):
            table = torch_cudnn_algo.profile(direction, x, w, padding=1, allow_tf32=False, deterministic=False,
                                             warmup=0, reps=1, energy=False)
            torch.cuda.synchronize()
            assert torch.cuda.memory_allocated(device) == baseline
        assert table.row(algo).status == "out of memory", str(table)
        assert table.stock is not None and table.stock.ok, str(table)
        assert any(r.ok for r in table if r.value is not None), str(table)

        # With the memory back, the same pinned choice runs: memory was the only reason.
        if workspace < 0.8 * torch.cuda.mem_get_info(device)[0]:
            before = diagnostics.pinned_run_counts()
            with torch_cudnn_algo.flags(**{FLAG[direction]: algo, "conv_algo_strict": True}):
                out = run_direction(direction, x, w, grad)
            assert ran_since(before)[direction] == 1
            assert relative_error(out, expected) <= 4e-3  # FFT: transform rounding


# -- misuse -------------------------------------------------------------------------

MISUSE_CHILD = r'''
import json, warnings
import torch
import torch.nn.functional as F
import torch_cudnn_algo

warnings.simplefilter("ignore")
cudnn = torch.backends.cudnn
cudnn.enabled, cudnn.benchmark, cudnn.deterministic = True, False, False
cudnn.allow_tf32 = False
dev = "cuda"
gen = torch.Generator(device=dev).manual_seed(0)
def randn(*shape, dtype=torch.float32):
    return torch.randn(shape, device=dev, generator=gen).to(dtype)

x = randn(2, 8, 9, 9)
w = randn(16, 8, 3, 3)
go = randn(2, 16, 9, 9)              # grad_output of conv2d(x, w, padding=1)
x5, w5 = randn(2, 4, 5, 6, 7), randn(8, 4, 3, 3, 3)
wt = randn(8, 6, 3, 3)               # transposed weight: (in, out / groups, kh, kw)
got = randn(2, 6, 18, 18)            # grad_output of conv_transpose2d(x, wt, stride 2, padding 1, output_padding 1)
x1, w1, go1 = randn(2, 8, 21), randn(16, 8, 3), randn(2, 16, 21)
conv = torch.ops.aten.cudnn_convolution
convt = torch.ops.aten.cudnn_convolution_transpose
bwd = torch.ops.aten.convolution_backward
L2, Z2, F3 = [1, 1], [0, 0], (False, False, False)
MASK = [True, True, False]

# name: (call, a word its message must contain, or None)
CASES = {
    "conv padding len 1": (lambda: conv(x, w, [1], L2, L2, 1, *F3), "padding"),
    "conv stride len 3": (lambda: conv(x, w, L2, [1, 1, 1], L2, 1, *F3), "stride"),
    "conv dilation empty": (lambda: conv(x, w, L2, L2, [], 1, *F3), "dilation"),
    "conv all lists len 1": (lambda: conv(x, w, [1], [1], [1], 1, *F3), "padding"),
    "conv all lists len 3 on 2-d": (lambda: conv(x, w, [1, 1, 1], [1, 1, 1], [1, 1, 1], 1, *F3), "padding"),
    "conv 3-d with lists of 2": (lambda: conv(x5, w5, L2, L2, L2, 1, *F3), "padding"),
    "conv stride 0": (lambda: conv(x, w, L2, [0, 1], L2, 1, *F3), "stride"),
    "conv negative padding": (lambda: conv(x, w, [-1, -1], L2, L2, 1, *F3), "padding"),
    "conv groups 0": (lambda: conv(x, w, L2, L2, L2, 0, *F3), "groups"),
    "conv groups -1": (lambda: conv(x, w, L2, L2, L2, -1, *F3), "groups"),
    "conv groups 3": (lambda: conv(x, w, L2, L2, L2, 3, *F3), "groups"),
    "conv channel mismatch": (lambda: conv(x, randn(16, 4, 3, 3), L2, L2, L2, 1, *F3), "channels"),
    "conv kernel larger than input": (lambda: conv(x, randn(16, 8, 15, 15), Z2, L2, L2, 1, *F3), None),
    "conv int32 tensors": (lambda: conv(x.int(), w.int(), L2, L2, L2, 1, *F3), None),
    "conv int64 tensors": (lambda: conv(x.long(), w.long(), L2, L2, L2, 1, *F3), None),
    "conv mixed dtypes": (lambda: conv(x, w.half(), L2, L2, L2, 1, *F3), None),
    "conv weight on cpu": (lambda: conv(x, w.cpu(), L2, L2, L2, 1, *F3), None),
    "conv input on cpu": (lambda: conv(x.cpu(), w, L2, L2, L2, 1, *F3), None),
    "conv weight 3-d": (lambda: conv(x, w[:, :, 0], L2, L2, L2, 1, *F3), None),
    "conv input 2-d": (lambda: conv(x[0, 0], w, L2, L2, L2, 1, *F3), None),
    "conv float in a list": (lambda: conv(x, w, [1.5, 1], L2, L2, 1, *F3), None),
    "conv None weight": (lambda: conv(x, None, L2, L2, L2, 1, *F3), None),
    "convt padding len 1": (lambda: convt(x, wt, [1], Z2, L2, L2, 1, *F3), "padding"),
    "convt output_padding len 3": (lambda: convt(x, wt, L2, [0, 0, 0], L2, L2, 1, *F3), "padding"),
    "convt stride len 1": (lambda: convt(x, wt, L2, Z2, [2], L2, 1, *F3), "stride"),
    "convt 3-d with lists of 2": (lambda: convt(x5, randn(4, 4, 3, 3, 3), L2, Z2, L2, L2, 1, *F3), "padding"),
    "convt groups 0": (lambda: convt(x, wt, L2, Z2, L2, L2, 0, *F3), "groups"),
    "convt channel mismatch": (lambda: convt(x, randn(4, 6, 3, 3), L2, Z2, L2, L2, 1, *F3), "channels"),
    "convt int32 tensors": (lambda: convt(x.int(), wt.int(), L2, Z2, L2, L2, 1, *F3), None),
    "convt mixed dtypes": (lambda: convt(x, wt.double(), L2, Z2, L2, L2, 1, *F3), None),
    "convt weight on cpu": (lambda: convt(x, wt.cpu(), L2, Z2, L2, L2, 1, *F3), None),
    "bwd stride len 3": (lambda: bwd(go, x, w, None, [1, 1, 1], L2, L2, False, Z2, 1, MASK), "stride"),
    "bwd padding len 3": (lambda: bwd(go, x, w, None, L2, [1, 1, 1], L2, False, Z2, 1, MASK), "padding"),
    "bwd dilation empty": (lambda: bwd(go, x, w, None, L2, L2, [], False, Z2, 1, MASK), "dilation"),
    "bwd groups 0": (lambda: bwd(go, x, w, None, L2, L2, L2, False, Z2, 0, MASK), "groups"),
    "bwd grad_output wrong spatial shape": (lambda: bwd(randn(2, 16, 5, 5), x, w, None, L2, L2, L2, False, Z2, 1, MASK), "grad_output"),
    "bwd grad_output wrong channels": (lambda: bwd(randn(2, 12, 9, 9), x, w, None, L2, L2, L2, False, Z2, 1, MASK), "grad_output"),
    "bwd grad_output wrong batch": (lambda: bwd(randn(3, 16, 9, 9), x, w, None, L2, L2, L2, False, Z2, 1, MASK), "grad_output"),
    "bwd grad_output wrong rank": (lambda: bwd(randn(2, 16, 9), x, w, None, L2, L2, L2, False, Z2, 1, MASK), None),
    "bwd transposed grad_output wrong shape": (lambda: bwd(randn(2, 6, 9, 9), x, wt, None, [2, 2], L2, L2, True, L2, 1, MASK), "grad_output"),
    # One row short of the right [2, 6, 18, 18]: maps back onto the same input under stride 2.
    "bwd transposed grad_output one row short": (lambda: bwd(randn(2, 6, 17, 18), x, wt, None, [2, 2], L2, L2, True, L2, 1, MASK), "grad_output"),
    "bwd int32 tensors": (lambda: bwd(go.int(), x.int(), w.int(), None, L2, L2, L2, False, Z2, 1, MASK), None),
    "bwd mixed dtypes": (lambda: bwd(go.half(), x, w, None, L2, L2, L2, False, Z2, 1, MASK), None),
    "bwd weight on cpu": (lambda: bwd(go, x, w.cpu(), None, L2, L2, L2, False, Z2, 1, MASK), None),
    "bwd output_mask of 2": (lambda: bwd(go, x, w, None, L2, L2, L2, False, Z2, 1, [True, True]), None),
}
# A wrong grad_output shape: stock raises only while its cuDNN plan cache misses
# (its key ignores grad_output's shape, so once the valid call below ran, stock
# runs the wrong one silently on the cached plan). Ours always raise, naming it.

# Valid calls: one-element lists, which ATen's convolution_backward expands.
VALID = {
    "bwd one-element lists": lambda: bwd(go, x, w, [16], [1], [1], [1], False, [0], 1, [True, True, True]),
    "bwd one-element lists, transposed": lambda: bwd(got, x, wt, None, [2], [1], [1], True, [1], 1, MASK),
    "bwd one-element lists, 1-d": lambda: bwd(go1, x1, w1, None, [1], [1], [1], False, [0], 1, MASK),
}
FULL = {
    "bwd one-element lists": lambda: bwd(go, x, w, [16], L2, L2, L2, False, Z2, 1, [True, True, True]),
    "bwd one-element lists, transposed": lambda: bwd(got, x, wt, None, [2, 2], L2, L2, True, L2, 1, MASK),
    "bwd one-element lists, 1-d": lambda: bwd(go1, x1, w1, None, [1], [1], [1], False, [0], 1, MASK),
}


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


summary = {"cases": {}, "valid": {}}


def outcome_of(call):
    try:
        call()
        torch.cuda.synchronize()
        return {"raised": None}
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        return {"raised": type(exc).__name__, "message": str(exc).strip()[:500]}
    except BaseException as exc:
        return {"raised": "unexpected " + type(exc).__name__, "message": str(exc).strip()[:500]}


stock_valid = {name: call() for name, call in VALID.items()}
stock_conv = F.conv2d(x, w, padding=1)
torch.cuda.synchronize()

cudnn.conv_fwd_algo, cudnn.conv_bwd_data_algo, cudnn.conv_bwd_filter_algo = 1, 1, 1
for name, (call, word) in CASES.items():
    print("CASE", name, flush=True)  # the last one printed names a crash
    before = torch_cudnn_algo.diagnostics.pinned_run_counts()
    outcome = outcome_of(call)
    outcome["ran_ours"] = torch_cudnn_algo.diagnostics.pinned_run_counts() != before
    outcome["word"] = word
    summary["cases"][name] = outcome

for name, call in VALID.items():
    print("VALID", name, flush=True)
    before = torch_cudnn_algo.diagnostics.pinned_run_counts()
    ours = call()
    full = FULL[name]()
    after = torch_cudnn_algo.diagnostics.pinned_run_counts()
    torch.cuda.synchronize()
    errors = [None if s is None else rel(o, s) for o, s in zip(ours, stock_valid[name])]
    same_as_full = all((o is None and f is None) or torch.equal(o, f) for o, f in zip(ours, full))
    summary["valid"][name] = {"errors": errors, "same_as_full_lists": same_as_full,
                              "ran": {d: after[d] - before[d] for d in after}}

# The process is still healthy: no sticky CUDA error, pinned convolutions still right.
healthy = F.conv2d(x, w, padding=1)
torch.cuda.synchronize()
summary["healthy_error"] = rel(healthy, stock_conv)
cudnn.conv_fwd_algo = cudnn.conv_bwd_data_algo = cudnn.conv_bwd_filter_algo = None
print("RESULT " + json.dumps(summary), flush=True)
'''

ALLOWED_ERRORS = {"RuntimeError", "ValueError", "TypeError", "IndexError", "NotImplementedError"}


def test_misuse_of_the_aten_ops_raises_clear_errors_never_crashes():
    """Direct aten calls with wrong list lengths, dtypes, devices and shapes while
    every direction is pinned: each raises a Python exception with a message (in a
    subprocess: a SIGFPE/SIGSEGV fails this test, naming the last case), the process
    stays healthy, and valid one-element lists give stock's gradients through our plans."""
    summary = run_child(MISUSE_CHILD)
    problems = []
    for name, outcome in summary["cases"].items():
        raised, message, word = outcome["raised"], outcome.get("message", ""), outcome["word"]
        if outcome["ran_ours"]:
            problems.append(f"{name}: one of our plans ran on it")
        if raised not in ALLOWED_ERRORS:
            problems.append(f"{name}: raised {raised} {message[:200]}")
        elif not message:
            problems.append(f"{name}: {raised} with an empty message")
        elif "cuda error" in message.lower() or "illegal memory access" in message.lower():
            problems.append(f"{name}: a CUDA error instead of an argument check: {message[:200]}")
        elif word is not None and word not in message.lower():
            problems.append(f"{name}: message does not name {word!r}: {message[:300]}")
    assert not problems, "\n".join(problems)
    for name, valid in summary["valid"].items():
        assert all(e is None or e <= 1e-5 for e in valid["errors"]), (name, valid)
        assert valid["same_as_full_lists"], (name, valid)
        data = "fwd" if "transposed" in name else "bwd_data"
        # Two calls each (one-element and full lists), both through our plans.
        assert valid["ran"][data] == 2 and valid["ran"]["bwd_filter"] == 2, (name, valid)
    assert summary["healthy_error"] <= 1e-5, summary["healthy_error"]
