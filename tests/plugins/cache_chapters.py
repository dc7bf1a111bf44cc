"""A pytest plugin for ``make test``'s nbval runs: chapters 4 and 5 (their notebooks' cells)
carry the ``cache_size`` marker, so that they run whole in the cache matrix, once at each
``TEXTBOOK_LLC_BYTES`` (8 MiB, 260 MiB, 1 GiB), and not again at the host's size.

Why: those two chapters time memory through ``helpers.measuring.timing``'s cache defeat, whose plan
(how many copies to rotate, or a flush) follows the cache size in force; the others read
no cache size. nbval's run of them is then the one whole run that checks both that every
cell runs and that the stored outputs reproduce at each size.

Loaded with ``-p cache_chapters`` and ``tests/plugins`` on ``PYTHONPATH`` (the Makefile).
"""

from __future__ import annotations

import pytest

CACHE_CHAPTERS = ("04_timing", "05_matmuls")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.suffix == ".ipynb" and item.path.parent.name in CACHE_CHAPTERS:
            item.add_marker(pytest.mark.cache_size)
