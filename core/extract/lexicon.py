"""Loading of the rule and entity lexicons (JSON data files, extensible without code)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Lexicon:
    """Compiled rule patterns (both languages merged) and the entity dictionary."""

    rules: dict[str, tuple[re.Pattern[str], ...]]
    reasoning_markers: tuple[str, ...]
    aliases: dict[str, str]
    topics: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)

    def matches(self, rule: str, text: str) -> bool:
        return any(p.search(text) for p in self.rules.get(rule, ()))


def _load_json(path: Path | None, name: str) -> dict[str, Any]:
    if path is not None:
        data: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
        return data
    lexicons = resources.files("memstrata.core.extract") / "lexicons"
    raw = (lexicons / name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(raw)
    return loaded


def build_lexicon(rules_path: Path | None = None, entities_path: Path | None = None) -> Lexicon:
    """Compile lexicons from the bundled files, or from the given replacements."""
    rules_raw = _load_json(rules_path, "rules.json")
    ent_raw = _load_json(entities_path, "entities.json")
    rules: dict[str, tuple[re.Pattern[str], ...]] = {}
    for name, langs in rules_raw.items():
        if name.startswith("_") or not isinstance(langs, dict):
            continue
        pats = [p for lang in ("en", "zh") for p in langs.get(lang, [])]
        rules[name] = tuple(re.compile(p, re.IGNORECASE) for p in pats)
    aliases = {k.casefold(): v for k, v in ent_raw.get("aliases", {}).items()}
    topics = {
        kind: {topic: tuple(w.casefold() for w in words) for topic, words in table.items()}
        for kind, table in ent_raw.get("topics", {}).items()
    }
    return Lexicon(
        rules=rules,
        reasoning_markers=tuple(rules_raw.get("reasoning_markers", [])),
        aliases=aliases,
        topics=topics,
    )


@cache
def default_lexicon() -> Lexicon:
    """The bundled lexicon, compiled once per process."""
    return build_lexicon()
