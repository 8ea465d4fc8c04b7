"""CPU: the README is a manual that stays true: its flags table has every flag and its
environment variable, CI runs its tests command verbatim, and every results file it (or
docs/design.md) cites exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from torch_cudnn_algo import _flags

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

pytestmark = pytest.mark.skipif(not README.exists(), reason="runs in a checkout (README.md beside tests/)")


def readme() -> str:
    return README.read_text()


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


@pytest.mark.parametrize("name", list(_flags.FLAGS))
def test_flags_table_has_every_flag_and_its_environment_variable(name: str) -> None:
    flag = _flags.FLAGS[name]
    rows = [line for line in readme().splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"README's flags table has no row for {name}"
    assert f"`{flag.env_var}`" in rows[0], f"the {name} row does not name {flag.env_var}"


def test_ci_runs_the_readme_tests_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line.strip() for block in bash_blocks(readme()) for line in block.splitlines()]
    tests_command = next(c for c in commands if c.endswith("python3 -m pytest -q tests"))
    assert tests_command in ci
    assert any("venv" in line for line in ci), ".ci/run must make its own virtual environment"
    main_job = next(c for c in commands if c.endswith("torch-cudnn-algo tune"))
    assert main_job.replace('".[test]"', ".").replace(" && torch-cudnn-algo tune", "") == \
        tests_command.replace('".[test]"', ".").replace(" && python3 -m pytest -q tests", "")


def test_readme_commands_parse_as_shell() -> None:
    for block in bash_blocks(readme()):
        for line in block.splitlines():
            shlex.split(line, comments=True)


@pytest.mark.parametrize("document", ["README.md", "docs/design.md"])
def test_cited_results_files_exist(document: str) -> None:
    path = ROOT / document
    if not path.exists():
        pytest.skip(f"{document} is not in this copy")
    cited = set(re.findall(r"benchmarks/results/[\w.\-]+", path.read_text()))
    assert cited, f"{document} cites no results file"
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert not missing, f"{document} cites results files that do not exist: {missing}"


def test_readme_has_no_integer_cudnn_version_or_stale_limits() -> None:
    text = readme()
    assert "91900" not in text  # cuDNN is written 9.19.0, as `torch-cudnn-algo info` prints it
    assert "Not yet:" not in text
    assert "docs/gpu_results.md" not in text  # replaced by the generated docs/performance.md
