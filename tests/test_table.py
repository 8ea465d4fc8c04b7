"""CPU: the profile table on synthetic rows (printing, sorting, JSON/CSV round
trips), the "fastest" policy's choice rule, tolerances and tensor descriptions."""

from __future__ import annotations

import json
import math

import expecttest
import pytest
import torch

from torch_cudnn_algo import (
    TOLERANCES,
    ProfileRow,
    ProfileTable,
    TensorSpec,
    choose_fastest,
    tolerance_for,
)
from torch_cudnn_algo._table import TIE_RELATIVE

ENGINE_A = "eng62_k2=1_k13=1_k18=0"
ENGINE_B = "eng65_k2=7_k13=1"


def rows() -> list[ProfileRow]:
    return [
        ProfileRow(0, "IMPLICIT_GEMM", "ok", 0.91, 0, True, ("TENSOR_OP_MATH",), 2.4e-4, 0.5),
        ProfileRow(2, "GEMM", "unsupported: cuDNN does not support it", notes=("TENSOR_OP_MATH",)),
        ProfileRow(ENGINE_A, "heuristics_a", "ok", 0.30, 4 << 20, True, ("TENSOR_CORE",), 2.5e-4, 0.03,
                   energy_min_j=0.0295, energy_max_j=0.0304, energy_vs_stock=0.968),
        ProfileRow(ENGINE_B, "heuristics_b", "ok", 0.25, 1536, False, ("TENSOR_CORE", "NONDETERMINISTIC"),
                   2.6e-4, None),
        ProfileRow("eng1", "fallback", "over workspace limit", workspace=1 << 30, deterministic=True),
        ProfileRow(None, "stock", "ok", 0.31, None, None, (), 2.5e-4, 0.031),
    ]


def table(**kwargs) -> ProfileTable:
    return ProfileTable("fwd", "conv2d: input [8, 64, 56, 56] torch.float16 channels_last", "float16",
                        rows(), **kwargs)


class TestTablePrinting(expecttest.TestCase):
    def test_seed_style_table(self):
        self.assertExpectedInline(str(table()), """\
cuDNN fwd candidates for conv2d: input [8, 64, 56, 56] torch.float16 channels_last
flag value              source         time ms  vs stock  workspace  determ.  max rel err      J/call (min-max)  J vs stock  notes                         status
eng65_k2=7_k13=1        heuristics_b    0.2500     0.81x    1.5 KiB  no           2.6e-04                     -           -  TENSOR_CORE,NONDETERMINISTIC  ok
eng62_k2=1_k13=1_k18=0  heuristics_a    0.3000     0.97x    4.0 MiB  yes          2.5e-04  0.03 (0.0295-0.0304)      0.968x  TENSOR_CORE                   ok
None (stock)            stock           0.3100     1.00x          -  -            2.5e-04                 0.031           -                                ok
0                       IMPLICIT_GEMM   0.9100     2.94x          0  yes          2.4e-04                   0.5           -  TENSOR_OP_MATH                ok
2                       GEMM                 -         -          -  -                  -                     -           -  TENSOR_OP_MATH                unsupported: cuDNN does not support it
eng1                    fallback             -         -   1.00 GiB  yes                -                     -           -                                over workspace limit""")


def test_rows_are_sorted_by_time_and_failures_keep_their_order():
    t = table()
    assert [r.value for r in t] == [ENGINE_B, ENGINE_A, None, 0, 2, "eng1"]
    assert t.stock is t.row(None) and t.row(0).label == "IMPLICIT_GEMM"
    with pytest.raises(KeyError, match="no row with value 7"):
        t.row(7)


def test_first_column_is_the_value_to_assign():
    for line, row in zip(str(table()).splitlines()[2:], table()):
        first = line.split()[0]
        assert first == ("None" if row.value is None else str(row.value))


def test_json_round_trip():
    original = table(environment={"gpu": "test", "reps": 20})
    text = original.to_json(indent=1)
    data = json.loads(text)
    assert data["format"] == "torch_cudnn_algo.profile/1" and data["rows"][0]["value"] == ENGINE_B
    restored = ProfileTable.from_json(text)
    assert restored == original
    assert restored.to_dicts() == original.to_dicts()


