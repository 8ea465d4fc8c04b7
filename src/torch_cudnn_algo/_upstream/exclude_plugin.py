"""A pytest plugin of torch_cudnn_algo's scripts/run-upstream-tests, which copies this
file to OUT/_plugin: deselects exactly the node ids listed in the file named by
$TCA_UPSTREAM_EXCLUDE (tests already run, and tests that crashed). pytest's own
--deselect matches node-id prefixes, which would also drop e.g.
test_Conv2d_groups_nobias_v2 with test_Conv2d_groups_nobias.

Standard library only, and no import from the runner: pytest loads the copy on its own."""
import os

EXCLUDE_VAR = "TCA_UPSTREAM_EXCLUDE"


def pytest_collection_modifyitems(config, items):
    path = os.environ.get(EXCLUDE_VAR)
    if not path:
        return
    with open(path, encoding="utf-8") as fh:
        exclude = {line.rstrip("\n") for line in fh if line.strip()}
    dropped = [item for item in items if item.nodeid in exclude]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.nodeid not in exclude]
