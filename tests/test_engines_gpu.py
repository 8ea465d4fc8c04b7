"""GPU: cuDNN graph-API engine configurations. Every configuration cuDNN offers
for a set of forms either matches a float64 reference within the tolerance its
notes imply, or is reported unusable (refusal warning + stock, strict error);
pinned names round-trip through the flags; pinning stock's own choice gives
stock's output bit for bit."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

import torch_cudnn_algo
from conv_cases import FORMS, TRANSPOSED_FORMS, DTYPES, ConvForm, make_inputs, relative_error
from torch_cudnn_algo import diagnostics
from torch_cudnn_algo._algorithms import DIRECTIONS

pytestmark = pytest.mark.gpu

FORMS_BY_NAME = {f.name: f for f in FORMS + TRANSPOSED_FORMS}
DTYPE_BY_NAME = {c.name: c for c in DTYPES}
ENGINE_FORMS = ["conv2d_3x3", "conv2d_stride2", "conv2d_groups2", "conv2d_dilation2", "conv3d", "conv_transpose2d"]
ENGINE_DTYPES = [("float32", "contiguous"), ("float32_tf32", "contiguous"), ("float16", "channels_last"),
                 ("bfloat16", "channels_last"), ("float64", "contiguous")]
FLAG = {key: spec.flag for key, spec in DIRECTIONS.items()}


def run_pass(form: ConvForm, direction: str, x: torch.Tensor, w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The one pass whose cuDNN call is `direction` (per cuDNN's mapping for transposed)."""
    forward_pass = "bwd_data" if form.transposed else "fwd"
    if direction == forward_pass:
        return form.conv(x, w)
    n = form.spatial_dims
    mask = [True, False, False] if direction != "bwd_filter" else [False, True, False]
    out = torch.ops.aten.convolution_backward(
        grad, x, w, None, [form.stride] * n, [form.padding] * n, [form.dilation] * n, form.transposed,
        [form.output_padding] * n, form.groups, mask,
    )
    return out[0] if mask[0] else out[1]


def notes_tolerance(case, notes: tuple[str, ...]) -> float:
    tol = case.tolerance
    if "TENSOR_CORE" in notes and case.dtype == torch.float32:
        tol = max(tol, 5e-3)  # TF32: 10-bit mantissa products
    if {"FFT", "WINOGRAD", "WINOGRAD_TILE_4x4", "WINOGRAD_TILE_6x6", "WINOGRAD_TILE_13x13"} & set(notes):
        tol = max(tol, 2e-3)
    if "REDUCED_PRECISION_REDUCTION" in notes:
        tol = max(tol, 2e-2)
    return tol


@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("dtype_name, layout", ENGINE_DTYPES, ids=lambda v: v)
@pytest.mark.parametrize("form_name", ENGINE_FORMS)
def test_every_engine_configuration(form_name, dtype_name, layout, direction, record_property):
    form, case = FORMS_BY_NAME[form_name], DTYPE_BY_NAME[dtype_name]
    fmt = torch.channels_last_3d if (layout == "channels_last" and form.spatial_dims == 3) else (
        torch.channels_last if layout == "channels_last" else torch.contiguous_format)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=case.allow_tf32):
        x, w = make_inputs(form, case, fmt, seed=hash((form_name, dtype_name, direction)) % 2**31)
        grad = torch.empty_like(form.conv(x, w)).normal_()
        expected = run_pass(form, direction, x.double().cpu(), w.double().cpu(), grad.double().cpu())
        stock = run_pass(form, direction, x, w, grad)
        configs = diagnostics.engine_configs(direction, x, w, **form.kwargs(), allow_tf32=case.allow_tf32,
                                             deterministic=False)
        assert configs, "cuDNN offers no engine configuration"
        assert len({c.name for c in configs}) == len(configs)
        ran = refused = 0
        for config in configs:
            if config.refusal is None:
                with torch_cudnn_algo.flags(**{FLAG[direction]: config.name, "conv_algo_strict": True}):
                    out = run_pass(form, direction, x, w, grad)
                assert out.shape == stock.shape and out.stride() == stock.stride(), config.name
                error = relative_error(out, expected)
                assert error <= notes_tolerance(case, config.numerical_notes), (config, error)
                ran += 1
            else:
                with warnings.catch_warnings(record=True) as caught, torch_cudnn_algo.flags(**{FLAG[direction]: config.name}):
                    warnings.simplefilter("always")
                    out = run_pass(form, direction, x, w, grad)
                assert any(config.refusal.split(" (")[0] in str(m.message) for m in caught), config
                # The stock path ran (not bit for bit: stock may pick a non-deterministic kernel).
                assert relative_error(out, stock) <= 2 * case.tolerance
                with torch_cudnn_algo.flags(**{FLAG[direction]: config.name, "conv_algo_strict": True}):
                    with pytest.raises(RuntimeError, match="cannot run this convolution"):
                        run_pass(form, direction, x, w, grad)
                refused += 1
            torch_cudnn_algo.clear_cache()  # built plans hold GPU resources; keep the sweep lean
        record_property("engine_configs", f"{len(configs)} listed, {ran} ran, {refused} refused")
        print(f"{form_name} {dtype_name} {direction}: {len(configs)} configs, {ran} ran, {refused} refused")


