"""GPU: the "fastest" policy's C++ tuner and the per-thread selection memo.

Checked against what we did not write: stock PyTorch's own output (pinning the
configuration the tuner names as stock's must reproduce it bit for bit) and a
float64 reference (the pick's output); the memo against the contract's rules
(a later strict flag, workspace limit or choice must take effect at once)."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import torch_cudnn_algo
from conv_cases import ConvForm, reference, reference_grads, relative_error
from torch_cudnn_algo._algorithms import DIRECTIONS

pytestmark = pytest.mark.gpu

cudnn = torch.backends.cudnn
FLAG = {key: spec.flag for key, spec in DIRECTIONS.items()}
# A ResNet-style layer: enough work for engines to differ.
FORM = ConvForm("tuner", (16, 64, 28, 28), (64, 64, 3, 3), padding=1)


def operands(dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    fmt = torch.channels_last

    def randn(shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).cuda().contiguous(memory_format=fmt)

    return randn(FORM.input_shape), randn(FORM.weight_shape), randn((16, 64, 28, 28))


def run_direction(direction, x, w, grad):
    if direction == "fwd":
        return torch.nn.functional.conv2d(x, w, padding=1)
    mask = [direction == "bwd_data", direction == "bwd_filter", False]
    out = torch.ops.aten.convolution_backward(grad, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)
    return out[0] if direction == "bwd_data" else out[1]


def float64_result(direction, x, w, grad):
    if direction == "fwd":
        return reference(FORM, x, w)
    gx, gw = reference_grads(FORM, x, w, grad)
    return gx if direction == "bwd_data" else gw


@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_tuner_pick_matches_float64_and_never_loses_to_stocks_config(direction, deterministic):
    x, w, grad = operands()
    with torch.backends.cudnn.flags(enabled=True, deterministic=deterministic):
        stock = run_direction(direction, x, w, grad)
        with torch_cudnn_algo.flags(**{FLAG[direction]: "fastest"}):
            picked = run_direction(direction, x, w, grad)
            again = run_direction(direction, x, w, grad)
        log = torch_cudnn_algo.diagnostics.tuning_log()
        assert len(log) == 1, log
        entry = log[0]
        assert entry["direction"] == direction and entry["deterministic"] == deterministic
        assert entry["candidates"] >= 2 and entry["timed"] >= 2 and entry["seconds"] < 30
        # Stock's configuration, pinned, is stock: same kernel, same bits.
        with torch_cudnn_algo.flags(**{FLAG[direction]: entry["stock_config"], "conv_algo_strict": True}):
            assert torch.equal(run_direction(direction, x, w, grad), stock)
        if entry["pick"] is not None and entry["pick"] != entry["stock_config"]:
            assert entry["pick_ms"] < entry["stock_config_ms"], entry
            # No less accurate than stock's configuration on the same operands.
            tolerance = torch_cudnn_algo.TOLERANCES["float16"]
            assert entry["stock_config_max_rel_error"] is not None, entry
            bound = 2 * entry["stock_config_max_rel_error"] + tolerance
            assert entry["max_rel_error_bound"] == pytest.approx(bound, rel=1e-5)  # the log prints 6 digits
            assert entry["max_rel_error"] <= entry["max_rel_error_bound"], entry
        assert_breakdown(entry)
        if deterministic and entry["pick"] is not None:
            # The rules' view of the pick: pinned strictly, it must be allowed.
            with torch_cudnn_algo.flags(**{FLAG[direction]: entry["pick"], "conv_algo_strict": True}):
                run_direction(direction, x, w, grad)
    expected = float64_result(direction, x, w, grad)
    assert relative_error(picked, expected) < 1e-2
    assert torch.equal(picked, again)


def assert_breakdown(entry):
    """Where a tuning's time went, and what it built, add up."""
    phases = entry["time_s"]
    assert set(phases) == {"heuristics", "build", "build_sum", "wait", "operands", "warmup", "timing", "accuracy",
                           "knob_search"}, phases
    assert all(value >= 0 for value in phases.values()), phases
    # Built ahead (tune()), the heuristics query and the builds ran before the tuning's own time.
    ahead = ("heuristics", "build") if entry["prepared_ahead"] else ()
    own = sum(value for name, value in phases.items() if name not in ("build_sum", *ahead))
    assert own <= entry["seconds"] + 1e-3, entry
    configs = entry["configs"]
    by_name = {c["config"]: c for c in configs}
    assert entry["stock_config"] in by_name and by_name[entry["stock_config"]]["rank"] == min(
        c["rank"] for c in configs if c["runnable"] and c["rank"] >= 0)
    if entry["pick"] is not None:
        assert by_name[entry["pick"]]["runnable"] and by_name[entry["pick"]]["ms"] is not None
    assert all((c["ms"] is None) == (c["host_us"] is None) for c in configs)
    if entry["pick"] not in (None, entry["stock_config"]):
        # The launch-cost trade (design.md, "fastest"): beyond 10% + 2 µs more host time per
        # call, a pick saves at least twice the host time it adds in GPU time.
        pick, stock = by_name[entry["pick"]], by_name[entry["stock_config"]]
        host_added_us = pick["host_us"] - (stock["host_us"] * 1.10 + 2.0)
        gpu_saved_us = (stock["ms"] - pick["ms"]) * 1e3
        assert host_added_us <= 0 or gpu_saved_us >= 2 * host_added_us * (1 - 1e-4), entry
    # Timed batches: the probes, the near ones' further calls and the finalists, each's late calls
    # timed again at most twice.
    assert 0 <= entry["retimed_batches"] <= 2 * 3 + 2 * entry["knob_configs"], entry
    probed = [c for c in configs if c["probe"] is not None]
    assert entry["probed"] == len(probed) and all(c["ms"] is not None for c in probed), entry
    # Every candidate timed in the first round was probed first (knob-search ones are not).
    assert all(c["probe"] is not None for c in configs if c["ms"] is not None and c["rank"] >= 0), entry
    # Only near ones are finalists, so a pick other than stock's configuration was near.
    if entry["pick"] not in (None, entry["stock_config"]) and by_name[entry["pick"]]["rank"] >= 0:
        assert by_name[entry["pick"]]["probe"] == "near", entry
    assert all(c["source"] in ("heuristics_a", "heuristics_b", "fallback", "kernel") for c in configs if c["rank"] >= 0)
    tried = [c for c in configs if c["build_s"] is not None]
    built = [c for c in tried if not c["cached"]]
    assert entry["built"] == len(built) and entry["built_rtc"] == sum(c["rtc"] for c in built)
    assert entry["deferred_rtc"] == sum(c["rtc"] and c["build_s"] is None for c in configs)
    assert all(c["build_s"] is not None for c in configs if c["runnable"])
    listed = [c for c in tried if c["rank"] >= 0]  # knob-search builds count as knob_search
    assert phases["build_sum"] == pytest.approx(sum(c["build_s"] for c in listed), rel=1e-3, abs=1e-3)


