"""The step models that watch a run: WorstStall and PhaseShare, on a hand-worked model and
in a whole simulation."""

import numpy as np
import pytest

from helpers.counting import hardware, models
from helpers.serving import (
    KVMemory,
    PhaseShare,
    RooflineSteps,
    Step,
    WorstStall,
    poisson_trace,
    simulate,
)


class Toy:
    """Prefill token 1 ms, decode sequence 0.5 ms, 2 ms a step; decode_run as the engine
    asks it (one time per step)."""

    def __call__(self, step):
        return 2e-3 + 1e-3 * sum(n for n, _ in step.prefill) + 0.5e-3 * step.decode

    def decode_run(self, batch, context, count):
        return np.full(count, self(Step((), batch, batch * context, batch)))


def test_worst_stall_remembers_the_longest_step_with_decodes_only():
    watch = WorstStall(Toy())
    assert watch(Step(((100, 0),), 0, 0, 1)) == pytest.approx(0.102)  # no decodes: ignored
    assert watch.worst == 0.0
    watch(Step(((10, 0),), 4, 40, 5))  # 2 + 10 + 2 = 14 ms
    watch(Step((), 4, 44, 4))  # 4 ms
    assert watch.worst == pytest.approx(0.014)
    watch.decode_run(30, 10, 3)  # 17 ms each
    assert watch.worst == pytest.approx(0.017)


def test_phase_share_splits_waiting_into_decode_work_and_the_rest():
    share = PhaseShare(Toy())
    share(Step(((10, 0),), 4, 40, 5))  # 14 ms shared by 4 streams; alone 4 ms
    share(Step(((10, 0),), 0, 0, 1))  # no stream waits on a pure prefill
    share.decode_run(2, 10, 2)  # 3 ms a step, 2 streams, 2 steps: all decode work
    assert share.total_wait == pytest.approx(4 * 0.014 + 2 * 2 * 0.003)
    assert share.decode_wait == pytest.approx(4 * 0.004 + 2 * 2 * 0.003)


def test_watchers_leave_a_simulation_unchanged():
    steps = RooflineSteps(models.get("Qwen2.5-0.5B"), hardware.get("H100 SXM"))
    trace = poisson_trace(60, 20.0, 512, 64, seed=3)
    memory = KVMemory(200_000)
    plain = simulate(trace, steps, memory, "chunked", max_batch=32, token_budget=256)
    stall, share = WorstStall(steps), PhaseShare(steps)
    for watched in (stall, share):
        result = simulate(trace, watched, memory, "chunked", max_batch=32, token_budget=256)
        np.testing.assert_array_equal(result.ttft, plain.ttft)
        np.testing.assert_array_equal(result.e2e, plain.e2e)
    # Chunks of 256 prompt tokens share steps with decodes: the worst such step is longer
    # than a decode-only step, and decode work explains part, not all, of the waiting.
    assert stall.worst > steps(Step((), 1, 512, 1))
    assert 0 < share.decode_wait < share.total_wait