def test_json_rejects_other_documents():
    with pytest.raises(ValueError, match="not a profile table"):
        ProfileTable.from_json('{"format": "something/1"}')
    bad = json.loads(table().to_json())
    bad["rows"][0]["speed"] = 1
    with pytest.raises(ValueError, match=r"unknown profile row fields \['speed'\]"):
        ProfileTable.from_json(json.dumps(bad))


def test_csv_round_trip():
    original = table()
    text = original.to_csv()
    header = text.splitlines()[0].split(",")
    assert header[:4] == ["direction", "convolution", "dtype", "value"]
    restored = ProfileTable.from_csv(text)
    assert restored.rows == original.rows
    assert (restored.direction, restored.convolution, restored.dtype) == ("fwd", original.convolution, "float16")
    assert type(restored.row(0).value) is int and restored.row(None).workspace is None


def test_csv_without_rows_is_an_error():
    with pytest.raises(ValueError, match="no rows"):
        ProfileTable.from_csv(table().to_csv().splitlines()[0] + "\n")


def test_fastest_takes_the_lowest_time_within_tolerance():
    assert choose_fastest(rows(), tolerance=1e-2).value == ENGINE_B
    # The error bound excludes rows above it, and NaN/None errors never qualify.
    assert choose_fastest(rows(), tolerance=2.55e-4).value == ENGINE_A
    assert choose_fastest(rows(), tolerance=1e-5) is None
    nan_row = ProfileRow("eng9", "fallback", "ok", 0.01, 0, True, (), math.nan)
    assert choose_fastest([*rows(), nan_row], tolerance=1e-2).value == ENGINE_B


def test_fastest_never_picks_stock_or_rows_that_did_not_run():
    only = [r for r in rows() if r.value is None or not r.ok]
    assert choose_fastest(only, tolerance=1.0) is None


def test_fastest_honours_determinism():
    assert choose_fastest(rows(), tolerance=1e-2, deterministic=True).value == ENGINE_A


def test_fastest_honours_the_workspace_limit():
    assert choose_fastest(rows(), tolerance=1e-2, workspace_limit=1536).value == ENGINE_B
    assert choose_fastest(rows(), tolerance=1e-2, workspace_limit=1535).value == 0
    assert choose_fastest(rows(), tolerance=1e-2, deterministic=True, workspace_limit=0).value == 0


def test_fastest_without_reduced_precision_skips_tensor_core_rows():
    assert choose_fastest(rows(), tolerance=1e-2, reduced_precision_allowed=False).value == 0
    fp32 = ProfileTable("fwd", "conv", "float32", rows())
    assert fp32.fastest(allow_tf32=False, tolerance=1e-2).value == 0
    assert fp32.fastest(allow_tf32=True).value == ENGINE_B  # TF32 tolerance 1e-2


def test_ties_go_to_the_smaller_workspace():
    fast = ProfileRow("eng5", "heuristics_a", "ok", 1.0, 8 << 20, True, (), 1e-4)
    tied = ProfileRow("eng6", "heuristics_a", "ok", 1.0 * (1 + TIE_RELATIVE / 2), 0, True, (), 1e-4)
    slower = ProfileRow("eng7", "heuristics_a", "ok", 1.0 * (1 + 2 * TIE_RELATIVE), 0, True, (), 1e-4)
    assert choose_fastest([fast, tied], tolerance=1e-3).value == "eng6"
    assert choose_fastest([fast, slower], tolerance=1e-3).value == "eng5"


def test_table_policy_uses_the_dtype_tolerance():
    t = table()
    assert t.fastest().value == ENGINE_B  # float16: 1e-2
    assert t.fastest(tolerance=1e-6) is None


def test_tolerances():
    assert tolerance_for("float16", allow_tf32=True) == TOLERANCES["float16"]
    assert tolerance_for("float32", allow_tf32=True) == TOLERANCES["float32+tf32"] > TOLERANCES["float32"]
    assert tolerance_for("float32", allow_tf32=False) == TOLERANCES["float32"]
    with pytest.raises(ValueError, match="no tolerance for dtype 'int8'"):
        tolerance_for("int8", allow_tf32=False)


