"""Crash-safe file writes. Every file under a run goes through these.

Whole files are written atomically (temp file in the same folder, fsync, rename). Append-only
logs (`*.jsonl`) append complete lines and fsync; a torn last line (power loss mid-write) is
ignored on read, so a log never holds a half record. The rollout hot path groups many records per
write and per fsync (`store.writer`), and writes trace files atomically but unsynced
(`write_new_text`): see `store.writer` for what a crash or a power loss keeps. Everything written
passes through `io.redact.redact` first: no secret reaches the disk.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from skillopt.errors import BadInput
from skillopt.io.redact import redact

M = TypeVar("M", bound=BaseModel)

_append_lock = threading.Lock()


def atomic_write_text(path: Path, text: str) -> None:
    text = redact(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    text = json.dumps(redact(data), indent=2, ensure_ascii=False, default=str)
    atomic_write_text(path, text + "\n")


def json_line(record: BaseModel | dict) -> str:
    """One record as a compact JSON line (a model's fields in order), secrets masked."""
    return json.dumps(redact(record), ensure_ascii=False, separators=(",", ":"), default=str)


def append_jsonl(path: Path, record: BaseModel | dict) -> None:
    line = json_line(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _append_lock:
        fresh = not path.exists()
        with open(path, "a", encoding="utf-8") as f:
            if not fresh and _ends_without_newline(path):
                f.write("\n")  # seal a torn line so the next record stays parseable
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def append_lines(path: Path, lines: list[str], sync: bool = True) -> None:
    """Append many complete records (JSON lines) with one `write`, and at most one `fsync`."""
    data = "".join(redact(line) + "\n" for line in lines).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with _append_lock:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if _ends_without_newline(path):
                data = b"\n" + data  # seal a torn line so the next record stays parseable
            _write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)


def write_new_text(path: Path, text: str) -> None:
    """Write a whole file atomically (temp name, rename) but without `fsync`: for files that a later,
    synced record points at (a rollout's trace). A crash never leaves a half file under `path`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, redact(text).encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _ends_without_newline(path: Path) -> bool:
    size = path.stat().st_size
    if size == 0:
        return False
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1) != b"\n"


def read_jsonl(path: Path) -> Iterator[dict]:
    """Yield the complete records of an append-only log, skipping torn lines."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def read_records(path: Path, model: type[M], skipped: list[int] | None = None) -> Iterator[M]:
    """The complete records of an append-only log as `model`s (parsed by pydantic from the JSON text,
    the fast path for big logs), skipping torn or foreign lines. `skipped` receives the (1-based)
    numbers of complete lines that could not be read: not a torn last line, which a crash leaves."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield model.model_validate_json(line)
                except ValidationError:
                    if skipped is not None and line.endswith(b"\n"):
                        skipped.append(n)
                    continue


def count_lines(path: Path) -> int:
    """Complete lines of a log, counted in blocks without parsing (0 when it does not exist)."""
    if not path.exists():
        return 0
    n = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            n += block.count(b"\n")
    return n


def read_user_text(path: Path, what: str) -> str:
    """A text file the user named, or `BadInput` saying why it cannot be read (missing, not UTF-8)."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise BadInput(f"cannot read {what} {path}: {e.strerror or type(e).__name__}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{what} {path} is not UTF-8 text (bad byte at offset {e.start}): "
                       "convert it to UTF-8") from None


def writable_output(path: Path, what: str) -> Path:
    """`path` made ready for writing (its folder created), or `BadInput` naming why it cannot be."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        probe = Path(path).parent / f".skillopt-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise BadInput(f"cannot write {what} {path}: {e.strerror or type(e).__name__}: pick another path") from None
    return Path(path)


def check_writable_folder(folder: Path, what: str, option: str) -> None:
    """`folder` can hold new files (tried, then undone: folders made for the try are removed)."""
    missing = []
    p = folder
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    made: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
        probe = folder / f".skillopt-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise BadInput(f"cannot write the {what} {folder}: {e.strerror or type(e).__name__}: pick a writable "
                       f"{option}") from None
    finally:
        for d in reversed(made):
            try:
                d.rmdir()
            except OSError:
                pass


def try_lock(path: Path) -> tuple[int | None, str]:
    """An exclusive, non-blocking `flock` on `path` (made when missing): (its descriptor, "") when
    held, else (None, what the holder wrote in it). The operating system drops it when its process
    dies, even by kill -9."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        return None, holder
    return fd, ""


def release_lock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
