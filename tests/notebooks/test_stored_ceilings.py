"""No stored run holds a rate more than 10% above its own ceiling (chapters 4-5, the bench).

A rate above the device's ceiling is a measurement bug until proven otherwise (chapter 4);
the harness raises each ceiling to the best rate of its run, so a stored run that breaks
this rule was made by a harness that did not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers.measuring import sweep_record

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 0.10


def _stored_text(chapter: str) -> str:
    path = ROOT / "solutions" / chapter / f"{chapter}.ipynb"
    cells = json.loads(path.read_text())["cells"]
    return "".join("".join(out.get("text", "")) for cell in cells if cell["cell_type"] == "code"
                   for out in cell.get("outputs", []))  # fmt: skip


def test_stored_bench_runs_stay_under_their_ceilings():
    """Every results file committed under helpers/data/ (GPU references: none until one has
    been measured), and a run of the checker on a point that breaks the rule."""
    for path in sorted((ROOT / "helpers" / "data" / "gpu").glob("*/05_matmuls.json")):
        results = json.loads(path.read_text())
        assert sweep_record.points_above_roofline(results, TOLERANCE) == [], path.name
    broken = {"ceilings": {"matmul_flops": {"fp32": 1e11}, "bandwidth": 1e10},
              "points": [{"dtype": "fp32", "flops": 1e6, "bytes": 2e6, "achieved_flops": f}
                         for f in (0.56e10, 0.54e10)]}  # 12% and 8% above 0.5 FLOP/B x 1e10 B/s
    assert [p["achieved_flops"] for p in
            sweep_record.points_above_roofline(broken, TOLERANCE)] == [0.56e10]


def test_chapter_5_sweep_stays_under_its_roofline():
    text = _stored_text("05_matmuls")
    # a point too noisy to set a ceiling (IQR at least half its median) may sit above it
    found = re.findall(r"steady points more than 10% above their own roofline: (\d+) of (\d+)",
                       text)  # fmt: skip
    assert len(found) == 1, "the stored chapter 5 must print the sweep's check once"
    above, total = map(int, found[0])
    assert total > 0 and above == 0


def test_chapter_5_pairs_stay_under_the_bandwidth_ceiling():
    text = _stored_text("05_matmuls")
    shares = re.findall(r"fastest group: stream (\d+)%, matmul (\d+)% of the bandwidth ceiling",
                        text)  # fmt: skip
    assert len(shares) == 2  # fp32 and bf16
    assert all(int(s) <= 100 * (1 + TOLERANCE) for pair in shares for s in pair)


def test_chapter_4_rotated_gemv_stays_under_the_roof():
    text = _stored_text("04_timing")
    share = re.findall(r"GEMV, rotated: [\d.]+ GB/s = (\d+)% of the", text)
    assert len(share) == 1 and int(share[0]) <= 100 * (1 + TOLERANCE)
