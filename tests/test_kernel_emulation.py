"""CPU: our CUDA kernels' own source (csrc/kernels/grouped_mma.cu, pointwise_mma.cu, pointwise_filter.cu,
gemm_filter.cu, depthwise.cu, direct_conv.cu) run on the host
by an emulation of the CUDA runtime (tests/emulation: the kernel file rewritten where CUDA-only
syntax stands, blocks run in turn, their threads as real threads so barriers are real, shared
memory filled with NaN), against float64 references: every output element, guard regions around
the output, a NaN prefill (an element never written fails), misaligned operands. The GPU runs the
same kinds of checks (devtools/kernels); this one needs no GPU, so a kernel change that breaks
the logic fails on every machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "emulation" / "run"

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("python3") is None,
                               reason="the emulation is compiled with g++ and rewritten by python3; this machine "
                                      "lacks one of them")


def run_emulation(kernel: str, build: Path) -> str:
    done = subprocess.run(["sh", str(RUN), kernel], cwd=ROOT, env={**os.environ, "BUILD": str(build)},
                          capture_output=True, text=True, timeout=900, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return output


@needs_cxx
def test_grouped_tensor_core_kernel_matches_float64_on_the_host(tmp_path: Path) -> None:
    output = run_emulation("grouped", tmp_path)
    assert "ALL PASS (0 failures" in output, output[-4000:]


@needs_cxx
def test_pointwise_tensor_core_kernel_matches_float64_on_the_host(tmp_path: Path) -> None:
    output = run_emulation("pointwise", tmp_path)
    assert "ALL PASS (0 failures" in output, output[-4000:]
    # Every kernel instance (up to 4, 8, 12 and 20 column fragments) and both weight stagings ran,
    # a block took more tiles than its stages, and the refusals were checked.
    for case in ("16->16 n2 11x12", "16->64 n1 17x19", "16->96 n1 12x12", "24->144 n1 9x10"):
        assert f"ok   {case}" in output, case
    for layout in ("wContig", "wT", "wMisaligned"):
        assert f" {layout} " in output, layout
    assert "ok   16->24 n4 32x36 (36 tiles)               fp16 fwd wT          sm1   early" in output
    assert output.count("ok   refused") == 14, output[-4000:]


@needs_cxx
def test_pointwise_filter_gradient_kernel_matches_float64_on_the_host(tmp_path: Path) -> None:
    output = run_emulation("pointwise-filter", tmp_path)
    assert "ALL PASS (0 failures" in output, output[-4000:]
    # Fragments split over 1 to 8 warp groups, both finishes (few slices and many), a block taking
    # more tiles than its stages, and the refusals.
    for case in ("16->16 n2 11x12 (2 fragments)", "72->24 n1 13x13 (18: 2 groups)", "144->24 n1 9x9 (36: 4 groups)",
                 "128->128 n1 6x6 (128: 8 groups)"):
        assert f"ok   {case}" in output, case
    assert "ok   16->24 n4 32x36 (36 tiles)           fp16 w     sm132 late    36 slices" in output
    assert "ok   16->24 n4 32x36 (36 tiles)           fp16 wT    sm1   early    2 slices" in output
    assert output.count("ok   refused") == 6, output[-4000:]


@needs_cxx
def test_stem_filter_gradient_kernel_matches_float64_on_the_host(tmp_path: Path) -> None:
    output = run_emulation("gemm-filter", tmp_path)
    assert "ALL PASS (0 failures" in output, output[-4000:]
    # Several tiles a block, and the refusals, were among the cases.
    assert "several a block) fp16 wNCHW sm1   early workspace 10368 " in output, output[-4000:]
    # The by-vector pipeline ran more tiles a block than it has stages, its copies landing early and late.
    assert "(8 tiles, 3 stages)    fp16 wNCHW sm1   early" in output, output[-4000:]
    assert "(8 tiles, 3 stages)    fp16 wNHWC sm132 late" in output, output[-4000:]
    assert "FAIL refused" not in output


@needs_cxx
def test_depthwise_kernels_match_float64_on_the_host(tmp_path: Path) -> None:
    output = run_emulation("depthwise", tmp_path)
    assert "ALL PASS (0 failures" in output, output[-4000:]
    # Every direction's kernels ran: the gathers forward and backward, the filter kernels and both
    # finishes (many slices and few), the tensor-core ones in fp16 and bf16.
    for kernel in ("dw_gather", "dw_filter", "sum_slices", "sum_few_slices", "dw_mma", "dw_mma_filter"):
        assert f"{kernel}(" in output, output[-4000:]
    for dtype in ("__half", "__nv_bfloat16"):
        assert f"dw_mma(MmaGeom, const T*, const T*, T*) [with T = {dtype}]" in output, output[-4000:]
        assert f"dw_mma_filter(MmaFilterGeom, const T*, const T*, float*) [with T = {dtype}]" in output
    # The CUDA-core filter gradient's grid fills its waves: 5x5 at stride 1 on 2 blocks an SM of 132 SMs.
    assert "EfficientNet 1152x7x7 5x5      filter waves: 252 blocks in 1 waves of 264 places (2 an SM)" in output


@needs_cxx
def test_general_kernels_match_float64_on_the_host(tmp_path: Path) -> None:
    output = run_emulation("direct", tmp_path)
    assert "ALL PASS (0 failures" in output, output[-4000:]
    # Both layouts' gathers and filters ran, vectorised and not, with 32- and 64-bit indices,
    # every element type, both finishes (many slices and few), and the refusals were checked.
    for kernel in ("gather_nchw(", "gather_nhwc(", "filter_nchw(", "filter_nhwc(", "sum_slices(", "sum_few_slices("):
        assert kernel in output, output[-4000:]
    for instance in ("int VEC = 8", "int VEC = 1", "Index = int;", "Index = long int;", "T = __half",
                     "T = __nv_bfloat16", "T = float", "T = double"):
        assert instance in output, instance
    assert output.count("ok   refusal:") == 3, output[-4000:]
    # Where both tensor-core filter kernels take a 1x1 filter gradient, the dispatch picked the one
    # measured faster for each width of dy (the GEMM kernel for 24 to 64 channels).
    assert output.count("ok   filter choice:") == 6, output[-4000:]


def test_the_runner_names_what_it_runs() -> None:
    done = subprocess.run(["sh", str(RUN), "conv3d"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "the kernel is grouped, pointwise, pointwise-filter, gemm-filter, depthwise or direct, got 'conv3d'" in done.stderr
