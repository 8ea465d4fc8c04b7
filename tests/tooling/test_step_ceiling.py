"""CPU: the step ceiling (benchmarks/harness/step_ceiling.py, tuner_breakdown.py --step-ceiling):
tuning-log descriptions parsed to keys, a model's convolution calls per forward counted on the
meta device (1-d as cuDNN's 2-d), each log entry weighted by its calls, calls no entry matches
counted apart, and the verdict against a zoo result's step times."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import networks, step_ceiling  # noqa: E402
from harness import tuner as tuner_breakdown  # noqa: E402
from harness.roofline import conv_bound  # noqa: E402

STEM = ("conv2d: input [8, 3, 32, 32] torch.float16 channels_last, weight [16, 3, 3, 3], output [8, 16, 32, 32], "
        "stride [1, 1], padding [1, 1], dilation [1, 1], groups 1, allow_tf32=False, deterministic=False, device cuda:0")
BLOCK = ("conv2d: input [8, 16, 32, 32] torch.float16 channels_last, weight [16, 1, 3, 3], output [8, 16, 32, 32], "
         "stride [1, 1], padding [1, 1], dilation [1, 1], groups 16, allow_tf32=False, deterministic=False, "
         "device cuda:0")
DECODER = ("conv_transpose2d: input [2, 4, 1, 10] torch.float16 contiguous, weight [4, 1, 1, 4], "
           "output [2, 1, 1, 40], stride [1, 4], padding [0, 0], output_padding [0, 0], dilation [1, 1], groups 1, "
           "allow_tf32=False, deterministic=False, device cuda:0")


class Net(nn.Module):
    """A stem, the same depthwise block three times, a dilated depthwise block (no log entry)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.block = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.dilated = nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for _ in range(3):
            x = self.block(x)
        return self.dilated(x)


def entry(direction: str, conv: str, *ms: float | None) -> dict:
    return {"direction": direction, "conv": conv, "configs": [{"config": f"eng{i}", "ms": m} for i, m in enumerate(ms)]}


def test_key_of_reads_shapes_and_skips_output_padding() -> None:
    key = step_ceiling.key_of(DECODER)
    assert key == step_ceiling.ConvKey(True, (2, 4, 1, 10), (4, 1, 1, 4), (2, 1, 1, 40), (1, 4), (0, 0), (1, 1), 1)
    assert step_ceiling.key_of(STEM).groups == 1 and not step_ceiling.key_of(STEM).transposed
    with pytest.raises(ValueError, match="not a convolution description"):
        step_ceiling.key_of("linear: input [2, 3]")


def test_conv_calls_counts_repeated_modules_and_describes_1d_as_cudnn_does() -> None:
    calls = step_ceiling.conv_calls(Net(), torch.randn(8, 3, 32, 32))
    assert calls[step_ceiling.key_of(STEM)] == 1 and calls[step_ceiling.key_of(BLOCK)] == 3
    assert sum(calls.values()) == 5
    decoder = nn.ConvTranspose1d(4, 1, 4, stride=4, bias=False)
    one_d = step_ceiling.conv_calls(decoder, torch.randn(2, 4, 10))
    assert one_d == collections.Counter({step_ceiling.key_of(DECODER): 1})


def test_step_ceiling_weights_each_entry_by_its_calls_and_counts_the_rest_apart() -> None:
    calls = step_ceiling.conv_calls(Net(), torch.randn(8, 3, 32, 32))
    # The stem's input needs no gradient: no bwd_data entry, as in a real tuning log.
    log = [entry("fwd", STEM, 0.02, 0.01), entry("bwd_filter", STEM, 0.03),
           entry("fwd", BLOCK, 0.05, None), entry("bwd_data", BLOCK, 0.04), entry("bwd_filter", BLOCK, 0.06),
           entry("fwd", BLOCK.replace("[8, 16, 32, 32], stride", "[8, 16, 31, 31], stride"), None)]  # nothing timed
    ceiling = step_ceiling.step_ceiling(log, calls)
    assert ceiling.cudnn_calls == 4 and ceiling.other_calls == 1
    assert ceiling.best_ms == pytest.approx(0.01 + 0.03 + 3 * (0.05 + 0.04 + 0.06))
    bound = 2 * conv_bound(STEM).bound_ms + 3 * 3 * conv_bound(BLOCK).bound_ms
    assert ceiling.bound_ms == pytest.approx(bound)
    assert ceiling.room_ms == pytest.approx(ceiling.best_ms - bound)


def test_step_ceiling_table_gives_each_network_its_verdict(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(networks, "ZOO", {
        name: networks.ZooEntry(name, frozenset({"depthwise"}),
                                lambda: networks.Workload(Net(), torch.randn(8, 3, 32, 32), networks.AMP_FP16,
                                                          torch.channels_last))
        for name in ("reachable", "unreachable", "met")})
    log = [entry("fwd", BLOCK, 0.5), entry("bwd_data", BLOCK, 0.5), entry("bwd_filter", BLOCK, 0.5)]
    zoo = {"networks": [{"name": "reachable", "gpu_ms_plan_in_benchmark_process": 10.0, "gpu_ms": {"benchmark": 11.0}},
                        {"name": "unreachable", "gpu_ms_plan_in_benchmark_process": 100.0,
                         "gpu_ms": {"benchmark": 101.0}},
                        {"name": "met", "gpu_ms_plan_in_benchmark_process": 8.0, "gpu_ms": {"benchmark": 10.0}}]}
    path = tmp_path / "zoo.json"
    path.write_text(json.dumps(zoo))
    records = [{"network": name, "log": log} for name in ("reachable", "unreachable", "met", "not_in_zoo")]
    table = step_ceiling.step_ceiling_table(records, str(path), target=1.15)
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()[2:]}
    assert set(rows) == {"reachable", "unreachable", "met"}
    # 3 block calls x 1.5 ms = 4.5 ms of convolutions, nearly all of it room.
    assert "| 0.43 ms | yes |" in rows["reachable"]  # 10 - 11/1.15
    assert "| 12.17 ms | **no** |" in rows["unreachable"]
    assert rows["met"].endswith("| 0.00 ms | met already |")
    assert "3 / 2" in rows["reachable"]  # the block 3 times; stem and dilated block not in this log


def test_the_command_needs_a_zoo_result(capsys) -> None:
    with pytest.raises(SystemExit):
        tuner_breakdown.main(["--step-ceiling", "log.jsonl"])
    assert "--step-ceiling needs --zoo" in capsys.readouterr().err
