"""GPU: a plan carrying its built execution plans, loaded by a fresh process
(TORCH_CUDNN_ALGO_PLAN, so the plan cache starts empty), runs every entry with
outputs bit-identical to the process that built them, and compiles nothing:
every entry with an execution plan is deserialised (same configuration and
workspace as built), none is built. Foreign and undeserialisable execution
plans are built instead, with one warning. The first call starts worker
threads that load the other execution plans ahead (also when that call is under
CUDA graph capture); without them every call loads its own. The processes are
tests/jobs/plan_blob_check.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_cudnn_algo._algorithms import KERNELS

pytestmark = pytest.mark.gpu

JOB = Path(__file__).parent / "jobs" / "plan_blob_check.py"


def run_job(*args: str, **env: str) -> tuple[dict, str]:
    environment = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8", **env}
    result = subprocess.run([sys.executable, str(JOB), *args], capture_output=True, text=True, env=environment,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    directory = tmp_path_factory.mktemp("blobs")
    plan, outputs = directory / "plan.json", directory / "outputs.pt"
    # Every plan built in the tuning process itself: a module fixture runs before the
    # per-test empty tuning database (conftest), so it gets one of its own, and no
    # compile worker (a worker's plan arrives serialised, as a loaded one does).
    report, _ = run_job("save", str(plan), str(outputs), TORCH_CUDNN_ALGO_COMPILE_WORKERS="0",
                        TORCH_CUDNN_ALGO_DB=str(tmp_path_factory.mktemp("tuning-db")))
    return plan, outputs, report


def counts(report: dict) -> dict[str, int]:
    """The report's plan build counts but "prefetched": which blobs a worker loads first is a race."""
    return {name: value for name, value in report["counts"].items() if name != "prefetched"}


def cudnn_entries(report: dict) -> int:
    """The plan's entries that make a cuDNN execution plan: all but our own kernels' (they are in
    the library: nothing to build or load)."""
    return sum(choice not in KERNELS for choice in report["entries"].values())


def plans_by_name(report: dict) -> dict[tuple[str, str, str], dict]:
    return {(p["direction"], p["conv"], p["engine"]): p for p in report["graph_plans"]}


def test_tune_keeps_execution_plans_where_cudnn_serialises_them(saved) -> None:
    plan_path, _, report = saved
    data = json.loads(plan_path.read_text())
    assert data["version"] == 2
    entries = report["entries"]
    assert len(entries) >= 10 and all(isinstance(choice, str) for choice in entries.values())
    # Every engine choice has an execution plan or says why not.
    assert set(report["with_execution_plan"]) | set(report["unavailable"]) == set(entries)
    assert report["with_execution_plan"], f"cuDNN serialised no plan: {report['unavailable']}"
    for conv in report["with_execution_plan"]:
        blob = data["entries"][conv]["execution_plan"]
        assert hashlib.sha256(base64.b64decode(blob["base64"])).hexdigest() == blob["sha256"]


def test_a_fresh_process_loading_the_plan_compiles_nothing_and_matches_bit_for_bit(saved) -> None:
    plan_path, outputs, built_report = saved
    report, stderr = run_job("load", str(outputs), TORCH_CUDNN_ALGO_PLAN=str(plan_path))
    assert "cannot load here" not in stderr and "cannot run this convolution" not in stderr, stderr
    assert not [w for w in report["warnings"] if "torch_cudnn_algo" in w or "execution plan" in w], report["warnings"]
    assert report["identical"] == {"out": True, "grads": True}
    entries = report["entries"]
    assert min(report["runs"].values()) >= 1 and set(report["runs"]) == set(entries), report["runs"]
    with_blob = len(report["with_execution_plan"])
    assert report["counts_before_step"] == {"built": 0, "deserialized": 0, "prefetched": 0, "deserialize_failed": 0}
    assert counts(report) == {"built": cudnn_entries(report) - with_blob, "deserialized": with_blob,
                              "deserialize_failed": 0}, (report["counts"], report["unavailable"])
    assert report["counts"]["prefetched"] <= with_blob - 1  # the first call loads its own
    # The step's plan time, split: rebuilding from execution plans, and building the rest.
    assert report["microseconds"]["deserialize_us"] > 0
    assert (report["microseconds"]["build_us"] > 0) == (cudnn_entries(report) > with_blob), report["microseconds"]
    # A deserialised plan is the built one: same configuration, same workspace.
    built = plans_by_name(built_report)
    deserialized = [p for p in report["graph_plans"] if p["deserialized"]]
    assert len(deserialized) == with_blob
    for plan in deserialized:
        original = built[(plan["direction"], plan["conv"], plan["engine"])]
        assert not original["deserialized"] and not plan["refusal"]
        assert (plan["choice"], plan["workspace"]) == (original["choice"], original["workspace"]), (plan, original)


