"""GPU: every legacy forward algorithm x every conv form, dtype and layout either
matches stock PyTorch and a float64 reference, or is reported unsupported and the
fallback/strict rule holds."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_cudnn_algo
from conv_cases import (
    DTYPES,
    form_layouts,
    make_inputs,
    memory_format,
    reaches_cudnn,
    reference,
    relative_error,
    tolerance,
    TRANSFORM_FWD_ALGOS,
)
from torch_cudnn_algo import diagnostics

pytestmark = pytest.mark.gpu

FWD_NAMES = diagnostics.legacy_algorithm_names("fwd")
LOGGER = "torch_cudnn_algo"


def refusal_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "cannot run this convolution" in str(w.message)]


def check_left_to_pytorch(algo: int, form, x: torch.Tensor, w: torch.Tensor) -> None:
    """A convolution stock PyTorch does not send to cuDNN (fp32/fp64 NCHW depthwise goes to its
    native kernel) is not ours to change: pinned, our plan never runs and the result is stock's."""
    stock = form.conv(x, w)
    before = diagnostics.pinned_run_counts()["fwd"]
    with warnings.catch_warnings(record=True) as caught, torch_cudnn_algo.flags(conv_fwd_algo=algo):
        warnings.simplefilter("always")
        out = form.conv(x, w)
    torch.cuda.synchronize()
    assert diagnostics.pinned_run_counts()["fwd"] == before, "our plan ran a convolution stock keeps from cuDNN"
    assert not refusal_warnings(caught)
    assert out.stride() == stock.stride() and torch.equal(out, stock)


@pytest.mark.parametrize("case", DTYPES, ids=lambda c: c.name)
@pytest.mark.parametrize("form, layout", form_layouts(), ids=lambda v: getattr(v, "name", v))
@pytest.mark.parametrize("algo", range(len(FWD_NAMES)), ids=lambda a: f"algo{a}")
def test_pinned_forward_algorithm(algo, form, layout, case, caplog):
    fmt = memory_format(layout, form.spatial_dims)
    tol = tolerance(case, algo)
    seed = hash((algo, form.name, case.name, layout)) % 2**31
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=case.allow_tf32):
        x, w = make_inputs(form, case, fmt, seed)
        if not reaches_cudnn(form, x, w):
            check_left_to_pytorch(algo, form, x, w)
            return
        expected = reference(form, x, w)
        stock = form.conv(x, w)
        workspace = diagnostics.legacy_workspace_sizes(
            "fwd", x, w, **form.kwargs(), allow_tf32=case.allow_tf32
        )[algo]

        with caplog.at_level(logging.INFO, logger=LOGGER), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch_cudnn_algo.flags(conv_fwd_algo=algo):
                out = form.conv(x, w)
        torch.cuda.synchronize()

        assert out.shape == stock.shape and out.dtype == stock.dtype
        assert relative_error(out, expected) <= tol
        assert relative_error(out, stock) <= 2 * tol
        announced = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        if workspace is not None:
            assert not refusal_warnings(caught)
            assert out.stride() == stock.stride(), "output layout differs from stock's"
            assert sum(f"requested fwd algorithm {algo} ({FWD_NAMES[algo]}) is set" in m for m in announced) == 1
        else:
            (message,) = refusal_warnings(caught)
            assert f"conv_fwd_algo = {algo} ({FWD_NAMES[algo]})" in message
            assert "Legacy algorithms that can run it:" in message
            assert not any("is set" in m for m in announced)
            with torch_cudnn_algo.flags(conv_fwd_algo=algo, conv_algo_strict=True):
                with pytest.raises(RuntimeError, match="cannot run this convolution") as info:
                    form.conv(x, w)
            assert "Repro:" in str(info.value) and "conv_algo_strict = True" in str(info.value)