def test_tune_builds_every_configuration_ahead_then_times_each():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, stride=2, padding=1),
        torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1, groups=32),
    ).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(8, 16, 32, 32, device="cuda").to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.float16):
        plan = torch_cudnn_algo.tune(model, x, progress=False)
    log = torch_cudnn_algo.diagnostics.tuning_log()
    assert len(log) == len(plan) == 8, log
    for entry in log:
        assert entry["prepared_ahead"], entry
        assert_breakdown(entry)
        assert entry["time_s"]["build"] > 0  # in the background threads
    picks = {entry["pick"] for entry in log}
    assert all(planned.choice in picks for planned in plan.entries.values()), (plan, log)


# Backend knob types (cudnnBackendKnobType_t) that cudnn_frontend's KnobType_t has
# no word for (SPLIT_K, USE_TEX, KBLOCK, LDGA, LDGB, CHUNK_K, SPLIT_H, WINO_TILE,
# CTA_SPLIT_K_MODE, SLICED, SPLIT_RS, SINGLEBUFFER, LDGC), which cuDNN's older
# engines still name: the frontend refuses every configuration carrying one.
FRONTEND_UNNAMED_KNOBS = {0, 3, 5, 6, 7, 8, 9, 10, 16, 19, 20, 21, 22}


def test_configurations_with_knobs_the_frontend_cannot_name_build_without_a_heuristics_query():
    # RegNetY's grouped 3x3 layer (group width 24), where cuDNN ranks such engines.
    gen = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=gen).half().cuda().contiguous(memory_format=torch.channels_last)

    x, w, grad = randn(16, 48, 56, 56), randn(48, 24, 3, 3), randn(16, 48, 56, 56)
    mask = [True, True, False]

    def step():
        out = torch.nn.functional.conv2d(x, w, padding=1, groups=2)
        dx, dw, _ = torch.ops.aten.convolution_backward(grad, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 2,
                                                        mask)
        return {"fwd": out, "bwd_data": dx, "bwd_filter": dw}

    stock = step()
    before = torch_cudnn_algo.diagnostics.execution_plan_counts()
    with torch_cudnn_algo.flags(conv_fwd_algo="fastest", conv_bwd_data_algo="fastest",
                                conv_bwd_filter_algo="fastest"):
        step()
    after = torch_cudnn_algo.diagnostics.execution_plan_counts()
    log = torch_cudnn_algo.diagnostics.tuning_log()
    assert sorted(entry["direction"] for entry in log) == sorted(DIRECTIONS), log

    def unnamed(config):
        return {int(knob) for knob in re.findall(r"_k(\d+)=", config)} & FRONTEND_UNNAMED_KNOBS

    named = {entry["direction"]: [c["config"] for c in entry["configs"] if c["runnable"] and unnamed(c["config"])]
             for entry in log}
    if not any(named.values()):
        pytest.fail("cuDNN lists no runnable configuration with the frontend's unnamed knobs for the test's "
                    "grouped layer; the test needs one")
    # Every candidate was built from its name: none needed a heuristics query.
    assert after["built"] > before["built"]
    assert after["built_by_heuristics"] == before["built_by_heuristics"], (named, before, after)
    for entry in log:
        direction = entry["direction"]
        # Stock's configuration, built from its name and pinned, is stock's: same bits.
        with torch_cudnn_algo.flags(**{FLAG[direction]: entry["stock_config"], "conv_algo_strict": True}):
            assert torch.equal(step()[direction], stock[direction]), entry["stock_config"]
        for config in named[direction]:
            with torch_cudnn_algo.flags(**{FLAG[direction]: config, "conv_algo_strict": True}):
                assert relative_error(step()[direction], stock[direction]) < 1e-2, config