def rewrite(plan_path: Path, target: Path, change) -> Path:
    data = json.loads(plan_path.read_text())
    for entry in data["entries"].values():
        if "execution_plan" in entry:
            change(entry["execution_plan"])
    target.write_text(json.dumps(data))
    return target


def test_execution_plans_made_for_another_gpu_are_ignored_with_one_warning(saved, tmp_path: Path) -> None:
    plan_path, outputs, _ = saved
    foreign = rewrite(plan_path, tmp_path / "foreign.json", lambda blob: blob.update(gpu="Imaginary GPU 9000"))
    report, stderr = run_job("load", str(outputs), TORCH_CUDNN_ALGO_PLAN=str(foreign))
    assert stderr.count("built execution plans are ignored") == 1, stderr
    assert report["counts"] == {"built": cudnn_entries(report), "deserialized": 0, "prefetched": 0,
                                "deserialize_failed": 0}
    assert report["microseconds"]["deserialize_us"] == 0 and report["microseconds"]["build_us"] > 0
    assert report["identical"] == {"out": True, "grads": True}


def test_an_execution_plan_cudnn_cannot_load_is_built_with_one_warning_per_entry(saved, tmp_path: Path) -> None:
    plan_path, outputs, _ = saved

    def break_cudnn_json(blob: dict) -> None:
        # Still the frontend's UBJSON (so the plan loads), but cuDNN's plan JSON inside is not JSON.
        data = bytearray(base64.b64decode(blob["base64"]))
        start = data.index(b"cudnn_backend_data")
        brace = data.index(b"{", start)
        data[brace:brace + 1] = b"#"
        blob.update(base64=base64.b64encode(bytes(data)).decode(), sha256=hashlib.sha256(bytes(data)).hexdigest())

    broken = rewrite(plan_path, tmp_path / "broken.json", break_cudnn_json)
    report, stderr = run_job("load", str(outputs), TORCH_CUDNN_ALGO_PLAN=str(broken))
    with_blob = len(report["with_execution_plan"])
    assert report["counts"] == {"built": cudnn_entries(report), "deserialized": 0, "prefetched": 0,
                                "deserialize_failed": with_blob}
    assert report["microseconds"]["deserialize_us"] > 0  # the failed attempts count too
    failures = [w for w in report["warnings"] if "cannot load here" in w]
    assert len(failures) == with_blob, report["warnings"]
    assert report["identical"] == {"out": True, "grads": True}


def test_the_first_call_loads_the_other_execution_plans_ahead_on_worker_threads(saved) -> None:
    plan_path, outputs, _ = saved
    report, _ = run_job("settle", str(outputs), TORCH_CUDNN_ALGO_PLAN=str(plan_path))
    with_blob = len(report["with_execution_plan"])
    assert with_blob >= 2
    # The first convolution loaded its own blob; while the job waited, the workers loaded the rest.
    assert report["counts"] == {"built": cudnn_entries(report) - with_blob, "deserialized": with_blob,
                                "prefetched": with_blob - 1, "deserialize_failed": 0}, report["counts"]
    assert report["identical"] == {"out": True, "grads": True}
    assert not [w for w in report["warnings"] if "torch_cudnn_algo" in w], report["warnings"]


def test_without_prefetch_threads_every_call_loads_its_own_execution_plan(saved) -> None:
    plan_path, outputs, _ = saved
    report, _ = run_job("settle", str(outputs), TORCH_CUDNN_ALGO_PLAN=str(plan_path),
                        TORCH_CUDNN_ALGO_PLAN_PREFETCH_THREADS="0")
    with_blob = len(report["with_execution_plan"])
    assert report["counts"] == {"built": cudnn_entries(report) - with_blob, "deserialized": with_blob,
                                "prefetched": 0, "deserialize_failed": 0}, report["counts"]
    assert report["identical"] == {"out": True, "grads": True}


def test_prefetch_workers_leave_a_cuda_graph_capture_of_the_first_calls_intact(saved) -> None:
    # PyTorch captures in the global mode: a worker's cuDNN handle creation or module load in
    # that mode would invalidate the capture running on the main thread.
    plan_path, outputs, _ = saved
    report, stderr = run_job("capture", str(outputs), TORCH_CUDNN_ALGO_PLAN=str(plan_path))
    with_blob = len(report["with_execution_plan"])
    assert counts(report) == {"built": cudnn_entries(report) - with_blob, "deserialized": with_blob,
                              "deserialize_failed": 0}, (report["counts"], stderr)
    assert report["captured_identical"], "the replayed forward differs from the saved logits"
    assert report["identical"] == {"out": True, "grads": True}
