"""CPU: the README and the pages under docs/ stay true to the repository: the README's flags
table has every flag and its environment variable, CI runs its tests command verbatim, every
relative link resolves to an existing file, every results file or repository file they cite
exists, and the README stays short. Nothing here depends on which result files exist beyond
those the documents cite."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from torch_cudnn_algo import _flags

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

pytestmark = pytest.mark.skipif(not README.exists(), reason="runs in a checkout (README.md beside tests/)")

# The pages the README sends users to: each must exist and be linked from the README.
DOC_PAGES = ("usage.md", "plans.md", "command-line.md", "wheels.md", "performance.md",
             "correctness.md", "design.md")
README_MAX_LINES = 160


def documents() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def readme() -> str:
    return README.read_text()


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def without_code(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def relative_links(text: str) -> list[str]:
    """Targets of markdown links and images that are not URLs or in-page anchors."""
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", without_code(text))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings."""
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*$", re.sub(r"```.*?```", "", text, flags=re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        found.add(slug)
    return found


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


def test_readme_is_short() -> None:
    lines = len(readme().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; keep it at most {README_MAX_LINES} " \
                                      "and move reference material to docs/"


def test_readme_links_every_docs_page() -> None:
    linked = {Path(t.split("#")[0]).name for t in relative_links(readme()) if t.startswith("docs/")}
    missing = [page for page in DOC_PAGES if page not in linked]
    assert not missing, f"README.md does not link docs pages {missing}"
    absent = [page for page in DOC_PAGES if not (DOCS / page).exists()]
    assert not absent, f"docs pages the README links are missing: {absent}"


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(document: Path) -> None:
    text = document.read_text()
    broken = []
    for target in relative_links(text):
        path_part, _, anchor = target.partition("#")
        path = (document.parent / path_part).resolve()
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{document.relative_to(ROOT)} links to what does not exist: {broken}"


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_files_exist(document: Path) -> None:
    """Paths of this repository a document names (results files, tests, scripts, sources)."""
    cited = set(re.findall(r"(?<![\w/.:])((?:benchmarks/results|tests|scripts|src)/[\w./\-]*\w)", document.read_text()))
    missing = sorted(c for c in cited if "*" not in c and not (ROOT / c).exists())
    assert not missing, f"{document.relative_to(ROOT)} cites files that do not exist: {missing}"


def test_readme_cites_its_headline_results() -> None:
    assert re.search(r"benchmarks/results/[\w.\-]+", readme()), "the README's results name no results file"


def test_readme_has_no_integer_cudnn_version() -> None:
    assert "91900" not in readme()  # cuDNN is written 9.19.0, as `torch-cudnn-algo info` prints it
