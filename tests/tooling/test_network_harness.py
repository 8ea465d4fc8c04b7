"""The network test harness itself, on the CPU (tests/network_cases.py, used by
tests/test_networks_gpu.py): replaying a run's branches, the branch-matched float64
reference, the cuDNN call hooks on every network, and the report renderer
(tests/network_report.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from network_cases import (
    DIRECTION_NAMES,
    NETS,
    Branches,
    CudnnCalls,
    _load_renderer,
    build_model,
    count_flips,
    gradient_errors,
    train_step,
)



@pytest.mark.parametrize("net_name, shape", [("conv1d_net", (2, 4, 64)), ("encoder_decoder", (2, 3, 16, 16))])
def test_replaying_a_runs_own_branches_reproduces_it(net_name, shape):
    model = build_model(NETS[net_name])
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    probe = torch.randn(model(x).shape, generator=torch.Generator().manual_seed(1))
    run = train_step(model, x, probe)
    again = train_step(model, x, probe, replay=run.decisions)
    assert torch.equal(run.out, again.out)
    assert all(torch.equal(run.grads[n], again.grads[n]) for n in run.grads)
    assert count_flips(run.decisions, again.decisions) == 0


def test_branch_matched_reference_removes_a_mask_flip():
    """Pre-activations within rounding of zero, so float32 and float64 take
    different ReLU branches: against the plain float64 model the gradient error is
    the flip's (large); against the float64 model on float32's branches it is
    rounding only."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    x = torch.randn(3, 64)
    with torch.no_grad():  # move each unit's bias so that one row's pre-activation is ~0 in float64
        z64 = x.double() @ model[0].weight.double().T + model[0].bias.double()
        for j in range(16):
            model[0].bias[j] = float(model[0].bias[j].double() - z64[j % 3, j])
    probe = torch.randn(3, 4)
    run = train_step(model, x, probe)
    reference = copy.deepcopy(model).double()
    plain = train_step(reference, x.double(), probe.double())
    matched = train_step(reference, x.double(), probe.double(), replay=run.decisions)
    flips = count_flips(run.decisions, plain.decisions)
    plain_err = gradient_errors(run.grads, plain.grads)[0]
    matched_err = gradient_errors(run.grads, matched.grads)[0]
    assert flips > 0
    assert matched_err < 1e-5 < plain_err, (flips, plain_err, matched_err)


@pytest.mark.parametrize("net", list(NETS.values()), ids=lambda n: n.name)
def test_cudnn_call_hooks_run_on_every_network_on_the_cpu(net):
    """The hooks accept every network's convolutions; on the CPU none reaches cuDNN."""
    if net.needs_torchvision:
        pytest.importorskip("torchvision")  # an optional package on a CPU machine
    model = build_model(net)
    with CudnnCalls(model) as calls, Branches(model) as branches:
        model(torch.randn((1,) + net.input_shape[1:]))
    assert calls.counts == dict.fromkeys(DIRECTION_NAMES, 0)
    assert branches.decisions  # every network has ReLUs


def test_report_renders():
    render = _load_renderer()
    assert render is not None
    row = {"model": "m", "dtype": "float32", "layout": "contiguous", "setting": "legacy0", "out_err": 1e-6,
           "grad_err": 2e-6, "stock_out_err": 1e-6, "stock_grad_err": 1e-6, "ratio": 2.0, "worst_param": "w",
           "worst_param_err": 1e-5, "stock_worst_param_err": 1e-5, "plain_grad_err": 1e-3, "flips": 1,
           "stock_flips": 0, "ran": {"fwd": 3, "bwd_data": 2, "bwd_filter": 3},
           "cudnn_calls": {"fwd": 3, "bwd_data": 2, "bwd_filter": 3}, "refusals": 0, "step_s": 0.01, "passed": True}
    table = render([row])
    assert "| m | float32 | contiguous | legacy0 |" in table and "3/3 2/2 3/3" in table
