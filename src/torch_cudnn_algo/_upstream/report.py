"""The summary (the dict written to summary.json) as the markdown of stdout and summary.md."""

from __future__ import annotations

from collections.abc import Mapping


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _short_test(nodeid: str) -> str:
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def render_markdown(summary: Mapping) -> str:
    """The summary (the dict written to summary.json) as markdown."""
    out = ["# PyTorch's tests under pinned cuDNN algorithms", ""]
    torch_info = summary.get("torch") or {}
    facts = [f"file `{summary.get('file', '?')}`", f"`-k {summary.get('k') or ''}`"]
    if torch_info.get("version"):
        facts.append(f"torch {torch_info['version']} (git {str(torch_info.get('git_version') or '?')[:12]})")
    if torch_info.get("device"):
        facts.append(str(torch_info["device"]))
    facts.append(f"{summary.get('jobs', '?')} runs in parallel")
    facts.append("strict" if summary.get("strict") else "not strict")
    if summary.get("elapsed") is not None:
        facts.append(f"{summary['elapsed']:.0f} s in all")
    out += [", ".join(facts) + ".", ""]
    if summary.get("phase") not in (None, "final"):
        out += ["**Preliminary**: the job has not finished; regressions marked *unconfirmed* have not been "
                "re-run alone yet.", ""]
    out.append("| setting | pins | passed | failed | skipped | errors | crashed | ours | numerics | cleared | time |")
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for run in summary.get("runs", []):
        regressions = run.get("regressions", [])
        is_stock = run["setting"] == "stock"
        ours = sum(1 for r in regressions if r["class"] == "ours")
        numerics = sum(1 for r in regressions if r["class"] == "numerics")
        row = [
            run["setting"],
            run.get("pins") or "-",
            run.get("passed", 0),
            run.get("failed", 0),
            run.get("skipped", 0),
            run.get("errors", 0),
            run.get("crashed", 0),
            "-" if is_stock else ours,
            "-" if is_stock else numerics,
            "-" if is_stock else len(run.get("cleared", [])),
            f"{run.get('duration', 0.0):.1f} s",
        ]
        out.append("| " + " | ".join(_cell(x) for x in row) + " |")
    out += [
        "",
        "Counts are the parallel runs'; *ours* and *numerics* count the tests that pass stock and "
        "fail under the setting, confirmed by a re-run alone on the GPU; *cleared* failed in the "
        "parallel run and passed alone.",
    ]
    run_errors = [(run["setting"], run["run_error"]) for run in summary.get("runs", []) if run.get("run_error")]
    if run_errors:
        out += ["", "Runs that did not finish normally:", ""]
        out += [f"- {_cell(name)}: {_cell(err)}" for name, err in run_errors]
    stock = summary.get("stock_rerun") or {}
    if stock.get("tests"):
        out += [
            "",
            f"Stock failures re-run alone: {stock['tests']}; passed alone: {len(stock.get('passed_alone', []))}, "
            f"still failing: {len(stock.get('still_failing', []))}.",
        ]
        for item in stock.get("still_failing", []):
            test, label, detail = _cell(_short_test(item["test"])), _cell(item["label"]), _cell(item["detail"])
            out.append(f"- stock fails: `{test}`: {label}: {detail}")
    rerun = summary.get("rerun") or {}
    if rerun:
        out += [
            "",
            f"Re-run alone: {rerun.get('candidates', 0)} tests that passed stock and failed or skipped "
            f"under a setting in parallel; {rerun.get('confirmed', 0)} failed again (confirmed), "
            f"{rerun.get('cleared', 0)} failed in parallel and passed alone (cleared).",
        ]
    rows = [(run["setting"], reg) for run in summary.get("runs", []) for reg in run.get("regressions", [])]
    out += ["", "## Regressions: pass stock, fail under the setting", ""]
    if rows:
        out += ["| setting | test | class | detail |", "|---|---|---|---|"]
        for name, reg in rows:
            test, label, detail = _cell(_short_test(reg["test"])), _cell(reg["label"]), _cell(reg["detail"])
            if reg.get("confirmed") is False:
                label += " (unconfirmed)"
            out.append(f"| {_cell(name)} | `{test}` | {label} | {detail} |")
    else:
        out.append("None.")
    cleared = [(run["setting"], t) for run in summary.get("runs", []) for t in run.get("cleared", [])]
    if cleared:
        out += ["", "Cleared by the re-run alone (failed only while runs shared the GPU):", ""]
        out += [f"- {_cell(name)}: `{_cell(_short_test(t))}`" for name, t in cleared]
    status = summary.get("exit_status")
    if status is not None:
        verdict = "no failure classified ours." if status == 0 else "failures classified ours."
        out += ["", f"Exit status {status}: {verdict}"]
    return "\n".join(out) + "\n"