@pytest.mark.parametrize("dtype_name, layout", [("float32", "contiguous"), ("float16", "channels_last")], ids=str)
@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_pinning_stocks_choice_reproduces_stock_bit_for_bit(direction, dtype_name, layout):
    """Stock (benchmark off) runs the first usable configuration of heuristics mode A."""
    form, case = FORMS_BY_NAME["conv2d_3x3"], DTYPE_BY_NAME[dtype_name]
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=case.allow_tf32):
        x, w = make_inputs(form, case, fmt, seed=7)
        grad = torch.empty_like(form.conv(x, w)).normal_()
        configs = diagnostics.engine_configs(direction, x, w, **form.kwargs())
        first = next(c for c in configs if c.source == "heuristics_a" and c.refusal is None)
        stock = run_pass(form, direction, x, w, grad)
        with torch_cudnn_algo.flags(**{FLAG[direction]: first.name, "conv_algo_strict": True}):
            ours = run_pass(form, direction, x, w, grad)
    if "NONDETERMINISTIC" in first.numerical_notes:
        assert relative_error(ours, stock) < 1e-3
    else:
        assert torch.equal(ours, stock), first.name


def test_names_round_trip_and_bare_engine_resolves(caplog):
    x = torch.randn(2, 8, 16, 16, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    configs = diagnostics.engine_configs("fwd", x, w, padding=1)
    usable = [c for c in configs if c.refusal is None]
    full = usable[-1].name
    torch.backends.cudnn.conv_fwd_algo = full.upper()
    assert torch.backends.cudnn.conv_fwd_algo == full
    bare = full.split("_")[0]
    first_of_engine = next(c.name for c in usable if c.name.split("_")[0] == bare)
    with caplog.at_level(logging.INFO, logger="torch_cudnn_algo"):
        with torch_cudnn_algo.flags(conv_fwd_algo=bare, conv_algo_strict=True):
            assert torch.backends.cudnn.conv_fwd_algo == bare
            out = torch.nn.functional.conv2d(x, w, padding=1)
    assert any(f"requested fwd algorithm {first_of_engine} is set" in r.getMessage() for r in caplog.records)
    assert relative_error(out, torch.nn.functional.conv2d(x.double().cpu(), w.double().cpu(), padding=1)) < 5e-3


def test_unknown_engine_is_refused_with_alternatives():
    x = torch.randn(2, 8, 16, 16, device="cuda")
    w = torch.randn(16, 8, 3, 3, device="cuda")
    stock = torch.nn.functional.conv2d(x, w, padding=1)
    with warnings.catch_warnings(record=True) as caught, torch_cudnn_algo.flags(conv_fwd_algo="eng9999"):
        warnings.simplefilter("always")
        out = torch.nn.functional.conv2d(x, w, padding=1)
    (message,) = [str(m.message) for m in caught if "cannot run" in str(m.message)]
    assert "offers no such engine configuration" in message and "Engine configurations that can run it: eng" in message
    assert torch.equal(out, stock)
    with torch_cudnn_algo.flags(conv_fwd_algo="eng9999", conv_algo_strict=True):
        with pytest.raises(RuntimeError, match="torch.backends.cudnn.conv_fwd_algo = 'eng9999'") as info:
            torch.nn.functional.conv2d(x, w, padding=1)
    assert "Repro:" in str(info.value)


def test_engine_pinned_training_follows_stock():
    x = torch.randn(4, 8, 16, 16, device="cuda", requires_grad=True)
    w = torch.randn(16, 8, 3, 3, device="cuda", requires_grad=True)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        picks = {d: next(c.name for c in diagnostics.engine_configs(d, x.detach(), w.detach(), padding=1)
                         if c.refusal is None) for d in DIRECTIONS}
        y = torch.nn.functional.conv2d(x, w, padding=1)
        stock = torch.autograd.grad(y, (x, w), torch.ones_like(y))
        with torch_cudnn_algo.flags(conv_fwd_algo=picks["fwd"], conv_bwd_data_algo=picks["bwd_data"],
                                    conv_bwd_filter_algo=picks["bwd_filter"], conv_algo_strict=True):
            y2 = torch.nn.functional.conv2d(x, w, padding=1)
            ours = torch.autograd.grad(y2, (x, w), torch.ones_like(y2))
    assert relative_error(y2, y) < 1e-5
    for a, b in zip(ours, stock):
        assert relative_error(a, b) < 1e-4
