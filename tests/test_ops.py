"""CPU: the typed boundary to the extension (torch_cudnn_algo._ops): one wrapper per operator,
the extension's convolution descriptions read back, clear errors without a GPU."""

from __future__ import annotations

import json

import pytest
import torch

import torch_cudnn_algo
from test_conv_spec import CASES
from torch_cudnn_algo import ConvSpec, _ops

needs_extension = pytest.mark.skipif(not torch_cudnn_algo.is_available(), reason="needs the C++ extension")


@needs_extension
def test_every_operator_has_its_wrapper_of_the_same_name() -> None:
    registered = {name.split("::")[1] for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("torch_cudnn_algo::")}
    assert registered, "the extension registers no operator"
    assert sorted(name for name in registered if not callable(getattr(_ops, name, None))) == []


def request_text(spec: ConvSpec) -> str:
    """What the extension writes for a convolution it met: the cuDNN problem x (*) w = y."""
    c = spec.cudnn_form()
    x, y = (c.output, c.input) if c.transposed else (c.input, c.output)
    fields = {"direction": c.direction, "input": x, "weight": c.weight, "output": y, "padding": c.padding,
              "stride": c.stride, "dilation": c.dilation, "groups": c.groups, "dtype": str(c.dtype)[len("torch."):],
              "channels_last": c.channels_last, "device": 1, "deterministic": True, "allow_tf32": False,
              "transposed": c.transposed}
    return json.dumps(fields)


@pytest.mark.parametrize("spec", CASES, ids=str)
def test_a_recorded_convolution_reads_back_as_the_convolution(spec: ConvSpec) -> None:
    request = _ops._conv_request(request_text(spec))
    assert request.conv_spec() == spec.cudnn_form()
    assert (request.device, request.deterministic, request.allow_tf32) == (1, True, False)
    assert isinstance(request.input, tuple) and isinstance(request.padding, tuple)


def test_gpu_calls_without_a_gpu_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(RuntimeError, match=r"torch_cudnn_algo.tune needs a CUDA GPU, and "
                                           r"torch.cuda.is_available\(\) is False here"):
        _ops.require_gpu("tune")
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(RuntimeError, match="torch_cudnn_algo.profile needs a CUDA GPU, and the installed "
                                           "torch .* is a CPU-only build"):
        _ops.require_gpu("profile")


@needs_extension
def test_results_cross_as_plain_values() -> None:
    assert _ops.pinned_run_counts().keys() == {"fwd", "bwd_data", "bwd_filter"}
    assert all(isinstance(v, int) for v in _ops.execution_plan_counts().values())
    assert _ops.plan_entries_in_force() == [] or all(
        isinstance(entry, _ops.PlanEntryInForce) for entry in _ops.plan_entries_in_force())
    assert isinstance(_ops.graph_runners(), list)
    assert isinstance(_ops.recorded_configs(), list)
