"""CPU: what a user reads when something is missing or mistyped, from the Python API and
the commands: a GPU call without a GPU, a bad knob value, the names of the public
classes, the demo's help and the version."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import torch_cudnn_algo
from torch_cudnn_algo import _algorithms, cli

CONV = "conv2d 8x16x8x8 -> 16x3x3 s1 p1 fp16 channels_last fwd"

GPU_CALLS = {
    "list_algorithms": lambda: torch_cudnn_algo.list_algorithms(CONV),
    "profile": lambda: torch_cudnn_algo.profile(CONV),
    "diagnostics.engine_configs": lambda: torch_cudnn_algo.diagnostics.engine_configs(CONV),
    "diagnostics.legacy_workspace_sizes": lambda: torch_cudnn_algo.diagnostics.legacy_workspace_sizes(CONV),
    "tune": lambda: torch_cudnn_algo.tune(torch.nn.Conv2d(3, 3, 3), (torch.zeros(1, 3, 8, 8),)),
}


@pytest.mark.parametrize("name", list(GPU_CALLS))
def test_gpu_calls_without_a_gpu_say_so(name, monkeypatch):
    # Not the driver's "CUDA driver version is insufficient for CUDA runtime version".
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=rf"^torch_cudnn_algo\.{name} needs a CUDA GPU, and "
                                           r"torch\.cuda\.is_available\(\) is False here$"):
        GPU_CALLS[name]()


def test_gpu_calls_with_a_cpu_only_torch_name_it(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(RuntimeError, match=r"^torch_cudnn_algo\.profile needs a CUDA GPU, and the installed "
                                           r"torch .* is a CPU-only build$"):
        torch_cudnn_algo.profile(CONV)


@pytest.mark.parametrize("value, problem", [
    ("eng62_k2=banana", "knob 'k2' has the value 'banana', which is not an integer"),
    ("eng62_k2", "knob 'k2' has no value ('k2=V')"),
    ("eng62_x2=1", "'x2=1' is not a knob (a knob is 'k' followed by its id, '=', and its value)"),
    ("eng6x_k2=1", "'eng6x' is not 'eng' followed by the engine's number"),
])
def test_a_malformed_engine_name_says_which_part_is_wrong(value, problem):
    with pytest.raises(ValueError) as caught:
        _algorithms.parse_algo_value(_algorithms.FORWARD, value)
    assert str(caught.value).startswith(f"torch.backends.cudnn.conv_fwd_algo: {value!r} is not an engine "
                                        f"configuration name: {problem}; expected 'engN'"), str(caught.value)


NAMESPACES = (torch_cudnn_algo, torch_cudnn_algo.db, torch_cudnn_algo.diagnostics, torch_cudnn_algo.distributed,
              torch_cudnn_algo.energy)


@pytest.mark.parametrize("namespace", NAMESPACES, ids=lambda m: m.__name__)
def test_public_classes_are_named_as_users_import_them(namespace):
    classes = [getattr(namespace, name) for name in namespace.__all__ if isinstance(getattr(namespace, name), type)]
    assert classes
    assert [c for c in classes if c.__module__ != namespace.__name__] == []
    assert repr(torch_cudnn_algo.PlanError) == "<class 'torch_cudnn_algo.PlanError'>"
    assert repr(torch_cudnn_algo.db.TuningDbEntry) == "<class 'torch_cudnn_algo.db.TuningDbEntry'>"


def test_every_public_name_has_one_home():
    homes: dict[str, list[str]] = {}
    for namespace in NAMESPACES:
        assert namespace.__doc__, namespace.__name__
        for name in namespace.__all__:
            assert hasattr(namespace, name), f"{namespace.__name__}.{name}"
            homes.setdefault(name, []).append(namespace.__name__)
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}
    with pytest.raises(AttributeError):
        torch_cudnn_algo.clear_tuning_db  # noqa: B018 - now torch_cudnn_algo.db.clear


def test_demo_help_is_whole():
    result = subprocess.run([sys.executable, "-m", "torch_cudnn_algo.demo", "--help"], capture_output=True,
                            text=True, timeout=300, cwd="/")
    assert result.returncode == 0, result.stderr
    description = result.stdout.split("\n\n", 1)[1].split("\noptions:")[0]
    assert description.rstrip().endswith("fp16 channels-last forward convolution."), description
    assert "for three typical\nconvolutions, and what each one does when pinned through the flags." in description


def test_version_names_the_build_and_the_running_torch(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out.strip()
    assert "\n" not in out, out
    assert out.startswith("torch-cudnn-algo 0.1.0"), out
    assert out.endswith(f"running torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}"), out
    built = torch_cudnn_algo._extension.build_info()
    if built is not None:  # an installed build records what it was made for
        assert f"{built['VERSION']} (built for torch " in out and f"cuDNN {built['CUDNN']}, " in out
        kernels = f"our kernels for {built['KERNEL_ARCHS']})" if built["KERNEL_ARCHS"] else "without our kernels)"
        assert kernels in out, out
