"""Appending one rollout's rows to an instance's Hugging Face dataset without rewriting it.

A dataset saved by `datasets.save_to_disk` is a folder of Arrow files listed, in order, in its
`state.json`. Each rollout's rows become one more Arrow file of their own (`data-<key>.arrow`), and
`state.json` is replaced atomically with the longer list: the cost of a rollout no longer grows with
the rows before it (rewriting the whole dataset per rollout was quadratic). `load_from_disk` reads
the result as one dataset, in the same row order the rewrite gave: a rollout written again (a retry)
replaces its file and moves to the end, as `upsert_dataset` did.

The rare cases the files cannot express (rows whose columns differ from the dataset's, or a dataset
written before this change that already holds the rollout) fall back to the full rewrite.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import secrets
from pathlib import Path
from typing import Any

from skillopt.io.files import atomic_write_json
from skillopt.traces import export

_SHARD = re.compile(r"data-[0-9a-f]{16}\.arrow")


def shard_name(rollout_key: str) -> str:
    return f"data-{hashlib.sha256(rollout_key.encode()).hexdigest()[:16]}.arrow"


def append_dataset(path: Path, rows: list[dict[str, Any]], rollout_key: str) -> None:
    """Add one rollout's rows to the dataset at `path` (made if missing), replacing that rollout's rows."""
    if not rows:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    try:
        export.make_dataset(rows).save_to_disk(str(tmp))
        _merge(tmp, path, rows, rollout_key)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _merge(tmp: Path, path: Path, rows: list[dict[str, Any]], rollout_key: str) -> None:
    new_state = json.loads((tmp / "state.json").read_text(encoding="utf-8"))
    (new_file,) = [f["filename"] for f in new_state["_data_files"]]
    shard = shard_name(rollout_key)
    if not (path / "state.json").is_file():  # the first rollout: the new folder is the dataset
        os.replace(tmp / new_file, tmp / shard)
        _write_state(tmp, new_state, [shard])
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, path)
        return
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    files = [f["filename"] for f in state["_data_files"]]
    if _features(tmp) != _features(path) or _legacy_holds(path, files, rollout_key):
        export.upsert_dataset(path, rows, rollout_key)
        return
    os.replace(tmp / new_file, path / shard)
    _write_state(path, state, [f for f in files if f != shard] + [shard])


def _write_state(folder: Path, state: dict[str, Any], files: list[str]) -> None:
    state = {**state, "_data_files": [{"filename": f} for f in files],
             # a new fingerprint: `datasets` keys its cache files on it
             "_fingerprint": hashlib.sha256(json.dumps(files).encode()).hexdigest()[:16]}
    atomic_write_json(folder / "state.json", state)


def _features(folder: Path) -> Any:
    return json.loads((folder / "dataset_info.json").read_text(encoding="utf-8")).get("features")


def _legacy_holds(path: Path, files: list[str], rollout_key: str) -> bool:
    """Whether a file not named by rollout (a dataset written whole) holds rows of `rollout_key`."""
    legacy = [f for f in files if not _SHARD.fullmatch(f)]
    if not legacy:
        return False
    import pyarrow as pa

    for name in legacy:
        with pa.memory_map(str(path / name)) as source:
            table = pa.ipc.open_stream(source).read_all()
        if "rollout_key" in table.column_names and rollout_key in set(table.column("rollout_key").to_pylist()):
            return True
    return False
