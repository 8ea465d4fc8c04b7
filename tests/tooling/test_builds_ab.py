"""CPU: the builds A/B benchmark (benchmarks/harness/builds_ab.py): its layer syntax, its refusals
of bad arguments, and the parent's rounds (the order of the builds reversed every other round, a
failed child reported and left out, medians and ratios in the table) with stand-in children."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import builds_ab  # noqa: E402


@pytest.mark.parametrize(("text", "expected"), [
    ("64x240x28x240x5x1", (64, 240, 28, 240, 5, 1, 240)),  # K == C and a window: depthwise
    ("64x16x112x64x1x1", (64, 16, 112, 64, 1, 1, 1)),
    ("64x16x112x16x1x1", (64, 16, 112, 16, 1, 1, 1)),  # 1x1: dense even with K == C
    ("64x120x28x120x3x1x5", (64, 120, 28, 120, 3, 1, 5)),
])
def test_layers_name_shape_filter_stride_and_groups(text, expected) -> None:
    assert builds_ab.parse_layer(text) == expected


@pytest.mark.parametrize(("args", "message"), [
    (["--layers", "64x16"], "--layers: layer '64x16'"),
    (["--layers", "64x16x112x16x1xone"], "of positive integers"),
    (["--layers", "64x16x112x16x0x1"], "of positive integers"),
    (["--layers", "64x16x112x16x1x1", "--directions", "fwd,both"], "each of fwd, data, filter"),
])
def test_bad_arguments_are_refused_naming_what_is_valid(args, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        builds_ab.main(["--builds", "a,b", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_rounds_alternate_the_builds_and_report_medians(monkeypatch, capsys) -> None:
    calls: list[str] = []
    times = {"/x/A": [0.010, 0.012, 0.011], "/x/B": [0.005, 0.006, 0.004]}

    def child(command, env, capture_output, text):
        build = env["PYTHONPATH"]
        calls.append(Path(build).name)
        if build == "/x/B" and calls.count("B") == 2:  # B's second round fails: left out
            return subprocess.CompletedProcess(command, 1, "", "boom")
        value = times[build].pop(0)
        return subprocess.CompletedProcess(command, 0, builds_ab.MARKER + json.dumps({"1x8x4x8x3x1 fwd": value}), "")

    monkeypatch.setattr(builds_ab.subprocess, "run", child)
    assert builds_ab.main(["--builds", "/x/A,/x/B", "--layers", "1x8x4x8x3x1", "--directions", "fwd",
                           "--rounds", "3"]) == 0
    assert calls == ["A", "B", "B", "A", "A", "B"]
    captured = capsys.readouterr()
    assert "/x/B: round 1 failed" in captured.err and "boom" in captured.err
    row = [line for line in captured.out.splitlines() if line.startswith("| 1x8x4x8x3x1 ")][0]
    # A: median of 0.010, 0.012, 0.011; B: of 0.005 and 0.006 (its failed round left out).
    assert "| 0.0110 (0.0100-0.0120) | 0.0055 (0.0050-0.0060) | 2.000 |" in row
