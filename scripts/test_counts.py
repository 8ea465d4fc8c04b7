"""Counts passed/skipped/failed GPU forward tests per dtype and layout from a
pytest JUnit XML file (for the closing notes' evidence)."""

from __future__ import annotations

import collections
import re
import sys
import xml.etree.ElementTree as ET


def main(path: str) -> None:
    counts: dict[tuple[str, str], collections.Counter] = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    for case in ET.parse(path).iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        totals[outcome] += 1
        # test_pinned_forward_algorithm[algo3-conv2d_3x3-channels_last-float16]
        match = re.search(r"\[algo\d+-[^-]+-([^-]+)-([^\]]+)\]", case.get("name", ""))
        if match:
            counts[(match.group(2), match.group(1))][outcome] += 1
    print(f"{'dtype':<14}{'layout':<15}{'passed':>8}{'skipped':>9}{'failed':>8}")
    for (dtype, layout), c in sorted(counts.items()):
        print(f"{dtype:<14}{layout:<15}{c['passed']:>8}{c['skipped']:>9}{c['failed']:>8}")
    print(f"all tests: {dict(totals)}")


if __name__ == "__main__":
    main(sys.argv[1])