@pytest.mark.parametrize(
    "text, spec",
    [
        ("64x256x56x56 float16 channels_last", TensorSpec((64, 256, 56, 56), torch.float16, torch.channels_last)),
        ("[8, 3, 32, 32]", TensorSpec((8, 3, 32, 32))),
        ("2x4x5x6x7 bfloat16 nhwc", TensorSpec((2, 4, 5, 6, 7), torch.bfloat16, torch.channels_last_3d)),
        ("16x8x3x3 torch.float64", TensorSpec((16, 8, 3, 3), torch.float64)),
        ("4x8x100, half", TensorSpec((4, 8, 100), torch.float16)),
    ],
)
def test_tensor_descriptions(text, spec):
    assert TensorSpec.parse(text) == spec


@pytest.mark.parametrize("text, message", [("float16", "cannot read a tensor description"),
                                           ("8x3x32x32 int8", "unknown word 'int8'")])
def test_bad_tensor_descriptions(text, message):
    with pytest.raises(ValueError, match=message):
        TensorSpec.parse(text)


# -- the "lowest_energy" policy ------------------------------------------------

def energy_table(*candidates: ProfileRow, resolution: float | None = None) -> ProfileTable:
    stock = ProfileRow(None, "stock", "ok", 1.0, None, None, (), 1e-4, 1.0)
    environment = {} if resolution is None else {"energy_measure": {"resolution": resolution, "summary": "s"}}
    return ProfileTable("fwd", "conv", "float16", [stock, *candidates], environment)


def energy_row(value: str, time_ms: float, vs_stock: float | None, joules: float | None = None) -> ProfileRow:
    joules = vs_stock if joules is None else joules
    return ProfileRow(value, "heuristics_a", "ok", time_ms, 0, True, (), 1e-4, joules, energy_vs_stock=vs_stock)


def test_lowest_energy_picks_the_least_energy_within_the_time_guard():
    frugal_slow = energy_row("eng1", 1.05, 0.80)  # 5% slower than stock: outside the default 2% guard
    frugal = energy_row("eng2", 1.01, 0.90)
    fast = energy_row("eng3", 0.95, 0.97)
    t = energy_table(frugal_slow, frugal, fast)
    assert t.pick("lowest_energy").value == "eng2"
    assert t.pick("lowest_energy", time_guard=0.06).value == "eng1"
    assert t.pick("lowest_energy", time_guard=0.0).value == "eng3"


def test_lowest_energy_keeps_stock_unless_the_saving_is_resolved():
    tiny = energy_row("eng2", 1.0, 0.995)  # 0.5%: below the 1% minimum saving
    assert energy_table(tiny).pick("lowest_energy") is None
    assert energy_table(tiny).pick("lowest_energy", min_saving=0.0).value == "eng2"
    frugal = energy_row("eng2", 1.0, 0.90)
    assert energy_table(frugal, resolution=0.05).pick("lowest_energy").value == "eng2"
    # The A/A control spread 12%: a 10% difference is not resolved.
    assert energy_table(frugal, resolution=0.12).pick("lowest_energy") is None


def test_lowest_energy_ignores_unmeasured_rows_and_compares_medians_without_per_round_ratios():
    unmeasured = ProfileRow("eng5", "heuristics_a", "ok", 0.5, 0, True, (), 1e-4)
    assert energy_table(unmeasured).pick("lowest_energy") is None
    by_medians = energy_row("eng2", 1.0, None, joules=0.9)  # stock's J/call is 1.0
    assert energy_table(by_medians).pick("lowest_energy").value == "eng2"


def test_lowest_energy_rejects_bad_bounds():
    with pytest.raises(ValueError, match="time_guard must be a fraction >= 0"):
        energy_table().pick("lowest_energy", time_guard=-0.1)
    with pytest.raises(ValueError, match=r"min_saving must be a fraction in \[0, 1\)"):
        energy_table().pick("lowest_energy", min_saving=1.5)


def test_the_energy_measurement_summary_is_the_tables_last_line():
    t = energy_table(energy_row("eng2", 1.0, 0.9))
    t.environment["energy_measure"] = {"summary": "NVML energy counter, 1.0 s windows x 3 rounds", "resolution": 0.01}
    assert str(t).splitlines()[-1] == "energy: NVML energy counter, 1.0 s windows x 3 rounds"
    round_trip = ProfileTable.from_json(t.to_json())
    assert round_trip.row("eng2").energy_vs_stock == 0.9
    assert ProfileTable.from_csv(t.to_csv()).row("eng2").energy_vs_stock == 0.9
