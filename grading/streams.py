"""A kernel output stream for nbgrader's own execution (see ``nbgrader_config.py``).

nbgrader scores 0 on a test cell that wrote anything to stderr, and ``nbgrader validate``
(JupyterLab's Validate button) reports it as failed, so an honest answer whose code merely
warns (torch does) would lose its points. With this stream class the kernel sends stderr
as ordinary output; an exception still fails the cell.
"""

from __future__ import annotations

from ipykernel.iostream import OutStream


class StderrAsStdout(OutStream):
    def __init__(self, session, pub_thread, name, *args, **kwargs):
        super().__init__(session, pub_thread, "stdout" if name == "stderr" else name,
                         *args, **kwargs)  # fmt: skip
