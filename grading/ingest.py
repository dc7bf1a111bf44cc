"""Bring submissions into the course folder's ``submitted/<student>/<assignment>/``.

Three sources: an LMS zip download (file names parsed with nbgrader ``zip_collect``'s
``named_regexp`` convention: groups ``student_id`` and ``file_id``, optional
``timestamp``), a folder laid out as ``<student>/<assignment>/``, or nbgrader's exchange
(``<exchange>/<course_id>/inbound/<student>+<assignment>+<timestamp>…``, latest wins, as
``nbgrader collect`` does). Archives are hostile: members are read with a size cap, never
extracted by their own paths, links are skipped, and student ids are sanitised.
Returns notes naming every file that was skipped and why.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
import zipfile
from pathlib import Path

MAX_FILE_BYTES = 50 << 20
# Canvas: "doejohn_12345_67890_01_flops.ipynb" (late: "doejohn_late_12345_…"; resubmissions
# get "-1" before the extension). Moodle: "Jane Doe_12345_assignsubmission_file_/01_flops.ipynb"
# (a folder per student, or flattened into one name).
PATTERNS = [
    r"^(?:.*/)?(?P<student_id>[^/_]+)_(?:late_)?\d+_\d+_(?P<file_id>[^/]+)$",
    r"^(?:.*/)?(?P<student_id>[^/_]+)_\d+_assignsubmission_(?:file|onlinetext)_/?(?P<file_id>[^/]+)$",
    r"^(?:[^/]+/)*?(?P<student_id>[^/]+)/(?:[^/]+/)?(?P<file_id>[^/]+)$",
]


def safe_id(text: str) -> str:
    """A student id usable as one folder name: letters, digits, ``.-_`` only."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip()).strip("._")
    return cleaned[:100] or "unknown"


def safe_name(text: str) -> str:
    name = os.path.basename(text.replace("\\", "/"))
    cleaned = re.sub(r"[^A-Za-z0-9._ ()-]+", "_", name).strip(". ")
    return cleaned[:150] or "unnamed"


def _store(folder: Path, name: str, data: bytes, mtime: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if not (path.is_file() and path.read_bytes() == data):
        tmp = folder / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, path)
    os.utime(path, (mtime, mtime))


def from_zip(
    archive: Path, assignment: str, submitted: Path, patterns: list[str] | None = None
) -> list[str]:
    """Ingest an LMS zip download of one assignment."""
    notes = []
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as error:
        return [f"{archive.name}: not a readable zip archive ({error})"]
    with zf:
        for info in zf.infolist():
            name = info.filename
            if info.is_dir():
                continue
            if name.startswith("/") or ".." in name.replace("\\", "/").split("/"):
                notes.append(f"{name}: skipped (a path outside the archive)")
                continue
            if name.startswith("__MACOSX/") or "/." in f"/{name}":
                continue  # the archiver's own files and hidden files
            if stat.S_ISLNK(info.external_attr >> 16):
                notes.append(f"{name}: skipped (a link)")
                continue
            match = _match(name, patterns or PATTERNS)
            if match is None:
                notes.append(f"{name}: skipped (no student in the file name)")
                continue
            student, file_name = match
            if info.file_size > MAX_FILE_BYTES:
                notes.append(f"{name}: skipped (larger than {MAX_FILE_BYTES >> 20} MiB)")
                continue
            try:
                with zf.open(info) as member:
                    data = member.read(MAX_FILE_BYTES + 1)
            except (zipfile.BadZipFile, OSError, RuntimeError, ValueError) as error:
                notes.append(f"{name}: skipped (unreadable: {error})")
                continue
            if len(data) > MAX_FILE_BYTES:
                notes.append(f"{name}: skipped (larger than {MAX_FILE_BYTES >> 20} MiB)")
                continue
            mtime = time.mktime((*info.date_time, 0, 0, -1))
            _store(submitted / student / assignment, file_name, data, mtime)
    return notes


def _match(member: str, patterns: list[str]) -> tuple[str, str] | None:
    for pattern in patterns:
        found = re.match(pattern, member)
        if found and found.groupdict().get("student_id") and found.groupdict().get("file_id"):
            return safe_id(found["student_id"]), safe_name(found["file_id"])
    return None


def _copy_files(source: Path, target: Path, notes: list[str], label: str) -> None:
    for path in sorted(source.iterdir()):
        if path.is_symlink() or not path.is_file():
            notes.append(f"{label}/{path.name}: skipped (not a regular file)")
        elif path.stat().st_size > MAX_FILE_BYTES:
            notes.append(f"{label}/{path.name}: skipped (larger than {MAX_FILE_BYTES >> 20} MiB)")
        else:
            _store(target, safe_name(path.name), path.read_bytes(), path.stat().st_mtime)


def from_folder(folder: Path, assignment: str, submitted: Path) -> list[str]:
    """Ingest ``folder/<student>/<assignment>/`` (nbgrader's submitted layout)."""
    notes: list[str] = []
    if folder.resolve() == submitted.resolve():
        return notes
    for student_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        source = student_dir / assignment
        if source.is_dir() and not source.is_symlink():
            student = safe_id(student_dir.name)
            _copy_files(source, submitted / student / assignment, notes, student_dir.name)
    return notes


def from_exchange(
    exchange: Path, course_id: str, assignment: str, submitted: Path
) -> list[str]:
    """Ingest the latest submission of each student from nbgrader's exchange inbound."""
    notes: list[str] = []
    inbound = exchange / course_id / "inbound"
    latest: dict[str, tuple[str, Path]] = {}
    for path in sorted(inbound.iterdir()) if inbound.is_dir() else []:
        parts = path.name.split("+")
        if len(parts) < 3 or parts[1] != assignment or not path.is_dir():
            continue
        student, stamp = safe_id(parts[0]), parts[2]
        if student not in latest or stamp > latest[student][0]:
            latest[student] = (stamp, path)
    for student, (_, path) in sorted(latest.items()):
        target = submitted / student / assignment
        if target.exists():
            shutil.rmtree(target)  # the exchange's latest replaces what was collected
        _copy_files(path, target, notes, path.name)
    return notes
