"""Why published GPU figures reach the share of the roofline they do (chapters 5, 6, 7, 9
and 10): ``reason(kind)``, one paragraph per kind of ``helpers.counting.published``'s rows,
every number in it read from those rows and their bounds, and ``report(*kinds)``, the rows,
their sources, bounds and shares with that paragraph, as a chapter prints them.
"""

from __future__ import annotations

from helpers.counting._validate import one_of
from helpers.counting.memory import linear_bytes
from helpers.counting.published import KINDS, SOURCES, Comparison, model, shares, table

__all__ = ["reason", "report"]


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%}-{high:.0%}"


def _copy_share() -> tuple[float, str]:  # BabelStream's Copy: its share, and on which chip
    (copy,) = [c for c in table("bandwidth") if c.row.label.startswith("BabelStream Copy")]
    return copy.share, copy.chip.name


def _gemm_reason(cs: list[Comparison]) -> str:
    ridge = max(c.chip.ridge(c.row.compute_dtype) for c in cs)
    least = min(c.work.flops / c.work.bytes_moved for c in cs)
    best = {d: [c.share for c in cs if c.row.source == "mamf" and c.row.compute_dtype == d]
            for d in ("bf16", "fp8")}  # fmt: skip
    sweep = {c.row.shape[1]: c.share for c in cs if c.row.source == "swiglu"}
    low, high = min(sweep), min(d for d in sweep if d > min(sweep))
    return (
        f"Every shape sits far right of its ridge (intensity at least {least:,.0f} FLOP/B, "
        f"ridges at most {ridge:,.0f}): the bound is the dense peak, and no memory traffic "
        f"explains the gap. At the best shape a search found, GEMMs reach {_span(best['bf16'])} "
        f"of the bf16 peak and {_span(best['fp8'])} of the fp8 one: clocks below boost under the "
        "power limit, tiles that do not divide the matrix, a last wave of tiles that leaves some "
        "of the GPU's cores idle, and writing the output cost time the roofline does not count. "
        f"Shape matters as much: on an H100 (SXM assumed: the source says no more), d_ff = {low} "
        f"(8/3 of 4096) reaches {sweep[low]:.0%} and d_ff = {high} reaches {sweep[high]:.0%}, "
        f"{sweep[high] / sweep[low] - 1:.0%} faster for {high - low} more columns. No model built "
        "from these GEMMs beats the share its shapes allow.")


def _bandwidth_reason(cs: list[Comparison]) -> str:
    parts = ", ".join(f"{c.row.label.split()[1]} {c.row.figure / 1e3:,.0f} GB/s "
                      f"({c.share:.0%})" for c in cs)  # fmt: skip
    return (
        f"A streaming kernel, arrays far larger than the cache: {parts} of the datasheet's "
        f"{cs[0].chip.bandwidth / 1e9:,.0f} GB/s. The datasheet counts the pins' transfer "
        "rate; DRAM refresh, row switches and turning the bus between reads and writes take "
        "a share that no kernel recovers. This is the practical memory roof: a decode that "
        "reaches it is as fast as memory allows.")


def _decode_reason(cs: list[Comparison]) -> str:
    copy, _ = _copy_share()
    lines = [f"{c.row.label}: bound {c.work.seconds * 1e3:.2f} ms a token for "
             f"{c.work.bytes_moved / 1e9:.1f} GB, measured {c.measured_seconds * 1e3:.2f} ms "
             f"({c.share:.0%}, {c.share / copy:.0%} of the copy kernel's share)"
             for c in cs]  # fmt: skip
    return (
        "One sequence reads every weight once per token, so the memory roof binds and the "
        "bound is the bytes over the datasheet bandwidth. " + "; ".join(lines) + ". "
        f"A copy kernel reaches {copy:.0%} of that bandwidth on this chip (chapter 5), so "
        "part of the gap is the memory itself; the rest is the engine: matrix-vector "
        "products too thin to stream at full rate, attention and norms between them, the "
        "cache growing from the 5-token prompt, a GPU power-limited to 330 W (gpt-fast's "
        "torch.compile with CUDA graphs has already removed most launch cost). "
        + _int8_against_bf16(cs))