def test_knob_search_tries_configurations_beyond_the_heuristics():
    x, w, grad = operands(seed=1)
    with torch_cudnn_algo.flags(conv_fwd_algo="fastest", conv_knob_search=True):
        out = run_direction("fwd", x, w, grad)
    (entry,) = torch_cudnn_algo.diagnostics.tuning_log()
    assert entry["knob_configs"] > 0, entry
    assert_breakdown(entry)
    assert entry["time_s"]["knob_search"] > 0
    assert relative_error(out, float64_result("fwd", x, w, grad)) < 1e-2
    if entry["pick"] is not None and entry["pick"] != entry["stock_config"]:
        assert entry["pick_ms"] < entry["stock_config_ms"], entry


def test_fastest_on_float64_under_a_zero_workspace_limit_matches_stock():
    # float64 under a zero workspace limit: few configurations qualify; whatever
    # the tuner decides (a pick, or none), the output is stock's to fp64 precision.
    x = torch.randn(2, 4, 9, 9, dtype=torch.float64, device="cuda")
    w = torch.randn(6, 4, 3, 3, dtype=torch.float64, device="cuda")
    stock = torch.nn.functional.conv2d(x, w)
    with torch_cudnn_algo.flags(conv_fwd_algo="fastest", conv_workspace_limit=0):
        out = torch.nn.functional.conv2d(x, w)
    torch.testing.assert_close(out, stock, rtol=1e-10, atol=1e-10)
    assert len(torch_cudnn_algo.diagnostics.tuning_log()) == 1


