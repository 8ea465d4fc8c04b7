"""GPU: every legacy backward-data and backward-filter algorithm x every conv form,
dtype and layout; transposed convolutions in all three directions (cuDNN's
mapping); float64 gradcheck; determinism refusals; a short training run."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_cudnn_algo
from conv_cases import (
    DTYPES,
    TRANSPOSED_FORMS,
    form_layouts,
    make_inputs,
    memory_format,
    reaches_cudnn,
    reference_grads,
    relative_error,
    tolerance,
)
from torch_cudnn_algo._algorithms import DIRECTIONS

pytestmark = pytest.mark.gpu

LOGGER = "torch_cudnn_algo"
FLAG = {key: spec.flag for key, spec in DIRECTIONS.items()}


def usable_algos(direction: str) -> list[int]:
    spec = DIRECTIONS[direction]
    return [a for a in range(len(spec.names)) if a not in spec.unimplemented]


def cases(directions, forms=None):
    return [(d, a, f, l) for d in directions for a in usable_algos(d) for f, l in form_layouts(forms)]


def case_id(value) -> str:
    return getattr(value, "name", str(value))


def check_left_to_pytorch(direction, algo, form, x, w, tol, seed) -> None:
    """A convolution stock PyTorch does not send to cuDNN (fp32/fp64 NCHW depthwise goes to its
    native kernels) is not ours to change: pinned, our plan never runs in the backward either
    and the gradients are stock's."""
    x.requires_grad_()
    w.requires_grad_()
    stock_out = form.conv(x, w)
    grad = torch.randn(stock_out.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    grad = torch.empty_like(stock_out).copy_(grad)
    stock = torch.autograd.grad(stock_out, (x, w), grad)
    before = torch_cudnn_algo.diagnostics.pinned_run_counts()[direction]
    with warnings.catch_warnings(record=True) as caught, torch_cudnn_algo.flags(**{FLAG[direction]: algo}):
        warnings.simplefilter("always")
        ours = torch.autograd.grad(form.conv(x, w), (x, w), grad)
    torch.cuda.synchronize()
    assert torch_cudnn_algo.diagnostics.pinned_run_counts()[direction] == before, "our plan ran a convolution stock keeps from cuDNN"
    assert not [m for m in caught if "cannot run this convolution" in str(m.message)]
    for mine, theirs in zip(ours, stock):
        assert mine.stride() == theirs.stride() and relative_error(mine, theirs) <= tol


def check_pinned_gradients(direction, algo, form, layout, case, caplog):
    """Pins `direction` to `algo`, runs forward + backward, and checks the output
    and both gradients against stock and a float64 reference."""
    fmt = memory_format(layout, form.spatial_dims)
    tol = tolerance(case, algo, direction)
    seed = hash((direction, algo, form.name, case.name, layout)) % 2**31
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=case.allow_tf32):
        x, w = make_inputs(form, case, fmt, seed)
        if not reaches_cudnn(form, x, w):
            check_left_to_pytorch(direction, algo, form, x, w, tol, seed)
            return
        x.requires_grad_()
        w.requires_grad_()
        stock_out = form.conv(x, w)
        grad = torch.randn(stock_out.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
        grad = torch.empty_like(stock_out).copy_(grad)  # stock output's layout, as autograd would give
        stock_gx, stock_gw = torch.autograd.grad(stock_out, (x, w), grad)
        ref_gx, ref_gw = reference_grads(form, x, w, grad)
        workspace = torch_cudnn_algo.diagnostics.legacy_workspace_sizes(
            direction, x.detach(), w.detach(), **form.kwargs(), allow_tf32=case.allow_tf32
        )[algo]

        with caplog.at_level(logging.INFO, logger=LOGGER), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch_cudnn_algo.flags(**{FLAG[direction]: algo}):
                out = form.conv(x, w)
                gx, gw = torch.autograd.grad(out, (x, w), grad)
        torch.cuda.synchronize()

        for ours, stock, ref in ((gx, stock_gx, ref_gx), (gw, stock_gw, ref_gw)):
            assert ours.shape == stock.shape and ours.dtype == stock.dtype
            assert ours.stride() == stock.stride(), "gradient layout differs from stock's"
            assert relative_error(ours, ref) <= tol
            assert relative_error(ours, stock) <= 2 * tol
        assert relative_error(out, stock_out) <= 2 * tol and out.stride() == stock_out.stride()

        refusals = [str(m.message) for m in caught if "cannot run this convolution" in str(m.message)]
        announced = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        name = DIRECTIONS[direction].names[algo]
        if workspace is not None:
            assert not refusals
            assert sum(f"requested {direction} algorithm {algo} ({name}) is set" in m for m in announced) == 1
        else:
            (message,) = refusals
            assert f"{FLAG[direction]} = {algo} ({name})" in message
            with torch_cudnn_algo.flags(**{FLAG[direction]: algo, "conv_algo_strict": True}):
                with pytest.raises(RuntimeError, match="cannot run this convolution") as info:
                    torch.autograd.grad(form.conv(x, w), (x, w), grad)
            assert "Repro:" in str(info.value)


@pytest.mark.parametrize("case", DTYPES, ids=lambda c: c.name)
@pytest.mark.parametrize("direction, algo, form, layout", cases(["bwd_data", "bwd_filter"]), ids=case_id)
def test_pinned_backward_algorithm(direction, algo, form, layout, case, caplog):
    check_pinned_gradients(direction, algo, form, layout, case, caplog)


@pytest.mark.parametrize("case", DTYPES, ids=lambda c: c.name)
@pytest.mark.parametrize(
    "direction, algo, form, layout", cases(["bwd_data", "fwd", "bwd_filter"], TRANSPOSED_FORMS), ids=case_id
)
def test_pinned_transposed_convolution(direction, algo, form, layout, case, caplog):
    """bwd_data pins the transposed forward, fwd its input gradient, bwd_filter its weight gradient."""
    check_pinned_gradients(direction, algo, form, layout, case, caplog)


@pytest.mark.parametrize("direction, algo", [(d, a) for d in DIRECTIONS for a in usable_algos(d)])
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv_transpose"])
def test_gradcheck_float64(direction, algo, transposed):
    gen = torch.Generator(device="cuda").manual_seed(algo)
    x = torch.randn(2, 4, 6, 6, device="cuda", dtype=torch.float64, generator=gen, requires_grad=True)
    if transposed:
        w = torch.randn(4, 3, 3, 3, device="cuda", dtype=torch.float64, generator=gen, requires_grad=True)
        fn = lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1)  # noqa: E731
        kwargs = dict(stride=2, padding=1, transposed=True, output_padding=1)
    else:
        w = torch.randn(3, 4, 3, 3, device="cuda", dtype=torch.float64, generator=gen, requires_grad=True)
        fn = lambda x, w: F.conv2d(x, w, padding=1)  # noqa: E731
        kwargs = dict(padding=1)
    if torch_cudnn_algo.diagnostics.legacy_workspace_sizes(direction, x.detach(), w.detach(), **kwargs)[algo] is None:
        # cuDNN has no float64 for this algorithm (FFT, Winograd, ...): strict mode refuses it, naming it.
        with torch_cudnn_algo.flags(**{FLAG[direction]: algo, "conv_algo_strict": True}):
            with pytest.raises(RuntimeError, match=f"{FLAG[direction]} = {algo} .*cannot run this convolution"):
                torch.autograd.grad(fn(x, w).sum(), (x, w))
        return
    with torch_cudnn_algo.flags(**{FLAG[direction]: algo, "conv_algo_strict": True}):
        assert torch.autograd.gradcheck(fn, (x, w))


