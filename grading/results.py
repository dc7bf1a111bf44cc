"""A graded submission's record: each question's result, stored as JSON and read back, and
how a result reads to people (the verdict of each status, a score as a number).

Written by the grader (``grades/<assignment>/<student>.json``), read by the records
(reports, the gradebook) and the commands; every file the grader writes is written
atomically (:func:`write_atomically`), so an interrupted run leaves no half-written file.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERDICT = {
    "passed": "passed",
    "failed": "failed",
    "hidden": "passed the visible tests, failed the hidden tests",
    "error": "your answer cell raised an error",
    "timeout": "ran out of time",
    "limit": "hit a resource limit",
    "crash": "crashed",
    "missing": "no answer found",
    "corrupt": "the notebook could not be read",
    "setup": "the setup cell failed (tell your instructor)",
    "manual": "graded by hand",
}


@dataclass
class QuestionResult:
    grade_id: str
    points: float
    score: float | None  # None: graded by hand (written answers)
    status: str  # passed, failed, hidden, error, timeout, limit, crash, missing, corrupt, manual
    detail: str = ""


@dataclass
class StudentResult:
    student: str
    assignment: str
    questions: list[QuestionResult]
    flags: list[str] = field(default_factory=list)
    file: str = ""  # the notebook graded, relative to the student's folder
    key: str = ""  # what it was graded from (submission, source, grader)

    @property
    def score(self) -> float:
        return sum(q.score or 0.0 for q in self.questions)

    @property
    def max_auto(self) -> float:
        return sum(q.points for q in self.questions if q.score is not None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StudentResult:
        data = json.loads(text)
        data["questions"] = [QuestionResult(**q) for q in data["questions"]]
        return cls(**data)


def stored(path: Path, key: str) -> StudentResult | None:
    """The result stored at ``path`` if it was graded from ``key``; None if there is none,
    it cannot be read, or it is stale."""
    try:
        result = StudentResult.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return result if result.key == key else None


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def number(value: float | None) -> str:
    """A score as people write it: 2, 1.5, or blank for none."""
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