def test_memo_follows_a_later_strict_flag():
    x, w, grad = operands(seed=2)
    with torch.backends.cudnn.flags(enabled=True, deterministic=True):
        cudnn.conv_bwd_filter_algo = 0  # non-deterministic: refused, stock runs
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_direction("bwd_filter", x, w, grad)
            run_direction("bwd_filter", x, w, grad)
        assert sum("cannot run this convolution" in str(c.message) for c in caught) == 1
        cudnn.conv_algo_strict = True
        with pytest.raises(RuntimeError, match="non-deterministic"):
            run_direction("bwd_filter", x, w, grad)


def test_memo_follows_a_later_workspace_limit_and_choice():
    x, w, grad = operands(seed=3)
    needing = [c for c in torch_cudnn_algo.list_algorithms("fwd", x, w, padding=1)
               if c.ok and c.kind == "engine" and c.workspace]
    if not needing:
        pytest.fail("cuDNN lists no runnable engine configuration with workspace for the test's layer; the test "
                    "needs one")
    cudnn.conv_fwd_algo = needing[0].value
    before = torch_cudnn_algo.diagnostics.pinned_run_counts()["fwd"]
    run_direction("fwd", x, w, grad)
    assert torch_cudnn_algo.diagnostics.pinned_run_counts()["fwd"] == before + 1
    cudnn.conv_workspace_limit = 0
    with pytest.warns(UserWarning, match="over torch.backends.cudnn.conv_workspace_limit"):
        run_direction("fwd", x, w, grad)
    assert torch_cudnn_algo.diagnostics.pinned_run_counts()["fwd"] == before + 1  # stock ran
    cudnn.conv_workspace_limit = None
    cudnn.conv_fwd_algo = None
    run_direction("fwd", x, w, grad)
    assert torch_cudnn_algo.diagnostics.pinned_run_counts()["fwd"] == before + 1


def test_backward_follows_cudnn_being_disabled_later():
    x, w, grad = operands(dtype=torch.float32, seed=4)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    with torch_cudnn_algo.flags(conv_bwd_data_algo=1, conv_bwd_filter_algo=1):
        before = torch_cudnn_algo.diagnostics.pinned_run_counts()
        torch.nn.functional.conv2d(xg, wg, padding=1).backward(grad)
        after = torch_cudnn_algo.diagnostics.pinned_run_counts()
        assert after["bwd_data"] == before["bwd_data"] + 1 and after["bwd_filter"] == before["bwd_filter"] + 1
        xg.grad = wg.grad = None
        with torch.backends.cudnn.flags(enabled=False):
            torch.nn.functional.conv2d(xg, wg, padding=1).backward(grad)
        assert torch_cudnn_algo.diagnostics.pinned_run_counts() == after  # not cuDNN: ATen's own kernels
    gx, gw = reference_grads(FORM, x, w, grad)
    assert relative_error(xg.grad, gx) < 1e-4 and relative_error(wg.grad, gw) < 1e-4


def cuda_kernel_names(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    fn()  # warm: plans built, nothing lazy left
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_pinned_call_fills_no_more_memory_than_stock_under_deterministic_algorithms(direction):
    # use_deterministic_algorithms fills at::empty's memory with NaN; stock's cuDNN
    # outputs skip that fill and ours must too (it cost 1 ms per ResNet-50 step).
    x, w, grad = operands(seed=5)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        stock = cuda_kernel_names(lambda: run_direction(direction, x, w, grad))
        config = next(c.name for c in torch_cudnn_algo.diagnostics.engine_configs(direction, x, w, padding=1,
                                                                                  deterministic=True)
                      if c.source == "heuristics_a" and c.refusal is None)
        with torch_cudnn_algo.flags(**{FLAG[direction]: config, "conv_algo_strict": True}):
            pinned = cuda_kernel_names(lambda: run_direction(direction, x, w, grad))
    finally:
        torch.use_deterministic_algorithms(previous)

    def fills(names):
        return sum("FillFunctor" in name for name in names)

    assert fills(pinned) <= fills(stock), (pinned, stock)


def depthwise_layer(kernel: int, seed: int) -> tuple[torch.nn.Conv2d, torch.Tensor, torch.Tensor]:
    """A depthwise layer as in MobileNetV3 (fp16, channels-last), where cuDNN's configurations
    are runtime-compiled: the layer, its input, and stock's output."""
    gen = torch.Generator().manual_seed(seed)
    conv = torch.nn.Conv2d(120, 120, kernel, padding=kernel // 2, groups=120, bias=False)
    conv = conv.cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn((64, 120, 28, 28), generator=gen).half().cuda().contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        return conv, x, conv(x)


def assert_stocks_bits_and_close(conv, x, stock, stock_config: str, configs: list[str]) -> None:
    """Pinned, stock's configuration gives stock's bits, and each of `configs` is close to them."""
    with torch.no_grad():
        with torch_cudnn_algo.flags(conv_fwd_algo=stock_config, conv_algo_strict=True):
            assert torch.equal(conv(x), stock), stock_config
        for config in configs:
            with torch_cudnn_algo.flags(conv_fwd_algo=config, conv_algo_strict=True):
                assert relative_error(conv(x), stock) < 1e-2, config


@pytest.mark.parametrize("kernel", [3, 5])
def test_runtime_compiled_plans_from_compile_workers_run_stocks_bits(monkeypatch, kernel):
    # Every runtime-compiled build goes to a worker process.
    monkeypatch.setenv("TORCH_CUDNN_ALGO_COMPILE_WORKERS", "2")
    monkeypatch.setenv("TORCH_CUDNN_ALGO_COMPILE_HERE", "0")
    torch_cudnn_algo.clear_cache()
    conv, x, stock = depthwise_layer(kernel, seed=kernel)
    ops = torch_cudnn_algo._ops
    before = dict(ops.compile_worker_counts())
    plan = torch_cudnn_algo.tune(conv, x, directions=("fwd",), progress=False)
    after = dict(ops.compile_worker_counts())
    (entry,) = torch_cudnn_algo.diagnostics.tuning_log()
    compiled = [c["config"] for c in entry["configs"] if c["rtc"] and c["build_s"] is not None and c["runnable"]]
    if not compiled:
        pytest.fail("cuDNN lists no runtime-compiled configuration that built and ran for the depthwise layer; "
                    "the test needs one")
    assert after["ready"] > before["ready"], (before, after)
    assert after["failed_builds"] == before["failed_builds"], (before, after)
    assert after["builds"] - before["builds"] >= len(compiled), (compiled, before, after)
    assert all(planned.execution_plan is not None for planned in plan.entries.values()), plan
    built = torch_cudnn_algo.diagnostics.execution_plan_counts()["built"]
    assert_stocks_bits_and_close(conv, x, stock, entry["stock_config"], compiled)  # as the worker built them
    # The workers' plans ran, none rebuilt here.
    assert torch_cudnn_algo.diagnostics.execution_plan_counts()["built"] == built


def test_runtime_compiled_plans_are_saved_and_a_later_tune_loads_them(monkeypatch, tmp_path):
    # What a later process tuning the same layer finds (csrc/store/execution_plan_cache.h, kept in
    # the tuning database):
    # the plans compiled here, loaded instead of compiled; stock's configuration,
    # loaded, still gives stock's bits; a corrupt file is ignored and rebuilt.
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path))
    monkeypatch.setenv("TORCH_CUDNN_ALGO_COMPILE_WORKERS", "0")  # every compile here
    conv, x, stock = depthwise_layer(3, seed=7)
    ops = torch_cudnn_algo._ops

    def tune_afresh() -> tuple[dict, dict]:
        torch_cudnn_algo.clear_cache()  # this process forgets its plans, as a new one has none
        before = dict(ops.execution_plan_cache_counts())
        torch_cudnn_algo.tune(conv, x, directions=("fwd",), progress=False, retune=True)
        (entry,) = torch_cudnn_algo.diagnostics.tuning_log()
        after = dict(ops.execution_plan_cache_counts())
        return entry, {name: after[name] - before[name] for name in after}

    entry, first = tune_afresh()
    compiled = [c["config"] for c in entry["configs"] if c["rtc"] and c["build_s"] is not None and c["runnable"]]
    if not compiled:
        pytest.fail("cuDNN lists no runtime-compiled configuration that built and ran for the depthwise layer; "
                    "the test needs one")
    files = sorted(tmp_path.glob("*.plan"))
    assert first["saved"] >= len(compiled) and len(files) >= len(compiled), (first, files)
    assert first["loaded"] == 0 and first["rejected"] == 0 and first["save_failed"] == 0, first

    built = torch_cudnn_algo.diagnostics.execution_plan_counts()["built"]
    entry, second = tune_afresh()
    assert second["loaded"] >= len(compiled) and second["saved"] == 0, second
    rebuilt = torch_cudnn_algo.diagnostics.execution_plan_counts()["built"] - built
    assert rebuilt <= len(entry["configs"]) - len(compiled), (rebuilt, entry["configs"])
    assert_stocks_bits_and_close(conv, x, stock, entry["stock_config"], compiled)  # as loaded from disk

    for file in files:  # the last bytes of each blob flipped: its checksum no longer holds
        data = bytearray(file.read_bytes())
        data[-8:] = bytes(b ^ 0xFF for b in data[-8:])
        file.write_bytes(bytes(data))
    entry, third = tune_afresh()
    assert third["rejected"] >= len(compiled) and third["loaded"] == 0, third
    assert third["saved"] >= len(compiled), third  # compiled again and saved over the corrupt ones
    assert entry["pick"] is not None


