"""A pytest plugin for ``make test``'s nbval run: start a notebook's kernel again when it dies
before answering its first message.

Why: nbval starts one kernel per notebook, and with two pytest workers two kernels can start
at the same moment. Over TCP each picks free ports by binding and releasing them, so both can
pick the same port and the loser dies before it replies to ``kernel_info`` (nbval then fails
every cell of that notebook with "Kernel died before replying to kernel_info"; it happened
once in a CI run whose rerun passed). Only the start is retried, never a cell: a notebook that
fails still fails.

Loaded with ``-p kernel_retry`` and ``tests/plugins`` on ``PYTHONPATH`` (the Makefile).
"""

from __future__ import annotations

import logging

import nbval.kernel

ATTEMPTS = 3
DIED = "Kernel died before replying to kernel_info"
log = logging.getLogger(__name__)


def retrying(start):
    """``start`` (nbval's ``start_new_kernel``), tried up to ``ATTEMPTS`` times while the
    kernel dies on start; any other error, and the last death, propagate."""

    def start_new_kernel(*args, **kwargs):
        for attempt in range(1, ATTEMPTS):
            try:
                return start(*args, **kwargs)
            except RuntimeError as error:
                if DIED not in str(error):
                    raise
                log.warning("kernel died on start (attempt %d of %d); starting another",
                            attempt, ATTEMPTS)  # fmt: skip
        return start(*args, **kwargs)  # the last attempt: its error propagates

    return start_new_kernel


nbval.kernel.start_new_kernel = retrying(nbval.kernel.start_new_kernel)
