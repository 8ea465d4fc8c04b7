"""CPU: a wheel built here installs into a fresh environment with the torch it was built
for and loads there; under another torch release, or a CPU-only torch, the version gate
refuses it with a message naming what it was built for and what to do, and `import
torch` still works.

The wheel is built from this checkout against the running torch (`pip wheel`, as
scripts/build-wheels does; after the README's `pip install .` the build directory makes
that incremental). The fresh environment is a new virtual environment that sees this
environment's torch through a .pth file: the wheel's own torch, without a second
download of it.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from torch_cudnn_algo import _version_gate

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.skipif(not (ROOT / "setup.py").exists(), reason="builds a wheel from the checkout beside tests/"),
    pytest.mark.skipif(torch.version.cuda is None, reason="a CPU-only torch builds no wheel (test_build_support)"),
]

PROBE = """
import json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import torch
    {pretend}
    import torch_cudnn_algo
    torch.backends.cudnn.conv_fwd_algo = 1  # inert when the extension is refused
print("RESULT" + json.dumps({{
    "file": torch_cudnn_algo.__file__, "loaded": torch_cudnn_algo.is_available(),
    "error": torch_cudnn_algo.load_error(), "warnings": [str(w.message) for w in caught],
    "fwd": torch.backends.cudnn.conv_fwd_algo}}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
                             str(ROOT), "-w", str(dist)], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (built,) = dist.glob("torch_cudnn_algo-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh_python(wheel, tmp_path_factory) -> str:
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # This environment's torch (and its CUDA libraries), behind the new environment's own packages.
    Path(purelib, "with_torch.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    # --ignore-installed: this environment's own installation of the package, seen through the
    # .pth file, must not satisfy pip; the wheel goes into the new environment.
    installed = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr
    return python


def probe(python: str, pretend: str = "pass") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_CUDNN_")}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    result = subprocess.run([python, "-c", PROBE.format(pretend=pretend)], capture_output=True, text=True,
                            env=env, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr
    (line,) = [l for l in result.stdout.splitlines() if l.startswith("RESULT")]
    return json.loads(line[len("RESULT"):])


def test_the_wheel_is_tagged_with_what_it_was_built_for(wheel):
    minor = _version_gate.major_minor(torch.__version__)
    assert f"+cu{torch.version.cuda.replace('.', '')}torch{minor}-cp310-abi3-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        assert f"Requires-Dist: torch=={minor}.*" in archive.read(metadata).decode().splitlines()
        assert "torch_cudnn_algo/_build_info.py" in archive.namelist()


def test_the_wheel_loads_under_its_own_torch(fresh_python):
    state = probe(fresh_python)
    venv = str(Path(fresh_python).parents[1])  # the new environment's, not the one running the tests
    assert state["file"].startswith(venv + "/") and "site-packages/torch_cudnn_algo" in state["file"], state["file"]
    assert state["loaded"] and state["error"] is None, state["error"]
    assert state["fwd"] == 1 and state["warnings"] == []


def test_the_gate_refuses_it_under_another_torch_release(fresh_python):
    major, minor = map(int, _version_gate.major_minor(torch.__version__).split("."))
    other = f"{major}.{minor + 1}.0+cu{torch.version.cuda.replace('.', '')}"
    state = probe(fresh_python, pretend=f"torch.__version__ = {other!r}")
    assert not state["loaded"]
    built = f"built for torch {major}.{minor}, CUDA {torch.version.cuda}"
    assert state["error"].startswith(f"version mismatch: it was {built}, cuDNN "), state["error"]
    assert "(torch differs); rebuild it against torch " + f"{major}.{minor + 1}, CUDA {torch.version.cuda}" \
        in state["error"]
    (warning,) = [w for w in state["warnings"] if "could not be loaded" in w]
    assert state["error"] in warning and "flags are inert" in warning
    assert state["fwd"] == 1  # validated and kept, without effect


def test_the_gate_names_a_cpu_only_torch(fresh_python):
    state = probe(fresh_python, pretend="torch.__version__ = torch.__version__.split('+')[0] + '+cpu'; "
                                        "torch.version.cuda = None")
    assert not state["loaded"]
    assert "is a CPU-only build (torch.version.cuda is None)" in state["error"], state["error"]
    assert "download.pytorch.org/whl/cu130" in state["error"]
