"""The job: a preflight, the parallel phase, the large-tensor tests one run at a time,
then the re-runs alone, one at a time.

A logical run is one pytest process over the file (or over given node ids),
restarted after a crash or a hang without the tests already done and without the
one it died in, which is recorded as crashed (or timed out).
"""

from __future__ import annotations

import concurrent.futures
import os
import shlex
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from .classification import classify_stock_failure, rerun_candidates, stock_rerun_candidates
from .exclude_plugin import EXCLUDE_VAR
from .large_tests import k_expression, large_tensor_tests
from .outcomes import (
    CRASHED, FAILING, FINISHED_EXIT_CODES, PASSED, SKIPPED, TIMEOUT, XFAILED,
    RunResult, TestResult, count_outcomes, crash_note, describe_returncode, last_meaningful_line, parse_junit,
    parse_verbose_log,
)
from .preflight import preflight_problems, run_preflight
from .processes import ChildProcesses
from .settings import Config, Setting, child_environment
from .summary import JobResults, build_summary, write_summary

# The module name under which restarts load exclude_plugin.py (copied to OUT/_plugin).
PLUGIN_NAME = "tca_upstream_exclude"
# Outcomes a restart does not run again.
_DONE = (PASSED, SKIPPED, XFAILED, CRASHED, TIMEOUT)


