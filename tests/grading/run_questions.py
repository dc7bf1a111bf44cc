"""Grade the submissions given as JSON on stdin with ``grading.sandbox.run``, one after the
other in this one thread (so through the same warm sandboxes), and print their outcomes as
JSON: test_grading_unprivileged.py runs it as an ordinary user.

stdin: ``{"sandbox": bool, "limits": {...}, "submissions": [[question, ...], ...]}``,
each question the fields of :class:`grading.sandbox.Question`."""

from __future__ import annotations

import dataclasses
import json
import sys

from grading import sandbox


def main() -> None:
    job = json.load(sys.stdin)
    limits = sandbox.Limits(**job["limits"])
    found = []
    for submission in job["submissions"]:
        questions = [sandbox.Question(**{k: tuple(v) if isinstance(v, list) else v
                                         for k, v in q.items()}) for q in submission]  # fmt: skip
        outcomes = sandbox.run(questions, limits, sandbox=job["sandbox"])
        found.append([dataclasses.asdict(o) for o in outcomes])
    print(json.dumps(found))


if __name__ == "__main__":
    main()
