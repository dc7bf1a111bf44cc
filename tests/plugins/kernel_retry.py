"""A pytest plugin for ``make test``'s nbval run: start a notebook's kernel again when it dies
before answering its first message.

Why: nbval starts one kernel per notebook, and with two pytest workers two kernels can start
at the same moment. Over TCP each picks free ports by binding and releasing them, so both can
pick the same port and the loser dies before it replies to ``kernel_info`` (nbval then fails
every cell of that notebook with "Kernel died before replying to kernel_info"; it happened
once in a CI run whose rerun passed). The same race can leave the loser alive on a port it
does not own, so it never answers and the start times out ("Kernel didn't respond in 60
seconds", every cell of chapter 5 in one clean-clone run); nbval shuts that kernel down
before raising, so it is started again too. Only the start is retried, never a cell: a
notebook that fails still fails.

Loaded with ``-p kernel_retry`` and ``tests/plugins`` on ``PYTHONPATH`` (the Makefile).
"""

from __future__ import annotations

import logging

import nbval.kernel

ATTEMPTS = 3
DIED = "Kernel died before replying to kernel_info"
SILENT = "Kernel didn't respond in"  # jupyter_client's wait_for_ready timing out
FAILED_STARTS = (DIED, SILENT)
log = logging.getLogger(__name__)


def retrying(start):
    """``start`` (nbval's ``start_new_kernel``), tried up to ``ATTEMPTS`` times while the
    kernel dies or stays silent on start; any other error, and the last failure, propagate."""

    def start_new_kernel(*args, **kwargs):
        for attempt in range(1, ATTEMPTS):
            try:
                return start(*args, **kwargs)
            except RuntimeError as error:
                if not any(failed in str(error) for failed in FAILED_STARTS):
                    raise
                log.warning("kernel failed to start (%s; attempt %d of %d); starting another",
                            error, attempt, ATTEMPTS)  # fmt: skip
        return start(*args, **kwargs)  # the last attempt: its error propagates

    return start_new_kernel


nbval.kernel.start_new_kernel = retrying(nbval.kernel.start_new_kernel)
