"""Renders docs/performance.md from the files in benchmarks/results/: nothing in it is
typed by hand, so it says only what a results file says.

    python benchmarks/render_performance.py            # rewrite docs/performance.md
    python benchmarks/render_performance.py --check    # exit 1 if it is out of date

What it renders, by file name (``<device>-<date>`` first, so names sort by machine and day):

- ``zoo-<gpu>-<date>.json`` (``benchmarks/zoo.py``): one table per file, a row per network,
  with the ratios stock / ours (above 1 = we are faster); fields may be null (not measured).
  The ``zoo-<gpu>-<date>.md`` beside it is linked, not included.
- ``<device>-<date>.json`` with ``sections`` (``benchmarks/report.py``): its environment and
  targets table, and a link to the full report rendered beside it (``<device>-<date>.md``).
- every other ``.md`` (a measured record, included as it is), ``.txt`` (command output, in a
  code block), ``.png`` (shown) and ``.json`` (linked). Subfolders (``raw/``) are not read.

Pure Python (no torch, no GPU), so a CPU test can check docs/performance.md is current.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
DOC = BENCHMARKS.parent / "docs" / "performance.md"
COMMAND = "python benchmarks/render_performance.py"

ZOO_PATTERN = re.compile(r"zoo-.+\.json")

sys.path.insert(0, str(BENCHMARKS))
from report_render import evaluate_targets  # noqa: E402  (pure Python, beside this file)


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], align: Sequence[str] | None = None) -> list[str]:
    align = align or ["---"] * len(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def number(value: float | None) -> str:
    """Three significant figures or so, "-" for a missing value."""
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def ratio(stock: float | None, ours: float | None) -> float | None:
    """stock / ours: above 1, ours is faster. None where either is missing or ours is 0."""
    if stock is None or ours is None or ours == 0:
        return None
    return stock / ours


def ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def geometric_mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None and v > 0]
    if not present:
        return None
    return math.exp(sum(math.log(v) for v in present) / len(present))


def cudnn_text(version: object) -> str:
    """91900 -> "9.19.0" (cuDNN 9: major * 10000 + minor * 100 + patch); text as it is."""
    if isinstance(version, int):
        if version >= 90000:
            return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
        return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"
    return "-" if version is None else str(version)


def _anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _demote(text: str, levels: int) -> list[str]:
    """A markdown record's headings (outside code fences) ``levels`` deeper."""
    lines, fenced = [], False
    for line in text.rstrip("\n").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            line = "#" * levels + line
        lines.append(line)
    return lines


# ---------------------------------------------------------------------------
# zoo-<gpu>-<date>.json
# ---------------------------------------------------------------------------

ZOO_COLUMNS = (
    # (header, function of a network row) -- times first, then the ratios stock / ours
    ("network", lambda n: n.get("name", "?")),
    ("GPU ms heuristics", lambda n: number(_get(n, "gpu_ms", "heuristics"))),
    ("GPU ms benchmark", lambda n: number(_get(n, "gpu_ms", "benchmark"))),
    ("GPU ms fastest", lambda n: number(_get(n, "gpu_ms", "fastest"))),
    ("heuristics / fastest", lambda n: ratio_text(_zoo_ratio(n, "gpu_ms", "heuristics", "fastest"))),
    ("benchmark / fastest", lambda n: ratio_text(_zoo_ratio(n, "gpu_ms", "benchmark", "fastest"))),
    ("benchmark / plan, same process", lambda n: ratio_text(_same_process_ratio(n))),
    ("eager ms stock", lambda n: number(_get(n, "eager_ms", "stock"))),
    ("eager ms plan", lambda n: number(_get(n, "eager_ms", "plan"))),
    ("eager ms fastest", lambda n: number(_get(n, "eager_ms", "fastest"))),
    ("eager stock / plan", lambda n: ratio_text(_zoo_ratio(n, "eager_ms", "stock", "plan"))),
    ("eager stock / fastest", lambda n: ratio_text(_zoo_ratio(n, "eager_ms", "stock", "fastest"))),
    ("eager stock / stock (A/A)", lambda n: ratio_text(_control_ratio(n))),
    ("host µs/conv call stock", lambda n: number(_get(n, "host_us_per_conv_call", "stock"))),
    ("host µs/conv call plan", lambda n: number(_get(n, "host_us_per_conv_call", "plan"))),
    ("host stock / plan", lambda n: ratio_text(_zoo_ratio(n, "host_us_per_conv_call", "stock", "plan"))),
    ("host, GPU drained, stock / plan", lambda n: ratio_text(_drained_host_ratio(n))),
    ("tune s", lambda n: number(n.get("tune_s"))),
    ("benchmark search s", lambda n: number(n.get("benchmark_search_s"))),
    ("first step s stock", lambda n: number(_get(n, "first_step_s", "stock"))),
    ("first step s choices only", lambda n: number(n.get("first_step_plan_names_s"))),
    ("first step s plan", lambda n: number(_get(n, "first_step_s", "plan"))),
    ("first step stock / plan", lambda n: ratio_text(_zoo_ratio(n, "first_step_s", "stock", "plan"))),
)