@pytest.mark.parametrize("direction, algo", [("bwd_data", 0), ("bwd_filter", 0), ("bwd_filter", 3)])
def test_nondeterministic_algorithms_refused_under_deterministic_mode(direction, algo):
    x = torch.randn(2, 8, 12, 12, device="cuda", requires_grad=True)
    w = torch.randn(16, 8, 3, 3, device="cuda", requires_grad=True)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True, allow_tf32=False):
        y = F.conv2d(x, w, padding=1)
        g = torch.randn_like(y)
        stock = torch.autograd.grad(y, (x, w), g)
        with warnings.catch_warnings(record=True) as caught, torch_cudnn_algo.flags(**{FLAG[direction]: algo}):
            warnings.simplefilter("always")
            ours = torch.autograd.grad(F.conv2d(x, w, padding=1), (x, w), g)
        (message,) = [str(m.message) for m in caught if "cannot run" in str(m.message)]
        assert "non-deterministic" in message
        for a, b in zip(ours, stock):
            assert torch.equal(a, b)  # the stock path ran: deterministic, so bitwise equal
        with torch_cudnn_algo.flags(**{FLAG[direction]: algo, "conv_algo_strict": True}):
            with pytest.raises(RuntimeError, match="non-deterministic"):
                torch.autograd.grad(F.conv2d(x, w, padding=1), (x, w), g)
        # A deterministic algorithm runs under the same mode.
        with torch_cudnn_algo.flags(**{FLAG[direction]: 1, "conv_algo_strict": True}):
            torch.autograd.grad(F.conv2d(x, w, padding=1), (x, w), g)


