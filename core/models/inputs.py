"""The one way untrusted input becomes a model: typed errors that name the field.

Every public entry (``record_turn``, :class:`core.recall.service.RecallRequest`, task
payloads) refuses bad input with :class:`core.errors.InvalidInput`, or the more precise
subclass a validator raised (``InvalidId``), before it writes anything.  pydantic's own
``ValidationError`` never leaves an entry point, and pydantic's lax coercions are turned
off where they would let junk through:

* :data:`Text` is a ``str`` and nothing else (no ``bytes`` decoded on the way), and it
  must encode as UTF-8 (a lone surrogate would only fail later, while being written);
* :data:`EventTime` is a real number (not ``bool``, not ``"1700000000"``), finite, not
  negative and at most :data:`MAX_AHEAD_S` (ten years) ahead of the wall clock: ``nan``,
  ``inf``, ``1e300``, milliseconds and ``-1`` are refused instead of stamping items that
  overflow, never expire or are born expired;
* :data:`StrictInt` and :data:`StrictBool` are what they say (``"5"`` and ``True`` are not
  ``5``, ``1`` is not ``True``).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Strict, ValidationError

from memstrata.core.errors import InvalidInput

MAX_AHEAD_S = 10 * 365.25 * 24 * 3600
"""How far ahead of the wall clock an event time may be: ten years.

Simulations and tests run on clocks of their own, some years ahead; a time past this is
a unit mistake (milliseconds, ``1e300``) that would stamp items which never expire.
"""


def _time_problem(value: object, now: float | None) -> tuple[str, float]:
    """``(what is wrong, 0.0)``, or ``("", the value in seconds)`` when it is fine."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"expected seconds since the epoch, got {type(value).__name__}", 0.0
    try:
        seconds = float(value)
    except (OverflowError, ValueError) as exc:  # a huge int, an odd Real subclass
        return f"not a usable number of seconds ({exc})", 0.0
    if not math.isfinite(seconds):
        return f"must be finite, got {seconds!r}", 0.0
    if seconds < 0:
        return f"must not be negative, got {seconds!r}", 0.0
    if seconds > (time.time() if now is None else now) + MAX_AHEAD_S:
        return f"{seconds!r} is more than ten years ahead of the wall clock", 0.0
    return "", seconds


def validate_event_time(value: object, *, kind: str, now: float | None = None) -> float:
    """``value`` as seconds since the epoch, or :class:`InvalidInput` naming ``kind``."""
    problem, seconds = _time_problem(value, now)
    if problem:
        raise InvalidInput(f"{kind}: {problem}")
    return seconds


def _event_time(value: float) -> float:
    problem, seconds = _time_problem(value, None)
    if problem:
        raise InvalidInput(problem)
    return seconds


def _text_problem(value: str) -> str:
    if value.isascii():
        return ""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"not valid UTF-8 text (lone surrogate at position {exc.start})"
    return ""


def validate_text(value: object, *, kind: str) -> str:
    """``value`` if it is a ``str`` that encodes as UTF-8, else :class:`InvalidInput`."""
    if not isinstance(value, str):
        raise InvalidInput(f"{kind}: expected text, got {type(value).__name__}")
    problem = _text_problem(value)
    if problem:
        raise InvalidInput(f"{kind}: {problem}")
    return value


def _text(value: str) -> str:
    problem = _text_problem(value)
    if problem:
        raise InvalidInput(problem)
    return value


Text = Annotated[str, Strict(), AfterValidator(_text)]
"""A ``str`` (never ``bytes``) that can be written as UTF-8."""

EventTime = Annotated[float, Strict(), AfterValidator(_event_time)]
"""Seconds since the epoch: finite, not negative, at most ten years ahead of the wall clock."""

StrictInt = Annotated[int, Strict()]
"""An ``int`` and nothing else (not ``True``, not ``"5"``, not ``5.0``)."""

StrictBool = Annotated[bool, Strict()]
"""``True`` or ``False`` and nothing else (not ``1``, not ``"yes"``)."""


def invalid_input(exc: ValidationError, *, prefix: str = "") -> InvalidInput:
    """The typed error for ``exc``: the first problem, its field first.

    When a field's own validator raised one of our typed errors (``SafeId`` raises
    ``InvalidId``), that type is kept.
    """
    problems = exc.errors(include_url=False, include_input=False)
    if not problems:  # pragma: no cover - pydantic always names at least one
        return InvalidInput(f"{prefix}value: {exc}"[:1000])
    first = problems[0]
    where = _where(first["loc"])
    cause = first.get("ctx", {}).get("error")
    kind = type(cause) if isinstance(cause, InvalidInput) else InvalidInput
    shown = str(cause) if isinstance(cause, InvalidInput) else first["msg"]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return kind(f"{prefix}{where}: {shown}{more}"[:1000])


def _where(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc) or "value"


class InputModel(BaseModel):
    """Base of the models an entry point builds from untrusted values.

    Building one raises :class:`InvalidInput` naming the field (``RecallRequest.now:
    must be finite``), never pydantic's ``ValidationError``.  Unknown fields are
    refused, instances are immutable.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_input(exc, prefix=f"{type(self).__name__}.") from exc

    # validation (``model_validate``, a nested model) must not run through this __init__:
    # pydantic then wraps our error into its own; only a direct call is translated
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]