def _get(network: dict, field: str, key: str) -> float | None:
    values = network.get(field)
    return values.get(key) if isinstance(values, dict) else None


def _zoo_ratio(network: dict, field: str, stock: str, ours: str) -> float | None:
    return ratio(_get(network, field, stock), _get(network, field, ours))


def _control_ratio(network: dict) -> float | None:
    """Stock's eager ms over stock's again (the A/A control): what noise alone gives."""
    return ratio(_get(network, "eager_ms", "stock"), network.get("eager_control_ms"))


def _same_process_ratio(network: dict) -> float | None:
    """Stock's benchmark picks / the plan's, interleaved in one process: median per repeat."""
    return _get(network, "gpu_speedup_plan_vs_benchmark_same_process", "median")


def _drained_host_ratio(network: dict) -> float | None:
    """Host µs per conv call, stock's / the plan's, with the GPU drained before every conv module."""
    return _zoo_ratio(network, "host_us_per_conv_call_gpu_drained", "stock", "plan")


# The ratio columns, for the geometric-mean row: header -> the ratio of a network.
ZOO_RATIOS = {
    "heuristics / fastest": lambda n: _zoo_ratio(n, "gpu_ms", "heuristics", "fastest"),
    "benchmark / fastest": lambda n: _zoo_ratio(n, "gpu_ms", "benchmark", "fastest"),
    "benchmark / plan, same process": _same_process_ratio,
    "eager stock / plan": lambda n: _zoo_ratio(n, "eager_ms", "stock", "plan"),
    "eager stock / fastest": lambda n: _zoo_ratio(n, "eager_ms", "stock", "fastest"),
    "eager stock / stock (A/A)": _control_ratio,
    "host stock / plan": lambda n: _zoo_ratio(n, "host_us_per_conv_call", "stock", "plan"),
    "host, GPU drained, stock / plan": _drained_host_ratio,
    "first step stock / plan": lambda n: _zoo_ratio(n, "first_step_s", "stock", "plan"),
}


def zoo_lines(data: dict) -> list[str]:
    networks = data.get("networks") or []
    lines = [f"Device {data.get('device', '?')}, torch {data.get('torch', '?')}, cuDNN {cudnn_text(data.get('cudnn'))}, "
             f"{data.get('date', '?')}; {len(networks)} networks. Times are medians; a ratio is stock / ours "
             "(above 1 = ours is faster; `heuristics` and `benchmark` are stock with `benchmark=False` / `True`); "
             "`-` = not measured.", ""]
    rows = [[column(n) for _, column in ZOO_COLUMNS] for n in networks]
    if len(networks) > 1:
        means = {header: geometric_mean(of(n) for n in networks) for header, of in ZOO_RATIOS.items()}
        rows.append([("geometric mean" if header == "network" else ratio_text(means[header]) if header in means else "")
                     for header, _ in ZOO_COLUMNS])
    align = [":--" if header == "network" else "--:" for header, _ in ZOO_COLUMNS]
    return lines + _table([header for header, _ in ZOO_COLUMNS], rows, align)


# ---------------------------------------------------------------------------
# <device>-<date>.json from benchmarks/report.py
# ---------------------------------------------------------------------------