def test_empty_batch_backward():
    x = torch.randn(0, 8, 9, 9, device="cuda", requires_grad=True)
    w = torch.randn(16, 8, 3, 3, device="cuda", requires_grad=True)
    with torch_cudnn_algo.flags(conv_fwd_algo=1, conv_bwd_data_algo=1, conv_bwd_filter_algo=1, conv_algo_strict=True):
        y = F.conv2d(x, w, padding=1)
        gx, gw = torch.autograd.grad(y.sum(), (x, w))
    assert gx.shape == x.shape and gw.shape == w.shape and torch.count_nonzero(gw) == 0


def test_bias_gradient_and_output_mask():
    x = torch.randn(2, 8, 9, 9, device="cuda", dtype=torch.float64)
    w = torch.randn(16, 8, 3, 3, device="cuda", dtype=torch.float64)
    g = torch.randn(2, 16, 9, 9, device="cuda", dtype=torch.float64)
    args = (g, x, w, [16], [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    stock = torch.ops.aten.convolution_backward(*args, [True, True, True])
    with torch_cudnn_algo.flags(conv_bwd_data_algo=1, conv_bwd_filter_algo=1, conv_algo_strict=True):
        for mask in ([True, True, True], [False, True, True], [True, False, False], [False, False, True]):
            ours = torch.ops.aten.convolution_backward(*args, mask)
            for wanted, a, b in zip(mask, ours, stock):
                if wanted:
                    assert relative_error(a, b) < 1e-10
                else:
                    assert a is None


def test_training_with_all_directions_pinned_follows_stock():
    def train(fwd, bwd_data, bwd_filter):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
        ).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator(device="cuda").manual_seed(1)
        losses = []
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
            with torch_cudnn_algo.flags(conv_fwd_algo=fwd, conv_bwd_data_algo=bwd_data,
                                        conv_bwd_filter_algo=bwd_filter, conv_algo_strict=fwd is not None):
                for _ in range(20):
                    x = torch.randn(8, 3, 16, 16, device="cuda", generator=gen)
                    y = torch.randint(0, 10, (8,), device="cuda", generator=gen)
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
        return torch.tensor(losses)

    stock, pinned = train(None, None, None), train(1, 1, 1)
    assert torch.allclose(pinned, stock, rtol=1e-4, atol=1e-5), (stock, pinned)
