"""CPU: plans that carry their built execution plans (docs/plan_format.md) —
file round trip, versions (older files still load), execution plans made for
another GPU, cuDNN or frontend (one warning, the entry kept without it),
corrupt ones (a PlanError naming the entry, nothing applied), and what is
staged in the extension. The blobs here are stand-ins shaped like the cuDNN
frontend's UBJSON; loading real ones is tests/test_plan_blobs_gpu.py's."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import warnings
from pathlib import Path

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import Plan, PlanEntry, PlanError, PlanMismatchWarning, SerializedExecutionPlan, _plan

pytestmark = pytest.mark.skipif(not torch_cudnn_algo.is_available(), reason="needs the C++ extension")

FWD = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd"
BWD_DATA = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last bwd_data"
BWD_FILTER = "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last bwd_filter"
GPU, CUDNN, FRONTEND = "Test GPU 80GB", 91900, 13200


def ubjson(value: object) -> bytes:
    """A minimal UBJSON encoder (strings, ints, lists, objects): what the
    frontend's serialised plans are written in."""
    def length(n: int) -> bytes:
        return b"U" + bytes([n]) if n < 256 else b"l" + struct.pack(">i", n)

    if isinstance(value, str):
        data = value.encode()
        return b"S" + length(len(data)) + data
    if isinstance(value, int):
        return b"l" + struct.pack(">i", value)
    if isinstance(value, list):
        return b"[" + b"".join(ubjson(v) for v in value) + b"]"
    assert isinstance(value, dict)
    return b"{" + b"".join(length(len(k.encode())) + k.encode() + ubjson(v) for k, v in value.items()) + b"}"


def frontend_blob(tag: str = "x") -> bytes:
    return ubjson({"json_version": "2.0", "cudnn_backend_data": '{"plan": "' + tag + '"}',
                   "variant_pack_uids": [1, 2, 3], "behavior_notes": [[]]})


def built(gpu: str = GPU, cudnn: int = CUDNN, frontend: int = FRONTEND, data: bytes | None = None) -> SerializedExecutionPlan:
    return SerializedExecutionPlan(frontend_blob() if data is None else data, gpu, cudnn, frontend)


