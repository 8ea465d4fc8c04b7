"""The command line: ``scripts/run-upstream-tests`` (its ``--help`` is the user documentation)."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from .large_tests import MODES as LARGE_MODES
from .runner import Runner
from .settings import Config, Setting, UsageError, select_settings, settings_help_table

DEFAULT_K = "CUDA or cuda or cudnn"
DEFAULT_JOBS = 4
DEFAULT_TIMEOUT = 0.0  # per pytest process: none
DEFAULT_TEST_TIMEOUT = 600.0  # no new line in the -v output for this long: the running test hangs
DEFAULT_MAX_RESTARTS = 10
DEFAULT_OUT = "upstream-test-results"

DESCRIPTION = """\
Run one of PyTorch's own test files (default use: test/nn/test_convolution.py) once
stock and once per *setting* -- a choice of pinned cuDNN algorithms, passed to each
pytest run through torch_cudnn_algo's environment variables (TORCH_CUDNN_CONV_FWD_ALGO,
TORCH_CUDNN_CONV_BWD_DATA_ALGO, TORCH_CUDNN_CONV_BWD_FILTER_ALGO,
TORCH_CUDNN_CONV_ALGO_STRICT) or a plan file (--plan: TORCH_CUDNN_ALGO_PLAN), read by
the package's autoload at `import torch` --
several runs in parallel on one GPU, and report per setting the passed / failed /
skipped / errors counts and, by name, every test that passes stock and fails under
the setting."""

EPILOG = """\
getting the test file:
  The file must match the installed torch. Read it at the commit torch was built
  from, e.g.
    GIT=$(python3 -c "import torch; print(torch.version.git_version)")
    mkdir -p scratch/upstream
    curl -fsSL -o scratch/upstream/test_convolution.py \\
      https://raw.githubusercontent.com/pytorch/pytorch/$GIT/test/nn/test_convolution.py
  PyTorch's test files are never committed to this repository: keep them under
  scratch/ (git-ignored). They need pytest, expecttest and numpy (scipy and
  hypothesis are optional: without scipy the *_vs_scipy tests skip). The package
  itself must be installed in the interpreter (--python), or the settings would
  change nothing: a preflight checks that every setting's flags read back after
  `import torch` (--no-preflight skips it).

default settings (each pins the named directions at once; together they cover every
legacy algorithm of every direction; `stock` is always run too, with no variable):
{settings}

how it runs:
  Each run is `python -m pytest FILE -k EXPR -p no:cacheprovider -v --junitxml=...`
  started in FILE's folder (with an empty ini file, --rootdir and --confcutdir set to
  that folder, so neither this repository's nor PyTorch's pytest configuration
  applies), extra pytest arguments after `--` appended. Its environment is the
  caller's minus every TORCH_CUDNN_CONV_* variable, plus the setting's (and
  TORCH_CUDNN_CONV_ALGO_STRICT=1 with --strict); PYTORCH_TEST_* and everything else
  are inherited unchanged.
  Large-tensor tests (those FILE decorates with @largeTensorTest: in test_convolution.py
  test_conv_large*, test_conv_transposed_large, test_conv3d_64bit_indexing and
  test_depthwise_conv_64bit_indexing) leave the parallel phase and run after it, one
  pytest process at a time per run (stock, then each setting), each with the whole GPU
  and host: PyTorch's largeTensorTest then skips one only where the machine lacks the
  memory it names (test_depthwise_conv_64bit_indexing asks 20 GB of GPU and 64 GB of
  host memory; an 80 GB GPU with 128 GB of host memory runs them all). Their results
  count as results alone. --large-tensor-tests skip leaves them out, parallel runs them
  with the rest (where they mostly skip or fail for want of memory).
  Runs sharing one GPU can fail memory-hungry tests for reasons that are not the
  setting's, so after the parallel phase every test that passed stock and failed (or
  skipped: PyTorch's largeTensorTest checks free memory) under a setting is re-run
  alone on the GPU (one pytest process at a time, only those node ids) and only a
  failure that repeats counts; the summary says how many were confirmed and how many
  cleared. So is every expected failure of stock that fails otherwise under a setting
  (an unexpected success: the setting changed what the test checks). Tests that
  failed stock in parallel are re-run alone first, for stock's true result.
  A run whose pytest process dies (a signal, or an exit code other than 0, 1, 5), or
  is killed (--timeout, or --test-timeout without a new line of -v output), is
  restarted without the tests already passed or skipped and without the test it died
  in -- the last node id the -v output printed without a result -- which is reported
  as `ours: crash (signal N)` (or `ours: timeout`); at most --max-restarts restarts
  per run. Restarts drop exact node ids through a small
  plugin written to OUT/_plugin (pytest's --deselect matches node-id prefixes, and
  test_Conv2d_groups_nobias is a prefix of test_Conv2d_groups_nobias_v2). Runs get
  PYTHONUNBUFFERED=1 so that the log is complete; do not pass -q after `--`.

