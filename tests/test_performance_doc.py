"""CPU: docs/performance.md is generated from benchmarks/results/ (never hand-kept), and
benchmarks/render_performance.py renders each kind of results file: a zoo-*.json as one
table per file with stock / ours ratios, a benchmarks/report.py JSON as its targets, and
markdown, text and image records as they are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import render_performance  # noqa: E402
from render_performance import render  # noqa: E402


def test_docs_performance_md_is_current() -> None:
    # Fails when a results file was added or changed without re-rendering: the fix is
    # `python benchmarks/render_performance.py`, never an edit of docs/performance.md.
    assert render_performance.DOC.exists(), "docs/performance.md is missing: run python benchmarks/render_performance.py"
    assert render_performance.DOC.read_text() == render(), \
        "docs/performance.md is out of date with benchmarks/results/: run python benchmarks/render_performance.py"
    assert render_performance.main(["--check"]) == 0


def zoo_network(name: str, **overrides: object) -> dict:
    network = {"name": name, "gpu_ms": {"heuristics": 10.0, "benchmark": 9.0, "fastest": 5.0},
               "eager_ms": {"stock": 20.0, "plan": 16.0, "fastest": 25.0},
               "host_us_per_conv_call": {"stock": 15.0, "plan": 12.0}, "tune_s": 1.8, "benchmark_search_s": 16.1,
               "first_step_s": {"stock": 4.0, "plan": 2.0}}
    network.update(overrides)
    return network


def write_zoo(results: Path, networks: list[dict], name: str = "zoo-h100-2026-12-01.json") -> Path:
    results.mkdir(parents=True, exist_ok=True)
    path = results / name
    path.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cudnn": 91900,
                                "date": "2026-12-01", "networks": networks}))
    return path


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith(f"| {first_cell}")]


def test_zoo_file_is_one_table_with_stock_over_ours_ratios(tmp_path: Path) -> None:
    results = tmp_path / "benchmarks" / "results"
    write_zoo(results, [zoo_network("resnet50"),
                        zoo_network("mobilenet_v3", gpu_ms={"heuristics": 4.0, "benchmark": None, "fastest": 2.0},
                                    eager_ms=None, tune_s=None, first_step_s={"stock": None, "plan": 1.0})])
    text = render(results, tmp_path / "docs" / "performance.md")
    assert "## Network zoo: zoo-h100-2026-12-01" in text
    assert "[zoo-h100-2026-12-01.json](../benchmarks/results/zoo-h100-2026-12-01.json)" in text
    assert "cuDNN 9.19.0, 2026-12-01; 2 networks" in text
    (header,) = table_rows(text, "network")
    (resnet,) = table_rows(text, "resnet50")
    (mobilenet,) = table_rows(text, "mobilenet_v3")
    (mean,) = table_rows(text, "geometric mean")
    row = dict(zip(header, resnet))
    assert (row["GPU ms fastest"], row["heuristics / fastest"], row["benchmark / fastest"]) == ("5.00", "2.000", "1.800")
    assert (row["eager stock / plan"], row["eager stock / fastest"]) == ("1.250", "0.800")
    assert (row["host stock / plan"], row["tune s"], row["first step stock / plan"]) == ("1.250", "1.80", "2.000")
    row = dict(zip(header, mobilenet))  # null fields and a null block render as "-"
    assert (row["benchmark / fastest"], row["eager ms stock"], row["tune s"]) == ("-", "-", "-")
    assert (row["heuristics / fastest"], row["first step stock / plan"]) == ("2.000", "-")
    row = dict(zip(header, mean))  # over the networks that have the ratio
    assert (row["heuristics / fastest"], row["benchmark / fastest"]) == ("2.000", "1.800")


def test_each_zoo_file_gets_its_own_table(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_zoo(results, [zoo_network("a")], "zoo-h100-2026-12-01.json")
    write_zoo(results, [zoo_network("b")], "zoo-h200-2026-12-02.json")
    (results / "zoo-h100-2026-12-01.md").write_text("| zoo.py's own table |\n")  # linked, not included
    (results / "raw" / "zoo").mkdir(parents=True)
    (results / "raw" / "zoo" / "a.gpu.json").write_text("{}")  # raw parts are not read
    text = render(results, tmp_path / "performance.md")
    assert "its own rendering: [zoo-h100-2026-12-01.md](results/zoo-h100-2026-12-01.md)" in text
    assert "zoo.py's own table" not in text and "a.gpu" not in text
    assert text.count("| network |") == 2
    assert text.index("zoo-h100-2026-12-01") < text.index("zoo-h200-2026-12-02")
    assert "geometric mean" not in text  # one network per file: nothing to average


def test_records_and_reports_render_as_they_are(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "h100-2026-12-01-demo.md").write_text("# The demo\n\nmeasured on x\n\n## part\n\n```\n# not a heading\n```\n")
    (results / "h100-2026-12-01-tune.txt").write_text("tuned 68 configurations in 1.8 s\n")
    (results / "h100-2026-12-01-plot.png").write_bytes(b"\x89PNG")
    (results / "h100-2026-12-01.json").write_text(json.dumps({"environment": {"gpu": "NVIDIA H100", "cudnn": 91900},
                                                               "sections": {}}))
    (results / "h100-2026-12-01.md").write_text("# the full report: linked, not included\n")
    text = render(results, tmp_path / "docs" / "performance.md")
    assert "## The demo\n\nFrom [h100-2026-12-01-demo.md](../results/h100-2026-12-01-demo.md).\n\nmeasured on x" in text
    assert "### part" in text and "\n# not a heading\n" in text  # headings demoted, code left alone
    assert "```\ntuned 68 configurations in 1.8 s\n```" in text
    assert "![h100-2026-12-01-plot](../results/h100-2026-12-01-plot.png)" in text
    assert "## Benchmark report: h100-2026-12-01" in text and "| 1 |" in text and "not run" in text
    assert "every table: [h100-2026-12-01.md](../results/h100-2026-12-01.md)" in text
    assert "the full report: linked, not included" not in text


def test_check_says_when_the_document_is_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results, doc = tmp_path / "results", tmp_path / "performance.md"
    write_zoo(results, [zoo_network("a")])
    assert render_performance.main(["--results", str(results), "--out", str(doc), "--check"]) == 1
    assert "run python benchmarks/render_performance.py" in capsys.readouterr().err
    assert render_performance.main(["--results", str(results), "--out", str(doc)]) == 0
    assert render_performance.main(["--results", str(results), "--out", str(doc), "--check"]) == 0
    write_zoo(results, [zoo_network("b")], "zoo-h100-2026-12-02.json")
    assert render_performance.main(["--results", str(results), "--out", str(doc), "--check"]) == 1
