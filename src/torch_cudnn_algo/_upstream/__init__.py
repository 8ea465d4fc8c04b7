"""Runs one of PyTorch's own test files stock and under pinned cuDNN algorithms.

The logic behind ``scripts/run-upstream-tests`` (whose ``--help`` is the user
documentation). Standard library only, and importable without torch: the script
loads this subpackage from the checkout under a parent package whose
``__init__`` never runs, so the runner's own process never imports torch or
touches the GPU; every pytest run is a subprocess whose environment carries the
setting (``TORCH_CUDNN_CONV_*``, read by the package's autoload at ``import torch``).
Hence only relative imports in here, and of the parent only ``_algorithms`` (pure Python).

One concern per module:

- :mod:`.settings`        settings, their parsing, and the child environment
- :mod:`.outcomes`        a test's outcome in a run, a run's results, exit codes
- :mod:`.junit`           outcomes from junit XML
- :mod:`.verbose_log`     outcomes from the ``-v`` log, and the test a process died in
- :mod:`.classification`  *ours* or *numerics*
- :mod:`.regressions`     which tests to re-run alone
- :mod:`.preflight`       do the settings' flags read back after ``import torch``
- :mod:`.processes`       starting, watching and killing pytest processes
- :mod:`.exclude_plugin`  the pytest plugin restarts use to drop exact node ids
- :mod:`.runner`          the job: restarts, parallel phase, re-runs alone
- :mod:`.summary`         summary.json
- :mod:`.report`          summary.md, the markdown table
- :mod:`.cli`             the command line
"""

# main for the script; the rest for tests/test_upstream_runner.py, which reaches the
# package the way the script loads it.
from .classification import classify
from .cli import main
from .junit import parse_junit
from .outcomes import TestResult, count_outcomes
from .preflight import preflight_problems
from .regressions import rerun_candidates, stock_rerun_candidates
from .report import render_markdown
from .settings import DEFAULT_SETTINGS, DIRECTIONS, UsageError, child_environment, parse_setting_spec, select_settings
from .summary import regression_entry
from .verbose_log import crash_note, parse_verbose_log

__all__ = [
    "DEFAULT_SETTINGS",
    "DIRECTIONS",
    "TestResult",
    "UsageError",
    "child_environment",
    "classify",
    "count_outcomes",
    "crash_note",
    "main",
    "parse_junit",
    "parse_setting_spec",
    "parse_verbose_log",
    "preflight_problems",
    "regression_entry",
    "render_markdown",
    "rerun_candidates",
    "select_settings",
    "stock_rerun_candidates",
]
