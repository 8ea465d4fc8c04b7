"""CPU: which torch a build supports and where its CUDA headers come from: the supported
range (as the README installs it), a CPU-only or unsupported torch named with what to
install, CUDA header packages of exactly torch's CUDA release, and
scripts/install-build-deps."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from build_helpers import buildtools
from torch_cudnn_algo import _version_gate

dependencies = buildtools("dependencies")
torch_support = buildtools("torch_support")

ROOT = Path(__file__).resolve().parent.parent


def test_the_range_and_the_list_of_supported_releases_agree():
    low, high = re.fullmatch(r">=(\d+\.\d+),<(\d+\.\d+)", _version_gate.SUPPORTED_TORCH_RANGE).groups()
    key = lambda v: tuple(map(int, v.split(".")))  # noqa: E731
    assert _version_gate.SUPPORTED_TORCH[0] == low
    assert key(_version_gate.SUPPORTED_TORCH[-1]) < key(high) == (key(_version_gate.SUPPORTED_TORCH[-1])[0],
                                                          key(_version_gate.SUPPORTED_TORCH[-1])[1] + 1)
    minors = [key(v)[1] for v in _version_gate.SUPPORTED_TORCH]
    assert minors == list(range(minors[0], minors[-1] + 1))  # no release left out


def test_readme_commands_install_the_supported_range():
    commands = [line for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("python3 -m pip") and line.endswith(("torch-cudnn-algo tune", "pytest -q tests"))]
    assert len(commands) == 2, commands
    for command in commands:
        assert command.startswith(f'python3 -m pip install "torch{_version_gate.SUPPORTED_TORCH_RANGE}" '), command
        assert "python3 scripts/install-build-deps &&" in command, command


@pytest.mark.parametrize("version, cuda", [("2.11.0+cu130", "13.0"), ("2.14.1", "13.0"), ("2.15.0+cu132", "13.2")])
def test_supported_cuda_builds_are_accepted(version, cuda):
    assert torch_support.torch_support_problem(version, cuda) is None


def test_a_cpu_only_torch_is_named_with_what_to_install_instead():
    problem = torch_support.torch_support_problem("2.13.0+cpu", None)
    assert problem.startswith("the installed torch 2.13.0+cpu is a CPU-only build (torch.version.cuda is None)")
    assert "pip install --force-reinstall torch==2.13.0 --index-url https://download.pytorch.org/whl/cu130" in problem


@pytest.mark.parametrize("version, side", [("2.10.0+cu128", "older"), ("2.16.0", "newer")])
def test_a_release_outside_the_range_names_the_range_and_the_override(version, side):
    problem = torch_support.torch_support_problem(version, "13.0")
    assert problem.startswith(f"torch {version} is {side} than the releases this package supports "
                              "(2.11, 2.12, 2.13, 2.14, 2.15)"), problem
    assert f'"torch{_version_gate.SUPPORTED_TORCH_RANGE}"' in problem and torch_support.ALLOW_UNSUPPORTED_TORCH in problem


def test_cuda_header_requirements_follow_torch_s_cuda_release():
    assert dependencies.cuda_header_requirements("13.0") == [
        "nvidia-cuda-runtime==13.0.*", "nvidia-cuda-crt==13.0.*", "nvidia-cuda-cccl==13.0.*"]
    assert dependencies.cuda_header_requirements("13.2")[1] == "nvidia-cuda-crt==13.2.*"
    with pytest.raises(ValueError, match="CUDA 12.8: .* CUDA 13 builds of torch only; .* set CUDA_HOME"):
        dependencies.cuda_header_requirements("12.8")


def make_headers(directory: Path, cudart: int, parts=("cuda_runtime_api.h", "crt/host_defines.h", "nv/target")) -> Path:
    for part in parts:
        (directory / part).parent.mkdir(parents=True, exist_ok=True)
        (directory / part).write_text(f"#define CUDART_VERSION  {cudart}\n" if part == "cuda_runtime_api.h" else "")
    return directory


def test_cuda_headers_of_torch_s_release_only_and_never_mixed(tmp_path):
    complete = make_headers(tmp_path / "a", 13000)
    assert dependencies.cudart_header_version("#define CUDART_VERSION  13020\n") == "13.2"
    assert dependencies.cuda_header_problem(complete, "13.0") is None
    assert dependencies.cuda_header_problem(complete, "13.2") == "CUDA 13.0, not torch's 13.2"
    assert dependencies.cuda_header_problem(complete, None) is None  # any release
    no_cccl = make_headers(tmp_path / "b", 13000, parts=("cuda_runtime_api.h", "crt/host_defines.h"))
    assert dependencies.cuda_header_problem(no_cccl, "13.0") == "lacks nv/target"
    assert dependencies.cuda_header_problem(tmp_path / "missing", "13.0") == \
        "lacks cuda_runtime_api.h, crt/host_defines.h, nv/target"
    # The pip-only machine: runtime 13.0 with crt 13.5 and cccl 13.3 in one directory.
    versions = {"nvidia-cuda-runtime": "13.0.96", "nvidia-cuda-crt": "13.5.37", "nvidia-cuda-cccl": "13.3.5.0.6"}
    assert dependencies.cuda_header_problem(complete, "13.0", versions) == \
        "mixes in nvidia-cuda-crt 13.5.37, nvidia-cuda-cccl 13.3.5.0.6"
    assert dependencies.cuda_header_problem(complete, "13.0", {**versions, "nvidia-cuda-crt": "13.0.88",
                                                         "nvidia-cuda-cccl": None}) is None


def load_install_build_deps():
    path = ROOT / "scripts" / "install-build-deps"
    loader = importlib.machinery.SourceFileLoader("install_build_deps", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.version.cuda is None or not torch.version.cuda.startswith("13."),
                    reason="a CUDA 13 build of torch installs its headers from pip")
def test_install_build_deps_installs_headers_of_the_installed_torch_s_cuda():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "install-build-deps"), "--dry-run"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    cuda = torch.version.cuda
    kernels = os.environ.get("TORCH_CUDNN_ALGO_OWN_KERNELS", "").strip().lower() not in ("0", "false", "no", "off")
    assert result.stdout.splitlines()[:2] == [
        "install-build-deps: -m pip install --no-deps nvidia-cudnn-frontend",
        f"install-build-deps: -m pip install nvidia-cuda-runtime=={cuda}.* nvidia-cuda-crt=={cuda}.* "
        f"nvidia-cuda-cccl=={cuda}.*",
    ]
    # nvcc for our kernels, of the same release (tests/test_build_kernels.py: not when they are left out).
    assert (f"install-build-deps: -m pip install nvidia-cuda-nvcc=={cuda}.* nvidia-nvvm=={cuda}.*"
            in result.stdout.splitlines()) == kernels


def test_install_build_deps_refuses_a_cpu_only_torch(monkeypatch, capsys):
    script = load_install_build_deps()
    monkeypatch.setenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # main() sets it: restored after the test
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(script.subprocess, "run", lambda *a, **k: pytest.fail("nothing may be installed"))
    assert script.main([]) == 1
    assert "is a CPU-only build (torch.version.cuda is None)" in capsys.readouterr().err


FAKE_CPU_TORCH = {
    "torch/__init__.py": "__version__ = '2.13.0+cpu'\nclass version:\n    cuda = None\n",
    "torch/utils/__init__.py": "",
    "torch/utils/cpp_extension.py": "CUDA_HOME = None\nBuildExtension = CppExtension = object\n",
}


def test_setup_refuses_a_cpu_only_torch_naming_it(tmp_path):
    # Before: "cudnn_version.h not found. Install the pip package nvidia-cudnn-cu13", which
    # sent the user after the wrong thing.
    for name, text in FAKE_CPU_TORCH.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 1
    assert "torch-cudnn-algo: the installed torch 2.13.0+cpu is a CPU-only build" in result.stderr, result.stderr
    assert "cudnn_version.h" not in result.stderr