classification of a test that passes stock and fails under a setting:
  ours: exception   the failure message names torch_cudnn_algo
  ours: crash       the process died in the test (signal N, or exit N)
  ours: timeout     the run was killed in the test (--timeout, --test-timeout)
  ours: oom         OutOfMemoryError / "out of memory"
  ours: layout/dtype  assertEqual's stride / dtype / layout mismatch, or a failed
                    assertTrue on is_contiguous / memory_format / stride
  numerics          a tolerance miss: "Tensor-likes are not close", "Scalars are not
                    close", "Mismatched elements" (with the greatest absolute and
                    relative differences parsed), a gradcheck "Jacobian mismatch", or
                    "Backward is not reentrant" (a non-deterministic algorithm).
                    Its evidence: the differences, the share of mismatched elements,
                    and where the greatest absolute difference is a power of two, the
                    values at which it is one rounding step (ulp) of float16, bfloat16
                    and float32: a result rounded the other way, not a wrong one
  ours: other       anything else (the first line of the message)

output:
  A markdown table on stdout and in OUT/summary.md; OUT/summary.json (per setting:
  env, passed, failed, skipped, errors, duration, and the regressions with test id,
  class, detail and a copy-paste repro); each run's junit XML and log under
  OUT/<setting>/ (re-runs under OUT/rerun-<setting>/). Progress and each run's
  elapsed time go to stderr.

exit status: 0 when no failure is classified ours, 1 otherwise, 2 on a usage error
(or a failed preflight, or a stock run that ran no test).

