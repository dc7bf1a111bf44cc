"""No way around the stubs, and no hidden test within the student's reach (as root here;
test_grading_unprivileged.py runs the same questions as an ordinary user).

Each route an answer cell could take to the exercise's reference (chapter 2's
``weight_bytes``: reload, a fresh import, ``spec_from_file_location`` on the file, ``exec``
of its source, the loader, pickle and copyreg, ``gc``) scores 0 with the stub's reason; the
same routes, run without the stubs, all reach the real function. An answer that scans its
own process (objects, frames, modules, the environment, open files, its whole memory, every
file it can read) finds the canary planted in a hidden test nowhere, and finds its own
marker where it put it."""

from __future__ import annotations

import pytest
import reach

from grading import sandbox


@pytest.fixture(scope="module")
def outcomes() -> dict[str, sandbox.Outcome]:
    """Every route, the control and the canary scan: one submission, one sandbox."""
    questions = reach.route_questions() + [reach.canary_question()]
    results = sandbox.run(questions, reach.LIMITS, sandbox=True)
    return dict(zip([*reach.ROUTES, "control", "canary"], results, strict=True))


@pytest.mark.parametrize("route", reach.ROUTES)
def test_a_route_around_the_stub_scores_zero(outcomes, route):
    assert (outcomes[route].status, outcomes[route].detail) == ("failed", reach.REFUSED)


def test_without_the_stubs_every_route_reaches_the_reference(outcomes):
    assert outcomes["control"].passed, outcomes["control"]


def test_no_hidden_test_in_the_answer_process(outcomes):
    """The answer's scans find its own marker (in objects, memory and files) and the
    hidden test's canary nowhere."""
    assert outcomes["canary"].passed, outcomes["canary"]
