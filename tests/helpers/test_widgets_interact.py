"""Every explorer as ``ipywidgets.interact`` runs it: inside an IPython shell with the inline
backend (what ``setup()`` asks for), each callback shows its figure and text, and nothing
else. ``interact`` displays whatever its callback returns, so a callback that returned its
data would put the data's repr under the figure.

And as JupyterLab 4.6 runs it: widget messages arrive on a kernel subshell, a second thread,
which after each message redraws every stale pyplot figure (``helpers.widgets.figures``).
A callback whose figure is in pyplot's list while it draws races that redraw."""

from __future__ import annotations

import threading

import ipywidgets
import matplotlib
import matplotlib.pyplot as plt
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.pylabtools import select_figure_formats
from IPython.utils.capture import capture_output
from traitlets.config import Config

from helpers.counting import hardware, latency, models
from helpers.measuring import cache_sweep, sweep_record
from helpers.widgets import (
    batching,
    flops,
    matmuls,
    memory,
    parallel,
    planner,
    roofline,
    serving,
    timing,
)
from helpers.widgets import latency as latency_widget

matplotlib.use("Agg")


@pytest.fixture
def shell():
    """An in-process IPython shell (history in memory) drawing with the inline backend; the
    shell is discarded and the backend set back to Agg afterwards."""
    assert not InteractiveShell.initialized(), "another IPython shell is running"
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    select_figure_formats(ip, {"png"})
    plt.switch_backend("module://matplotlib_inline.backend_inline")
    try:
        yield ip
    finally:
        plt.close("all")
        plt.switch_backend("Agg")
        ip.history_manager.end_session()
        InteractiveShell.clear_instance()


def _cache_points():
    buffer = 2**20
    return cache_sweep.cache_points([1, 2, 4, 8], [2e-5, 2e-5, 4e-5, 9e-5], buffer)


def _curves():
    cfg, h100 = models.get("Qwen2.5-0.5B"), hardware.get("H100 SXM")
    ttft = {p: latency.ttft(cfg, h100, p) for p in (16, 256, 1024, 4096)}
    tpot = {c: latency.tpot(cfg, h100, c) for c in (1, 1024, 4096)}
    return ttft, tpot


# Each explorer: the callback, as the notebook wires it (fixed data bound), and the values
# of its widgets.
EXPLORERS = {
    "ch01 attention share": (flops.show_attention_share,
                             {"preset": "Qwen2.5-7B", "keys": 4096}),
    "ch02 memory budget": (memory.show_memory_budget, {"model": "Qwen2.5-7B", "batch": 32}),
    "ch03 roofline": (roofline.show_roofline, {"model": "Qwen2.5-7B", "batch": 1}),
    "ch04 cache sweep": (lambda copies, factor: timing.show_cache(_cache_points(), 4 * 2**20,
                                                                 copies=copies, factor=factor),
                         {"copies": 2, "factor": 2.0}),
    "ch05 sweep": (lambda layer, dtype: matmuls.show_matmuls(
        sweep_record.roofline_results("Qwen2.5-7B", "H100 SXM"), layer=layer, dtype=dtype),
        {"layer": "gate", "dtype": "fp32"}),
    "ch06 latency breakdown": (lambda prompt, output: latency_widget.show_latency_breakdown(
        *_curves(), prompt_tokens=prompt, output_tokens=output), {"prompt": 256, "output": 64}),
    "ch07 batch curve": (batching.show_batch_curve,
                         {"model": "Llama-3.1-8B", "chip": "H100 SXM", "context": 4096,
                          "dtype": "bf16"}),
    "ch08 stall": (serving.show_stall, {"decodes": 4, "prompt_tokens": 1024}),
    "ch08 prefix": (serving.show_prefix, {"shared_fraction": 0.5}),
    "ch08 transfer": (serving.show_transfer, {"prompt_tokens": 1024}),
    "ch08 speculative": (serving.show_spec, {"alpha": 0.8}),
    "ch09 planner": (planner.show_planner, {"model": "Qwen2.5-7B", "chip": "H100 SXM"}),
    "ch10 deployment": (parallel.show_deployment,
                        {"model": "Llama-3.1-8B", "chip": "H100 SXM", "ranks": 2,
                         "kv_dtype": "fp8", "batch": 64, "price_per_chip_hour": 2.0}),
}  # fmt: skip


@pytest.mark.parametrize("name", EXPLORERS)
def test_interact_shows_the_figure_and_no_returned_value(shell, name):
    callback, values = EXPLORERS[name]
    widgets = {key: ipywidgets.fixed(value) for key, value in values.items()}
    with capture_output() as captured:
        explorer = ipywidgets.interactive(callback, **widgets)  # runs the callback once
    assert "Traceback" not in captured.stdout, captured.stdout
    assert explorer.result is None, f"the callback returned {explorer.result!r}"
    kinds = [sorted(output.data) for output in captured.outputs]
    # One figure, shown as a PNG (with its <Figure size …> text), and no other display.
    assert kinds == [["image/png", "text/plain"]], kinds
    assert captured.outputs[0].data["text/plain"].startswith("<Figure size")


@pytest.mark.parametrize("name", EXPLORERS)
def test_a_redraw_from_another_thread_never_meets_the_callbacks_figure(shell, name):
    callback, values = EXPLORERS[name]
    widgets = {key: ipywidgets.fixed(value) for key, value in values.items()}
    seen, failures, done = set(), [], threading.Event()

    def subshell():  # what pyplot's post_execute hook does after each widget message
        while not done.is_set():
            seen.update(plt.get_fignums())
            try:
                plt.draw_all()
            except Exception as error:  # the race's symptom, reported below
                failures.append(repr(error))

    other = threading.Thread(target=subshell)
    other.start()
    try:
        with capture_output() as captured:
            ipywidgets.interactive(callback, **widgets)
    finally:
        done.set()
        other.join()
    assert "Traceback" not in captured.stdout, captured.stdout
    assert not failures, failures
    assert not seen, f"pyplot figures {sorted(seen)} were open while the callback drew"
    assert [sorted(output.data) for output in captured.outputs] == [["image/png",
                                                                     "text/plain"]]
