"""Picking the one line worth quoting out of a message or a log."""

from __future__ import annotations


def first_line(text: str) -> str:
    """The first non-blank line, stripped and cut to 300 characters."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def last_meaningful_line(text: str) -> str:
    """The last line that is neither blank nor a ``====``/``----`` rule (pytest's
    closing summary line, say), stripped and cut to 300 characters."""
    for line in reversed(text.splitlines()):
        if line.strip() and not set(line.strip()) <= set("=-_ "):
            return line.strip()[:300]
    return ""
