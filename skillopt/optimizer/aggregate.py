"""Aggregate and select: merge edits across minibatches, then keep at most L of them."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from skillopt.edits import Edit


def _norm(text: str | None) -> str:
    return re.sub(r"\s+", " ", (text or "").lower()).strip(" .#")


def _similar(a: Edit, b: Edit, threshold: float = 0.85) -> bool:
    if a.op != b.op or _norm(a.anchor) != _norm(b.anchor):
        return False
    return difflib.SequenceMatcher(None, _norm(a.text), _norm(b.text)).ratio() >= threshold


def aggregate(edits: Sequence[Edit], rejected: Sequence[Edit] = ()) -> list[Edit]:
    """Merge near-duplicates (pooling their evidence), drop ones already rejected, rank by support."""
    merged: list[Edit] = []
    for e in edits:
        if any(_similar(e, r) for r in rejected):
            continue
        for i, m in enumerate(merged):
            if _similar(e, m):
                evidence = list(dict.fromkeys([*m.evidence, *e.evidence]))
                merged[i] = m.model_copy(update={"evidence": evidence})
                break
        else:
            merged.append(e)
    order = {id(e): i for i, e in enumerate(merged)}
    return sorted(merged, key=lambda e: (-len(e.evidence), order[id(e)]))


def select(edits: Sequence[Edit], learning_rate: int) -> list[Edit]:
    """Keep the best-supported `learning_rate` edits (at most one edit per anchor)."""
    chosen: list[Edit] = []
    anchors: set[str] = set()
    for e in edits:
        a = _norm(e.anchor)
        if a and a in anchors:
            continue
        chosen.append(e)
        if a:
            anchors.add(a)
        if len(chosen) >= learning_rate:
            break
    return chosen