def blob_plan(**kwargs: object) -> Plan:
    return Plan({
        FWD: PlanEntry("eng0_k2=1_k13=0", time_ms=0.07, stock_ms=0.08, workspace=0, execution_plan=built(**kwargs)),
        BWD_DATA: PlanEntry("eng7_k2=1", execution_plan_unavailable="cuDNN cannot serialise it: no"),
        BWD_FILTER: PlanEntry(1),
    }, policy="fastest")


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process runs on GPU GPU with cuDNN CUDNN and frontend FRONTEND (no GPU needed)."""
    monkeypatch.setattr(_plan, "_build_environment", lambda: (GPU, CUDNN, FRONTEND))


def blob_labels() -> list[str]:
    return torch_cudnn_algo._ops.plan_entries_with_execution_plan()


def in_force() -> dict[str, str]:
    return {entry.label: entry.choice for entry in torch_cudnn_algo._ops.plan_entries_in_force()}


def test_round_trip_keeps_the_blob_readably_beside_the_choice(tmp_path: Path) -> None:
    plan = blob_plan()
    path = tmp_path / "plan.json"
    plan.save(path)
    data = json.loads(path.read_text())
    assert data["version"] == 2
    entry = data["entries"][FWD]
    assert entry["choice"] == "eng0_k2=1_k13=0" and entry["time_ms"] == 0.07
    blob = frontend_blob()
    assert entry["execution_plan"] == {
        "gpu": GPU, "cudnn": CUDNN, "cudnn_frontend": FRONTEND, "bytes": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(), "base64": base64.b64encode(blob).decode()}
    assert data["entries"][BWD_DATA] == {"choice": "eng7_k2=1",
                                         "execution_plan_unavailable": "cuDNN cannot serialise it: no"}
    assert data["entries"][BWD_FILTER] == {"choice": 1}
    loaded = torch_cudnn_algo.load_plan(path)
    assert loaded.entries == plan.entries
    assert loaded[FWD].execution_plan.data == blob
    assert "1 with their built execution plans" in loaded.format()


def test_a_plan_without_blobs_is_still_written_as_version_1(tmp_path: Path) -> None:
    path = tmp_path / "plain.json"
    Plan({FWD: "eng0"}).save(path)
    assert json.loads(path.read_text())["version"] == 1


def test_an_older_version_1_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "v1.json"
    path.write_text(json.dumps({
        "format": "torch-cudnn-algo plan", "version": 1, "torch": torch.__version__, "cudnn": None, "gpu": None,
        "created": "2025-01-01T00:00:00+00:00", "policy": "fastest",
        "entries": {FWD: {"choice": "eng0_k2=1_k13=0", "time_ms": 0.1}, BWD_FILTER: {"choice": None}}}))
    plan = torch_cudnn_algo.load_plan(path)
    assert plan[FWD] == PlanEntry("eng0_k2=1_k13=0", time_ms=0.1) and plan[BWD_FILTER].choice is None
    torch_cudnn_algo.use_plan(plan)
    assert in_force() == {FWD: "eng0_k2=1_k13=0", BWD_FILTER: ""} and blob_labels() == []


def test_use_plan_stages_blobs_made_here(here: None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_cudnn_algo.use_plan(blob_plan())
    assert blob_labels() == [FWD]
    assert in_force()[FWD] == "eng0_k2=1_k13=0"
    torch_cudnn_algo.use_plan(None)
    assert blob_labels() == []


@pytest.mark.parametrize("foreign, why", [
    (dict(gpu="Other GPU"), "made on a Other GPU, this process runs on a Test GPU 80GB"),
    (dict(cudnn=90100), "made with cuDNN 90100, this process runs cuDNN 91900"),
    (dict(frontend=11200), "made with cuDNN frontend 11200"),
])
def test_a_foreign_blob_is_one_warning_and_the_entry_is_kept_without_it(
        here: None, tmp_path: Path, foreign: dict, why: str) -> None:
    plan = Plan({FWD: PlanEntry("eng0_k2=1_k13=0", execution_plan=built(**foreign)),
                 BWD_DATA: PlanEntry("eng7_k2=1", execution_plan=built(**foreign))})
    path = tmp_path / "foreign.json"
    plan.save(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch_cudnn_algo.use_plan(path) as loaded:
            assert in_force() == {FWD: "eng0_k2=1_k13=0", BWD_DATA: "eng7_k2=1"}
            assert blob_labels() == []  # never trusted: the choices are built as without them
        # Restoring the previous plan (none) on exit says nothing more.
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and caught[0].category is PlanMismatchWarning, messages
    assert messages[0].startswith(str(path)) and "2 of its 2 built execution plans are ignored" in messages[0]
    assert why in messages[0]
    # The plan object keeps them: saved again, the file still carries them.
    assert loaded[FWD].execution_plan == built(**foreign)


def test_only_the_foreign_blobs_are_ignored(here: None) -> None:
    plan = Plan({FWD: PlanEntry("eng0_k2=1_k13=0", execution_plan=built()),
                 BWD_DATA: PlanEntry("eng7_k2=1", execution_plan=built(gpu="Other GPU"))})
    with pytest.warns(PlanMismatchWarning, match="1 of its 2 built execution plans"):
        torch_cudnn_algo.use_plan(plan)
    assert blob_labels() == [FWD]


def test_without_a_gpu_blobs_are_silently_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_plan, "_build_environment", lambda: (None, CUDNN, FRONTEND))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch_cudnn_algo.use_plan(blob_plan())
    assert blob_labels() == [] and FWD in in_force()


def encoded(plan: Plan) -> dict:
    return plan.to_dict()


def with_blob_field(**fields: object) -> dict:
    data = encoded(blob_plan())
    data["entries"][FWD]["execution_plan"].update(fields)
    return data


def without_blob_field(name: str) -> dict:
    data = encoded(blob_plan())
    del data["entries"][FWD]["execution_plan"][name]
    return data


CORRUPT = {
    "bad base64": (with_blob_field(base64="not*base64!"), "not base64"),
    "truncated": (with_blob_field(base64=base64.b64encode(frontend_blob()[:-3]).decode()), "is corrupt"),
    "sha256 mismatch": (with_blob_field(sha256="0" * 64), "is corrupt"),
    "missing sha256": (without_blob_field("sha256"), "sha256 must be a string"),
    "cudnn not int": (with_blob_field(cudnn="9.19"), "cudnn must be an integer"),
    "unknown blob field": (with_blob_field(extra=1), "unknown fields ['extra']"),
    "blob not object": (None, "execution_plan must be an object"),
    "legacy choice with blob": (None, "belongs to an engine configuration"),
    "version 1 with blob": (None, "unknown fields ['execution_plan']"),
}


def corrupt_content(name: str) -> dict:
    content, _ = CORRUPT[name]
    if content is not None:
        return content
    data = encoded(blob_plan())
    if name == "blob not object":
        data["entries"][FWD]["execution_plan"] = "AAAA"
    elif name == "legacy choice with blob":
        data["entries"][FWD]["choice"] = 1
    else:
        data["version"] = 1
    return data


@pytest.mark.parametrize("name", CORRUPT)
def test_a_corrupt_blob_is_a_plan_error_naming_the_entry_and_nothing_is_applied(
        here: None, tmp_path: Path, name: str) -> None:
    previous = Plan({BWD_FILTER: 0})
    torch_cudnn_algo.use_plan(previous)
    before = in_force()
    path = tmp_path / "corrupt.json"
    path.write_text(json.dumps(corrupt_content(name)))
    with pytest.raises(PlanError) as info:
        torch_cudnn_algo.use_plan(str(path))
    message = str(info.value)
    assert message.startswith(str(path)) and f"entry {FWD!r}" in message and CORRUPT[name][1] in message, message
    assert torch_cudnn_algo.current_plan() is previous and in_force() == before and blob_labels() == []


@pytest.mark.parametrize("data, problem", [
    (b"\x00\xffgarbage", "not UBJSON"),
    (ubjson(["a", "list"]), "not a UBJSON object"),
    (ubjson({"json_version": "2.0"}), "no cuDNN execution plan"),
    (ubjson({"cudnn_backend_data": "{}", "behavior_notes": []}), "no tensor uids"),
])
def test_bytes_that_are_no_frontend_plan_are_a_plan_error_when_put_in_use(
        here: None, tmp_path: Path, data: bytes, problem: str) -> None:
    """The checksum matches (the file was written so): the bytes themselves are no plan."""
    previous = Plan({BWD_FILTER: 0})
    torch_cudnn_algo.use_plan(previous)
    before = in_force()
    path = tmp_path / "garbage.json"
    Plan({BWD_DATA: "eng7_k2=1", FWD: PlanEntry("eng0_k2=1_k13=0", execution_plan=built(data=data))}).save(path)
    loaded = torch_cudnn_algo.load_plan(path)  # sha256 and base64 are fine
    with pytest.raises(PlanError) as info:
        torch_cudnn_algo.use_plan(loaded)
    message = str(info.value)
    assert message.startswith(str(path)) and f"the plan entry '{FWD}'" in message and problem in message, message
    assert torch_cudnn_algo.current_plan() is previous and in_force() == before and blob_labels() == []


@pytest.mark.parametrize("version, expected", [(3, "version 3 is newer"), (0, "version 0 does not exist")])
def test_version_mismatch(tmp_path: Path, version: int, expected: str) -> None:
    data = encoded(blob_plan())
    data["version"] = version
    path = tmp_path / "version.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match=expected):
        torch_cudnn_algo.load_plan(path)


def test_an_execution_plan_needs_an_engine_choice() -> None:
    with pytest.raises(ValueError, match="belongs to an engine configuration"):
        Plan({FWD: PlanEntry(1, execution_plan=built())})
    with pytest.raises(ValueError, match="belongs to an engine configuration"):
        Plan({FWD: PlanEntry(None, execution_plan=built())})


def test_the_extension_refuses_a_blob_on_a_legacy_choice() -> None:
    ops = torch_cudnn_algo._ops
    spec = torch_cudnn_algo.ConvSpec.parse(FWD)
    with pytest.raises(ValueError, match="no engine configuration"):
        ops.stage_plan_entry(spec, "1", FWD, frontend_blob(), GPU)
    # The operator's own check of what carries the bytes, under the typed wrapper.
    blob = torch.frombuffer(bytearray(frontend_blob()), dtype=torch.uint8)
    with pytest.raises(ValueError, match="1-d uint8 CPU tensor"):
        torch.ops.torch_cudnn_algo.stage_plan_entry(ops._conv_json(spec), "eng0", FWD, blob.float(), GPU)
    ops.discard_staged_plan()


def test_execution_plan_counts_are_there_without_a_gpu() -> None:
    counts = torch_cudnn_algo.diagnostics.execution_plan_counts()
    assert set(counts) == {"built", "built_by_heuristics", "deserialized", "prefetched", "deserialize_failed",
                           "build_us", "deserialize_us"}
    assert all(isinstance(v, int) and v >= 0 for v in counts.values())
    ops = torch_cudnn_algo._ops
    assert ops.cudnn_frontend_version() >= 13200 and ops.cudnn_runtime_version() > 0


def test_environment_variable_plan_with_blobs_applies(tmp_path: Path) -> None:
    from test_plan import PROBE, run_python

    path = tmp_path / "plan.json"
    blob_plan().save(path)
    result = run_python(PROBE, TORCH_CUDNN_ALGO_PLAN=str(path))
    assert result.returncode == 0, result.stderr
    assert f"{(str(path), 3)}" in result.stdout
