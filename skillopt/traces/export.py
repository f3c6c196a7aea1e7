"""Token-level training data: captured spans -> dataset rows, per-instance datasets, run exports.

A row is one LLM call of a rollout, in turn order: `repo`, `instance_id`, `turn`, `prompt_ids`,
`gold_completion_ids`, `logprobs`, `reward` (the rollout's score, on every turn), `prompt`
(decoded, only when a tokenizer is at hand), `messages` (the request's messages and the reply, a
JSON string), `tools` (the tools offered, a JSON string, "" when none), `completion` (the reply's
text), and what export filters need: `rollout_key`, `version`, `resolved`, `trial`, `split`,
`model`, `response_id`; and how the turn's prompt continues the previous turn (a multi-turn
rollout is one token sequence only where the chat template allows it): `shared_prefix`, the number of
leading prompt ids equal to the previous turn's prompt + completion ids, and `extends_previous`,
whether that is all of them (always true on turn 0). A turn that does not extend the previous one
(the template re-renders or drops earlier text, the reply's text re-tokenizes differently, a side
call) is a new sequence for a trainer that concatenates turns.

Token ids are read from the proxy's `raw_gen_ai_request` spans (LiteLLM records the server's
request and answer there, `llm.<provider>.prompt_token_ids` and `llm.<provider>.choices`), the
same source as agentlightning's `LlmProxyTraceToTriplet`, with logprobs and messages added.
An export (`export_runs`, `skillopt traces export`) adds `input_ids` and `completion_mask`, the
columns TRL's SFTTrainer reads from a pre-tokenized dataset (`trainer_columns`).
`datasets` is imported only when a dataset is written or read.
"""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from skillopt.errors import BadInput, require

Format = Literal["hf", "jsonl", "parquet"]
FORMATS: tuple[str, ...] = ("hf", "jsonl", "parquet")
_SECRET_ATTRS = re.compile(r"api_key_hash$|authorization|api[-_]key$", re.IGNORECASE)
_SECRET_VALUES = re.compile(r"""(['"](?:authorization|x-api-key|api-key)['"]\s*:\s*)(['"])[^'"]*\2""", re.IGNORECASE)


@dataclass(frozen=True)
class RowMeta:
    """What a row knows about its rollout, besides the call itself."""

    repo: str
    instance_id: str
    reward: float
    version: int
    resolved: bool
    rollout_key: str
    trial: int = 0
    split: str | None = None
    model: str = ""


