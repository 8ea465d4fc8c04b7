"""PyTorch's large-tensor tests: found in the test file, run one pytest process at a time.

A test decorated ``@largeTensorTest("20GB")`` (and ``"64GB", "cpu"``) checks the free
memory it names when it starts and skips without it. In the parallel phase, runs
sharing the GPU (and the host's memory) would skip them or fail them for want of
memory, so they are left out there and run afterwards, alone, per run: each then has
the whole GPU and host, and PyTorch's own check decides whether the machine has the
memory.
"""

from __future__ import annotations

import ast
from pathlib import Path

LARGE_DECORATOR = "largeTensorTest"
MODES = ("alone", "skip", "parallel")  # --large-tensor-tests


def _decorator_name(node: ast.expr) -> str | None:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return None


def large_tensor_tests(file: Path) -> list[str]:
    """The names of the test functions in ``file`` decorated with ``largeTensorTest``, in
    file order (their device and dtype variants are node ids that start with them)."""
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            if any(_decorator_name(d) == LARGE_DECORATOR for d in node.decorator_list):
                names.append(node.name)
    return names


def k_expression(k: str, names: list[str], large: bool) -> str:
    """``k`` narrowed to the large-tensor tests (``large``) or to everything else."""
    if not names:
        return k
    either = " or ".join(names)
    selected = f"({either})" if large else f"not ({either})"
    return f"({k}) and {selected}" if k else selected
