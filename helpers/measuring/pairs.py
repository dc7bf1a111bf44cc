"""What chapter 5's paired decode says (``sweep.paired_decode``: the bandwidth stream and a
one-token matmul taken in turn): ``pairs_reading``, whether the matmul's gap to the bandwidth
ceiling is its kernel's, the moment's traffic, or a timing's, read from the pairs, the sweep's
own point of the same kernel, and the stream measured beside that point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from helpers.measuring import timing
from helpers.measuring.sweep import PAIR_GROUPS, pair_groups

__all__ = ["STREAM_BAND", "pairs_reading"]

STREAM_BAND = (0.95, 1.05)
"""``pairs_reading``: a matmul whose notch reaches this band of ``x.sum()``'s rate streams as
well as the stream; a notch above it, better; below it, worse."""


def pairs_reading(rates: Sequence[tuple[float, float]], groups: int = PAIR_GROUPS,
                  kernel_best: float | None = None,
                  kernel_moment: float | None = None, set_ceiling: bool = False,
                  fastest_stream: float | None = None) -> str:
    """What ``paired_decode``'s pairs say about a one-token matmul's gap to the bandwidth
    ceiling, for any outcome. Each pair's matmul rate over its stream's (the same moment)
    is a sample; their median and its notch (median ± 1.57·IQR/√r, chapter 4) say whether
    the matmul streams as well as ``x.sum()`` (the notch reaches ``STREAM_BAND``, 95%–105%),
    better (the notch lies above it: ``x.sum()`` is not the best stream here) or worse (below
    it: that share is the kernel's). The notch's ends are compared as printed, to 0.1%, so the
    verdict never hangs on a digit the line does not show.

    The trend is tested, not assumed, in every case: from the slowest group of pairs to the
    fastest (``fastest_group``), did the matmul rise with the stream (by at least half as
    much: it follows the moment's traffic), level off or fall while the stream climbed (a
    limit of the kernel's own unless a group's matmul came within 5% of the fastest group's
    stream: then the groups scatter), or did the stream vary by under 5%? Only a matmul shown
    to follow the stream has its gap put down to the moment's traffic (its share of the stream
    steady within 5%, or said to move). ``kernel_best``: the rate (B/s) the same kernel and
    shape reached in the sweep's blocks; where the notch lies below the band and that rate is
    over 5% above every group's matmul, the pairs' one-call timing held it back, not the
    kernel alone, as where that rate reaches the band against ``kernel_moment``; under 90%
    of the slowest group's, the sweep's timing or its moment did:
    ``kernel_moment``, the stream rate (B/s) measured beside the sweep's point (the streams
    just before and after its dtype's sweep), says which. Where the point's share of that
    stream is at least the pairs' median share, less 5%, memory was slower at the sweep's
    moment; otherwise the sweep's timing lost the difference. ``set_ceiling``: these pairs'
    fastest group set the bandwidth ceiling (``sweep.fastest_group``), so no gap to it is
    read. ``fastest_stream``: the fastest ``x.sum()`` rate the run measured (B/s); where the
    notch lies below the band and ``kernel_best`` reaches the band against it, no moment the
    run saw let ``x.sum()`` outstream the kernel, so the pairs' timing held it back, whether
    or not the matmul follows the stream."""
    ratios = [matmul / stream for stream, matmul in rates]
    median, iqr = timing.median_and_iqr(ratios)
    notch = 1.57 * iqr / math.sqrt(len(ratios))
    low, high = round(median - notch, 3), round(median + notch, 3)  # as printed: 0.1%
    share = (f"{median:.1%} of x.sum()'s rate (the median of {len(ratios)} pairs, notch "
             f"{low:.1%}–{high:.1%})")  # fmt: skip
    band = f"{STREAM_BAND[0]:.0%}–{STREAM_BAND[1]:.0%}"
    rows = pair_groups(rates, groups)
    (_, slow_stream, slow_matmul), (_, stream, matmul) = rows[0], rows[-1]
    stream_rise, matmul_rise = stream / slow_stream - 1, matmul / slow_matmul - 1
    # the table's first group to its last: its rows run from slow streams to fast ones
    # the groups are sorted by the stream's rate, so the stream rises by construction
    rises = (f"({matmul_rise:+.0%}) from its group of slowest streams to its fastest's (the stream "
             f"{stream_rise:+.0%})")
    if stream_rise < 0.05:
        follows = None
        trend = (f"the stream varied by {stream_rise:.0%} from its slowest group of pairs to "
                 "its fastest, too little to show whether the matmul follows it")  # fmt: skip
    elif matmul_rise >= stream_rise / 2:
        follows = True
        trend = f"the matmul rose with it {rises}: it follows the moment's traffic"
    else:
        follows = False
        # A change that prints as 0% (under half a percent) is no fall.
        trend = f"the matmul {'levelled off' if matmul_rise > -0.005 else 'fell'} {rises}"
    # The best group's matmul: a one-call pair that reached a rate shows the pairs' timing can.
    best_matmul = max(m for _, _, m in rows)
    if low > STREAM_BAND[1]:
        reading = (f"the matmul streamed {share} at the same moment: the notch lies above "
                   f"{band}, so x.sum() is not the best stream here, and its rate is no "
                   f"bandwidth ceiling; {trend}")  # fmt: skip
    elif high >= STREAM_BAND[0]:
        gap = {True: "so its gap to the ceiling moves with the moment's traffic, as x.sum()'s does",
               None: "so it falls as short of the ceiling as x.sum() does: that gap is to whatever "
                     "set the ceiling (a faster moment, or a kernel streaming better than x.sum())",
               False: "yet at the fastest moments it fell behind the stream: a limit of the "
                      "kernel's own, which only the fastest traffic reached"
                      if best_matmul < 0.95 * stream else "yet the fastest group's matmul still "
                      "kept within 5% of its stream: no limit of the kernel's own shown"
                      if matmul >= 0.95 * stream else f"yet another group's matmul reached "
                      f"{best_matmul / 1e9:.1f} GB/s, within 5% of the fastest group's stream: "
                      "the groups scatter, no limit of the kernel's own shown"}
        reading = (f"the matmul streamed {share} at the same moment: the notch reaches {band}, "
                   f"so it streams as well as x.sum(), within the spread; {trend}, "
                   + ("and its fastest group set the bandwidth ceiling itself: no gap to it to "
                      "read" if set_ceiling else gap[follows]))
    elif (kernel_best is not None and kernel_moment is not None
          and kernel_best / kernel_moment >= STREAM_BAND[0]):
        reading = (f"the matmul streamed {share} at the same moment: the notch lies below "
                   f"{band}; {trend}; yet in the sweep's blocks the same kernel and shape "
                   f"streamed {kernel_best / kernel_moment:.0%} of the stream measured beside it "
                   f"({kernel_moment / 1e9:.1f} GB/s), "
                   + ("within" if kernel_best / kernel_moment <= STREAM_BAND[1] else "above")
                   + " the band: the pairs' timing (each call alone, after a stream) held it "
                   "back, not the kernel")
    elif (kernel_best is not None and fastest_stream is not None
          and kernel_best >= STREAM_BAND[0] * fastest_stream):
        reading = (f"the matmul streamed {share} at the same moment: the notch lies below "
                   f"{band}; {trend}; yet in the sweep's blocks the same kernel and shape "
                   f"streamed {kernel_best / fastest_stream:.0%} of the fastest x.sum() this run "
                   f"measured ({fastest_stream / 1e9:.1f} GB/s): the pairs' timing (each call "
                   "alone, after a stream) held it back, not the kernel")
    elif kernel_best is not None and kernel_best > 1.05 * best_matmul and follows is not True:
        reading = (f"the matmul streamed {share} at the same moment: the notch lies below "
                   f"{band}; {trend}; yet the same kernel and shape streamed "
                   f"{kernel_best / best_matmul:.2f}× its best group's rate in the sweep (timed "
                   "in blocks), so the pairs' timing (each call alone, after a stream) held it "
                   "back, not the kernel alone")
    else:
        shares = f"{slow_matmul / slow_stream:.0%} to {matmul / stream:.0%}"  # first, last group
        drift = (matmul / stream) / (slow_matmul / slow_stream) - 1
        # In blocks beside a known stream, well above the pairs' share: the pairs' one-call
        # timing adds to the shortfall (the last clause below says by how much).
        timed = (" as the pairs time it (a call at a time)" if kernel_best is not None
                 and kernel_moment is not None and kernel_best / kernel_moment > median + 0.05
                 else "")  # fmt: skip
        reading = (f"the matmul streamed {share} at the same moment: the notch lies below "
                   f"{band}, so that shortfall is the kernel's{timed}; {trend}" + ("" if not follows
                   else ", at a steady share of the stream" if abs(drift) <= 0.05
                   else f", its share of the stream moving from {shares}"))  # fmt: skip
    if kernel_best is not None and kernel_best < 0.9 * slow_matmul:
        # The same kernel and shape, slower in the sweep than in every group of pairs: the
        # sweep's timing (blocks over rotated copies) or its moment, not the kernel.
        reading += (f"; the sweep's own point (timed in blocks) streamed only "
                    f"{kernel_best / matmul:.0%} of the fastest group's rate, below every group "
                    "of pairs")
        if kernel_moment is None:
            reading += ": the sweep's timing or its moment, not the kernel, lost that difference"
        elif kernel_best / kernel_moment >= median - 0.05:
            blocked = kernel_best / kernel_moment
            beside = (f"above the pairs' {median:.0%}, so the pairs' one-call timing cost part "
                      "of their shortfall" if blocked > median + 0.05
                      else f"as the pairs' {median:.0%}")  # fmt: skip
            reading += (f", yet {blocked:.0%} of the stream measured beside it "
                        f"({kernel_moment / 1e9:.1f} GB/s), {beside}: memory was slower at the "
                        "sweep's moment, not the kernel" + ("" if blocked > median + 0.05
                                                           else " or its timing"))
        else:
            reading += (f", and {kernel_best / kernel_moment:.0%} of the stream measured beside "
                        f"it ({kernel_moment / 1e9:.1f} GB/s), under the pairs' {median:.0%}: "
                        "the sweep's timing, not the kernel or the moment, lost that difference")
    return reading
