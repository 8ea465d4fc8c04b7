"""CPU: plans — JSON round trip, version and environment mismatches, corrupt
files (a clear error naming the file, nothing applied), use_plan in the
extension (entries in force, overrides registered, context manager), and
TORCH_CUDNN_ALGO_PLAN at autoload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import ConvSpec, Plan, PlanEntry, PlanError

from plan_checks import check_mismatch_warns_and_strict_refuses

ENGINE = "eng0_k2=1_k13=0"
FWD = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
BWD_DATA = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last bwd_data"
BWD_FILTER = "conv_transpose2d 8x32x7x7 -> 16x4x4 s2 p1 op1 fp32 contiguous bwd_filter"
CONV1D = "conv1d 4x16x100 -> 32x5 s1 p2 fp32 contiguous fwd"

pytestmark = pytest.mark.skipif(not torch_cudnn_algo.is_available(), reason="needs the C++ extension")


def sample_plan() -> Plan:
    return Plan({
        FWD: PlanEntry(ENGINE, time_ms=0.071, stock_ms=0.073, workspace=1024),
        BWD_DATA: PlanEntry(1, time_ms=0.2, stock_ms=0.2, workspace=0),
        BWD_FILTER: PlanEntry(None),
        CONV1D: "eng7",
    }, policy="fastest")


def in_force() -> dict[str, str]:
    return {entry.label: entry.choice for entry in torch_cudnn_algo._ops.plan_entries_in_force()}


def write(path: Path, data: object) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_json_round_trip_keeps_every_entry_and_the_environment(tmp_path: Path) -> None:
    plan = sample_plan()
    path = tmp_path / "plan.json"
    plan.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "torch-cudnn-algo plan" and data["version"] == 1
    assert data["torch"] == torch.__version__ and data["cudnn"] == torch.backends.cudnn.version()
    assert {"gpu", "created", "policy"} <= set(data)
    # Readable configuration strings are the keys; a 1-d convolution is planned as cuDNN runs it (2-d).
    assert set(data["entries"]) == {FWD, BWD_DATA, BWD_FILTER, "conv2d 4x16x1x100 -> 32x1x5 s1 p0x2 fp32 contiguous fwd"}
    assert data["entries"][FWD] == {"choice": "eng0_k2=1_k13=0", "time_ms": 0.071, "stock_ms": 0.073, "workspace": 1024}
    assert data["entries"][BWD_FILTER] == {"choice": None}
    loaded = torch_cudnn_algo.load_plan(path)
    assert loaded.entries == plan.entries
    assert (loaded.policy, loaded.torch, loaded.cudnn, loaded.gpu, loaded.created) == (
        plan.policy, plan.torch, plan.cudnn, plan.gpu, plan.created)
    assert loaded.source == str(path)
    assert loaded[CONV1D].choice == "eng7" and CONV1D in loaded
    assert not list(tmp_path.glob("*.partial"))


def test_plan_choices_are_canonical_and_validated_per_direction() -> None:
    plan = Plan({FWD: "IMPLICIT_PRECOMP_GEMM", BWD_DATA: "eng62_k13=1_k2=0"})
    assert plan[FWD].choice == 1
    assert plan[BWD_DATA].choice == "eng62_k2=0_k13=1"
    with pytest.raises(ValueError, match="not the 'fastest' policy"):
        Plan({FWD: "fastest"})
    with pytest.raises(ValueError, match="not implemented by cuDNN|WINOGRAD"):
        Plan({BWD_FILTER: 4})
    with pytest.raises(ValueError):
        Plan({FWD: "eng"})


def test_format_lists_every_configuration() -> None:
    text = sample_plan().format()
    assert FWD in text and ENGINE in text and "stock" in text and "0.0710" in text


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d.update(cudnn=8907), "made with cuDNN 8.9.7, this process runs cuDNN 9."),
])  # another GPU's name: test_plan_gpu.py (compared with this process's GPU)
def test_another_cudnn_warns_and_strict_refuses(tmp_path: Path, mutate, expected: str) -> None:
    data = sample_plan().to_dict()
    mutate(data)
    path = write(tmp_path / "other.json", data)
    check_mismatch_warns_and_strict_refuses(path, expected, entries=4)


def good() -> dict:
    return sample_plan().to_dict()


CORRUPT = {
    "not json": ("{not json", "not JSON"),
    "a list": ([1, 2], 'no "format"'),
    "foreign json": ({"hello": "world"}, 'no "format"'),
    "newer version": ({**good(), "version": 99}, "version 99 is newer"),
    "version not int": ({**good(), "version": "1"}, '"version" must be an integer'),
    "entries not object": ({**good(), "entries": []}, '"entries" must be an object'),
    "bad configuration": ({**good(), "entries": {"conv2d 1x2": {"choice": 1}}}, "entry 'conv2d 1x2'"),
    "bad choice": ({**good(), "entries": {FWD: {"choice": "engX"}}}, f"entry {FWD!r}"),
    "policy as choice": ({**good(), "entries": {FWD: {"choice": "fastest"}}}, "not the 'fastest' policy"),
    "entry not object": ({**good(), "entries": {FWD: "eng0"}}, 'with a "choice"'),
    "unknown field": ({**good(), "entries": {FWD: {"choice": 1, "speed": 2}}}, "unknown fields ['speed']"),
    "measure not number": ({**good(), "entries": {FWD: {"choice": 1, "time_ms": "fast"}}}, "time_ms must be a number"),
    "cudnn not int": ({**good(), "cudnn": "9.19"}, '"cudnn" must be an integer'),
    "duplicate after 1-d lift": ({**good(), "entries": {CONV1D: {"choice": 0},
                                  "conv2d 4x16x1x100 -> 32x1x5 s1 p0x2 fp32 contiguous fwd": {"choice": 1}}},
                                 "a second entry"),
}


@pytest.mark.parametrize("name", CORRUPT)
def test_corrupt_or_foreign_file_names_the_file_and_applies_nothing(tmp_path: Path, name: str) -> None:
    content, expected = CORRUPT[name]
    previous = Plan({FWD: ENGINE})
    torch_cudnn_algo.use_plan(previous)
    before = in_force()
    path = write(tmp_path / "corrupt.json", content)
    with pytest.raises(PlanError) as info:
        torch_cudnn_algo.use_plan(str(path))
    message = str(info.value)
    assert message.startswith(str(path)) and expected in message, message
    assert torch_cudnn_algo.current_plan() is previous
    assert in_force() == before


def test_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(PlanError, match="not UTF-8"):
        torch_cudnn_algo.load_plan(path)


def test_use_plan_puts_entries_in_force_and_registers_the_overrides() -> None:
    assert torch_cudnn_algo.diagnostics.active_overrides() == []
    plan = sample_plan()
    torch_cudnn_algo.use_plan(plan)
    assert torch_cudnn_algo.current_plan() is plan
    assert in_force() == {FWD: ENGINE, BWD_DATA: "1", BWD_FILTER: "",
                          "conv2d 4x16x1x100 -> 32x1x5 s1 p0x2 fp32 contiguous fwd": "eng7"}
    assert set(torch_cudnn_algo.diagnostics.active_overrides()) == {
        "aten::cudnn_convolution", "aten::cudnn_convolution_transpose", "aten::convolution_backward"}
    assert set(torch_cudnn_algo.diagnostics.plan_entry_run_counts().values()) == {0}
    torch_cudnn_algo.use_plan(None)
    assert torch_cudnn_algo.current_plan() is None and in_force() == {}
    assert torch_cudnn_algo.diagnostics.active_overrides() == []


def test_a_plan_covering_one_direction_registers_only_what_it_needs() -> None:
    torch_cudnn_algo.use_plan(Plan({FWD: ENGINE}))
    assert set(torch_cudnn_algo.diagnostics.active_overrides()) == {"aten::cudnn_convolution",
                                                                    "aten::convolution_backward"}


def test_use_plan_as_context_manager_restores_the_previous_plan(tmp_path: Path) -> None:
    outer = Plan({FWD: ENGINE})
    torch_cudnn_algo.use_plan(outer)
    inner_path = tmp_path / "inner.json"
    Plan({BWD_DATA: 0}).save(inner_path)
    with torch_cudnn_algo.use_plan(inner_path) as inner:
        assert torch_cudnn_algo.current_plan() is inner and in_force() == {BWD_DATA: "0"}
        assert inner.source == str(inner_path)
    assert torch_cudnn_algo.current_plan() is outer and in_force() == {FWD: ENGINE}
    with pytest.raises(RuntimeError, match="inside"):
        with torch_cudnn_algo.use_plan(None):
            assert in_force() == {}
            raise RuntimeError("inside")
    assert torch_cudnn_algo.current_plan() is outer


def test_use_plan_refuses_other_types() -> None:
    with pytest.raises(TypeError, match="takes a Plan"):
        torch_cudnn_algo.use_plan({FWD: 1})


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environment, timeout=300)


PROBE = """
    import torch, torch_cudnn_algo
    plan = torch_cudnn_algo.current_plan()
    in_force = {entry.label: entry.choice for entry in torch_cudnn_algo._ops.plan_entries_in_force()}
    print(None if plan is None else (plan.source, len(plan)), in_force)
