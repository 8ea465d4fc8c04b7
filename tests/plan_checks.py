"""Checks shared by the CPU and GPU plan tests (a helper module, no tests of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import PlanError, PlanMismatchWarning


def check_mismatch_warns_and_strict_refuses(path: Path, expected: str, entries: int) -> None:
    """A plan file made elsewhere: loading it warns (and keeps its ``entries``), strict loading
    raises naming the file, and strict=None follows the conv_algo_strict flag."""
    with pytest.warns(PlanMismatchWarning, match=expected):
        plan = torch_cudnn_algo.load_plan(path)
    assert len(plan) == entries
    with pytest.raises(PlanError, match=expected) as info:
        torch_cudnn_algo.load_plan(path, strict=True)
    assert str(path) in str(info.value)
    torch.backends.cudnn.conv_algo_strict = True  # strict=None follows the flag
    with pytest.raises(PlanError, match=expected):
        torch_cudnn_algo.load_plan(path)
