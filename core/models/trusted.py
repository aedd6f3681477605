"""Building pydantic models from parts that are valid already, without re-validating.

The write path builds about eight candidates, decisions and items per turn from parts
that were validated when they entered (the L0 record, the extractor's constants, the
policy's numbers).  Validation is for boundaries; inside, ``model_construct`` costs more
than validating (it walks every field in Python: 20 µs for an item, 13 µs for a decision
on this machine), so the hot path sets the fields directly (issue 17 profile).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)
_ORDER: dict[type[BaseModel], tuple[str, ...]] = {}  # ``model_fields`` is slow to read


def trusted(cls: type[M], fields: dict[str, Any]) -> M:
    """An instance of ``cls`` holding exactly ``fields`` (every field of the model, each
    already of its type): what ``cls(**fields)`` returns for valid fields, unchecked.
    ``fields`` must be a fresh dict: in field order, it becomes the instance's own.

    ``tests/unit/test_trusted.py`` pins that it equals the validated model."""
    order = _ORDER.get(cls)
    if order is None:
        order = _ORDER[cls] = tuple(cls.model_fields)
    obj = cls.__new__(cls)
    # in the model's field order, as validation leaves them (serialisation follows it);
    # a dict built in that order (the callers') becomes the instance's own, uncopied
    values = fields if tuple(fields) == order else {name: fields[name] for name in order}
    object.__setattr__(obj, "__dict__", values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(fields))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj
