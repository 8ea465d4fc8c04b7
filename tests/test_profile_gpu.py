"""GPU: list_algorithms agrees with what runs; profile() returns a row per
candidate with sane numbers and gives memory back; the "fastest" policy picks a
candidate whose output matches a float64 reference, honours determinism and the
workspace limit, and never profiles during CUDA graph capture; conv_profile
logs the table before the seed's line."""

from __future__ import annotations

import gc
import logging

import pytest
import torch

import torch_cudnn_algo
from conv_cases import ConvForm, reference, reference_grads, relative_error
from torch_cudnn_algo import _ops, _profile
from torch_cudnn_algo._algorithms import DIRECTIONS

pytestmark = pytest.mark.gpu

cudnn = torch.backends.cudnn
FLAG = {key: spec.flag for key, spec in DIRECTIONS.items()}
# A small convolution every direction has many candidates for.
INPUT = "4x16x12x12 float16 channels_last"
WEIGHT = "32x16x3x3 float16 channels_last"
CONV = dict(stride=1, padding=1)
FORM = ConvForm("profile", (4, 16, 12, 12), (32, 16, 3, 3), padding=1)


def make_tensors(dtype=torch.float16, fmt=torch.channels_last, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 16, 12, 12, generator=gen, dtype=torch.float64).to(dtype).cuda().contiguous(memory_format=fmt)
    w = torch.randn(32, 16, 3, 3, generator=gen, dtype=torch.float64).to(dtype).cuda().contiguous(memory_format=fmt)
    return x, w


