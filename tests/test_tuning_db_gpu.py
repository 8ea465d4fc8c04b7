"""GPU: "fastest" decisions kept in the tuning database (csrc/decide/kept_decisions.h). A later
process takes an earlier one's decision instead of tuning, runs the same engine (stock's output
bits where the pick is stock's configuration; against float64 always), and builds nothing its
decision carries; tune() takes kept decisions unless asked to retune; a decision made under other
settings is not taken; processes of one node meeting a configuration at once tune it once (also
eight at once with a ninth killed among them); a corrupt decision is tuned again. On the fly, a
size within 2x of a tuned one borrows its decision (right against float64, kept, loaded later like
any), and tune() tunes over a borrowed decision."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import _ops, diagnostics

pytestmark = pytest.mark.gpu

# A depthwise layer: its "fastest" candidates include runtime-compiled engines, whose build is what
# a kept decision saves most.
CHILD = textwrap.dedent("""
    import hashlib, json, sys, torch, torch_cudnn_algo
    from torch_cudnn_algo import _ops
    sys.stdin.readline()  # start together when asked
    torch.manual_seed(0)
    x = torch.randn(32, 96, 56, 56, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w = torch.randn(96, 1, 5, 5, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(enabled=True), torch_cudnn_algo.flags(conv_fwd_algo="fastest"):
        y = torch.nn.functional.conv2d(x, w, padding=2, groups=96)
    torch.cuda.synchronize()
    print(json.dumps({"kept": _ops.kept_decision_counts(), "log": len(torch_cudnn_algo.diagnostics.tuning_log()),
                      "plans": torch_cudnn_algo.diagnostics.execution_plan_counts(),
                      "bits": hashlib.sha256(y.cpu().numpy().tobytes()).hexdigest()}), flush=True)
""")

# A process with no job to share decisions with adopts none and publishes none.
ALONE = {"adopted": 0, "shared": 0}


def run_children(count: int, db: str) -> list[dict]:
    env = {**os.environ, "TORCH_CUDNN_ALGO_DB": db, "TORCH_CUDNN_ALGO_COMPILE_WORKERS": "0"}
    processes = [subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True) for _ in range(count)]
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    results = [json.loads(process.stdout.read().splitlines()[-1]) for process in processes]
    assert all(process.wait() == 0 for process in processes)
    return results


def test_a_later_process_takes_the_decision_and_builds_nothing(tmp_path):
    (first,) = run_children(1, str(tmp_path))
    assert first["kept"] == {"kept": 0, "tuned": 1, "waited": 0, "borrowed": 0, **ALONE} and first["log"] == 1, first
    (second,) = run_children(1, str(tmp_path))
    assert second["kept"] == {"kept": 1, "tuned": 0, "waited": 0, "borrowed": 0, **ALONE} and second["log"] == 0, second
    assert second["bits"] == first["bits"]  # the same engine ran
    assert second["plans"]["built"] == 0 and second["plans"]["deserialized"] >= 1, second


def test_processes_meeting_a_configuration_at_once_tune_it_once(tmp_path):
    results = run_children(4, str(tmp_path))
    assert sum(r["kept"]["tuned"] for r in results) == 1, results
    assert sum(r["kept"]["kept"] for r in results) == 3, results
    assert len({r["bits"] for r in results}) == 1


def test_tune_takes_kept_decisions_unless_asked_to_retune():
    conv = torch.nn.Conv2d(48, 48, 3, padding=1, groups=2).cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn(16, 48, 28, 28, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    first = torch_cudnn_algo.tune(conv, x, progress=False)
    tuned = len(diagnostics.tuning_log())
    assert tuned == len(first) >= 2
    torch_cudnn_algo.clear_cache()
    second = torch_cudnn_algo.tune(conv, x, progress=False)
    assert diagnostics.tuning_log() == [] and _ops.kept_decision_counts()["kept"] >= tuned
    assert {str(c): e.choice for c, e in second.entries.items()} == {str(c): e.choice for c, e in first.entries.items()}
    assert all(e.execution_plan is not None for e in second.entries.values() if isinstance(e.choice, str))
    torch_cudnn_algo.clear_cache()
    torch_cudnn_algo.tune(conv, x, progress=False, retune=True)
    assert len(diagnostics.tuning_log()) == tuned


def test_a_decision_made_under_other_settings_is_not_taken():
    x = torch.randn(16, 64, 28, 28, device="cuda", dtype=torch.float16)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16)
    with torch.backends.cudnn.flags(enabled=True), torch_cudnn_algo.flags(conv_fwd_algo="fastest"):
        torch.nn.functional.conv2d(x, w, padding=1)
    assert len(diagnostics.tuning_log()) == 1
    torch_cudnn_algo.clear_cache()
    with torch.backends.cudnn.flags(enabled=True), torch_cudnn_algo.flags(conv_fwd_algo="fastest",
                                                                          conv_workspace_limit=0):
        torch.nn.functional.conv2d(x, w, padding=1)
    assert len(diagnostics.tuning_log()) == 1  # tuned again: the limit is part of the decision
    torch_cudnn_algo.clear_cache()
    with torch.backends.cudnn.flags(enabled=True), torch_cudnn_algo.flags(conv_fwd_algo="fastest"):
        torch.nn.functional.conv2d(x, w, padding=1)
    assert diagnostics.tuning_log() == []  # the first decision, kept


def test_a_corrupt_decision_is_tuned_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path))
    x = torch.randn(16, 64, 28, 28, device="cuda", dtype=torch.float16)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16)

    def decide() -> int:
        torch_cudnn_algo.clear_cache()
        with torch.backends.cudnn.flags(enabled=True), torch_cudnn_algo.flags(conv_fwd_algo="fastest"):
            torch.nn.functional.conv2d(x, w, padding=1)
        return len(diagnostics.tuning_log())

    assert decide() == 1
    (decision,) = tmp_path.glob("*.decision")
    data = bytearray(decision.read_bytes())
    data[-1] ^= 0xFF
    decision.write_bytes(bytes(data))
    rejected = torch_cudnn_algo.db.counts()["rejected"]
    assert decide() == 1
    assert torch_cudnn_algo.db.counts()["rejected"] > rejected
    assert decide() == 0  # the new decision replaced the corrupt one


# A 1-d convolution met at several lengths, as an audio network over variable-length batches meets
# it: 9000 and 15000 are within 2x of 8000 and borrow its decision; 16000 is 2x away and is tuned.
LENGTHS = (8000, 9000, 15000, 16000)
BORROW_CHILD = textwrap.dedent("""
    import json, sys, torch, torch_cudnn_algo
    from torch_cudnn_algo import _ops
    torch.manual_seed(0)
    w = torch.randn(64, 64, 3, device="cuda", dtype=torch.float16) / 8
    errors = {}
    for length in json.loads(sys.argv[1]):
        x = torch.randn(4, 64, length, device="cuda", dtype=torch.float16)
        with torch.backends.cudnn.flags(enabled=True), torch_cudnn_algo.flags(conv_fwd_algo="fastest"):
            y = torch.nn.functional.conv1d(x, w, padding=1)
        expected = torch.nn.functional.conv1d(x.double(), w.double(), padding=1)
        errors[length] = float((y.double() - expected).norm() / expected.norm())
    print(json.dumps({"kept": _ops.kept_decision_counts(), "log": torch_cudnn_algo.diagnostics.tuning_log(),
                      "plans": torch_cudnn_algo.diagnostics.execution_plan_counts(), "errors": errors}), flush=True)
""")


def run_borrow_child(db: str, **env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", BORROW_CHILD, json.dumps(LENGTHS)], capture_output=True, text=True,
                          env={**os.environ, "TORCH_CUDNN_ALGO_DB": db, **env}, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def length_of(entry: dict) -> int:
    # cuDNN convolves a 1-d convolution as a 2-d one of height 1.
    return int(re.search(r"input \[4, 64, 1, (\d+)\]", entry["conv"]).group(1))


def test_a_nearby_size_borrows_the_tuned_decision_and_a_later_process_loads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path))
    first = run_borrow_child(str(tmp_path))
    assert first["kept"] == {"kept": 0, "tuned": 2, "waited": 0, "borrowed": 2, **ALONE}, first["kept"]
    assert sorted(length_of(entry) for entry in first["log"]) == [8000, 16000]
    tolerance = torch_cudnn_algo._ops.tuner_tolerance("float16", False)
    assert all(error < tolerance for error in first["errors"].values()), first["errors"]
    decisions = [e for e in torch_cudnn_algo.db.entries() if e.kind == "decision"]
    borrowed = {e.configuration.input[-1]: e for e in decisions if e.borrowed}
    assert sorted(borrowed) == [9000, 15000]
    (anchor,) = [entry for entry in first["log"] if length_of(entry) == 8000]
    for entry in borrowed.values():
        assert entry.header["borrowed_from"]["input"] == [4, 64, 1, 8000]
        assert entry.header["pick"] == anchor["pick"], (entry.header, anchor)
    second = run_borrow_child(str(tmp_path))
    assert second["kept"] == {"kept": 4, "tuned": 0, "waited": 0, "borrowed": 0, **ALONE}, second["kept"]
    assert second["log"] == [] and second["plans"]["built"] == 0, second["plans"]


def test_tune_tunes_over_a_borrowed_decision(tmp_path, monkeypatch):
    run_borrow_child(str(tmp_path))
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path))
    x = torch.randn(4, 64, 9000, device="cuda", dtype=torch.float16)
    conv = torch.nn.Conv1d(64, 64, 3, padding=1, bias=False).cuda().half()
    torch_cudnn_algo.tune(conv, x, progress=False)
    tuned_fwd = [e for e in diagnostics.tuning_log() if e["direction"] == "fwd" and length_of(e) == 9000]
    assert len(tuned_fwd) == 1, diagnostics.tuning_log()
    (entry,) = [e for e in torch_cudnn_algo.db.entries()
                if e.kind == "decision" and e.configuration.direction == "fwd" and e.configuration.input[-1] == 9000]
    assert not entry.borrowed


def test_borrowing_turned_off_tunes_every_size(tmp_path):
    result = run_borrow_child(str(tmp_path), TORCH_CUDNN_ALGO_FASTEST_BORROW="0")
    assert result["kept"] == {"kept": 0, "tuned": 4, "waited": 0, "borrowed": 0, **ALONE}, result["kept"]


# Six configurations, each process meeting all of them in its own rotation: every pair of processes
# overlaps on every configuration, at different moments.
STRESS_CHILD = textwrap.dedent("""
    import json, sys, torch, torch_cudnn_algo
    from torch_cudnn_algo import _ops
    start = int(sys.argv[1])
    channels = [16, 24, 32, 40, 48, 56]
    torch.zeros(1, device="cuda")
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(len(channels)):
        c = channels[(start + i) % len(channels)]
        x = torch.randn(8, c, 28, 28, device="cuda", dtype=torch.float16)
        w = torch.randn(c, c, 3, 3, device="cuda", dtype=torch.float16)
        with torch.backends.cudnn.flags(enabled=True), torch_cudnn_algo.flags(conv_fwd_algo="fastest"):
            torch.nn.functional.conv2d(x, w, padding=1)
    torch.cuda.synchronize()
    print(json.dumps({"kept": _ops.kept_decision_counts(),
                      "tuned": [entry["conv"] for entry in torch_cudnn_algo.diagnostics.tuning_log()]}), flush=True)
""")


def test_eight_processes_and_a_killed_one_tune_each_configuration_once_into_one_database(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_CUDNN_ALGO_DB", str(tmp_path))
    env = {**os.environ, "TORCH_CUDNN_ALGO_DB": str(tmp_path), "TORCH_CUDNN_ALGO_COMPILE_WORKERS": "0"}
    processes = [subprocess.Popen([sys.executable, "-c", STRESS_CHILD, str(i)], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True) for i in range(9)]
    for process in processes:
        assert process.stdout.readline().strip() == "ready"
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    victim = processes.pop()
    time.sleep(0.5)  # in the middle of its first tunings, claims or writes
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    results = [json.loads(process.stdout.read().splitlines()[-1]) for process in processes]
    assert all(process.wait() == 0 for process in processes)
    tuned = [conv for result in results for conv in result["tuned"]]
    assert len(tuned) == len(set(tuned)), tuned  # no configuration tuned twice by the survivors
    assert all(sum(result["kept"][k] for k in ("kept", "tuned")) == 6 for result in results), results
    # Whatever the killed process left: every entry loads whole, or is not there.
    decisions = [entry for entry in torch_cudnn_algo.db.entries() if entry.kind == "decision"]
    assert len(decisions) == 6 and not any(entry.borrowed for entry in decisions)
    (late,) = run_children_with(STRESS_CHILD, env, "0")
    assert late["kept"]["kept"] == 6 and late["tuned"] == [], late


def run_children_with(script: str, env: dict, *args: str) -> list[dict]:
    process = subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    process.stdin.write("go\n")
    process.stdin.flush()
    result = json.loads(process.stdout.read().splitlines()[-1])
    assert process.wait() == 0
    return [result]
