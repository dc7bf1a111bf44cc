"""helpers.measuring.kernel_table: chapter 5 §9's table of kernels as one call and its record."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from helpers.counting import memory, roofline
from helpers.measuring import ceilings, kernels, machine, timing
from helpers.measuring.ceilings import Ceilings
from helpers.measuring.kernel_table import (
    TRANSPOSED,
    DtypeKernels,
    KernelRow,
    KernelTable,
    kernel_table,
)

K, N = 256, 128
FAST = (0.005, 0.01)  # each row's min and max run time: the test reads the record, not speed


def _ceilings(peak: float = 1e12, bandwidth: float = 5e9, dtypes=("fp32", "bf16")) -> Ceilings:
    return Ceilings("cpu", "test CPU", "t", "today", 1, dict.fromkeys(dtypes, peak),
                    {d: (1, 1, 1) for d in dtypes}, bandwidth, "test", 2**20, 2**30)


@pytest.fixture(scope="module")
def table() -> KernelTable:
    points = [SimpleNamespace(dtype="fp32", m=1, k=K, n=N, kernel="eager", median_s=1e-3),
              SimpleNamespace(dtype="fp32", m=8, k=K, n=N, kernel="packed", median_s=1.0),
              {"dtype": "bf16", "m": 1, "k": K + 1, "n": N, "kernel": "eager", "median_s": 1.0}]
    return kernel_table(K, N, ("fp32", "bf16"), _ceilings(), "cpu", swept_points=points,
                        run_time_s=FAST)


def test_every_kernel_and_x_at_b_are_timed_and_read_as_the_steps_read_them(table):
    measured = _ceilings()
    assert (table.k, table.n, table.device, table.bandwidth) == (K, N, "cpu", measured.bandwidth)
    assert [t.dtype for t in table.dtypes] == ["fp32", "bf16"] and table["bf16"].dtype == "bf16"
    for t in table.dtypes:
        assert [r.name for r in t.kernels] == [k.name for k in kernels.linear_kernels(
            "cpu", t.dtype, 1)]
        assert (t.transposed.name, t.transposed.description) == TRANSPOSED
        assert t.nbytes == memory.linear_bytes(1, K, N, t.dtype)
        plan = timing.plan_cache_defeat(t.nbytes, measured.cache_bytes)
        assert (t.cache_defeat, t.copies) == (plan.method, plan.copies)
        for row in (*t.kernels, t.transposed):
            assert row.median_s > 0
            assert row.bandwidth == timing.achieved_bandwidth(t.nbytes, row.median_s)
            assert row.share == row.bandwidth / measured.bandwidth
            assert row.steady == ceilings.steady(row.median_s, row.iqr_s)
            assert row.loaded == machine.load_unreliable(row.others_cores, table.threads)
        eager = next(r for r in t.kernels if r.name == "eager")
        # the least median among the steady rows (a two-mode timing is not ranked), if any
        fastest = min([r for r in t.kernels if r.steady] or t.kernels, key=lambda r: r.median_s)
        assert t.fastest == fastest and t.fastest_share == fastest.share
        assert t.layout == t.transposed.median_s / eager.median_s
        assert t.over_fastest == t.transposed.median_s / fastest.median_s
        assert t.compute_cap is None  # ridge 200 FLOP/B: memory-bound at m = 1
    with pytest.raises(KeyError):
        table["fp16"]


def test_the_sweeps_own_point_is_compared_on_its_kernel_and_others_are_ignored(table):
    fp32 = table["fp32"]
    eager = next(r for r in fp32.kernels if r.name == "eager")
    assert (fp32.swept_kernel, fp32.swept_s, fp32.here_s) == ("eager", 1e-3, eager.median_s)
    assert fp32.swept_ratio == 1e-3 / eager.median_s
    assert "fp32 section 4's sweep timed this shape on eager at 1000.0 µs" in table.report()
    bf16 = table["bf16"]  # its only point is another shape (k + 1): no comparison
    assert (bf16.swept_kernel, bf16.swept_s, bf16.here_s, bf16.swept_ratio) == (None,) * 4
    assert "bf16 section 4's sweep" not in table.report()
    elsewhere = [{"dtype": "fp32", "m": 1, "k": K, "n": N, "kernel": "cuBLAS", "median_s": 1.0}]
    alone = kernel_table(K, N, ("fp32",), _ceilings(), "cpu", swept_points=elsewhere,
                         run_time_s=FAST)  # a kernel this table does not offer
    assert alone["fp32"].here_s is None and "section 4" not in alone.report()


def test_a_shape_compute_bound_at_one_token_gets_the_matmul_ceilings_cap():
    measured = _ceilings(peak=1e6, bandwidth=5e9, dtypes=("fp32",))
    table = kernel_table(K, N, ("fp32",), measured, "cpu", run_time_s=FAST)
    roof = roofline.matmul_time(1, K, N, measured.peak("fp32"), measured.bandwidth, "fp32")
    assert roof.bound == "compute"
    assert table["fp32"].compute_cap == table["fp32"].nbytes / roof.seconds
    assert (f"fp32 at m = 1 is compute-bound here: the matmul ceiling caps it at "
            f"{table['fp32'].compute_cap / 1e9:.1f} GB/s") in table.report().splitlines()


def _row(name, median_us, iqr_us, gbs, share, loaded=False, steady=True, description=None):
    description = description or {k.name: k.description for k in (
        kernels.EAGER, kernels.ONEDNN, kernels.PACKED, kernels.ATEN)}.get(name, TRANSPOSED[1])
    return KernelRow(name, description, median_us * 1e-6, iqr_us * 1e-6, gbs * 1e9, share,
                     0.0, loaded, steady)


def test_the_report_prints_the_stored_lines_byte_for_byte():
    """The chapter's stored output (a 2-core Xeon), rebuilt from its own figures."""
    fp32 = DtypeKernels("fp32", 0, "rotate", 2, (
        _row("eager", 2755.4, 274.7, 18.7, 0.41), _row("onednn", 1980.1, 219.2, 26.0, 0.58),
        _row("packed", 2337.0, 113.4, 22.0, 0.49)), _row("x @ B", 2733.2, 66.2, 18.8, 0.42),
        None, "packed", 2368.5e-6, 2337.0e-6)
    table = KernelTable(3584, 3584, "cpu", 2, 45.1e9, (fp32,))
    assert table.report().splitlines() == [
        "[1×3584]·[3584×3584], bandwidth ceiling 45.1 GB/s",
        "fp32 eager   F.linear, torch's default kernel          2755.4 µs (IQR  274.7)   "
        "18.7 GB/s =  41%",
        "fp32 onednn  oneDNN, weight as a oneDNN tensor         1980.1 µs (IQR  219.2)   "
        "26.0 GB/s =  58%",
        "fp32 packed  oneDNN, weight packed ahead of time       2337.0 µs (IQR  113.4)   "
        "22.0 GB/s =  49%",
        "fp32 x @ B   B stored [in, out]                        2733.2 µs (IQR   66.2)   "
        "18.8 GB/s =  42%",
        # x @ B 2733.2 against eager's 2755.4 µs, IQRs 66.2 and 274.7: within the spreads
        "fp32 x @ B took 0.99x F.linear's time on the [out, in] layout (layout alone) and 1.38x "
        "the fastest kernel's: within the two timings' spreads, no layout effect shown; the "
        "kernel and its prepared weight make the gap",
        "fp32 section 4's sweep timed this shape on packed at 2368.5 µs; here 2337.0 µs "
        "(sweep / here 1.01x)",
        # onednn, 1980.1 µs, beat packed's 2337.0 by more than 10%: the race's pick was not
        # the fastest here
        "fp32 the sweep's race picked packed; here onednn took 0.85x its time: a race of a few "
        "calls a kernel can pick a slower one"]