def _int8_against_bf16(cs: list[Comparison]) -> str:
    # Only the same model in both dtypes compares: another model has other shapes.
    pairs = [(b, i) for b in cs if b.row.dtype == "bf16" for i in cs
             if i.row.dtype == "int8" and i.row.model == b.row.model]  # fmt: skip
    said = []
    for b, i in pairs:
        share = "below" if i.share < b.share else "not below"
        rate = "higher" if i.row.figure > b.row.figure else "not higher"
        said.append(f"on {b.row.model} its share ({i.share:.0%}) is {share} bf16's "
                    f"({b.share:.0%}), its tokens/s {rate} ({i.row.figure:,.0f} against "
                    f"{b.row.figure:,.0f})")
    if not said:
        return ""
    return ("Weight-only int8 halves the bytes but adds a dequantize: " + "; ".join(said)
            + ".")


def _throughput_reason(cs: list[Comparison]) -> str:
    copy, copy_chip = _copy_share()
    gemm = {(c.row.chip, c.row.dtype): c.share for c in table("gemm") if c.row.source == "mamf"}
    runs = [f"{c.row.label} ({c.chip.name}): {c.share:.0%} of a {c.binds}-bound {c.bound:,.0f},"
            f" {c.sequential_share:.0%} with the phases in sequence" for c in cs]
    heavy = [c for c in cs if c.phases[1].seconds >= 0.9 * sum(p.seconds for p in c.phases)]
    # the phases bind different roofs: only there does running them in sequence cost anything
    mixed = [c for c in cs if c not in heavy and c.phases[0].bound != c.phases[1].bound]
    rest = [c for c in cs if c not in heavy + mixed]
    chips = {c.chip.name for c in heavy}
    sentences = [
        "Static batches: the bound counts every prompt's prefill and each decode step (the "
        "weights read once for the batch, each sequence's own cache), with prefill's compute "
        "free to hide decode's memory traffic",
        "; ".join(runs),
    ]
    decode = ("Runs that are nearly all decode are memory-bound and reach "
              f"{_span([c.share for c in heavy])}")
    if copy_chip in chips:
        on_copy_chip = _span([c.share for c in heavy if c.chip.name == copy_chip])
        decode += (f"; on the {copy_chip} {on_copy_chip}, near the {copy:.0%} a copy kernel "
                   "reaches there (chapter 5)")
    if chips - {copy_chip}:
        decode += f"; no copy share at hand for the {' or '.join(sorted(chips - {copy_chip}))}"
    sentences.append(decode)
    if mixed:
        sentences.append(
            "Where the prefill weighs too and the phases bind different roofs, the shares are "
            f"lower ({_span([c.share for c in mixed])}): a static batch runs its prefill, then "
            "its decode, so neither hides the other; bounded so, the same runs reach "
            f"{_span([c.sequential_share for c in mixed])}; continuous batching (chapter 7) "
            "lets an engine overlap them")
    for c in rest:  # one roof in both phases: their order costs nothing
        sentence = (f"{c.row.label} is {c.binds}-bound in both phases, so their order costs it "
                    f"nothing; part of its gap is {c.row.dtype} GEMMs short of their peak (the "
                    f"best on an {c.row.chip} reaches {gemm[c.row.chip, c.row.dtype]:.0%} of it,"
                    " chapter 5)")
        if c.row.chips > 1:
            sentence += f" and TP={c.row.chips}'s all-reduces, which the bound does not count"
        sentences.append(sentence)
    sentences.append("The rest is attention over each sequence's cache, launches, sampling.")
    return ". ".join(sentences)