class Runner:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.out = config.out
        self.processes = ChildProcesses(config.timeout, config.test_timeout)
        self._say_lock = threading.Lock()
        self._start = time.monotonic()
        # Large-tensor tests leave the parallel phase (see large_tests.py) unless asked otherwise.
        self.large = large_tensor_tests(config.file) if config.large_tensor_tests != "parallel" else []

    def say(self, text: str) -> None:
        """A progress line on stderr, stamped with the seconds since the start."""
        with self._say_lock:
            print(f"[{time.monotonic() - self._start:7.1f} s] {text}", file=sys.stderr, flush=True)

    def kill_all(self) -> None:
        """Kills every running pytest process; no new one starts afterwards."""
        self.processes.kill_all()

    def env_for(self, setting: Setting | None) -> dict[str, str]:
        env = child_environment(os.environ, setting, self.config.strict)
        env["PYTHONUNBUFFERED"] = "1"  # so the -v log is complete when a test kills the process
        return env

    def pytest_command(self, targets: Sequence[str] | None, junit: Path, exclude: bool,
                       large: bool = False) -> list[str]:
        """pytest over the file with -k (``targets`` None: the large-tensor tests where
        ``large``, else all others), or over the given node ids. The empty ini file,
        --rootdir and --confcutdir keep this repository's and PyTorch's pytest
        configuration out."""
        c = self.config
        cmd = [c.python, "-m", "pytest", *(targets if targets is not None else [c.file_name])]
        k = k_expression(c.k, self.large, large)
        if targets is None and k:
            cmd += ["-k", k]
        cmd += [
            "-p", "no:cacheprovider", "-v", "--color=no", f"--junitxml={junit}",
            "-c", str(self.out / "pytest.ini"), "--rootdir", str(c.rootdir), "--confcutdir", str(c.rootdir),
        ]
        if exclude:
            cmd += ["-p", PLUGIN_NAME]
        return cmd + list(c.extra)

    def run_pytest(self, label: str, setting: Setting | None, targets: Sequence[str] | None,
                   large: bool = False) -> RunResult:
        """One logical run (the file with ``-k``, or the given node ids), restarted
        after a crash or a timeout without the tests already done and the one that died."""
        folder = self.out / label
        folder.mkdir(parents=True, exist_ok=True)
        base_env = self.env_for(setting)
        results: dict[str, TestResult] = {}
        exclude: set[str] = set()
        attempts: list[dict] = []
        run_error = None
        total = 0.0
        for attempt in range(1, self.config.max_restarts + 2):
            if self.processes.stopping:
                run_error = "interrupted"
                break
            junit, log = folder / f"junit-{attempt}.xml", folder / f"pytest-{attempt}.log"
            for path in (junit, log):
                path.unlink(missing_ok=True)
            env = dict(base_env)
            if exclude:
                exclude_file = folder / f"exclude-{attempt}.txt"
                exclude_file.write_text("".join(t + "\n" for t in sorted(exclude)), encoding="utf-8")
                env[EXCLUDE_VAR] = str(exclude_file)
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.out / "_plugin"), env.get("PYTHONPATH")]))
            cmd = self.pytest_command(targets, junit, bool(exclude), large)
            rc, killed, seconds = self.processes.run(cmd, self.config.rootdir, env, log)
            timed_out = killed is not None
            total += seconds
            if self.processes.stopping:
                run_error = "interrupted"
                break
            text = log.read_text(encoding="utf-8", errors="replace")
            verbose, pending = parse_verbose_log(text, self.config.file_name)
            for nodeid, outcome in verbose.items():
                results[nodeid] = TestResult(nodeid, outcome)
            if junit.exists():
                try:
                    results.update(parse_junit(junit.read_text(encoding="utf-8", errors="replace"),
                                               self.config.file_name))
                except ET.ParseError as exc:
                    run_error = f"unreadable junit {junit}: {exc}"
            attempts.append({"attempt": attempt, "returncode": rc, "timed_out": timed_out,
                             "seconds": round(seconds, 2), "log": str(log), "command": shlex.join(cmd)})
            if not timed_out and rc in FINISHED_EXIT_CODES:
                break
            if pending is None:
                what = f"was killed ({killed})" if timed_out else f"ended with {describe_returncode(rc)}"
                run_error = f"pytest {what} outside any test (log: {log}): {last_meaningful_line(text)}"
                break
            if timed_out:
                results[pending] = TestResult(pending, TIMEOUT, f"killed in this test: {killed}", returncode=rc)
            else:
                results[pending] = TestResult(pending, CRASHED, crash_note(text, pending), returncode=rc)
            self.say(f"{label}: {pending.split('::', 1)[-1]} "
                     f"{'timed out' if timed_out else 'crashed: ' + describe_returncode(rc)}; restarting without it")
            exclude |= {t for t, r in results.items() if r.outcome in _DONE}
        else:
            run_error = f"gave up after {self.config.max_restarts} restarts"
        if targets is not None:  # a re-run: only the tests asked for
            wanted = set(targets)
            results = {t: r for t, r in results.items() if t in wanted}
        return RunResult(label, results, total, attempts, run_error)

    @staticmethod
    def _summary_line(run: RunResult) -> str:
        c = count_outcomes(run.results)
        text = (f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped, {c['errors']} errors, "
                f"{c['crashed']} crashed in {run.duration:.1f} s")
        return text + (f" ({run.run_error})" if run.run_error else "")

    def _write_summary(self, found: JobResults, phase: str) -> tuple[dict, str]:
        summary = build_summary(self.config, found, phase, time.monotonic() - self._start)
        return summary, write_summary(self.out, summary)

    def _prepare_out(self) -> None:
        """The empty ini file every run uses, and the plugin restarts load."""
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        (self.out / "_plugin").mkdir(exist_ok=True)
        plugin_source = Path(__file__).with_name("exclude_plugin.py").read_text(encoding="utf-8")
        (self.out / "_plugin" / f"{PLUGIN_NAME}.py").write_text(plugin_source, encoding="utf-8")

    def _preflight(self, all_runs: list[Setting | None]) -> dict | None:
        """torch's version and device from the preflight, or None after printing its problems."""
        self.say(f"preflight: {len(all_runs)} interpreters read their flags back after `import torch`")
        with concurrent.futures.ThreadPoolExecutor(self.config.jobs) as pool:
            infos = list(pool.map(lambda s: run_preflight(self.config.python, self.env_for(s)), all_runs))
        problems = [p for s, info in zip(all_runs, infos) for p in preflight_problems(info, s, self.config.strict)]
        if problems:
            print("run-upstream-tests: preflight failed (use --no-preflight to run anyway):", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return None
        torch_info = {k: infos[0].get(k) for k in ("version", "git_version", "cuda", "device")}
        self.say(f"torch {torch_info['version']} (git {torch_info['git_version']}), "
                 f"{torch_info['device'] or 'no CUDA device: the CUDA tests will skip'}")
        return torch_info

    def _parallel_phase(self, names: list[str], all_runs: list[Setting | None]) -> dict[str, RunResult]:
        self.say(f"parallel phase: {len(all_runs)} runs of {self.config.file_name}, {self.config.jobs} at a time")
        parallel: dict[str, RunResult] = {}
        with concurrent.futures.ThreadPoolExecutor(self.config.jobs) as pool:
            futures = {pool.submit(self.run_pytest, name, s, None): name for name, s in zip(names, all_runs)}
            for future in concurrent.futures.as_completed(futures):
                run = future.result()
                parallel[run.name] = run
                self.say(f"{run.name}: {self._summary_line(run)}")
        return parallel

    def _large_tensor_phase(self, names: list[str], all_runs: list[Setting | None],
                            found: JobResults) -> None:
        """The large-tensor tests, one pytest process at a time per run. They ran alone, so
        their results are final: they join the run's results and, for a setting, its
        results alone (no re-run repeats them)."""
        if self.config.large_tensor_tests != "alone" or not self.large:
            return
        self.say(f"large-tensor phase: those of {', '.join(self.large)} that -k selects, one run at a time")
        for name, setting in zip(names, all_runs):
            run = self.run_pytest(f"large-{name}", setting, None, large=True)
            self.say(f"large-{name}: {self._summary_line(run)}")
            found.parallel[name].results.update(run.results)
            found.large[name] = run
            if name == "stock":
                found.stock_final.update(run.results)
            self._write_summary(found, "parallel")  # so that a job cut short here still leaves one

    def _rerun_stock_alone(self, found: JobResults) -> None:
        """Stock's true result for its failures (and for what it skipped while a setting failed it)."""
        stock = found.parallel["stock"]
        settings_results = (found.parallel[s.name].results for s in self.config.settings)
        ran_alone = set(found.large["stock"].results) if "stock" in found.large else set()
        stock_ids = [t for t in stock_rerun_candidates(stock.results, settings_results) if t not in ran_alone]
        found.stock_rerun["tests"] = len(stock_ids)
        if not stock_ids:
            return
        self.say(f"stock: re-running {len(stock_ids)} tests alone")
        stock_alone = self.run_pytest("rerun-stock", None, stock_ids)
        for t in stock_ids:
            r = stock_alone.results.get(t)
            if r is None:
                continue
            found.stock_final[t] = r
            if r.outcome == PASSED:
                found.stock_rerun["passed_alone"].append(t)
            elif r.outcome in FAILING:
                c = classify_stock_failure(r)
                found.stock_rerun["still_failing"].append({"test": t, "label": c.label, "detail": c.detail})

    def run(self) -> int:
        """The whole job; returns the exit status."""
        self._prepare_out()
        all_runs: list[Setting | None] = [None, *self.config.settings]

        torch_info: dict = {}
        if self.config.preflight:
            torch_info = self._preflight(all_runs)
            if torch_info is None:
                return 2

        names = ["stock"] + [s.name for s in self.config.settings]
        parallel = self._parallel_phase(names, all_runs)
        stock = parallel["stock"]
        found = JobResults(torch_info, parallel, dict(stock.results),
                           {"tests": 0, "passed_alone": [], "still_failing": []}, {})
        # Serial phases, one pytest process at a time: the large-tensor tests, then
        # stock's true result, then each setting's candidates.
        self._large_tensor_phase(names, all_runs, found)
        if not stock.results:
            tail = stock.attempts[-1]["log"] if stock.attempts else "?"
            print(f"run-upstream-tests: the stock run ran no test ({stock.run_error or 'nothing selected'}); "
                  f"see {tail}", file=sys.stderr)
            return 2
        # A preliminary summary (nothing confirmed yet), rewritten after every re-run,
        # so that a job cut short still leaves one.
        self._write_summary(found, "parallel")
        self._rerun_stock_alone(found)
        for setting in self.config.settings:
            large = found.large.get(setting.name)
            ran_alone = large.results if large is not None else {}
            candidates = [t for t in rerun_candidates(found.stock_final, parallel[setting.name].results)
                          if t not in ran_alone]
            if candidates:
                self.say(f"{setting.name}: re-running {len(candidates)} tests alone")
                alone = self.run_pytest(f"rerun-{setting.name}", setting, candidates)
            else:
                alone = RunResult(f"rerun-{setting.name}", {}, 0.0, [])
            alone.results.update(ran_alone)
            found.alone[setting.name] = alone
            self._write_summary(found, "rerun")

        summary, markdown = self._write_summary(found, "final")
        sys.stdout.write(markdown)
        sys.stdout.flush()
        self.say(f"wrote {self.out / 'summary.md'} and {self.out / 'summary.json'}")
        return summary["exit_status"]