def test_refusal_warns_once_per_configuration():
    x = torch.randn(2, 8, 9, 9, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    sizes = diagnostics.legacy_workspace_sizes("fwd", x, w, padding=1)
    unsupported = [a for a, b in sizes.items() if b is None]
    if not unsupported:
        pytest.fail("every forward algorithm supports the test's convolution; the test needs one cuDNN refuses")
    with warnings.catch_warnings(record=True) as caught, torch_cudnn_algo.flags(conv_fwd_algo=unsupported[0]):
        warnings.simplefilter("always")
        for _ in range(3):
            F.conv2d(x, w, padding=1)
        F.conv2d(x[:1], w, padding=1)  # a new configuration warns again
    assert len(refusal_warnings(caught)) == 2


def test_strict_repro_is_copy_paste_runnable(tmp_path):
    x = torch.randn(2, 8, 9, 9, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    sizes = diagnostics.legacy_workspace_sizes("fwd", x, w, stride=2)
    unsupported = [a for a, b in sizes.items() if b is None]
    if not unsupported:
        pytest.fail("every forward algorithm supports the test's convolution; the test needs one cuDNN refuses")
    with torch_cudnn_algo.flags(conv_fwd_algo=unsupported[0], conv_algo_strict=True):
        with pytest.raises(RuntimeError) as info:
            F.conv2d(x, w, stride=2)
    repro = str(info.value).split("Repro:\n", 1)[1]
    script = tmp_path / "repro.py"
    script.write_text(repro)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "cannot run this convolution" in result.stderr


def test_log_line_once_per_configuration(caplog):
    x = torch.randn(2, 8, 9, 9, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    with caplog.at_level(logging.INFO, logger=LOGGER), torch_cudnn_algo.flags(conv_fwd_algo=0):
        for _ in range(3):
            F.conv2d(x, w)
        F.conv2d(x, w, padding=1)
    lines = [r.getMessage() for r in caplog.records if "requested fwd algorithm 0 (IMPLICIT_GEMM) is set" in r.getMessage()]
    assert len(lines) == 2


def test_benchmark_mode_does_not_override_pinned_choice(caplog):
    x = torch.randn(2, 8, 9, 9, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=False):
        with caplog.at_level(logging.INFO, logger=LOGGER), torch_cudnn_algo.flags(conv_fwd_algo="IMPLICIT_GEMM"):
            out = F.conv2d(x, w)
    assert any("requested fwd algorithm 0 (IMPLICIT_GEMM) is set" in r.getMessage() for r in caplog.records)
    assert relative_error(out, F.conv2d(x.double().cpu(), w.double().cpu())) < 2e-5


@pytest.mark.parametrize("algo", range(len(FWD_NAMES)))
def test_every_output_element_is_written(algo):
    """Deterministic mode makes torch fill fresh allocations with NaN: any
    element the pinned algorithm failed to write would stay NaN. On the first
    convolution the algorithm supports; one that supports none (DIRECT: cuDNN
    implements it nowhere) must be refused, naming it."""
    for x_shape, w_shape in ((3, 8, 16, 16), (16, 8, 3, 3)), ((4, 64, 28, 28), (64, 64, 3, 3)):
        x = torch.randn(x_shape, device="cuda")
        w = torch.randn(w_shape, device="cuda")
        if diagnostics.legacy_workspace_sizes("fwd", x, w, padding=1, allow_tf32=False)[algo] is not None:
            break
    else:
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
            with torch_cudnn_algo.flags(conv_fwd_algo=algo, conv_algo_strict=True):
                with pytest.raises(RuntimeError, match=f"conv_fwd_algo = {algo} .*cannot run this convolution"):
                    F.conv2d(x, w, padding=1)
        return
    previous = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
            with torch_cudnn_algo.flags(conv_fwd_algo=algo, conv_algo_strict=True):
                out = F.conv2d(x, w, padding=1)
    finally:
        torch.use_deterministic_algorithms(previous)
        torch.utils.deterministic.fill_uninitialized_memory = fill
    assert torch.isfinite(out).all()
    err = relative_error(out, F.conv2d(x.double().cpu(), w.double().cpu(), padding=1))
    assert err < (2e-3 if algo in TRANSFORM_FWD_ALGOS else 2e-5)


def test_direct_op_call_empty_batch_and_1d():
    op = torch.ops.aten.cudnn_convolution
    w = torch.randn(16, 8, 3, 3, device="cuda")
    empty = torch.empty(0, 8, 9, 9, device="cuda")
    x1d = torch.randn(2, 8, 21, device="cuda")
    w1d = torch.randn(16, 8, 3, device="cuda")
    stock_empty = op(empty, w, [1, 1], [1, 1], [1, 1], 1, False, False, False)
    stock_1d = op(x1d, w1d, [1], [1], [1], 1, False, False, False)
    with torch_cudnn_algo.flags(conv_fwd_algo=0, conv_algo_strict=True):
        ours_empty = op(empty, w, [1, 1], [1, 1], [1, 1], 1, False, False, False)
        ours_1d = op(x1d, w1d, [1], [1], [1], 1, False, False, False)
    assert ours_empty.shape == stock_empty.shape == (0, 16, 9, 9)
    assert ours_1d.shape == stock_1d.shape and ours_1d.stride() == stock_1d.stride()
    assert relative_error(ours_1d, F.conv1d(x1d.double().cpu(), w1d.double().cpu(), padding=1)) < 2e-5


@pytest.mark.parametrize(
    "padding, stride, dilation, match",
    [([1], [1, 1], [1, 1], "padding, stride and dilation must each have 2"),
     ([1, 1], [1, 1, 1], [1, 1], "must each have 2"),
     ([1, 1], [0, 1], [1, 1], "stride and dilation must be >= 1")],
)
def test_bad_argument_lists_raise_instead_of_crashing(padding, stride, dilation, match):
    x = torch.randn(2, 8, 9, 9, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    with torch_cudnn_algo.flags(conv_fwd_algo=1):
        with pytest.raises(RuntimeError, match=match):
            torch.ops.aten.cudnn_convolution(x, w, padding, stride, dilation, 1, False, False, False)


def test_training_follows_stock_loss_curve():
    def train(algo):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 3, padding=1, groups=4), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
        ).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator(device="cuda").manual_seed(1)
        losses = []
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
            with torch_cudnn_algo.flags(conv_fwd_algo=algo, conv_algo_strict=True):
                for _ in range(20):
                    x = torch.randn(8, 3, 16, 16, device="cuda", generator=gen)
                    y = torch.randint(0, 10, (8,), device="cuda", generator=gen)
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
        return torch.tensor(losses)

    stock, pinned = train(None), train(1)
    assert torch.allclose(pinned, stock, rtol=1e-4, atol=1e-5), (stock, pinned)


def test_concurrent_threads_get_correct_results():
    """Plans are built and shared across threads; every thread must still get
    its own correct result."""
    shapes = [((2, 8, 12, 12), (16, 8, 3, 3)), ((4, 4, 10, 10), (8, 4, 5, 5)), ((1, 16, 9, 9), (16, 16, 1, 1))]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            xs, ws = shapes[i % len(shapes)]
            for _ in range(20):
                x = torch.randn(xs, device="cuda")
                w = torch.randn(ws, device="cuda")
                out = F.conv2d(x, w)
                err = relative_error(out, F.conv2d(x.double().cpu(), w.double().cpu()))
                assert err < 2e-5, err
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        with torch_cudnn_algo.flags(conv_fwd_algo=0, conv_algo_strict=True):
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert not errors, errors