def run_direction(direction: str, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    if direction == "fwd":
        return torch.nn.functional.conv2d(x, w, **CONV)
    mask = [direction == "bwd_data", direction == "bwd_filter", False]
    out = torch.ops.aten.convolution_backward(grad, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)
    return out[0] if direction == "bwd_data" else out[1]


def float64_result(direction: str, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    if direction == "fwd":
        return reference(FORM, x, w)
    gx, gw = reference_grads(FORM, x, w, grad)
    return gx if direction == "bwd_data" else gw


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_list_algorithms_agrees_with_what_runs(direction):
    x, w = make_tensors()
    listed = torch_cudnn_algo.list_algorithms(direction, INPUT, WEIGHT, **CONV)
    from_tensors = torch_cudnn_algo.list_algorithms(direction, x, w, **CONV)
    assert [(c.value, c.status, c.workspace) for c in listed] == [
        (c.value, c.status, c.workspace) for c in from_tensors]
    assert sum(c.ok for c in listed) >= 5, listed
    grad = torch.randn(4, 32, 12, 12, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    expected = float64_result(direction, x, w, grad)
    cudnn.conv_algo_strict = True
    for candidate in listed:
        setattr(cudnn, FLAG[direction], candidate.value)
        if candidate.ok:
            out = run_direction(direction, x, w, grad)
            assert relative_error(out, expected) < 2e-2, candidate
        else:
            with pytest.raises(RuntimeError, match="cannot run this convolution"):
                run_direction(direction, x, w, grad)
    setattr(cudnn, FLAG[direction], None)


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_profile_has_a_row_per_candidate_and_returns_memory(direction):
    listed = torch_cudnn_algo.list_algorithms(direction, INPUT, WEIGHT, **CONV)
    gc.collect()  # tensors of earlier tests held in reference cycles would be freed inside profile()
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    table = torch_cudnn_algo.profile(direction, INPUT, WEIGHT, **CONV, reps=5, energy=False)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == baseline
    assert sorted(map(str, (r.value for r in table))) == sorted(map(str, [c.value for c in listed] + [None]))
    ok = [r for r in table if r.ok]
    assert len(ok) >= 6  # the runnable candidates and stock
    for row in ok:
        assert row.time_ms > 0 and row.max_rel_error < 2e-2, row
    # Sorted by time, failures last; runnable candidates in the listing ran.
    times = [r.time_ms for r in ok]
    assert times == sorted(times) and table.rows[: len(ok)] == ok
    listed_ok = {c.value for c in listed if c.ok}
    assert listed_ok <= {r.value for r in ok}
    stock = table.stock
    assert stock is not None and stock.ok
    text = str(table)
    assert text.splitlines()[1].startswith("flag value") and "None (stock)" in text


def test_profile_reports_energy_where_nvml_has_a_counter():
    if torch_cudnn_algo.energy.unavailable() is not None:
        pytest.fail(f"energy cannot be measured here ({torch_cudnn_algo.energy.unavailable()}); the test needs it")
    settings = torch_cudnn_algo.energy.EnergySettings(window_s=0.5, rounds=2, warmup=None)
    table = torch_cudnn_algo.profile("fwd", "32x64x28x28 float16 channels_last", "64x64x3x3 float16 channels_last",
                                     padding=1, reps=5, energy=settings, energy_within=None, energy_candidates=2)
    energies = [r.energy_j for r in table if r.energy_j is not None]
    assert len(energies) == 3 and all(0 < e < 10 for e in energies), str(table)  # stock and 2 candidates
    # Without energy=..., none is measured: it costs seconds per candidate.
    assert all(r.energy_j is None for r in torch_cudnn_algo.profile("fwd", INPUT, WEIGHT, **CONV, reps=3))


def test_out_of_memory_marks_the_candidate_and_profiling_goes_on(monkeypatch):
    listed = [c for c in torch_cudnn_algo.list_algorithms("fwd", INPUT, WEIGHT, **CONV) if c.ok]
    victim = listed[0].value
    real = _profile._Operands.candidate

    def candidate(self, value, execute):
        if execute and value == victim:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, value, execute)

    monkeypatch.setattr(_profile._Operands, "candidate", candidate)
    table = torch_cudnn_algo.profile("fwd", INPUT, WEIGHT, **CONV, reps=3, energy=False)
    assert table.row(victim).status == "out of memory"
    assert sum(r.ok for r in table) >= 5


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_fastest_policy_matches_reference_and_logs_its_pick(direction, caplog):
    x, w = make_tensors(seed=3)
    grad = torch.randn(4, 32, 12, 12, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    expected = float64_result(direction, x, w, grad)
    setattr(cudnn, FLAG[direction], "fastest")
    with caplog.at_level(logging.INFO, logger="torch_cudnn_algo"):
        out = run_direction(direction, x, w, grad)
        again = run_direction(direction, x, w, grad)
    assert relative_error(out, expected) < 1e-2
    assert relative_error(again, expected) < 1e-2
    assert _ops.profile_decision_count() == 1
    picks = [r.getMessage() for r in caplog.records if f"requested {direction} algorithm fastest -> " in r.getMessage()]
    assert len(picks) == 1, [r.getMessage() for r in caplog.records]


def test_fastest_policy_honours_determinism_and_the_workspace_limit(caplog):
    x, w = make_tensors(seed=4)
    grad = torch.randn(4, 32, 12, 12, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    cudnn.conv_bwd_filter_algo = "fastest"
    cudnn.conv_workspace_limit = 0
    with torch.backends.cudnn.flags(enabled=True, deterministic=True), \
            caplog.at_level(logging.DEBUG, logger="torch_cudnn_algo"):
        run_direction("bwd_filter", x, w, grad)
    lines = [r.getMessage() for r in caplog.records]
    picks = [line for line in lines if "requested bwd_filter algorithm fastest -> " in line]
    table = torch_cudnn_algo.profile("bwd_filter", INPUT, WEIGHT, **CONV, deterministic=True,
                                     workspace_limit=0, reps=3, energy=False)
    assert all(r.status == "over workspace limit" for r in table if r.workspace and r.value is not None)
    if not picks:  # nothing deterministic runs without workspace: stock ran
        assert table.fastest(deterministic=True, workspace_limit=0) is None
        return
    value = picks[0].split("fastest -> ")[1].split(" is set")[0]
    value = int(value.split(" ")[0]) if value[0].isdigit() else value
    row = table.row(value)
    assert row.deterministic and row.workspace == 0


def test_pinned_choice_over_the_workspace_limit_is_refused():
    x, w = make_tensors(seed=5)
    needing = [c for c in torch_cudnn_algo.list_algorithms("fwd", x, w, **CONV) if c.ok and c.workspace]
    if not needing:
        pytest.fail("every candidate runs the test's convolution without workspace; the test needs one with "
                    "workspace")
    choice = needing[0]
    cudnn.conv_fwd_algo = choice.value
    cudnn.conv_workspace_limit = choice.workspace - 1
    with pytest.warns(UserWarning, match="over torch.backends.cudnn.conv_workspace_limit"):
        out = torch.nn.functional.conv2d(x, w, **CONV)
    cudnn.conv_fwd_algo = None
    assert torch.equal(out, torch.nn.functional.conv2d(x, w, **CONV))  # stock ran
    cudnn.conv_fwd_algo = choice.value
    cudnn.conv_algo_strict = True
    torch_cudnn_algo.clear_cache()
    with pytest.raises(RuntimeError, match="over torch.backends.cudnn.conv_workspace_limit"):
        torch.nn.functional.conv2d(x, w, **CONV)
    cudnn.conv_workspace_limit = choice.workspace
    torch.nn.functional.conv2d(x, w, **CONV)  # exactly the limit is allowed


def test_conv_profile_logs_the_table_then_the_seed_line(caplog):
    x, w = make_tensors(seed=6)
    cudnn.conv_fwd_algo = 1
    cudnn.conv_profile = True
    with caplog.at_level(logging.INFO, logger="torch_cudnn_algo"):
        torch.nn.functional.conv2d(x, w, **CONV)
        torch.nn.functional.conv2d(x, w, **CONV)  # not profiled again
    lines = [r.getMessage() for r in caplog.records]
    tables = [i for i, line in enumerate(lines) if line.startswith("cuDNN fwd candidates for conv2d")]
    seed = [i for i, line in enumerate(lines) if "requested fwd algorithm 1 (IMPLICIT_PRECOMP_GEMM) is set" in line]
    assert len(tables) == 1 and len(seed) == 1 and tables[0] < seed[0], lines


def test_conv_profile_without_a_pinned_choice_profiles_and_runs_stock(caplog):
    x, w = make_tensors(seed=7)
    expected = torch.nn.functional.conv2d(x, w, **CONV)
    cudnn.conv_profile = True
    with caplog.at_level(logging.INFO, logger="torch_cudnn_algo"):
        out = torch.nn.functional.conv2d(x, w, **CONV)
    assert torch.equal(out, expected)
    assert any(r.getMessage().startswith("cuDNN fwd candidates for") for r in caplog.records)
    assert not any("requested fwd" in r.getMessage() for r in caplog.records)


def test_no_profiling_during_cuda_graph_capture():
    x, w = make_tensors(seed=8)
    expected = torch.nn.functional.conv2d(x, w, **CONV)
    cudnn.conv_fwd_algo = "fastest"
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            captured = torch.nn.functional.conv2d(x, w, **CONV)
    torch.cuda.current_stream().wait_stream(stream)
    assert _ops.profile_decision_count() == 0  # stock path during capture
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, expected)
    torch.nn.functional.conv2d(x, w, **CONV)  # outside capture: profiled now
    assert _ops.profile_decision_count() == 1
    with pytest.raises(RuntimeError, match="during CUDA graph capture"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            torch_cudnn_algo.profile("fwd", x, w, **CONV)


def test_fastest_in_training_follows_stock():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(16, 8, 3, padding=1)).cuda()
    reference_model = [p.detach().clone() for p in model.parameters()]
    data = torch.randn(4, 8, 16, 16, device="cuda")

    def train(steps: int) -> list[float]:
        with torch.no_grad():
            for p, p0 in zip(model.parameters(), reference_model):
                p.copy_(p0)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = model(data).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    with cudnn.flags(enabled=True, allow_tf32=False):
        stock = train(5)
        with torch_cudnn_algo.flags(conv_fwd_algo="fastest", conv_bwd_data_algo="fastest",
                                    conv_bwd_filter_algo="fastest"):
            pinned = train(5)
    assert pinned == pytest.approx(stock, rel=1e-4)
