"""The configuration reference (docs/CONFIGURATION.md), generated from ``Settings``.

    python -m memstrata.ops.configref > docs/CONFIGURATION.md

Every field of :class:`memstrata.core.settings.Settings` and of its nested models
(``MEMSTRATA_<FIELD>``, nested ones ``MEMSTRATA_<PARENT>__<FIELD>``) with its type, its
default and its meaning.  The meaning is the field's ``description`` if it has one, else
the comment on its line or the comment block right above it in the source (where the
settings are documented today).  ``tests/unit/test_configuration_doc.py`` fails when the
file is not what this module prints.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from memstrata.core.settings import Settings

_FIELD = re.compile(r"^\s{4}(\w+)\s*:\s")
_COMMENT = re.compile(r"^\s*#\s?(.*)$")
_TRAILING = re.compile(r"\s#\s(?!fmt:|noqa|type:)(.*)$")

HEADER = """# Configuration reference

Generated from `core/settings.py` (and the models it nests) by
`python -m memstrata.ops.configref > docs/CONFIGURATION.md`; a test checks it is current.

Every setting is an environment variable with the prefix `MEMSTRATA_`, read when a
process starts (pydantic-settings); nested ones use `__`, e.g.
`MEMSTRATA_TTL__FACT_S=3600`.  A value out of range stops the process with one line
naming the setting.  Secrets are shown as `(secret)`.
"""


def _comments(model: type[BaseModel]) -> tuple[dict[str, str], dict[str, str]]:
    """(field -> its own comment, field -> the section note that starts at it).

    A comment block after a blank line opens a section (its note is printed above the
    fields that follow); a comment block right after a field, or on a field's line,
    belongs to the next field (or that field).
    """
    try:
        lines = inspect.getsource(model).splitlines()
    except (OSError, TypeError):
        return {}, {}
    own: dict[str, str] = {}
    sections: dict[str, str] = {}
    block: list[str] = []
    block_is_section = False
    after_blank = True
    for line in lines:
        if m := _COMMENT.match(line):
            if not block:
                block_is_section = after_blank
            block.append(m.group(1).strip())
            continue
        after_blank = not line.strip()
        if m := _FIELD.match(line):
            name, trailing = m.group(1), _TRAILING.search(line)
            if block and block_is_section:
                sections[name] = " ".join(block)
            elif block:
                own[name] = " ".join(block)
            if trailing:
                own[name] = trailing.group(1).strip()
        block = [] if not _COMMENT.match(line) else block
    return own, sections


def _type(info: FieldInfo) -> str:
    ann = info.annotation
    text = getattr(ann, "__name__", None) if not hasattr(ann, "__args__") else None
    return text or str(ann).replace("typing.", "").replace("pydantic.types.", "")


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "(nested)"
    value: Any = info.default
    if isinstance(value, SecretStr):
        return "(secret)"
    if isinstance(value, set | frozenset):  # stable across runs (hash randomisation)
        value = sorted(value)
    return "—" if value is None else f"`{value}`"


def _constraints(info: FieldInfo) -> str:
    parts = []
    for m in info.metadata:
        for name, sym in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            v = getattr(m, name, None)
            if v is not None:
                parts.append(f"{sym} {v}")
    return ", ".join(parts)


def rows(model: type[BaseModel], prefix: str = "MEMSTRATA_") -> Iterator[tuple[str, ...]]:
    """(section note or "", variable, type, default, meaning) per setting, in source order."""
    own, sections = _comments(model)
    for name, info in model.model_fields.items():
        ann = info.annotation
        env = prefix + name.upper()
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            doc = (ann.__doc__ or "").strip().split("\n")[0]
            note = sections.get(name) or doc or f"the {name} settings"
            yield f"{env}__*: {note}", "", "", "", ""
            yield from rows(ann, env + "__")
            continue
        meaning = info.description or own.get(name, "")
        limits = _constraints(info)
        if limits:
            meaning = f"{meaning} ({limits})" if meaning else f"({limits})"
        yield sections.get(name, ""), env, _type(info), _default(info), meaning.replace("|", "\\|")


def render() -> str:
    lines = [HEADER]
    table = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    started = False
    for section, env, typ, default, meaning in rows(Settings):
        if section:
            lines += ["", section[0].upper() + section[1:], "", *table]
            started = True
        elif not started:
            lines += ["", *table]
            started = True
        if env:
            typ = typ.replace("pydantic.networks.", "").replace("|", "\\|")
            lines.append(f"| `{env}` | `{typ}` | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