"""


def test_environment_variable_applies_a_plan_at_autoload(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    Plan({FWD: ENGINE, BWD_DATA: 1}).save(path)
    result = run_python(PROBE, TORCH_CUDNN_ALGO_PLAN=str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{(str(path), 2)} {({FWD: ENGINE, BWD_DATA: '1'})}"


def test_bad_environment_plan_is_one_warning_and_import_torch_still_works(tmp_path: Path) -> None:
    path = write(tmp_path / "broken.json", "{broken")
    result = run_python(PROBE, TORCH_CUDNN_ALGO_PLAN=str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "None {}"
    assert f"ignoring environment variable TORCH_CUDNN_ALGO_PLAN={str(path)!r}" in result.stderr and "not JSON" in result.stderr
    missing = run_python(PROBE, TORCH_CUDNN_ALGO_PLAN=str(tmp_path / "missing.json"))
    assert missing.returncode == 0 and "No such file" in missing.stderr


def test_saved_entries_parse_back_as_conv_specs(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    sample_plan().save(path)
    for key in json.loads(path.read_text())["entries"]:
        assert str(ConvSpec.parse(key)) == key


def test_no_warning_for_a_plan_made_here(tmp_path: Path) -> None:
    path = tmp_path / "here.json"
    sample_plan().save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_cudnn_algo.load_plan(path)
