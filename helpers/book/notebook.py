"""The one setup call every chapter's first code cell makes (all chapters)."""

from __future__ import annotations

import os
import random
import warnings

DEVICE_ENV = "TEXTBOOK_DEVICE"
"""Set to ``cpu``, ``cuda`` or ``mps`` to override the automatic device pick."""


def pick_device() -> str:
    """The best device here: cuda, then mps, then cpu, unless ``$TEXTBOOK_DEVICE`` says."""
    import torch

    wanted = os.environ.get(DEVICE_ENV, "").strip().lower()
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
    }
    if wanted:
        if wanted not in available:
            raise ValueError(f"${DEVICE_ENV}={wanted!r} is not one of {sorted(available)}")
        if not available[wanted]:
            raise ValueError(f"${DEVICE_ENV}={wanted!r} but no {wanted} device is available")
        return wanted
    return next(name for name in ("cuda", "mps", "cpu") if available[name])


def setup(seed: int = 0) -> str:
    """Seed every generator, fix print and figure options, give torch all CPU threads,
    silence known-harmless warnings (their text holds per-process paths that would break
    nbval), and return the device name. Prints nothing, so its cell's output is stable."""
    import matplotlib
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    np.set_printoptions(precision=4, suppress=True, linewidth=100)
    torch.set_printoptions(precision=4, sci_mode=False, linewidth=100)
    torch.set_num_threads(os.cpu_count() or 1)
    matplotlib.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "figure.figsize": (7, 4)})
    try:  # only inside IPython: inline PNG figures
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            shell.run_line_magic("matplotlib", "inline")
            from matplotlib_inline.config import InlineBackend

            # what `%config InlineBackend.figure_formats = ['png']` sets, without the
            # magic's loading of every lazy magic (20 ms of each graded process)
            InlineBackend.instance(parent=shell).figure_formats = {"png"}
    except ImportError:
        pass
    for module in ("torch", "matplotlib"):
        warnings.filterwarnings("ignore", category=UserWarning, module=module)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    return pick_device()