def _mlperf_reason(cs: list[Comparison]) -> str:
    lines = [f"{c.row.label}: {c.row.figure:,.0f} tokens/s of {c.bound:,.0f} "
             f"({c.share:.0%}; {c.row.figure / c.row.chips:,.0f} per GPU)" for c in cs]
    offline = {(c.row.model, c.row.chip): c for c in cs if c.row.scenario == "Offline"}
    kept = [f"{c.row.label} on {c.row.chip} keeps {c.row.figure / base.row.figure:.0%} of "
            f"Offline's throughput under TTFT <= {c.row.ttft_limit:g} s and TPOT <= "
            f"{c.row.tpot_limit * 1e3:g} ms" for c in cs if c.row.scenario != "Offline"
            for base in [offline[c.row.model, c.row.chip]]]  # fmt: skip
    return (
        "The bound counts only each output token's pass through the weights, at the fp8 "
        "peak of all 8 GPUs, with no prompt, cache or communication: " + "; ".join(lines)
        + ". So these shares understate the engine: the prompts' prefill (left out because "
        "the datasets' lengths are not among the published figures), every step's KV-cache "
        "reads, all-reduces where a system splits the model and the engine's losses take the rest. "
        "What the rows do say is the price of latency limits (at the 99th percentile, "
        "requests arriving one at a time): " + "; ".join(kept) + ". The tighter the limits, "
        "the smaller the batch an engine may run, the trade chapter 9's planner makes.")


def _tp_reason(cs: list[Comparison]) -> str:
    out = []
    for name in dict.fromkeys(c.row.model for c in cs):
        series = [c for c in cs if c.row.model == name]
        base, cfg = series[0], model(name)
        reduces, t0 = 2 * cfg.layers, base.row.chips
        # gpt-fast's apply_tp splits only the layers: every GPU reads the whole LM head, whose
        # time dividing by T would not shorten. One GPU's read of it, at one chip's bandwidth:
        head = linear_bytes(1, *cfg.linear_shapes()["lm_head"], "bf16") * t0 / base.chip.bandwidth
        points = ", ".join(f"T={c.row.chips} {c.share:.0%}" for c in series)
        extra = []
        for c in series[1:]:  # the time beyond the smallest T's time scaled by T_0 / T
            added = c.measured_seconds - base.measured_seconds * t0 / c.row.chips
            whole = head * (1 - t0 / c.row.chips)  # the head T does not divide
            each = (f" ({whole * 1e3:.2f} ms the whole LM head; past it, "
                    f"{(added - whole) / reduces * 1e6:.0f} us a call)" if added > 0 else "")
            extra.append(f"T={c.row.chips} {added * 1e3:+.2f} ms{each}")
        what = ("the T=1 time holds no all-reduce, so one all-reduce costs at most a call's share, "
                "if thinner slices only lose speed" if t0 == 1 else f"the T={t0} time "
                f"already holds T={t0}'s all-reduces: a call's share is not one all-reduce's cost")
        out.append(f"{name}: {points}. Against its own T={t0} time scaled by {t0}/T, a token takes "
                   + ", ".join(extra) + f", {reduces} all-reduce calls a token; {what}.")
    return (
        "The bound splits the bytes over T chips' bandwidth and charges nothing for the "
        "all-reduces, two a layer for each token, and splits the LM head too, which "
        "gpt-fast leaves whole on every GPU. " + " ".join(out) + " What T does not divide "
        "is what tensor parallelism adds: all-reduces whose latency no chip count shortens, "
        "and slices of every matrix that get thinner and stream less well; chapter 10's "
        "TPOT(T) adds the all-reduces, not the slices' loss. The source ran A100s in a 'hybrid "
        "cube mesh', batch 1; where a time is below its ideal (a minus sign), T chips did "
        "better than scaling alone, and the source does not say why.")


def reason(kind: str) -> str:
    """Why a kind's rows reach the share they do, with their numbers in it."""
    one_of(kind, KINDS, "kind")
    return globals()[f"_{kind}_reason"](table(kind))


def report(*kinds: str) -> str:
    """The rows of ``kinds``, each with its source, software and date, its bound, share
    and binding roof, then the reason for the gap: what a chapter prints."""
    out = []
    for kind in kinds:
        low, high = shares(kind)
        out.append(f"== {kind}: published figures reach {low:.0%}-{high:.0%} of the roofline")
        for c in table(kind):
            r = c.row
            count = f"{r.chips}x " if r.chips > 1 else ""
            out.append(f"  {r.label}, {count}{r.chip}: {r.figure:,} {r.unit}; bound "
                       f"{c.bound:,.{0 if c.bound >= 100 else 1}f} ({c.binds}); "
                       f"share {c.share:.1%}")  # fmt: skip
            out.append(f"      {SOURCES[r.source].title}; {r.software}; {r.date}")
        out.append("  Why: " + reason(kind))
    return "\n".join(out)