@dataclass(frozen=True)
class Call:
    """One LLM call read from a `raw_gen_ai_request` span."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    messages: list[Any]
    reply: dict[str, Any]
    response_id: str | None
    tools: list[Any]


# -- spans -> rows ---------------------------------------------------------------------------------

def _value(raw: Any) -> Any:
    """Span attributes hold Python reprs (LiteLLM) or JSON; lists may already be lists."""
    if not isinstance(raw, str):
        return raw
    for parse in (ast.literal_eval, json.loads):
        try:
            return parse(raw)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return raw


def _provider_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """`llm.<provider>.<field>` -> `<field>` (the server's own request and answer fields)."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        parts = key.split(".", 2)
        if len(parts) == 3 and parts[0] == "llm" and parts[1] not in ("request", "is_streaming"):
            out.setdefault(parts[2], value)
    return out


def _ints(value: Any) -> list[int]:
    value = _value(value)
    if isinstance(value, list) and value and isinstance(value[0], list):
        value = value[0]  # response_token_ids: one list per choice
    return [int(x) for x in value] if isinstance(value, list) and all(isinstance(x, int) for x in value) else []


def read_call(span: dict[str, Any]) -> Call | None:
    """The LLM call a span records, or None when it is not a call span."""
    if span.get("name") != "raw_gen_ai_request":
        return None
    fields = _provider_attrs(span.get("attributes") or {})
    choices = _value(fields.get("choices"))
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    completion = _ints(fields.get("response_token_ids")) or _ints(choice.get("token_ids"))
    content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    logprobs = [float(t.get("logprob", 0.0)) for t in content or [] if isinstance(t, dict)]
    messages = _value(fields.get("messages"))
    reply = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    rid, tools = fields.get("id"), _value(fields.get("tools"))
    return Call(prompt_ids=_ints(fields.get("prompt_token_ids")), completion_ids=completion, logprobs=logprobs,
                messages=messages if isinstance(messages, list) else [], reply=reply,
                response_id=rid if isinstance(rid, str) and rid else None,
                tools=tools if isinstance(tools, list) else [])


def no_nones(value: Any) -> Any:
    """Drop None values (recursively), so a JSON column never carries nulls that break a row."""
    if isinstance(value, dict):
        return {k: no_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [no_nones(v) for v in value if v is not None]
    return value


def rows_from_spans(spans: Sequence[dict[str, Any]], meta: RowMeta,
                    tokenizer: Any = None) -> tuple[list[dict[str, Any]], str | None]:
    """Dataset rows of one rollout, in turn order, and why there are none (None when there are)."""
    ordered = sorted(spans, key=lambda s: (s.get("sequence_id", 0), s.get("start_time") or 0))
    calls, seen = [], set()
    for span in ordered:
        call = read_call(span)
        if call is None or (call.response_id and call.response_id in seen):
            continue
        if call.response_id:
            seen.add(call.response_id)
        calls.append(call)
    if not spans:
        return [], "no LLM call went through the capture proxy"
    if not calls:
        return [], "no LLM call of this rollout got an answer from the server"
    with_ids = [c for c in calls if c.prompt_ids and c.completion_ids]
    if not with_ids:
        return [], (f"the server returned no token ids for the {len(calls)} LLM call(s) of this rollout "
                    f"(vLLM >= 0.10.2 returns prompt_token_ids and token_ids; this backend does not)")
    rows, before = [], None
    for turn, call in enumerate(with_ids):
        reply = no_nones(call.reply)
        shared = shared_prefix(call.prompt_ids, before) if before is not None else 0
        row = {"repo": meta.repo, "instance_id": meta.instance_id, "turn": turn, "prompt_ids": call.prompt_ids,
               "gold_completion_ids": call.completion_ids, "logprobs": call.logprobs, "reward": float(meta.reward),
               "messages": json.dumps(no_nones(call.messages) + ([reply] if reply else []), ensure_ascii=False),
               "tools": json.dumps(no_nones(call.tools), ensure_ascii=False) if call.tools else "",
               "completion": _text(reply.get("content")), "rollout_key": meta.rollout_key,
               "version": meta.version, "resolved": bool(meta.resolved), "trial": meta.trial,
               "split": meta.split or "", "model": meta.model, "response_id": call.response_id or "",
               "extends_previous": before is None or shared == len(before), "shared_prefix": shared}
        if tokenizer is not None:
            row["prompt"] = _decode(tokenizer, call.prompt_ids)
        rows.append(row)
        before = call.prompt_ids + call.completion_ids
    return rows, None


def shared_prefix(ids: list[int], before: list[int]) -> int:
    """How many leading ids `ids` shares with `before` (the previous turn's prompt + completion)."""
    n = min(len(ids), len(before))
    for i in range(n):
        if ids[i] != before[i]:
            return i
    return n


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _decode(tokenizer: Any, ids: list[int]) -> str | None:
    try:
        return str(tokenizer.decode(ids))
    except Exception:  # a tokenizer that cannot read these ids: no prompt, never a crash
        return None


def load_tokenizer(spec: Any, model: str) -> Any:
    """A tokenizer with `decode`: the object given, or one transformers finds locally; else None."""
    if spec is not None and hasattr(spec, "decode"):
        return spec
    name = spec if isinstance(spec, str) else model
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found]  # optional, in no extra
    except ImportError:
        return None
    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:  # not in the local cache (no hub access at run time): no prompt column
        return None


def redact_span(span: dict[str, Any]) -> dict[str, Any]:
    """The span with API keys and authorization headers blanked (spans are written to disk)."""
    attrs = {}
    for key, value in (span.get("attributes") or {}).items():
        if _SECRET_ATTRS.search(key) and value not in ("", None):
            value = "[redacted]"
        elif isinstance(value, str) and ("uthorization" in value or "pi-key" in value or "PI-KEY" in value):
            value = _SECRET_VALUES.sub(r"\1\2[redacted]\2", value)
        attrs[key] = value
    return {**span, "attributes": attrs}


# -- datasets on disk -----------------------------------------------------------------------------

def _datasets():
    return require("datasets", "token datasets", "vllm")


def _features(rows: list[dict[str, Any]]):
    ds = _datasets()
    ints, floats = ds.Sequence(ds.Value("int64")), ds.Sequence(ds.Value("float64"))
    kinds = {"turn": "int64", "reward": "float64", "version": "int64", "resolved": "bool", "trial": "int64",
             "extends_previous": "bool", "shared_prefix": "int64"}
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    feats = {}
    for col in columns:
        if col in ("prompt_ids", "gold_completion_ids", "input_ids", "completion_mask"):
            feats[col] = ints
        elif col == "logprobs":
            feats[col] = floats
        else:
            feats[col] = ds.Value(kinds.get(col, "string"))
    return ds.Features(feats), list(columns)


def make_dataset(rows: list[dict[str, Any]]):
    """A `datasets.Dataset` of rows whose columns may differ (a missing `prompt` becomes None)."""
    features, columns = _features(rows)
    return _datasets().Dataset.from_list([{c: r.get(c) for c in columns} for r in rows], features=features)


def read_dataset(path: Path) -> list[dict[str, Any]]:
    return _datasets().load_from_disk(str(path)).to_list() if path.exists() else []


def save_dataset(dataset: Any, path: Path) -> None:
    """`save_to_disk` into a temp folder beside `path`, then swap it in (the old one, if any, goes)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    old = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.old")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        dataset.save_to_disk(str(tmp))
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def upsert_dataset(path: Path, rows: list[dict[str, Any]], rollout_key: str) -> None:
    """Add one rollout's rows to an instance's dataset, replacing rows of the same rollout."""
    kept = [r for r in read_dataset(path) if r.get("rollout_key") != rollout_key]
    save_dataset(make_dataset(kept + rows), path)


# -- merging runs (skillopt traces export) ----------------------------------------------------------

@dataclass(frozen=True)
class ExportFilter:
    resolved_only: bool = False
    version: int | None = None
    min_reward: float | None = None

    def keep(self, row: dict[str, Any]) -> bool:
        return ((not self.resolved_only or bool(row.get("resolved")))
                and (self.version is None or row.get("version") == self.version)
                and (self.min_reward is None or float(row.get("reward") or 0.0) >= self.min_reward))


@dataclass(frozen=True)
class ExportResult:
    path: Path
    rows: int
    instances: int
    runs: int
    skipped_runs: tuple[str, ...] = ()  # runs with no token datasets

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path)}


def run_rows(run_root: Path) -> list[dict[str, Any]]:
    """Every row of a run's per-instance datasets, each with its `run_id`."""
    rows = []
    for folder in sorted((run_root / "tokens").glob("dataset-*")):
        if folder.is_dir():
            rows += [{"run_id": run_root.name, **r} for r in read_dataset(folder)]
    return rows


def trainer_columns(row: dict[str, Any]) -> dict[str, Any]:
    """`row` plus what TRL's SFTTrainer (1.16) reads from a pre-tokenized dataset: `input_ids` (the
    prompt then the completion ids) and `completion_mask` (1 on the completion's ids), so its loss
    falls on what the model wrote (`completion_only_loss`)."""
    prompt, completion = list(row.get("prompt_ids") or []), list(row.get("gold_completion_ids") or [])
    return {**row, "input_ids": prompt + completion, "completion_mask": [0] * len(prompt) + [1] * len(completion)}


def export_runs(run_roots: Sequence[Path], out: Path, fmt: str = "hf",
                flt: ExportFilter | None = None) -> ExportResult:
    """Merge the per-instance datasets of runs into one dataset at `out` (hf folder, or a file)."""
    if fmt not in FORMATS:
        raise BadInput(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    flt = flt or ExportFilter()
    rows, skipped = [], []
    for root in run_roots:
        mine = run_rows(root)
        if not mine:
            skipped.append(root.name)
        rows += [r for r in mine if flt.keep(r)]
    if not rows:
        why = "no run has token datasets (tokens/dataset-*/, written for vllm: targets)" if len(skipped) == len(run_roots) \
            else "no row passes the filters"
        raise BadInput(f"nothing to export from {', '.join(r.name for r in run_roots)}: {why}")
    dataset = make_dataset([trainer_columns(r) for r in rows])
    path = out if fmt == "hf" else out / f"data.{fmt}"
    if fmt == "hf":
        save_dataset(dataset, out)
    else:
        out.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            dataset.to_json(str(tmp), lines=True) if fmt == "jsonl" else dataset.to_parquet(str(tmp))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    instances = len({(r["run_id"], r["instance_id"]) for r in rows})
    return ExportResult(path, len(rows), instances, len(run_roots) - len(skipped), tuple(skipped))
