"""Counts passed/skipped/failed GPU algorithm tests per family, dtype and layout
from a pytest JUnit XML file (the evidence in the closing notes)."""

from __future__ import annotations

import collections
import re
import sys
import xml.etree.ElementTree as ET

# test_pinned_forward_algorithm[algo3-conv2d_3x3-channels_last-float16]
# test_pinned_backward_algorithm[bwd_data-0-conv1d-contiguous-float32]
# test_pinned_transposed_convolution[fwd-1-conv_transpose2d-channels_last-bfloat16]
PATTERN = re.compile(r"test_pinned_(\w+?)_(?:algorithm|convolution)\[(?:(\w+)-\d+|algo\d+)-.*-(\w+)-(\w+)\]$")


def outcome_of(case: ET.Element) -> str:
    for child in case:
        if child.tag in ("failure", "error"):
            return "failed"
        if child.tag == "skipped":
            return "skipped"
    return "passed"


def main(path: str) -> None:
    counts: dict[tuple[str, str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    for case in ET.parse(path).iter("testcase"):
        outcome = outcome_of(case)
        totals[outcome] += 1
        match = PATTERN.search(case.get("name", ""))
        if match:
            family, direction, layout, dtype = match.groups()
            label = family if direction is None else f"{family} {direction}"
            counts[(label, dtype, layout)][outcome] += 1
    print(f"{'tests':<24}{'dtype':<14}{'layout':<15}{'passed':>8}{'skipped':>9}{'failed':>8}")
    for (label, dtype, layout), c in sorted(counts.items()):
        print(f"{label:<24}{dtype:<14}{layout:<15}{c['passed']:>8}{c['skipped']:>9}{c['failed']:>8}")
    print(f"all tests: {dict(totals)}")


if __name__ == "__main__":
    main(sys.argv[1])