# Grouped convolutions where heuristics A leaves cuDNN's fastest engines out
# (benchmarks/results/kernels-h200-2026-11-28-depthwise.md): RegNetY's 24 channels per group, and an
# EfficientNet depthwise 5x5.
GROUPED_FORMS = [
    ConvForm("regnety g5", (16, 120, 28, 28), (120, 24, 3, 3), padding=1, groups=5),
    ConvForm("regnety g14", (16, 336, 14, 14), (336, 24, 3, 3), padding=1, groups=14),
    ConvForm("regnety g37 s2", (16, 888, 14, 14), (888, 24, 3, 3), stride=2, padding=1, groups=37),
]
DEPTHWISE_FORM = ConvForm("efficientnet dw5x5 s2", (16, 144, 56, 56), (144, 1, 5, 5), stride=2, padding=2,
                          groups=144)


def run_form(form, direction, x, w, grad):
    if direction == "fwd":
        return form.conv(x, w)
    mask = [direction == "bwd_data", direction == "bwd_filter", False]
    out = torch.ops.aten.convolution_backward(grad, x, w, None, [form.stride] * 2, [form.padding] * 2,
                                              [form.dilation] * 2, False, [0, 0], form.groups, mask)
    return out[0] if direction == "bwd_data" else out[1]


def form_operands(form, dtype=torch.float16):
    gen = torch.Generator().manual_seed(0)

    def randn(shape):
        t = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).cuda()
        return t.contiguous(memory_format=torch.channels_last)

    x, w = randn(form.input_shape), randn(form.weight_shape)
    meta = form.conv(torch.empty(form.input_shape, device="meta"), torch.empty(form.weight_shape, device="meta"))
    return x, w, randn(tuple(meta.shape))


def replay_probe_rule(tuned):
    """Checks (form, log entry) pairs in tuning order against the wide search's rule: a tuning
    does not probe an engine on a kind of convolution (direction, depthwise or not, dtype) once
    two of its earlier probes there were far from the best and none near. Our own kernel is
    probed on every tuning (its speed against cuDNN's turns on the shape): no record."""
    record = {}
    for form, entry in tuned:
        kind = (entry["direction"], form.groups == form.input_shape[1], entry["dtype"])
        probes = [(re.match(r"(eng\d+)", c["config"]).group(1), c["probe"]) for c in entry["configs"]
                  if c["probe"] is not None and c["extra"]]
        for engine, _ in probes:
            far, near = record.get((kind, engine), (0, 0))
            assert near > 0 or far < 2, (engine, form.name, entry)
        for engine, probe in probes:
            far, near = record.get((kind, engine), (0, 0))
            record[(kind, engine)] = (far + (probe == "far"), near + (probe == "near"))