example:
  scripts/run-upstream-tests scratch/upstream/test_convolution.py --settings legacy0,fft \\
      --setting mine=fwd:1,bwd_data:eng0 -j 4 --test-timeout 300 --out /tmp/upstream -- --durations=10
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run-upstream-tests",
        description=DESCRIPTION,
        epilog=EPILOG.format(settings=settings_help_table()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s FILE [options] [-- PYTEST_ARGS...]",
    )
    parser.add_argument("file", metavar="FILE", help="a PyTorch test file matching the installed torch")
    parser.add_argument("--settings", metavar="LIST", default=None,
                        help="comma-separated default settings to run (default: all; 'none': only --setting ones)")
    parser.add_argument("--setting", metavar="NAME=DIR:VALUE,...", action="append", default=[],
                        help="add a setting, e.g. mine=fwd:4,bwd_data:2,bwd_filter:eng0 (repeatable); "
                             "directions fwd, bwd_data, bwd_filter; values as the flags take them: "
                             "legacy int or name, engine configuration, 'fastest'")
    parser.add_argument("--plan", metavar="NAME=PATH", action="append", default=[],
                        help="add a setting that puts a plan file in use (TORCH_CUDNN_ALGO_PLAN=PATH, applied by "
                             "the autoload), e.g. plan=torch-cudnn-algo-plan.json (repeatable)")
    parser.add_argument("--strict", action="store_true", help="set TORCH_CUDNN_CONV_ALGO_STRICT=1 in every setting")
    parser.add_argument("-k", metavar="EXPR", default=DEFAULT_K, help=f"pytest -k expression (default: {DEFAULT_K!r})")
    parser.add_argument("-j", "--jobs", type=int, default=DEFAULT_JOBS, metavar="N",
                        help=f"pytest runs at once in the parallel phase (default {DEFAULT_JOBS})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="limit per pytest process (a run restarted after a crash starts a new one); "
                             "0: none (the default)")
    parser.add_argument("--test-timeout", type=float, default=DEFAULT_TEST_TIMEOUT, metavar="SECONDS",
                        help="kill a pytest process whose -v output has not moved for this long: the test "
                             f"it was running counts as a timeout (default {DEFAULT_TEST_TIMEOUT:g}; 0: off)")
    parser.add_argument("--max-restarts", type=int, default=DEFAULT_MAX_RESTARTS, metavar="N",
                        help=f"restarts of one run after crashes or timeouts (default {DEFAULT_MAX_RESTARTS})")
    parser.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                        help=f"folder for junit XML, logs, summary.md and summary.json (default ./{DEFAULT_OUT})")
    parser.add_argument("--python", metavar="PATH", default=sys.executable,
                        help="interpreter that runs pytest, with torch and this package (default: this one)")
    parser.add_argument("--no-preflight", action="store_true",
                        help="skip checking that each setting's flags read back after `import torch`")
    parser.add_argument("--large-tensor-tests", choices=LARGE_MODES, default="alone",
                        help="FILE's @largeTensorTest tests: 'alone' after the parallel phase, one process "
                             "at a time per run (default), 'skip', or 'parallel' with the rest")
    parser.add_argument("--list-settings", action="store_true", help="print the default settings and exit")
    return parser


def _config(args: argparse.Namespace, settings: Sequence[Setting], extra: Sequence[str]) -> Config:
    """The validated command line as the job's :class:`Config`; a zero or negative timeout is none."""

    def positive_or_none(seconds: float) -> float | None:
        return seconds if seconds and seconds > 0 else None

    return Config(
        file=Path(args.file).resolve(),
        settings=tuple(settings),
        extra=tuple(extra),
        k=args.k,
        jobs=args.jobs,
        timeout=positive_or_none(args.timeout),
        test_timeout=positive_or_none(args.test_timeout),
        out=Path(args.out).resolve(),
        python=args.python,
        strict=args.strict,
        max_restarts=args.max_restarts,
        preflight=not args.no_preflight,
        large_tensor_tests=args.large_tensor_tests,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the job; returns the exit status (argparse exits 2 itself on a usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, extra = argv[:split], argv[split + 1 :]
    parser = build_parser()
    if "--list-settings" in argv:  # before parsing: FILE is not needed
        print(settings_help_table())
        return 0
    args = parser.parse_args(argv)
    try:
        settings = select_settings(args.settings, args.setting, args.plan)
        if args.jobs < 1:
            raise UsageError("-j must be at least 1")
        if args.max_restarts < 0:
            raise UsageError("--max-restarts must be at least 0")
        if not Path(args.file).is_file():
            raise UsageError(f"no test file at {args.file} (see 'getting the test file' in --help)")
    except UsageError as exc:
        parser.error(str(exc))  # exits 2
    runner = Runner(_config(args, settings, extra))

    def stop(signum: int, _frame: object) -> None:
        # Children run in their own sessions: kill them first, or the worker
        # threads (and the pool's exit) would wait for them.
        runner.kill_all()
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return runner.run()
    except KeyboardInterrupt:
        runner.kill_all()
        print(f"run-upstream-tests: interrupted; partial results in {runner.out}", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
