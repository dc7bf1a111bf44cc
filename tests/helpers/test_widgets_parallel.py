"""The chapter 10 deployment explorer: controls in, the library's numbers and bars out."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from helpers.counting import (
    hardware,
    models,  # noqa: E402
)
from helpers.parallel import cost
from helpers.parallel import sharding as tp  # noqa: E402
from helpers.widgets.figures import new_figure  # noqa: E402
from helpers.widgets.parallel import (  # noqa: E402
    DeploymentControls,
    deployment,
    draw_deployment,
    show_deployment,
)

LLAMA, H100, NVLINK = models.get("Llama-3.1-8B"), hardware.get("H100 SXM"), tp.link("NVLink 4")


def test_numbers_come_from_the_library():
    view = deployment(DeploymentControls("Llama-3.1-8B", "H100 SXM", 2, "fp8", 64, 3.0))
    assert view.degrees == tuple(tp.degrees(LLAMA, 8)) == (1, 2, 4, 8)
    parts = tp.tp_decode_step(LLAMA, H100, NVLINK, 2, 64, 4096, kv_dtype="fp8")
    assert view.tpot_s[1] == pytest.approx(sum(parts.values()))
    assert view.allreduce_s[1] == parts["all_reduce"] and view.allreduce_s[0] == 0.0
    assert view.capacity == tuple(tp.tp_max_sequences(LLAMA, H100, t, 4096, kv_dtype="fp8")
                                  for t in view.degrees)  # fmt: skip
    costs = cost.token_costs(LLAMA, H100, NVLINK, 2, 3.0, batch=64, context=4096,
                             prompt_tokens=2048, kv_dtype="fp8")  # fmt: skip
    assert (view.input_cost, view.output_cost) == (costs["input"], costs["output"])
    assert "$3 a chip-hour" in view.summary()


def test_a_batch_that_does_not_fit_and_a_degree_that_does_not_divide():
    short = deployment(DeploymentControls("Llama-3.1-8B", "H100 SXM", 1, "bf16", 200, 2.0))
    assert short.output_cost is None and "does not fit (memory holds 130" in short.summary()
    assert [r[4] for r in short.rows()] == [False, True, True, True]
    odd = deployment(DeploymentControls("Qwen2.5-7B", "H100 SXM", 8, "bf16", 8, 2.0))  # 4 KV heads
    assert 8 not in odd.degrees and "does not divide" in odd.summary()


def test_draw_stacks_two_bars_a_degree():
    view = deployment(DeploymentControls("Llama-3.1-70B", "H100 SXM", 4, "bf16", 16, 2.0))
    fig, ax = new_figure()
    draw_deployment(ax, view)
    assert len(ax.patches) == 2 * len(view.degrees)
    assert ax.get_ylabel() == "TPOT (ms)"


def test_show_prints_the_table_and_returns_none(capsys):
    assert show_deployment(kv_dtype="bf16", batch=32) is None
    out = capsys.readouterr().out
    assert "T = 8: TPOT" in out and "all-reduce" in out


def test_the_title_shows_dollars_not_mathtext():
    view = deployment(DeploymentControls("Llama-3.1-8B", "H100 SXM", 1, "bf16", 8, 2.5))
    fig, ax = new_figure()
    draw_deployment(ax, view)
    assert r"at \$2.5 a chip-hour" in ax.get_title()
    fig.canvas.draw()  # an unescaped pair of dollars would render as math, not fail: no error


def test_each_chip_gets_its_own_link_and_unmodelled_links_are_refused():
    pcie = deployment(DeploymentControls("Llama-3.1-8B", "H100 PCIe", 2, "bf16", 8, 2.0))
    net = tp.link("PCIe Gen5 x16")
    parts = tp.tp_decode_step(LLAMA, hardware.get("H100 PCIe"), net, 2, 8, 4096,
                              kv_dtype="bf16")  # fmt: skip
    assert pcie.link == "PCIe Gen5 x16" and "(PCIe Gen5 x16)" in pcie.summary()
    assert pcie.allreduce_s[1] == parts["all_reduce"]
    h200 = deployment(DeploymentControls("Llama-3.1-8B", "H200 SXM", 2, "bf16", 8, 2.0))
    assert h200.link == "NVLink 4"
    for chip in ("L4", "A100 80GB SXM", "B200", "MI300X", "TPU v5e"):
        with pytest.raises(ValueError, match="no modelled link"):
            deployment(DeploymentControls("Llama-3.1-8B", chip, 2, "bf16", 8, 2.0))