def tune_forms(forms, direction):
    """Tunes `direction` of each form under "fastest"; checks the pick against float64 and stock's
    configuration against stock's bits; returns the (form, log entry) pairs."""
    tuned = []
    with torch.backends.cudnn.flags(enabled=True):
        for form in forms:
            x, w, grad = form_operands(form)
            stock = run_form(form, direction, x, w, grad)
            with torch_cudnn_algo.flags(**{FLAG[direction]: "fastest"}):
                picked = run_form(form, direction, x, w, grad)
            entry = torch_cudnn_algo.diagnostics.tuning_log()[-1]
            assert_breakdown(entry)
            by_name = {c["config"]: c for c in entry["configs"]}
            assert not by_name[entry["stock_config"]]["extra"], entry
            with torch_cudnn_algo.flags(**{FLAG[direction]: entry["stock_config"], "conv_algo_strict": True}):
                assert torch.equal(run_form(form, direction, x, w, grad), stock)
            if direction == "fwd":
                expected = reference(form, x, w)
            else:
                gx, gw = reference_grads(form, x, w, grad)
                expected = gx if direction == "bwd_data" else gw
            assert relative_error(picked, expected) < 1e-2, (form.name, entry)
            tuned.append((form, entry))
    assert [entry for _, entry in tuned] == torch_cudnn_algo.diagnostics.tuning_log()
    replay_probe_rule(tuned)
    return tuned


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_wide_search_probes_the_fallback_list_on_grouped_convolutions(direction):
    """By default grouped convolutions that are not depthwise also try the fallback list's
    configurations (runtime-compiled ones within the compile budget), each probed once first;
    heuristics B stays unasked. A form may have no extras left: the process's record skips an
    engine that was far from the best on two convolutions of the kind (replayed in tune_forms)."""
    before = torch_cudnn_algo.diagnostics.execution_plan_counts()
    tuned = tune_forms(GROUPED_FORMS, direction)
    extras = [c for _, entry in tuned for c in entry["configs"] if c["extra"]]
    assert extras and {c["source"] for c in extras} == {"fallback"}, tuned
    for _, entry in tuned:
        # One runtime compilation beyond stock's configuration, A's first round's or an extra's.
        first_round = [c for c in entry["configs"] if c["rank"] >= 0 and c["config"] != entry["stock_config"]]
        assert sum(c["rtc"] and c["build_s"] is not None for c in first_round) <= 1, entry
        assert "heuristics_b" not in {c["source"] for c in entry["configs"]}, entry
    # Extras build from their names: no heuristics query.
    assert torch_cudnn_algo.diagnostics.execution_plan_counts()["built_by_heuristics"] == before["built_by_heuristics"]


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_wide_search_two_adds_heuristics_b_and_depthwise_convolutions(direction, monkeypatch):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_TUNE_WIDE", "2")
    tuned = tune_forms([DEPTHWISE_FORM, *GROUPED_FORMS[:1]], direction)
    sources = {c["source"] for _, entry in tuned for c in entry["configs"] if c["extra"]}
    assert "heuristics_b" in sources and sources <= {"heuristics_b", "fallback"}, tuned


def test_wide_search_stays_off_for_dense_and_depthwise_convolutions_and_when_turned_off(monkeypatch):
    x, w, grad = operands()
    with torch.backends.cudnn.flags(enabled=True), torch_cudnn_algo.flags(conv_fwd_algo="fastest"):
        run_direction("fwd", x, w, grad)
    (dense,) = torch_cudnn_algo.diagnostics.tuning_log()
    torch_cudnn_algo.clear_cache()
    (depthwise,) = [entry for _, entry in tune_forms([DEPTHWISE_FORM], "fwd")]
    torch_cudnn_algo.clear_cache()
    monkeypatch.setenv("TORCH_CUDNN_ALGO_TUNE_WIDE", "0")
    (grouped,) = [entry for _, entry in tune_forms(GROUPED_FORMS[:1], "fwd")]
    for entry in (dense, depthwise, grouped):
        assert not any(c["extra"] for c in entry["configs"]), entry
        assert "heuristics_b" not in {c["source"] for c in entry["configs"]}, entry
