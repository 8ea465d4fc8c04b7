"""Runs one of PyTorch's own test files stock and under pinned cuDNN algorithms.

The logic behind ``scripts/run-upstream-tests`` (whose ``--help`` is the user
documentation). Standard library only, and importable without torch: the script
loads this subpackage from the checkout under a parent package whose
``__init__`` never runs, so the runner's own process never imports torch or
touches the GPU; every pytest run is a subprocess whose environment carries the
setting (``TORCH_CUDNN_CONV_*``, read by the package's autoload at ``import torch``).
Hence only relative imports in here, and of the parent only ``_algorithms`` (pure Python).

One concern per module, in the order a job uses them:

- :mod:`.cli`             the command line
- :mod:`.settings`        settings, their parsing, the child environment; the job's Config
- :mod:`.preflight`       do the settings' flags read back after ``import torch``
- :mod:`.runner`          the job: restarts, parallel phase, large-tensor tests, re-runs alone
- :mod:`.large_tests`     which tests are large-tensor tests, and the -k that selects them
- :mod:`.processes`       starting, watching and killing pytest processes
- :mod:`.exclude_plugin`  the pytest plugin restarts use to drop exact node ids (a file
                          pytest loads on its own)
- :mod:`.outcomes`        a test's outcome, a run's results, exit codes; read from junit
                          XML or the ``-v`` log (and the test a process died in)
- :mod:`.classification`  which tests to re-run alone; *ours* or *numerics*
- :mod:`.summary`         summary.json and summary.md
"""

# main for the script; the rest for tests/test_upstream_runner.py, which reaches the
# package the way the script loads it.
from .classification import (classify, classify_stock_failure, rerun_candidates, rounding_step_note,
                             stock_rerun_candidates)
from .cli import main
from .large_tests import k_expression, large_tensor_tests
from .outcomes import TestResult, count_outcomes, crash_note, parse_junit, parse_verbose_log
from .preflight import preflight_problems
from .settings import DEFAULT_SETTINGS, DIRECTIONS, UsageError, child_environment, parse_setting_spec, select_settings
from .summary import regression_entry, render_markdown

__all__ = [
    "DEFAULT_SETTINGS",
    "DIRECTIONS",
    "TestResult",
    "UsageError",
    "child_environment",
    "classify",
    "classify_stock_failure",
    "count_outcomes",
    "crash_note",
    "k_expression",
    "large_tensor_tests",
    "main",
    "parse_junit",
    "parse_setting_spec",
    "parse_verbose_log",
    "preflight_problems",
    "regression_entry",
    "render_markdown",
    "rerun_candidates",
    "rounding_step_note",
    "select_settings",
    "stock_rerun_candidates",
]
