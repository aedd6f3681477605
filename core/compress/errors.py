"""Errors of the compression layer, placed under the project's one exception tree."""

from __future__ import annotations

from memstrata.core.errors import InvalidInput, PermanentError


class BudgetTooSmall(InvalidInput):
    """The token budget cannot hold even the near-field and the mandatory summary.

    Carries both numbers so a caller (or an agent) can retry with ``needed`` tokens
    instead of guessing; the near-field is never cut, by design (seed 十六.4).
    """

    def __init__(self, *, budget: int, needed: int, near_field: int) -> None:
        self.budget = budget
        self.needed = needed
        self.near_field = near_field
        super().__init__(
            f"budget of {budget} tokens is smaller than the near-field and mandatory summary "
            f"({needed} tokens, of which near-field {near_field}); ask for at least {needed}"
        )


class TokenizerUnavailable(PermanentError):
    """The bundled offline tokenizer is not installed or its data fails its checksum."""
