"""CPU: ``profile --plot`` draws a synthetic table to a PNG, refuses a table with
nothing timed, and says how to install matplotlib when it is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torch_cudnn_algo._plot import plot_profile
from torch_cudnn_algo._table import ProfileRow, ProfileTable

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIB = 1 << 20


def _table() -> ProfileTable:
    return ProfileTable(
        "fwd",
        "conv2d: input [64, 256, 56, 56] torch.float16 channels_last, weight [64, 256, 1, 1], "
        "stride [1, 1], padding [0, 0], dilation [1, 1], groups 1",
        "float16",
        [
            ProfileRow(0, "IMPLICIT_GEMM", "ok", 0.91, 0, True, ("TENSOR_OP_MATH",), 2e-4),
            ProfileRow(1, "IMPLICIT_PRECOMP_GEMM", "ok", 0.62, 3 * 1024, True, (), 2e-4),
            ProfileRow(4, "FFT", "ok", 2.5, 300 * MIB, True, (), 5e-4),
            ProfileRow(2, "GEMM", "unsupported: cuDNN does not support it"),
            ProfileRow("eng0_k2=1", "heuristics_a", "ok", 0.55, 0, True, (), 1e-4),
            ProfileRow("eng62_k2=1_k13=1", "heuristics_a", "ok", 0.48, 12 * MIB, False, (), 1e-4),
            ProfileRow("eng65_k2=7", "fallback", "failed: CUDNN_STATUS_EXECUTION_FAILED"),
            ProfileRow(None, "stock", "ok", 0.60),
        ],
    )


@pytest.mark.filterwarnings("error")  # matplotlib's complaints (a log axis from 0, say) are bugs of ours
def test_plot_writes_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.image

    path = tmp_path / "p.png"
    plot_profile(_table(), path)
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 100 and image.shape[1] > 100


@pytest.mark.filterwarnings("error")
def test_plot_accepts_str_path_and_only_stock(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    table = ProfileTable("bwd_data", "conv", "float32", [ProfileRow(None, "stock", "ok", 1.0)])
    path = tmp_path / "stock.png"
    plot_profile(table, str(path))
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_plot_without_timed_rows_raises(tmp_path: Path) -> None:
    table = ProfileTable("fwd", "conv", "float16", [
        ProfileRow(2, "GEMM", "unsupported: cuDNN does not support it"),
        ProfileRow("eng0", "heuristics_a", "out of memory"),
        ProfileRow(1, "IMPLICIT_PRECOMP_GEMM", "ok"),  # "ok" but no time: not plotted
    ])
    with pytest.raises(ValueError, match="no candidate in this table ran"):
        plot_profile(table, tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()


def test_plot_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"torch-cudnn-algo\[plot\]"):
        plot_profile(_table(), tmp_path / "p.png")


# -- profile --energy-plot ---------------------------------------------------

def _energy_table() -> ProfileTable:
    return ProfileTable("fwd", "conv2d 64x256x14x14 -> 256x3x3 s1 p1 fp16 channels_last fwd", "float16", [
        ProfileRow("eng0_k2=1", "heuristics_a", "ok", 0.55, 0, True, (), 1e-4, 0.021, 0.0205, 0.0212, 0.97),
        ProfileRow("eng62_k2=1", "heuristics_a", "ok", 0.50, 0, True, (), 1e-4, 0.020, 0.0199, 0.0203, 0.92),
        ProfileRow(1, "IMPLICIT_PRECOMP_GEMM", "ok", 0.9, 0, True, (), 1e-4),  # time only: not plotted
        ProfileRow(None, "stock", "ok", 0.52, None, None, (), 1e-4, 0.0217, 0.0215, 0.022),
    ], {"energy_measure": {"resolution": 0.008, "summary": "s"}})


@pytest.mark.filterwarnings("error")
def test_energy_plot_writes_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from torch_cudnn_algo._plot import plot_profile_energy

    path = tmp_path / "energy.png"
    plot_profile_energy(_energy_table(), path)
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_energy_plot_without_energy_raises(tmp_path: Path) -> None:
    from torch_cudnn_algo._plot import plot_profile_energy

    with pytest.raises(ValueError, match=r"no row has an energy reading \(profile with energy=True, or --energy\)"):
        plot_profile_energy(_table(), tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()
