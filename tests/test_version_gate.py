"""CPU: the version gate (issue 12). An extension built for another torch minor
release, CUDA or cuDNN release, or a newer libstdc++ than the process loads, is not
loaded: ``import torch`` works, warns once naming what the build was made for and
what to rebuild against, and the flags stay inert. Also the wheel's version and
requirement carry the build's torch and CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest
import torch

from build_helpers import buildtools
from torch_cudnn_algo import _extension, _ops, _version_gate

build_info = buildtools("build_info")
dependencies = buildtools("dependencies")
torch_support = buildtools("torch_support")

BUILT = {"TORCH": "2.11.0+cu130", "CUDA": "13.0", "CUDNN": "9.19.0"}


# --- the comparison -----------------------------------------------------------------------------


def test_same_minor_releases_match():
    assert _version_gate.version_mismatch(BUILT, dict(BUILT)) is None
    assert _version_gate.version_mismatch(BUILT, {"TORCH": "2.11.1+cu130", "CUDA": "13.0", "CUDNN": "9.19.1"}) is None
    # A key the build did not record is not compared.
    assert _version_gate.version_mismatch({"TORCH": "2.11.0"}, {"TORCH": "2.11.0", "CUDA": None, "CUDNN": None}) is None


@pytest.mark.parametrize(
    "running, differs, rebuild",
    [
        ({"TORCH": "2.12.0+cu130"}, "torch differs", "torch 2.12, CUDA 13.0, cuDNN 9.19"),
        ({"CUDA": "12.8", "TORCH": "2.11.0+cu128"}, "CUDA differs", "torch 2.11, CUDA 12.8, cuDNN 9.19"),
        ({"CUDNN": "9.20.0"}, "cuDNN differs", "torch 2.11, CUDA 13.0, cuDNN 9.20"),
        ({"TORCH": "2.10.0+cu126", "CUDA": "12.6", "CUDNN": "9.10.2"}, "torch, CUDA, cuDNN differ",
         "torch 2.10, CUDA 12.6, cuDNN 9.10"),
    ],
)
def test_a_different_release_is_named_with_what_to_rebuild_against(running, differs, rebuild):
    message = _version_gate.version_mismatch(BUILT, {**BUILT, **running})
    assert message is not None
    assert "built for torch 2.11, CUDA 13.0, cuDNN 9.19" in message
    assert f"this process runs {rebuild}" in message
    assert f"({differs})" in message and message.endswith(f"rebuild it against {rebuild}")


def test_a_cpu_only_torch_is_named_as_such_with_what_to_install():
    message = _version_gate.version_mismatch(BUILT, {"TORCH": "2.11.0+cpu", "CUDA": None, "CUDNN": None})
    assert message.startswith("it was built for torch 2.11, CUDA 13.0, cuDNN 9.19 and this process runs torch 2.11, "
                              "CUDA none, cuDNN none (CUDA, cuDNN differ): the installed torch 2.11.0+cpu is a "
                              "CPU-only build (torch.version.cuda is None)"), message
    assert "rebuild it against" not in message
    assert "pip install --force-reinstall torch==2.11.0 --index-url https://download.pytorch.org/whl/cu130" in message


def test_version_helpers():
    assert _version_gate.cudnn_version_string(91900) == "9.19.0"
    assert _version_gate.cudnn_version_string(90102) == "9.1.2"
    assert _version_gate.cudnn_version_string(8907) == "8.9.7"
    assert _version_gate.cudnn_version_string(None) is None
    assert _version_gate.major_minor("2.11.0a0+git1234") == "2.11" and _version_gate.major_minor(None) is None
    assert dependencies.cudnn_header_version(
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 19\n#define CUDNN_PATCHLEVEL 0\n") == "9.19.0"
    assert torch_support.local_version("0.1.0", "2.11.0+cu130", "13.0") == "0.1.0+cu130torch2.11"
    assert torch_support.local_version("0.1.0", "2.12.1+cu128", "12.8") == "0.1.0+cu128torch2.12"
    assert torch_support.local_version("0.1.0", "2.11.0+cpu", None) == "0.1.0+cputorch2.11"
    assert torch_support.torch_requirement("2.11.0+cu130") == "torch==2.11.*"


def test_build_info_module_round_trips(tmp_path):
    info = {"VERSION": "0.1.0+cu130torch2.11", **BUILT, "CXX": "/usr/bin/g++", "GLIBCXX": None}
    namespace: dict = {}
    exec(build_info.render_build_info(info), namespace)
    assert {key: namespace[key] for key in info} == info


def test_libstdcxx_older_than_the_build_is_a_mismatch(tmp_path):
    runtime = tmp_path / "libstdc++.so.6"
    runtime.write_bytes(b"\x00GLIBCXX_3.4\x00GLIBCXX_3.4.31\x00GLIBCXX_3.4.32\x00")
    assert _version_gate.libstdcxx_mismatch("3.4.32", str(runtime)) is None
    assert _version_gate.libstdcxx_mismatch("3.4.30", str(runtime)) is None
    message = _version_gate.libstdcxx_mismatch("3.4.34", str(runtime))
    assert "GLIBCXX_3.4.34 (GCC 15)" in message and str(runtime) in message and "GLIBCXX_3.4.32" in message
    # Unknown on either side: no verdict.
    assert _version_gate.libstdcxx_mismatch(None, str(runtime)) is None
    assert _version_gate.libstdcxx_mismatch("3.4.34", None) is None
    assert _version_gate.libstdcxx_mismatch("3.4.34", str(tmp_path / "missing")) is None


# --- the loader, in this process ----------------------------------------------------------------


@pytest.fixture
def fresh_loader(monkeypatch):
    """_extension as if nothing had been loaded yet (restored afterwards)."""
    monkeypatch.setattr(_extension, "_loaded", False)
    monkeypatch.setattr(_extension, "_load_error", None)
    monkeypatch.delenv(_version_gate.SKIP_VERSION_CHECK, raising=False)
    return monkeypatch


def test_loader_refuses_a_mismatched_build(fresh_loader):
    fresh_loader.setattr(_extension, "build_info", lambda: {**BUILT, "TORCH": "2.9.1+cu130", "GLIBCXX": None})
    fresh_loader.setattr(_extension, "runtime_versions", lambda: dict(BUILT))
    imported = []
    fresh_loader.setattr(_extension.importlib, "import_module", lambda name: imported.append(name))
    assert not _extension.is_loaded()
    assert _extension.load_error().startswith("version mismatch: it was built for torch 2.9, ")
    assert imported == []  # _C was never imported
    with pytest.raises(RuntimeError, match="version mismatch"):
        _ops.active_overrides()


def test_loader_gate_can_be_skipped_and_passes_unknown_builds(fresh_loader):
    fresh_loader.setattr(_extension, "runtime_versions", lambda: dict(BUILT))
    fresh_loader.setattr(_extension, "build_info", lambda: {**BUILT, "TORCH": "2.9.1+cu130", "GLIBCXX": None})
    fresh_loader.setenv(_version_gate.SKIP_VERSION_CHECK, "1")
    assert _extension.version_gate() is None
    fresh_loader.delenv(_version_gate.SKIP_VERSION_CHECK)
    fresh_loader.setattr(_extension, "build_info", lambda: None)
    assert _extension.version_gate() is None


def test_runtime_versions_of_this_process():
    running = _extension.runtime_versions()
    assert running["TORCH"] == torch.__version__ and running["CUDA"] == torch.version.cuda
    # A CUDA wheel reports its cuDNN also on a machine without a GPU.
    if torch.version.cuda is not None:
        assert running["CUDNN"] == _version_gate.cudnn_version_string(torch.backends.cudnn.version())


# --- import torch under a mismatched build, in a fresh interpreter --------------------------------

PROBE = """
import json, sys, types, warnings
fake = types.ModuleType("torch_cudnn_algo._build_info")
fake.__dict__.update({built!r})
sys.modules[fake.__name__] = fake
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import torch
    state = {{"import_warnings": [str(w.message) for w in caught]}}
    cudnn = torch.backends.cudnn
    state["has_flags"] = hasattr(type(cudnn), "conv_fwd_algo")
    cudnn.conv_fwd_algo = 1
    state["value"] = cudnn.conv_fwd_algo
    import torch_cudnn_algo
    state["available"] = torch_cudnn_algo.is_available()
    state["extension_imported"] = "torch_cudnn_algo._C" in sys.modules
    state["load_error"] = torch_cudnn_algo.load_error()
    x = torch.randn(1, 2, 5, 5); w = torch.randn(3, 2, 3, 3)
    state["conv_ok"] = bool(torch.allclose(torch.nn.functional.conv2d(x, w), torch.nn.functional.conv2d(x, w)))
