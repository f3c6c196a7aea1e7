"""The Skill document: YAML front matter (name, description) + Markdown body.

MINIMAL PLACEHOLDER: being completed (sections, protected regions, token cap).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from skillopt.errors import BadInput


class Skill(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    body: str
    extra: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, source: str = "<skill>") -> "Skill":
        if not text.startswith("---"):
            raise BadInput(f"{source}: a SKILL.md must start with YAML front matter ('---')")
        parts = text.split("---", 2)
        if len(parts) < 3:
            raise BadInput(f"{source}: front matter is not closed by '---'")
        meta = yaml.safe_load(parts[1]) or {}
        name = meta.pop("name", None)
        desc = meta.pop("description", None)
        if not name or not desc:
            raise BadInput(f"{source}: front matter needs 'name' and 'description'")
        return cls(name=str(name), description=str(desc), body=parts[2].lstrip("\n"), extra=meta)

    @classmethod
    def load(cls, path: str | Path) -> "Skill":
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise BadInput(f"cannot read skill file {p}: {e.strerror}") from e
        return cls.parse(text, source=str(p))

    def render(self) -> str:
        meta = {"name": self.name, "description": self.description, **self.extra}
        fm = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000).strip()
        return f"---\n{fm}\n---\n\n{self.body.strip()}\n"

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.render().encode("utf-8")).hexdigest()

    def with_body(self, body: str) -> "Skill":
        return self.model_copy(update={"body": body})

    def tokens(self) -> int:
        return max(1, len(self.render()) // 4)