def test_the_verdicts_flip_where_their_thresholds_are_crossed():
    def dtype_table(fastest_share, transposed_us, swept_us, loaded=False, steady=True):
        rows = (_row("eager", 100.0, 1.0, 1.0, 0.5), _row("aten", 50.0, 1.0, 2.0, fastest_share,
                                                          loaded=loaded, steady=steady))
        return DtypeKernels("bf16", 0, "flush", 3, rows, _row("x @ B", transposed_us, 1, 1, 0.5),
                            None, "aten", swept_us * 1e-6, 50e-6)

    quiet = dtype_table(1.05, 109.0, 54.0)  # at or under each threshold, not past it
    assert not quiet.above_ceiling and quiet.layout_cheap and not quiet.timing_differs
    loud = dtype_table(1.06, 111.0, 56.0, loaded=True)
    assert loud.above_ceiling and not loud.layout_cheap and loud.timing_differs
    lines = "\n".join(loud.lines())
    assert ("bf16: the fastest kernel streamed 106% of the bandwidth ceiling: the ceiling is the "
            "best rate the sweep's run saw past the cache, not this machine's limit, so the "
            "memory-bound roofline times of sections 4–8 are not lower bounds here") in lines
    assert "roofline times above" not in lines  # the table prints no roofline times
    assert "the layout alone cost time here, past the two timings' spreads" in lines
    assert ("(sweep / here 1.12x): the same kernel, so the difference is the timing's moment or "
            "harness") in lines
    assert "  (timed under load: unreliable)\n" in lines + "\n"
    assert "two-mode" not in lines
    assert "the fastest kernel streamed" not in "\n".join(quiet.lines())
    assert "race picked" not in lines  # the sweep's aten is the fastest here too
    assert "unreliable" not in "\n".join(quiet.lines())
    # A two-mode aten is no kernel to rank by: eager (steady) is the fastest, and the sweep's
    # point compared with aten's two-mode timing here is called unreliable.
    two_mode = dtype_table(1.06, 111.0, 56.0, steady=False)
    assert two_mode.fastest.name == "eager" and not two_mode.above_ceiling
    two_lines = "\n".join(two_mode.lines())
    assert "  (IQR over half the median: two-mode, unreliable)" in two_lines
    assert "its timing here is two-mode, so this comparison is unreliable" in two_lines
    assert "1.11x the fastest kernel's" in two_lines  # x @ B against eager, not aten
    # x @ B faster than eager by more than LAYOUT_CHEAP: the layout cost nothing.
    faster = "\n".join(dtype_table(1.0, 80.0, 50.0).lines())
    assert "the layout cost nothing here (x @ B ran faster)" in faster


@pytest.mark.parametrize(("args", "problem"), [
    ((K, N, ()), "at least one dtype"),
    ((K, N, ("fp32", "fp32")), "repeat"),
    ((K, N, ("int8",)), "unknown dtype"),
    ((0, N, ("fp32",)), "k"),
    ((K, N, ("fp16",)), "no measured ceiling for 'fp16'"),
])
def test_bad_input_raises_a_value_error_naming_the_problem(args, problem):
    with pytest.raises(ValueError, match=problem):
        kernel_table(*args, _ceilings(), "cpu", run_time_s=FAST)
    with pytest.raises(ValueError, match="run_time_s"):
        kernel_table(K, N, ("fp32",), _ceilings(), "cpu", run_time_s=(0.0, 0.1))
    with pytest.raises(ValueError, match="no 'kernel'"):
        kernel_table(K, N, ("fp32",), _ceilings(), "cpu", run_time_s=FAST,
                     swept_points=[{"dtype": "fp32", "m": 1, "k": K, "n": N, "median_s": 1.0}])
