"""CPU: how our CUDA kernels are built (buildtools/cuda_kernels.py): in every build unless
TORCH_CUDNN_ALGO_OWN_KERNELS=0, with which nvcc (a toolkit's or pip's, of torch's CUDA release),
for which GPU architectures (TORCH_CUDA_ARCH_LIST, else the visible GPUs, else every
architecture torch is built for plus PTX of the newest), compiled in parallel; and the
installed build, which has them."""

from __future__ import annotations

import importlib.util
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import torch_cudnn_algo

ROOT = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("_cuda_kernels_under_test", ROOT / "buildtools" / "cuda_kernels.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


kb = _load()


# -- whether -------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, "", "1", "true", "ON", " yes "])
def test_every_build_has_the_kernels_unless_told_otherwise(value):
    env = {} if value is None else {kb.OWN_KERNELS_ENV: value}
    assert kb.kernels_wanted(env)


@pytest.mark.parametrize("value", ["0", "false", "Off", "no"])
def test_the_opt_out_leaves_them_out(value):
    assert not kb.kernels_wanted({kb.OWN_KERNELS_ENV: value})


def test_an_opt_out_value_that_means_nothing_is_refused_naming_the_valid_ones():
    with pytest.raises(kb.KernelBuildError, match=r"TORCH_CUDNN_ALGO_OWN_KERNELS='maybe' is not valid: set it to 0"):
        kb.kernels_wanted({kb.OWN_KERNELS_ENV: "maybe"})


def test_what_the_opt_out_costs_is_said():
    assert "tca.direct" in kb.WITHOUT_KERNELS and "benchmark=True" in kb.WITHOUT_KERNELS


# -- which nvcc ----------------------------------------------------------------------------------

def fake_nvcc(root: Path, with_cicc: bool = True) -> Path:
    """A CUDA tree as pip's nvidia-cuda-nvcc and nvidia-nvvm lay it out: bin/nvcc, nvvm/bin/cicc."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True, exist_ok=True)
    nvcc.write_text("#!/bin/sh\n")
    if with_cicc:
        (root / "nvvm" / "bin").mkdir(parents=True, exist_ok=True)
        (root / "nvvm" / "bin" / "cicc").write_text("")
    return nvcc


def test_pip_nvcc_of_torchs_release_is_taken_over_a_system_toolkit_of_another(tmp_path):
    pip, system = fake_nvcc(tmp_path / "pip"), fake_nvcc(tmp_path / "cuda-13.2")
    releases = {pip: "13.0", system: "13.2"}
    chosen = kb.choose_nvcc("13.0", [], [pip], [system], release_of=releases.get)
    assert chosen == kb.Nvcc(pip, "13.0")
    # Without pip's, the system's of the same major release builds.
    assert kb.choose_nvcc("13.0", [], [], [system], release_of=releases.get) == kb.Nvcc(system, "13.2")


def test_the_users_cuda_home_comes_first(tmp_path):
    given, pip = fake_nvcc(tmp_path / "given"), fake_nvcc(tmp_path / "pip")
    releases = {given: "13.1", pip: "13.0"}
    assert kb.choose_nvcc("13.0", [given], [pip], [], release_of=releases.get).path == given


def test_no_nvcc_names_where_it_looked_and_how_to_get_one(tmp_path):
    old = fake_nvcc(tmp_path / "cuda-12.8")
    no_cicc = fake_nvcc(tmp_path / "pip", with_cicc=False)
    releases = {old: "12.8", no_cicc: "13.0"}
    with pytest.raises(kb.KernelBuildError) as error:
        kb.choose_nvcc("13.0", [], [no_cicc, tmp_path / "missing" / "nvcc"], [old], release_of=releases.get)
    message = str(error.value)
    assert "scripts/install-build-deps" in message and "TORCH_CUDNN_ALGO_OWN_KERNELS=0" in message
    assert f"{old} (CUDA 12.8, not torch's CUDA 13.0 major release)" in message
    assert "nvidia-nvvm" in message and f"{tmp_path / 'missing' / 'nvcc'} (not there)" in message


def test_nvcc_release_is_read_from_its_version_line(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    assert kb.nvcc_release(nvcc) == "13.0"
    assert kb.nvcc_release(tmp_path / "absent") is None


def test_pip_packages_of_exactly_torchs_cuda_release():
    assert kb.nvcc_requirements("13.0") == ["nvidia-cuda-nvcc==13.0.*", "nvidia-nvvm==13.0.*"]
    assert kb.nvcc_requirements("13.2") == ["nvidia-cuda-nvcc==13.2.*", "nvidia-nvvm==13.2.*"]
    with pytest.raises(kb.KernelBuildError, match="CUDA 13 builds of torch only"):
        kb.nvcc_requirements("12.8")


def test_install_build_deps_installs_nvcc_unless_the_kernels_are_left_out():
    def dry_run(**env: str) -> str:
        environment = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", **env}
        result = subprocess.run([sys.executable, str(ROOT / "scripts" / "install-build-deps"), "--dry-run"],
                                capture_output=True, text=True, env=environment, timeout=300)
        assert result.returncode == 0, result.stderr
        return result.stdout

    if torch.version.cuda is None or not torch.version.cuda.startswith("13."):
        pytest.skip("pip's nvcc packages are set up for CUDA 13 builds of torch")
    release = ".".join(torch.version.cuda.split(".")[:2])
    assert f"nvidia-cuda-nvcc=={release}.* nvidia-nvvm=={release}.*" in dry_run()
    without = dry_run(TORCH_CUDNN_ALGO_OWN_KERNELS="0")
    assert "nvidia-cuda-nvcc" not in without and "leaves our kernels out" in without


# -- which architectures -------------------------------------------------------------------------

def never(*_):
    raise AssertionError("torch's rules are not asked without TORCH_CUDA_ARCH_LIST or a GPU")


def test_without_a_gpu_every_architecture_torch_is_built_for_and_ptx_of_the_newest():
    archs = kb.choose_architectures({}, 0, never, "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120")
    assert archs.names() == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
    assert "-gencode=arch=compute_120,code=compute_120" in archs.flags
    assert archs.source == "every architecture the installed torch is built for"


def test_torchs_own_rules_for_the_variable_and_for_the_visible_gpus():
    rules = lambda: ["-gencode=arch=compute_90,code=compute_90", "-gencode=arch=compute_90,code=sm_90"]  # noqa: E731
    by_variable = kb.choose_architectures({"TORCH_CUDA_ARCH_LIST": "9.0+PTX"}, 0, rules, "sm_75")
    assert by_variable.names() == ["sm_90", "compute_90"] and "TORCH_CUDA_ARCH_LIST=9.0+PTX" in by_variable.source
    by_gpu = kb.choose_architectures({}, 1, rules, "sm_75 sm_80")
    assert by_gpu.names() == ["sm_90", "compute_90"] and by_gpu.source == "the visible GPUs"


@pytest.mark.skipif(torch.version.cuda is None, reason="torch's CUDA rules need a CUDA build of torch")
def test_the_variable_is_read_as_torch_reads_it(monkeypatch):
    from torch.utils.cpp_extension import _get_cuda_arch_flags

    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "Ampere;9.0+PTX")
    archs = kb.choose_architectures(os.environ, 0, _get_cuda_arch_flags, "")
    # "Ampere" is 8.0;8.6+PTX to torch.
    assert archs.names() == ["sm_80", "sm_86", "sm_90", "compute_86", "compute_90"]


def test_torch_naming_no_architecture_and_no_gpu_asks_for_the_variable():
    with pytest.raises(kb.KernelBuildError, match="set TORCH_CUDA_ARCH_LIST"):
        kb.choose_architectures({}, 0, never, "")


def test_architectures_this_nvcc_cannot_build_are_dropped_and_named():
    archs = kb.choose_architectures({}, 0, never, "sm_75 sm_90 sm_121")
    kept, dropped = kb.supported_by(archs, ["compute_75", "compute_90", "compute_100"])
    assert kept.names() == ["sm_75", "sm_90"] and dropped == ["sm_121", "compute_121"]
    with pytest.raises(kb.KernelBuildError, match="compiles none of the architectures"):
        kb.supported_by(archs, ["compute_50"])


@pytest.mark.skipif(torch.version.cuda is None, reason="a CUDA build of torch names its architectures")
def test_the_installed_torch_names_its_architectures_without_a_gpu():
    flags = kb.torch_build_flags(torch._C._cuda_getArchFlags())
    assert flags and flags[-1].endswith(",code=compute_" + re.findall(r"sm_(\w+)", torch._C._cuda_getArchFlags())[-1])


# -- compiling -----------------------------------------------------------------------------------

def test_jobs_follow_max_jobs_as_torchs_builds_do():
    assert kb.jobs({}, 16) == 16 and kb.jobs({"MAX_JOBS": "3"}, 16) == 3 and kb.jobs({}, None) == 1
    with pytest.raises(kb.KernelBuildError, match="MAX_JOBS='two'"):
        kb.jobs({"MAX_JOBS": "two"}, 4)


def recording_compiler(tmp_path: Path, seconds: float = 0.3) -> Path:
    """A stand-in nvcc that writes its -o target after a pause and logs when it ran."""
    script = tmp_path / "nvcc"
    script.write_text(f"""#!{sys.executable}
import sys, time
start = time.monotonic(); time.sleep({seconds})
out = sys.argv[sys.argv.index("-o") + 1]
if "broken" in " ".join(sys.argv): print("error: broken.cu(1): expected a ;", file=sys.stderr); sys.exit(2)
open(out, "w").write("object")
open({str(tmp_path / "log")!r}, "a").write(f"{{start}} {{time.monotonic()}}\\n")
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_kernel_files_compile_in_parallel_and_an_up_to_date_object_is_kept(tmp_path):
    nvcc = recording_compiler(tmp_path)
    sources = []
    for name in ("a.cu", "b.cu"):
        (tmp_path / name).write_text("")
        sources.append(tmp_path / name)
    work = kb.compilations(nvcc, sources, ["-O3"], tmp_path / "out", threads=1)
    started = time.monotonic()
    objects = kb.compile_all(work, [], parallel=2, log=lambda _: None)
    assert objects == [tmp_path / "out" / "a.o", tmp_path / "out" / "b.o"]
    spans = [tuple(map(float, line.split())) for line in (tmp_path / "log").read_text().splitlines()]
    assert len(spans) == 2 and max(s for s, _ in spans) < min(e for _, e in spans)  # they overlapped
    assert time.monotonic() - started < 2 * 0.3 + 2.0
    kb.compile_all(work, [], parallel=2, log=lambda _: None)
    assert len((tmp_path / "log").read_text().splitlines()) == 2  # nothing rebuilt
    changed = kb.compilations(nvcc, sources, ["-O2"], tmp_path / "out", threads=1)
    kb.compile_all(changed, [], parallel=2, log=lambda _: None)
    assert len((tmp_path / "log").read_text().splitlines()) == 4  # other flags: rebuilt


def test_nvcc_threads_split_a_files_architectures_when_cpus_outnumber_files(tmp_path):
    (command,) = [c.command for c in kb.compilations(Path("nvcc"), [tmp_path / "a.cu"], [], tmp_path, threads=4)]
    assert command[1:3] == ("--threads", "4")
    (command,) = [c.command for c in kb.compilations(Path("nvcc"), [tmp_path / "a.cu"], [], tmp_path, threads=1)]
    assert "--threads" not in command


def test_a_failing_kernel_file_says_which_with_nvccs_words_and_the_opt_out(tmp_path):
    nvcc = recording_compiler(tmp_path, seconds=0)
    (tmp_path / "broken.cu").write_text("")
    work = kb.compilations(nvcc, [tmp_path / "broken.cu"], [], tmp_path / "out", threads=1)
    with pytest.raises(kb.KernelBuildError) as error:
        kb.compile_all(work, [], parallel=1, log=lambda _: None)
    assert "nvcc failed on broken.cu (exit 2)" in str(error.value) and "expected a ;" in str(error.value)
    assert "TORCH_CUDNN_ALGO_OWN_KERNELS=0" in str(error.value)


# -- the installed build -------------------------------------------------------------------------

@pytest.mark.skipif(not torch_cudnn_algo.is_available(), reason="needs the C++ extension")
def test_the_installed_build_has_our_kernels_and_records_their_architectures():
    from torch_cudnn_algo import _ops

    if os.environ.get(kb.OWN_KERNELS_ENV, "").strip().lower() in ("0", "false", "no", "off"):
        pytest.skip("this environment builds without our kernels")
    assert _ops.own_kernels_built()
    try:
        from torch_cudnn_algo import _build_info
    except ImportError:
        pytest.skip("an editable install has no build record")
    assert _build_info.KERNEL_ARCHS and re.fullmatch(r"(sm_\w+ )+compute_\w+", _build_info.KERNEL_ARCHS)