def report_lines(name: str, data: dict, link: str, full_report: str | None) -> list[str]:
    env = data.get("environment") or {}
    commit = env.get("git_commit")
    lines = [f"{env.get('gpu', '?')} (driver {env.get('driver', '?')}), torch {env.get('torch', '?')}, "
             f"cuDNN {cudnn_text(env.get('cudnn'))}, torch_cudnn_algo {env.get('torch_cudnn_algo', '?')} "
             f"(commit {commit[:12] if commit else 'unknown'}), {str(env.get('date', '?'))[:10]}. "
             f"Sections: {', '.join(data.get('sections') or {}) or 'none'}. Raw numbers: [{name}]({link})"
             + (f"; every table: [{Path(full_report).name}]({full_report})." if full_report else "."), ""]
    rows = [(t.number, t.target, t.measured, t.verdict) for t in evaluate_targets(data)]
    return lines + _table(("#", "target", "measured", "verdict"), rows)


def is_report(data: object) -> bool:
    return isinstance(data, dict) and isinstance(data.get("sections"), dict)


# ---------------------------------------------------------------------------
# The document
# ---------------------------------------------------------------------------


def render(results: Path = RESULTS, doc: Path = DOC) -> str:
    link_base = os.path.relpath(results, doc.parent)

    def link(path: Path) -> str:
        return f"{link_base}/{path.name}".replace(os.sep, "/")

    files = sorted(p for p in results.iterdir() if p.is_file()) if results.is_dir() else []
    reports = {p: json.loads(p.read_text()) for p in files if p.suffix == ".json" and not ZOO_PATTERN.fullmatch(p.name)}
    reports = {p: data for p, data in reports.items() if is_report(data)}
    zoo = [p for p in files if ZOO_PATTERN.fullmatch(p.name)]
    # A JSON's own markdown rendering beside it (report.py's full report, zoo.py's table) is
    # linked from its section, not included again.
    renderings = {p.with_suffix(".md") for p in [*reports, *zoo]}
    records = [p for p in files if p not in reports and p not in zoo and p not in renderings]

    parts: list[tuple[str, list[str]]] = []
    for path in zoo:
        rendering = path.with_suffix(".md")
        also = f"; its own rendering: [{rendering.name}]({link(rendering)})" if rendering.exists() else ""
        parts.append((f"Network zoo: {path.stem}", [f"From [{path.name}]({link(path)}) (`benchmarks/zoo.py`){also}.",
                                                    "", *zoo_lines(json.loads(path.read_text()))]))
    for path, data in reports.items():
        full = path.with_suffix(".md")
        parts.append((f"Benchmark report: {path.stem}",
                       report_lines(path.name, data, link(path), link(full) if full.exists() else None)))
    for path in records:
        source = f"From [{path.name}]({link(path)})"
        if path.suffix == ".md":
            lines = path.read_text().rstrip("\n").splitlines()
            title = path.stem
            if lines and lines[0].startswith("# "):
                title, lines = lines[0][2:].strip(), lines[1:]
            body = _demote("\n".join(lines), 1)
            while body and not body[0].strip():
                body = body[1:]
            parts.append((title, [f"{source}.", "", *body]))
        elif path.suffix == ".txt":
            parts.append((path.name, [f"{source}, as the command printed it:", "", "```",
                                      *path.read_text().rstrip("\n").splitlines(), "```"]))
        elif path.suffix == ".png":
            parts.append((path.name, [f"{source}:", "", f"![{path.stem}]({link(path)})"]))
        else:
            parts.append((path.name, [f"{source}."]))

    out = [
        "# Performance: what was measured",
        "",
        f"<!-- Generated by `{COMMAND}` from benchmarks/results/. Do not edit: change or add a",
        "results file and run it again (tests/test_performance_doc.py fails when this file is out of date). -->",
        "",
        "Every number here is read from a file in [benchmarks/results/](" + link_base + "/), named under each "
        "section. Stock PyTorch is measured in the same run as what it is compared with. How the override "
        "works, and why the numbers look as they do: [design.md](design.md).",
        "",
        "## Contents",
        "",
        *[f"- [{title}](#{_anchor(title)})" for title, _ in parts],
    ]
    if not parts:
        out += ["", "No results yet."]
    for title, lines in parts:
        out += ["", f"## {title}", "", *lines]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=DOC)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from a fresh rendering")
    args = parser.parse_args(argv)
    text = render(args.results, args.out)
    if args.check:
        current = args.out.read_text() if args.out.exists() else None
        if current != text:
            print(f"{args.out} is out of date with {args.results}: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out} from {len(list(args.results.iterdir()))} files in {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