state["warnings"] = [str(w.message) for w in caught]
print("STATE" + json.dumps(state))
"""


def import_torch_with_build_info(built: dict, env: dict | None = None) -> dict:
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("TORCH_CUDNN_") and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    full_env.update(env or {})
    result = subprocess.run([sys.executable, "-c", PROBE.format(built=built)], capture_output=True, text=True,
                            env=full_env, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr
    (line,) = [l for l in result.stdout.splitlines() if l.startswith("STATE")]
    return json.loads(line[len("STATE"):])


def _running() -> dict:
    return {"VERSION": "0.1.0+test", **_extension.runtime_versions(), "CXX": "c++", "GLIBCXX": None}


def test_import_torch_under_another_torch_warns_once_and_leaves_the_flags_inert():
    running = _running()
    built = {**running, "TORCH": "2.9.1+cu126", "CUDA": "12.6"}
    state = import_torch_with_build_info(built)
    assert state["has_flags"] and state["value"] == 1  # settable, validated...
    assert state["available"] is False and state["extension_imported"] is False  # ...and inert
    assert state["conv_ok"]
    (warning,) = state["import_warnings"]
    assert "built for torch 2.9, CUDA 12.6" in warning
    assert f"this process runs torch {_version_gate.major_minor(running['TORCH'])}" in warning
    assert "torch, CUDA differ" in warning and "rebuild it against" in warning and "flags are inert" in warning
    assert state["load_error"].startswith("version mismatch")


def test_import_torch_under_another_cudnn_or_older_libstdcxx_warns_once():
    running = _running()
    if running["CUDNN"] is None:
        pytest.skip("this torch has no cuDNN")
    state = import_torch_with_build_info({**running, "CUDNN": "8.9.7"})
    (warning,) = state["import_warnings"]
    assert "cuDNN differs" in warning and "built for" in warning and "cuDNN 8.9" in warning
    assert state["available"] is False and state["extension_imported"] is False
    state = import_torch_with_build_info({**running, "GLIBCXX": "3.4.999"})
    (warning,) = state["import_warnings"]
    assert "GLIBCXX_3.4.999" in warning and "libstdc++" in warning
    assert state["available"] is False and state["extension_imported"] is False


def test_matching_build_info_loads_and_the_gate_can_be_skipped():
    if _extension.build_info() is None or not _extension.is_loaded():
        pytest.skip("needs the built extension")
    state = import_torch_with_build_info(_running())
    assert state["import_warnings"] == [] and state["available"] is True
    state = import_torch_with_build_info({**_running(), "TORCH": "2.9.1"}, env={_version_gate.SKIP_VERSION_CHECK: "1"})
    assert state["import_warnings"] == [] and state["available"] is True


# --- the installed wheel ------------------------------------------------------------------------


def test_installed_build_matches_this_environment_and_names_it_in_its_version():
    info = _extension.build_info()
    if info is None:
        pytest.skip("the installed torch_cudnn_algo has no _build_info (not built by this setup.py)")
    assert _extension.version_gate() is None
    assert info["VERSION"] == torch_support.local_version(info["VERSION"].split("+")[0], torch.__version__, torch.version.cuda)
    try:
        dist = metadata.distribution("torch-cudnn-algo")
    except metadata.PackageNotFoundError:
        pytest.skip("torch-cudnn-algo is not installed (running from the source tree)")
    assert dist.version == info["VERSION"]
    requires = dist.requires or []
    assert torch_support.torch_requirement(torch.__version__) in requires, requires
    # Build-only: the cuDNN frontend's headers are compiled in, the package is never needed at run time.
    assert not any(r.startswith("nvidia-cudnn-frontend") for r in requires), requires
