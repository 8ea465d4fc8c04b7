"""CPU: scripts/run-upstream-tests, the runner of PyTorch's own test files under
pinned algorithms -- settings, child environments, junit and ``-v`` log parsing,
classification, regression detection, the table, and one end-to-end run against a
synthetic test file (no GPU: the settings only reach the file through the env)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import expecttest
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "run-upstream-tests"


def _load_runner():
    """The package the script runs (this checkout's src/torch_cudnn_algo/_upstream/), loaded
    the script's way: without torch_cudnn_algo/__init__.py, so without torch."""
    loader = SourceFileLoader("_run_upstream_tests_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    script = importlib.util.module_from_spec(spec)
    loader.exec_module(script)
    return script._load()


up = _load_runner()


# --------------------------------------------------------------------------- settings


def test_default_settings_cover_every_legacy_algorithm():
    names = [s.name for s in up.DEFAULT_SETTINGS]
    assert names == ["legacy0", "legacy1", "fft", "fft_tiling", "winograd", "winograd_nonfused",
                     "gemm", "direct", "algo3", "eng0", "fastest"]
    covered = {d: set() for d in up.DIRECTIONS}
    for setting in up.DEFAULT_SETTINGS:
        for direction, value in setting.pins:
            if value.isdigit():
                covered[direction].add(int(value))
    assert covered == {"fwd": set(range(8)), "bwd_data": set(range(6)), "bwd_filter": {0, 1, 2, 3, 5, 6}}
    by_name = {s.name: s.pin_map for s in up.DEFAULT_SETTINGS}
    assert by_name["fft_tiling"] == {"fwd": "5", "bwd_data": "3", "bwd_filter": "6"}
    assert by_name["winograd"] == {"fwd": "6", "bwd_data": "4"}
    assert by_name["eng0"] == {d: "eng0" for d in up.DIRECTIONS}
    assert by_name["fastest"] == {d: "fastest" for d in up.DIRECTIONS}


def test_parse_setting_spec_canonicalizes_values():
    s = up.parse_setting_spec("mine=fwd:IMPLICIT_PRECOMP_GEMM, bwd_data:2 ,bwd_filter:ENG62_k13=1_k2=0")
    assert s.name == "mine"
    assert s.pins == (("fwd", "1"), ("bwd_data", "2"), ("bwd_filter", "eng62_k2=0_k13=1"))
    assert s.describe() == "fwd=1 bwd_data=2 bwd_filter=eng62_k2=0_k13=1"
    assert up.parse_setting_spec("p=bwd_data:fastest").pins == (("bwd_data", "fastest"),)


@pytest.mark.parametrize(
    "spec, words",
    [
        ("x=fwdd:1", "bad direction 'fwdd'"),
        ("x=fwd:8", "out of range"),
        ("x=bwd_filter:4", "not implemented"),
        ("x=fwd:banana", "unknown algorithm 'banana'"),
        ("x=fwd:1,fwd:2", "fwd given twice"),
        ("x", "expected NAME=DIRECTION:VALUE"),
        ("x=fwd", "expected DIRECTION:VALUE"),
        ("stock=fwd:1", "'stock' is the run without any pin"),
        ("a b=fwd:1", "bad setting name"),
    ],
)
def test_parse_setting_spec_errors(spec, words):
    with pytest.raises(up.UsageError, match=None) as info:
        up.parse_setting_spec(spec)
    assert words in str(info.value)


def test_select_settings():
    assert [s.name for s in up.select_settings("fft, legacy0")] == ["fft", "legacy0"]
    assert [s.name for s in up.select_settings(None)] == [s.name for s in up.DEFAULT_SETTINGS]
    assert [s.name for s in up.select_settings("none", ["mine=fwd:0"])] == ["mine"]
    assert [s.name for s in up.select_settings("gemm", ["mine=fwd:0"])] == ["gemm", "mine"]
    with pytest.raises(up.UsageError, match="unknown setting 'nope'"):
        up.select_settings("legacy0,nope")
    with pytest.raises(up.UsageError, match="already exists"):
        up.select_settings("legacy0", ["fft=fwd:4"])
    with pytest.raises(up.UsageError, match="no setting to run"):
        up.select_settings("none")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--setting", "x=fwd_data:1"], "bad direction 'fwd_data'"),
        (["--setting", "x=bwd_data:6"], "out of range"),
        (["--settings", "legacy7"], "unknown setting 'legacy7'"),
        (["-j", "0"], "-j must be at least 1"),
    ],
)
def test_usage_errors_exit_2(tmp_path, capsys, args, words):
    test_file = tmp_path / "test_x.py"
    test_file.write_text("def test_a():\n    pass\n")
    with pytest.raises(SystemExit) as info:
        up.main([str(test_file), *args, "--out", str(tmp_path / "out")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "usage: run-upstream-tests" in err
    assert not (tmp_path / "out").exists()


def test_script_usage_error_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "no test file at" in done.stderr


def test_script_loads_the_runner_without_torch():
    # In a fresh interpreter: this one may have imported torch for other tests.
    code = ("import runpy, sys; runpy.run_path(sys.argv[1])['_load'](); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_cudnn_algo')))")
    done = subprocess.run([sys.executable, "-c", code, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_child_environment_sets_only_the_settings_vars():
    base = {
        "PATH": "/usr/bin",
        "PYTORCH_TEST_WITH_SLOW": "1",
        "TORCH_CUDNN_CONV_FWD_ALGO": "7",  # inherited from the caller: removed
        "TORCH_CUDNN_CONV_BWD_FILTER_ALGO": "eng1",
        "TORCH_CUDNN_CONV_WORKSPACE_LIMIT": "0",
        "TORCH_CUDNN_CONV_ALGO_STRICT": "1",
        "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT": "100",  # PyTorch's own: kept
    }
    winograd = up.select_settings("winograd")[0]

    def conv_vars(env):
        return {k: v for k, v in env.items() if k.startswith("TORCH_CUDNN_CONV_")}

    env = up.child_environment(base, winograd)
    assert conv_vars(env) == {"TORCH_CUDNN_CONV_FWD_ALGO": "6", "TORCH_CUDNN_CONV_BWD_DATA_ALGO": "4"}
    assert env["PYTORCH_TEST_WITH_SLOW"] == "1" and env["PATH"] == "/usr/bin"
    assert env["TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT"] == "100"
    assert conv_vars(up.child_environment(base, winograd, strict=True)) == {
        "TORCH_CUDNN_CONV_FWD_ALGO": "6", "TORCH_CUDNN_CONV_BWD_DATA_ALGO": "4",
        "TORCH_CUDNN_CONV_ALGO_STRICT": "1",
    }
    assert conv_vars(up.child_environment(base, None, strict=True)) == {}
    assert base["TORCH_CUDNN_CONV_FWD_ALGO"] == "7"  # the caller's mapping is untouched
    eng0 = up.select_settings("eng0")[0]
    assert conv_vars(up.child_environment({}, eng0)) == {
        "TORCH_CUDNN_CONV_FWD_ALGO": "eng0", "TORCH_CUDNN_CONV_BWD_DATA_ALGO": "eng0",
        "TORCH_CUDNN_CONV_BWD_FILTER_ALGO": "eng0",
    }


def test_preflight_problems():
    fft = up.select_settings("fft")[0]
    good = {"version": "2.11.0", "extension": True, "flags": {"fwd": 4, "bwd_data": 2, "bwd_filter": 2},
            "strict": False, "warnings": []}
    assert up.preflight_problems(good, fft, strict=False) == []
    assert up.preflight_problems({**good, "flags": dict.fromkeys(up.DIRECTIONS)}, None, False) == []
    problems = up.preflight_problems({**good, "flags": {"fwd": 4, "bwd_data": None, "bwd_filter": 2}}, fft, False)
    assert problems == ["fft: conv_bwd_data_algo reads None after autoload, expected '2'"]
    missing = up.preflight_problems({**good, "flags": dict.fromkeys(up.DIRECTIONS, "<missing>")}, fft, False)
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in missing[0]
    assert "not loaded (no _C)" in up.preflight_problems({**good, "extension": False, "load_error": "no _C"},
                                                         fft, False)[0]
    assert up.preflight_problems(good, fft, strict=True) == ["fft: conv_algo_strict reads False, expected True"]


# --------------------------------------------------------------------------- junit and classification

NUMERICS_MESSAGE = """AssertionError: Tensor-likes are not close!

Mismatched elements: 3 / 64 (4.7%)
Greatest absolute difference: 0.0004119873046875 at index (0, 1, 2, 3) (up to 1e-05 allowed)
Greatest relative difference: 0.0025749206542968750 at index (0, 1, 2, 3) (up to 1.3e-06 allowed)"""

JUNIT = f"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="5" skipped="1" tests="9">
<testcase classname="test_convolution.TestConvCUDA" name="test_pass_cuda" time="0.1"/>
<testcase classname="test_convolution.TestConvCUDA" name="test_numerics_cuda_float32" time="0.1">
  <failure message="{NUMERICS_MESSAGE.replace(chr(10), '&#10;')}">traceback text</failure></testcase>
<testcase classname="test_convolution.TestConvCUDA" name="test_oom_cuda" time="0.1">
  <failure message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB">tb</failure></testcase>
<testcase classname="test_convolution.TestConvCUDA" name="test_ours_cuda" time="0.1">
  <failure message="RuntimeError: torch_cudnn_algo: cudnnConvolutionForward(...) returned CUDNN_STATUS_BAD_PARAM">tb</failure></testcase>
<testcase classname="test_convolution.TestConvCUDA" name="test_stride_cuda" time="0.1">
  <failure message="AssertionError: The values for attribute 'stride()' do not match: (1, 4) != (4, 1).">tb</failure></testcase>
<testcase classname="test_convolution.TestConvCUDA" name="test_channels_last_cuda" time="0.1">
  <failure message="AssertionError: False is not true">    def test_channels_last_cuda(self):
&gt;       self.assertTrue(out.is_contiguous(memory_format=torch.channels_last))
E       AssertionError: False is not true</failure></testcase>
<testcase classname="test_convolution.TestConvCUDA" name="test_setup_cuda" time="0.1">
  <error message="failed on setup with &quot;KeyError: 'x'&quot;">tb</error></testcase>
<testcase classname="test_convolution.TestConvCUDA" name="test_skip_cuda" time="0.0">
  <skipped type="pytest.skip" message="Insufficient cuda memory">skip</skipped></testcase>
<testcase classname="test_convolution.TestConvCUDA" name="test_xfail_cuda" time="0.0">
  <skipped type="pytest.xfail" message="expected failure">xfail</skipped></testcase>
<testcase classname="test_convolution" name="test_plain_function[a-b]" time="0.1">
  <failure message="ValueError: something else&#10;second line">tb</failure></testcase>
</testsuite></testsuites>"""


@pytest.fixture(scope="module")
def junit_results():
    return up.parse_junit(JUNIT, "test_convolution.py")


def test_parse_junit_outcomes_and_node_ids(junit_results):
    outcomes = {nodeid: r.outcome for nodeid, r in junit_results.items()}
    prefix = "test_convolution.py::TestConvCUDA::"
    assert outcomes == {
        prefix + "test_pass_cuda": "passed",
        prefix + "test_numerics_cuda_float32": "failed",
        prefix + "test_oom_cuda": "failed",
        prefix + "test_ours_cuda": "failed",
        prefix + "test_stride_cuda": "failed",
        prefix + "test_channels_last_cuda": "failed",
        prefix + "test_setup_cuda": "error",
        prefix + "test_skip_cuda": "skipped",
        prefix + "test_xfail_cuda": "xfailed",
        "test_convolution.py::test_plain_function[a-b]": "failed",
    }
    assert junit_results[prefix + "test_numerics_cuda_float32"].message == NUMERICS_MESSAGE
    assert up.count_outcomes(junit_results) == {"passed": 1, "failed": 6, "skipped": 2, "errors": 1, "crashed": 0}


def _classify(junit_results, name):
    key = name if "::" in name else "test_convolution.py::TestConvCUDA::" + name
    return up.classify(junit_results[key])


def test_classify_numerics_parses_the_differences(junit_results):
    c = _classify(junit_results, "test_numerics_cuda_float32")
    assert (c.cls, c.kind, c.label) == ("numerics", "tolerance", "numerics")
    assert c.max_abs == pytest.approx(0.0004119873046875)
    assert c.max_rel == pytest.approx(0.002574920654296875)
    assert c.detail == ("max abs diff 0.000412 (allowed 1e-05), max rel diff 0.00257 (allowed 1.3e-06), "
                        "mismatched 3 / 64 (4.7%)")


def test_classify_scalars_are_not_close():
    message = ("AssertionError: Scalars are not close!\n\nExpected 0.0 but got 0.5.\n"
               "Absolute difference: 0.5 (up to 1e-05 allowed)\nRelative difference: inf (up to 1.3e-06 allowed)")
    c = up.classify(up.TestResult("f.py::t", "failed", message))
    assert (c.cls, c.max_abs, c.max_rel) == ("numerics", 0.5, float("inf"))
    assert up.regression_entry("f.py::t", up.TestResult("f.py::t", "failed", message), "failed")["max_rel"] == "inf"


@pytest.mark.parametrize("message, label", [
    ("URLError: <urlopen error [Errno -3] Temporary failure in name resolution>", "other"),
    ("RuntimeError: torch_cudnn_algo autoload was loaded here too", "exception"),
    ("torch.OutOfMemoryError: CUDA out of memory", "oom"),
    ("AssertionError: Scalars are not close!\n\nAbsolute difference: 0.5 (up to 1e-05 allowed)", "numerics"),
])
def test_a_test_that_fails_stock_is_never_ours(message, label):
    ours = up.classify(up.TestResult("f.py::t", "failed", message))
    stock = up.classify_stock_failure(up.TestResult("f.py::t", "failed", message))
    assert (stock.cls, stock.label, stock.detail) == ("stock", label, ours.detail)
    assert "ours" not in stock.label
    crashed = up.classify_stock_failure(up.TestResult("f.py::t", "crashed", "", returncode=-11))
    assert (crashed.cls, crashed.label) == ("stock", "crash (signal 11)")


def test_classify_ours(junit_results):
    assert _classify(junit_results, "test_oom_cuda").label == "ours: oom"
    ours = _classify(junit_results, "test_ours_cuda")
    assert (ours.label, ours.detail) == (
        "ours: exception", "RuntimeError: torch_cudnn_algo: cudnnConvolutionForward(...) returned CUDNN_STATUS_BAD_PARAM")
    stride = _classify(junit_results, "test_stride_cuda")
    assert (stride.label, stride.detail) == (
        "ours: layout/dtype", "The values for attribute 'stride()' do not match: (1, 4) != (4, 1).")
    layout = _classify(junit_results, "test_channels_last_cuda")
    assert (layout.label, layout.detail) == (
        "ours: layout/dtype", "self.assertTrue(out.is_contiguous(memory_format=torch.channels_last))")
    other = _classify(junit_results, "test_convolution.py::test_plain_function[a-b]")
    assert (other.cls, other.label, other.detail) == ("ours", "ours: other", "ValueError: something else")
    dtype = up.classify(up.TestResult("f.py::t", "failed",
                                      "AssertionError: The values for attribute 'dtype' do not match: "
                                      "torch.float32 != torch.float16."))
    assert dtype.label == "ours: layout/dtype"


def test_classify_crash_and_timeout():
    crash = up.classify(up.TestResult("f.py::t", "crashed", "Fatal Python error: Segmentation fault", returncode=-11))
    assert (crash.cls, crash.label) == ("ours", "ours: crash (signal 11)")
    assert crash.detail == "signal 11 (SIGSEGV); Fatal Python error: Segmentation fault"
    assert up.classify(up.TestResult("f.py::t", "crashed", returncode=3)).label == "ours: crash (exit 3)"
    assert up.classify(up.TestResult("f.py::t", "timeout", "killed", returncode=-9)).label == "ours: timeout"


# --------------------------------------------------------------------------- regressions and crashes


def _results(**outcomes):
    return {f"f.py::{name}": up.TestResult(f"f.py::{name}", outcome) for name, outcome in outcomes.items()}


def test_regression_detection():
    stock = _results(a="passed", b="passed", c="failed", d="passed", e="skipped", f="passed", g="xfailed",
                     h="xfailed")
    setting = _results(a="passed", b="failed", c="failed", d="skipped", e="failed", f="crashed", g="failed",
                       h="xfailed")
    # b: passes stock, fails under the setting; d: skipped in parallel (resource check); f: crashed;
    # g: an expected failure of stock that fails otherwise (unexpected success).
    assert up.rerun_candidates(stock, setting) == ["f.py::b", "f.py::d", "f.py::f", "f.py::g"]
    # Stock re-runs alone its failure (c) and what it skipped while a setting failed it (e).
    assert up.stock_rerun_candidates(stock, [setting, _results(a="passed")]) == ["f.py::c", "f.py::e"]


FAKE_VERBOSE_LOG = """\
============================= test session starts ==============================
collecting ... collected 5 items / 1 deselected / 4 selected

test_convolution.py::TestConvCUDA::test_a_cuda PASSED                    [ 25%]
test_convolution.py::TestConvCUDA::test_b_cuda SKIPPED (no cudnn)        [ 50%]
test_convolution.py::TestConvCUDA::test_x_cuda XFAIL                     [ 60%]
test_convolution.py::TestConvCUDA::test_c_cuda FAILED                    [ 75%]
test_convolution.py::TestConvCUDA::test_d_cuda Fatal Python error: Segmentation fault

Current thread 0x00007f0c (most recent call first):
  File "/x/test_convolution.py", line 12 in test_d_cuda
  File "/usr/lib/python3/unittest/case.py", line 589 in _callTestMethod
"""


def test_crash_attribution_from_verbose_log():
    outcomes, pending = up.parse_verbose_log(FAKE_VERBOSE_LOG, "test_convolution.py")
    prefix = "test_convolution.py::TestConvCUDA::"
    assert outcomes == {prefix + "test_a_cuda": "passed", prefix + "test_b_cuda": "skipped",
                        prefix + "test_x_cuda": "xfailed", prefix + "test_c_cuda": "failed"}
    assert pending == prefix + "test_d_cuda"
    assert up.crash_note(FAKE_VERBOSE_LOG, pending) == "Fatal Python error: Segmentation fault"
    finished = FAKE_VERBOSE_LOG.split("test_convolution.py::TestConvCUDA::test_d_cuda")[0]
    assert up.parse_verbose_log(finished + prefix + "test_d_cuda PASSED [100%]\n", "test_convolution.py")[1] is None
    # A teardown ERROR line after FAILED keeps the failure.
    teardown = prefix + "test_e_cuda FAILED\n" + prefix + "test_e_cuda ERROR\n"
    assert up.parse_verbose_log(teardown, "test_convolution.py") == ({prefix + "test_e_cuda": "failed"}, None)


# --------------------------------------------------------------------------- table


class TestTable(expecttest.TestCase):
    def test_render_markdown(self):
        summary = {
            "file": "/x/test_convolution.py", "k": "CUDA or cuda or cudnn", "jobs": 4, "strict": False,
            "torch": {"version": "2.11.0+cu130", "git_version": "70d99e998b4955e0049d13a98d77ae1b14db1f45",
                      "device": "NVIDIA H100 80GB HBM3"},
            "elapsed": 300.04,
            "runs": [
                {"setting": "stock", "pins": "", "passed": 10, "failed": 1, "skipped": 2, "errors": 0,
                 "crashed": 0, "duration": 61.23, "regressions": [], "cleared": []},
                {"setting": "fft", "pins": "fwd=4 bwd_data=2 bwd_filter=2", "passed": 8, "failed": 2,
                 "skipped": 2, "errors": 0, "crashed": 1, "duration": 80.0, "cleared": ["t.py::T::test_big"],
                 "regressions": [
                     {"test": "t.py::T::test_num_cuda", "class": "numerics", "label": "numerics",
                      "detail": "max abs diff 0.000412 (allowed 1e-05), max rel diff 0.00257 (allowed 1.3e-06)"},
                     {"test": "t.py::T::test_die_cuda", "class": "ours", "label": "ours: crash (signal 11)",
                      "detail": "signal 11 (SIGSEGV)"},
                 ]},
            ],
            "stock_rerun": {"tests": 1, "passed_alone": [],
                            "still_failing": [{"test": "t.py::T::test_net", "label": "other",
                                               "detail": "URLError: no network"}]},
            "rerun": {"candidates": 3, "confirmed": 2, "cleared": 1},
            "exit_status": 1,
        }
        self.assertExpectedInline(up.render_markdown(summary), """\
# PyTorch's tests under pinned cuDNN algorithms

file `/x/test_convolution.py`, `-k CUDA or cuda or cudnn`, torch 2.11.0+cu130 (git 70d99e998b49), NVIDIA H100 80GB HBM3, 4 runs in parallel, not strict, 300 s in all.

| setting | pins | passed | failed | skipped | errors | crashed | ours | numerics | cleared | time |
|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|
| stock | - | 10 | 1 | 2 | 0 | 0 | - | - | - | 61.2 s |
| fft | fwd=4 bwd_data=2 bwd_filter=2 | 8 | 2 | 2 | 0 | 1 | 1 | 1 | 1 | 80.0 s |

Counts are the parallel runs', the large-tensor tests' results (run alone, after them) in place; *time*: the parallel run's, + the large-tensor run's. *ours* and *numerics* count the tests that pass stock and fail under the setting, confirmed by a re-run alone on the GPU; *cleared* failed in the parallel run and passed alone.

Stock failures re-run alone: 1; passed alone: 0, still failing: 1.
- stock fails: `T::test_net`: other: URLError: no network

Re-run alone: 3 tests that passed stock and failed or skipped under a setting in parallel; 2 failed again (confirmed), 1 failed in parallel and passed alone (cleared).

## Regressions: pass stock, fail under the setting

| setting | test | class | detail |
|---|---|---|---|
| fft | `T::test_num_cuda` | numerics | max abs diff 0.000412 (allowed 1e-05), max rel diff 0.00257 (allowed 1.3e-06) |
| fft | `T::test_die_cuda` | ours: crash (signal 11) | signal 11 (SIGSEGV) |

Cleared by the re-run alone (failed only while runs shared the GPU):

- fft: `T::test_big`

Exit status 1: failures classified ours.
""")

    def test_render_preliminary(self):
        summary = {"phase": "parallel", "file": "t.py", "k": "cuda", "jobs": 2, "runs": [
            {"setting": "gemm", "pins": "fwd=2", "duration": 1.0, "cleared": [], "regressions": [
                {"test": "t.py::T::test_a", "class": "ours", "label": "ours: oom", "detail": "CUDA out of memory",
                 "confirmed": False}]}]}
        markdown = up.render_markdown(summary)
        self.assertIn("**Preliminary**: the job has not finished", markdown)
        self.assertIn("| gemm | `T::test_a` | ours: oom (unconfirmed) | CUDA out of memory |", markdown)
        self.assertNotIn("Exit status", markdown)


# --------------------------------------------------------------------------- end to end

SYNTHETIC_TESTS = """\
import os
import signal


def test_pass():
    pass


def test_crash_under_setting():
    if os.environ.get("TORCH_CUDNN_CONV_FWD_ALGO") is not None:
        os.kill(os.getpid(), signal.SIGSEGV)


def test_mismatch_under_setting():
    if os.environ.get("TORCH_CUDNN_CONV_FWD_ALGO") is not None:
        import torch

        torch.testing.assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
"""


def test_end_to_end_synthetic_file(tmp_path):
    test_file = tmp_path / "test_synthetic.py"
    test_file.write_text(SYNTHETIC_TESTS)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_CUDNN_CONV_")}
    env["TORCH_CUDNN_CONV_FWD_ALGO"] = "3"  # the caller's: the stock run must not see it
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(test_file), "--settings", "legacy0", "-j", "2", "-k", "test_",
         "--no-preflight", "--timeout", "240", "--test-timeout", "120", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_status"] == 1
    stock, legacy0 = summary["runs"]
    assert (stock["setting"], stock["passed"], stock["failed"], stock["crashed"]) == ("stock", 3, 0, 0)
    assert legacy0["env"] == {"TORCH_CUDNN_CONV_FWD_ALGO": "0", "TORCH_CUDNN_CONV_BWD_DATA_ALGO": "0",
                              "TORCH_CUDNN_CONV_BWD_FILTER_ALGO": "0"}
    assert (legacy0["passed"], legacy0["failed"], legacy0["crashed"]) == (1, 1, 1)
    assert legacy0["attempts"] == 2  # restarted once after the crash
    regressions = {r["test"]: r for r in legacy0["regressions"]}
    crash = regressions["test_synthetic.py::test_crash_under_setting"]
    assert (crash["class"], crash["label"]) == ("ours", "ours: crash (signal 11)")
    numerics = regressions["test_synthetic.py::test_mismatch_under_setting"]
    assert numerics["class"] == "numerics"
    assert numerics["max_abs"] == pytest.approx(0.5) and numerics["max_rel"] == pytest.approx(0.2)
    assert "TORCH_CUDNN_CONV_FWD_ALGO=0" in numerics["repro"]
    assert len(regressions) == 2 and legacy0["cleared"] == []
    assert summary["rerun"] == {"candidates": 2, "confirmed": 2, "cleared": 0}
    assert summary["phase"] == "final" and all(r["confirmed"] for r in legacy0["regressions"])
    assert (out / "summary.md").read_text() == done.stdout
    assert "| legacy0 | fwd=0 bwd_data=0 bwd_filter=0 | 1 | 1 | 0 | 0 | 1 | 1 | 1 | 0 |" in done.stdout
    assert "legacy0: test_crash_under_setting crashed: signal 11 (SIGSEGV)" in done.stderr


# --------------------------------------------------------------------------- large-tensor tests

SYNTHETIC_LARGE_TESTS = '''\
import os


def largeTensorTest(size, device=None):  # stands in for torch.testing's decorator
    def decorate(test):
        return test
    return decorate


def test_small():
    pass


@largeTensorTest("20GB")
@largeTensorTest("64GB", "cpu")
def test_large_rounds_differently_under_setting():
    with open(os.environ["LARGE_TESTS_MARKER"], "a") as marker:  # who ran it, and with whom
        marker.write(os.environ.get("TORCH_CUDNN_CONV_FWD_ALGO", "stock") + "\\n")
    if os.environ.get("TORCH_CUDNN_CONV_FWD_ALGO") is not None:
        import torch

        torch.testing.assert_close(torch.tensor([3.0], dtype=torch.half),
                                   torch.tensor([3.001953125], dtype=torch.half), atol=1e-3, rtol=1e-4)
'''


def test_large_tensor_tests_are_found_and_selected(tmp_path):
    test_file = tmp_path / "test_synthetic_large.py"
    test_file.write_text(SYNTHETIC_LARGE_TESTS)
    assert up.large_tensor_tests(test_file) == ["test_large_rounds_differently_under_setting"]
    names = ["test_a", "test_b"]
    assert up.k_expression("cuda", names, large=True) == "(cuda) and (test_a or test_b)"
    assert up.k_expression("cuda", names, large=False) == "(cuda) and not (test_a or test_b)"
    assert up.k_expression("", names, large=False) == "not (test_a or test_b)"
    assert up.k_expression("cuda", [], large=False) == "cuda"


def test_rounding_step_note():
    assert up.rounding_step_note(0.001953125) == (
        "max abs diff = 2^-9: one rounding step (ulp) of float16 values in [2, 4), bfloat16 values in "
        "[0.25, 0.5), float32 values in [16384, 32768)")
    assert up.rounding_step_note(0.0015) is None
    assert up.rounding_step_note(float("inf")) is None and up.rounding_step_note(None) is None


def _run_on_large_file(tmp_path, *args):
    """The script over SYNTHETIC_LARGE_TESTS: (completed process, out folder, marker file)."""
    test_file = tmp_path / "test_synthetic_large.py"
    test_file.write_text(SYNTHETIC_LARGE_TESTS)
    out, marker = tmp_path / "out", tmp_path / "marker.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_CUDNN_CONV_")}
    env["LARGE_TESTS_MARKER"] = str(marker)
    done = subprocess.run([sys.executable, str(SCRIPT), str(test_file), "--no-preflight", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=300, env=env)
    return done, out, marker


def test_large_tensor_tests_run_alone_after_the_parallel_phase(tmp_path):
    done, out, marker = _run_on_large_file(tmp_path, "--settings", "legacy0,legacy1", "-j", "3", "-k", "test_",
                                           "--timeout", "240")
    assert done.returncode == 0, done.stdout + done.stderr  # a tolerance miss is numerics, not ours
    # Run once per run, one after the other, after the parallel phase (stock first).
    assert marker.read_text().split() == ["stock", "0", "1"]
    assert "::test_large" not in (out / "stock" / "pytest-1.log").read_text()
    assert "test_large_rounds_differently_under_setting PASSED" in (out / "large-stock" / "pytest-1.log").read_text()
    summary = json.loads((out / "summary.json").read_text())
    stock, legacy0, _legacy1 = summary["runs"]
    assert stock["passed"] == 2 and legacy0["failed"] == 1
    (regression,) = legacy0["regressions"]
    assert regression["test"].endswith("test_large_rounds_differently_under_setting")
    assert regression["class"] == "numerics" and regression["confirmed"]
    assert "one rounding step (ulp) of float16 values in [2, 4)" in regression["detail"]
    assert not (out / "rerun-legacy0").exists()  # it ran alone already: not run a third time
    assert "large-tensor phase: those of test_large_rounds_differently_under_setting that -k selects" in done.stderr
    assert all(run["large_duration"] > 0 for run in summary["runs"])
    assert " s + " in (out / "summary.md").read_text()  # time: the parallel run's + the large-tensor run's


def test_large_tensor_tests_skip(tmp_path):
    done, out, marker = _run_on_large_file(tmp_path, "--settings", "legacy0", "-k", "test_",
                                           "--large-tensor-tests", "skip")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not marker.exists()
    assert json.loads((out / "summary.json").read_text())["runs"][0]["passed"] == 1


def test_plan_settings(tmp_path):
    plan = tmp_path / "my.plan.json"
    plan.write_text("{}")
    (setting,) = up.select_settings("none", (), [f"tuned={plan}"])
    assert (setting.name, setting.pins, setting.plan) == ("tuned", (), str(plan.resolve()))
    assert setting.env_vars() == {"TORCH_CUDNN_ALGO_PLAN": str(plan.resolve())}
    assert setting.describe() == "plan my.plan.json"
    base = {"TORCH_CUDNN_ALGO_PLAN": "/elsewhere.json", "TORCH_CUDNN_CONV_FWD_ALGO": "1", "PATH": "/bin"}
    assert up.child_environment(base, None) == {"PATH": "/bin"}  # stock sees no plan
    assert up.child_environment(base, setting)["TORCH_CUDNN_ALGO_PLAN"] == str(plan.resolve())
    for bad, words in ((f"stock={plan}", "'stock' is the run"), ("p=", "expected NAME=PATH"),
                       (f"p={tmp_path / 'none.json'}", "no plan file")):
        with pytest.raises(up.UsageError, match=words):
            up.select_settings("none", (), [bad])
    info = {"extension": True, "flags": dict.fromkeys(up.DIRECTIONS), "plan": None}
    assert up.preflight_problems(info, setting, False) == [
        f"tuned: the plan in use after autoload is None, expected {str(plan.resolve())!r}"]
    assert up.preflight_problems({**info, "plan": str(plan.resolve())}, setting, False) == []
    assert up.preflight_problems(info, None, False) == []


def test_a_selection_of_large_tensor_tests_alone_runs_them(tmp_path):
    """-k picking only large-tensor tests: the parallel phase runs nothing, the large phase all."""
    done, out, marker = _run_on_large_file(tmp_path, "--settings", "legacy0", "-k", "test_large")
    assert done.returncode == 0, done.stdout + done.stderr
    assert marker.read_text().split() == ["stock", "0"]
    stock, legacy0 = json.loads((out / "summary.json").read_text())["runs"]
    assert (stock["passed"], legacy0["failed"], len(legacy0["regressions"])) == (1, 1, 1)
