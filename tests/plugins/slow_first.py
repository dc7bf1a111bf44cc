"""The order files run in: those holding a test marked ``slow`` first.

``make test`` hands whole files to its workers (pytest-xdist's ``--dist loadfile``) in
collection order, and a worker that draws a long file last runs it alone while the others
wait: the grader's run as an ordinary user (two minutes on a 2-core CPU) came last
alphabetically and kept one core idle for most of that. Started first, the long files
overlap with everything else. The order of the tests inside a file is kept.

A plugin (``-p slow_first``, with tests/plugins on PYTHONPATH) rather than tests/conftest.py:
a conftest there would put tests/ on sys.path, where tests/helpers/ shadows the helpers
package for the grader's answer processes.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: False sorts first
