"""GPU: one training step of real networks under pinned algorithms (stock, legacy 0 and 1,
an engine, "fastest"), each checked against a float64 copy of the model that follows the
run's own branches. The networks, settings and verdicts: tests/network_cases.py."""

from __future__ import annotations

import json
import os

import pytest

from network_cases import (
    _CURRENT,
    _ROWS,
    CASES,
    REPORT_ENV,
    Case,
    _jsonable,
    _load_renderer,
    case_data,
    diagnosis,
    report_row,
    verdict,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _print_table():
    yield
    _CURRENT.clear()
    render = _load_renderer() if _ROWS else None
    if render is not None:
        print("\n" + render(_ROWS))


# ---------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("case, setting", [(c, s) for c in CASES for s in c.settings],
                         ids=[f"{c.id}-{s}" for c in CASES for s in c.settings])
def test_training_step(case: Case, setting: str, record_property):
    data = case_data(case)
    stock = data.stock
    m = stock if setting == "stock" else data.measure(setting)
    failures = verdict(case, setting, m, stock)
    row = _jsonable(report_row(case, setting, m, stock, failures))
    _ROWS.append(row)
    for key in ("out_err", "grad_err", "stock_grad_err", "ratio", "flips", "ran", "cudnn_calls", "step_s"):
        record_property(key, row[key])
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    assert not failures, "\n".join(failures) + "\n" + diagnosis(m, stock)
