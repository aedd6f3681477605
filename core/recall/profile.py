"""Query profile (seed 八): the user's input turned into rule-checkable fields.

Three kinds of features, all rules: text lexicons (zh + en, a data file), entities
(patterns + a dictionary that includes entities known to PostgreSQL and the session's
recent entity table) and runtime state (active task, session recency, profile-cache
state, last recall's sufficiency, topic shift).  No model call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from memstrata.core.extract.entities import extract_entities
from memstrata.core.extract.lexicon import Lexicon, default_lexicon
from memstrata.core.ltm.text import exact_terms

INTENTS = (
    "profile_query",
    "permission_query",
    "config_query",
    "similar_case",
    "verify_current_state",
    "debug_continue",
    "continue_task",
    "general",
)


@dataclass(frozen=True)
class QueryLexicon:
    patterns: dict[str, tuple[re.Pattern[str], ...]]

    @cached_property
    def _any(self) -> dict[str, re.Pattern[str]]:
        """One alternation per name: one scan of the text instead of one per pattern (a
        profile asks ~80 patterns; issue 17).  Same answer as trying each pattern, as the
        lexicon's patterns carry no group references or inline flags of their own."""
        return {
            name: re.compile("|".join(f"(?:{p.pattern})" for p in ps), re.IGNORECASE)
            for name, ps in self.patterns.items()
            if ps and all(p.flags & re.IGNORECASE for p in ps)
        }

    def hit(self, name: str, text: str) -> bool:
        combined = self._any.get(name)
        if combined is not None:
            return combined.search(text) is not None
        return any(p.search(text) for p in self.patterns.get(name, ()))


def load_query_lexicon(path: Path | None = None) -> QueryLexicon:
    if path is None:
        lexicons = resources.files("memstrata.core.recall") / "lexicons"
        raw = (lexicons / "query.json").read_text("utf-8")
    else:
        raw = Path(path).read_text("utf-8")
    data = json.loads(raw)
    patterns = {
        name: tuple(
            re.compile(p, re.IGNORECASE) for lang in ("en", "zh") for p in langs.get(lang, [])
        )
        for name, langs in data.items()
        if not name.startswith("_")
    }
    return QueryLexicon(patterns)


@cache
def default_query_lexicon() -> QueryLexicon:
    return load_query_lexicon()


class RuntimeState(BaseModel):
    """What the caller knows about the session right now (seed 八.2 运行时状态)."""

    model_config = ConfigDict(frozen=True)

    active_task_id: str | None = None
    now: float
    last_turn_at: float | None = None
    recent_entities: tuple[str, ...] = ()
    known_entities: tuple[str, ...] = ()  # e.g. project/service names held in PostgreSQL
    profile_cache_missing: bool = False
    profile_cache_stale: bool = False
    last_recall_insufficient: bool = False
    session_recent_s: float = Field(1800.0, gt=0)


class QueryProfile(BaseModel):
    """Every field of the seed's example, plus ``fuzzy_history_reference``."""

    model_config = ConfigDict(frozen=True)

    intent: str
    has_reference: bool
    has_profile_request: bool
    has_similarity_request: bool
    entities: list[str]
    active_task_id: str | None
    session_recent: bool
    topic_shift: bool
    needs_exact_metadata: bool
    recent_entity_overlap: int
    profile_cache_missing: bool
    profile_cache_stale: bool
    redis_result_insufficient: bool
    fuzzy_history_reference: bool
    # error codes, camelCase/snake_case, dotted names: words meant to match verbatim
    exact_identifiers: bool = False


def _intent(text: str, lx: QueryLexicon, *, active_task: bool, reference: bool) -> str:
    if lx.hit("permission", text):
        return "permission_query"
    if lx.hit("profile", text):
        return "profile_query"
    if lx.hit("config", text) and not lx.hit("debug", text):
        return "config_query"
    if lx.hit("similarity", text) or lx.hit("fuzzy_history", text):
        return "similar_case"
    if lx.hit("verify", text) and (active_task or reference):
        return "verify_current_state"
    if lx.hit("debug", text) and (active_task or reference):
        return "debug_continue"
    if lx.hit("continue", text) or (reference and active_task):
        return "continue_task"
    return "general"


def query_intent(text: str, *, active_task: bool, lexicon: QueryLexicon | None = None) -> str:
    """The intent :func:`build_query_profile` gives ``text``: it reads nothing of the
    runtime state but whether a task is active."""
    lx = lexicon or default_query_lexicon()
    return _intent(text, lx, active_task=active_task, reference=lx.hit("reference", text))


def _overlap(entities: Iterable[str], recent: Iterable[str]) -> int:
    recent_folded = {e.casefold() for e in recent}
    return sum(1 for e in {x.casefold() for x in entities} if e in recent_folded)


def build_query_profile(
    text: str,
    state: RuntimeState,
    *,
    lexicon: QueryLexicon | None = None,
    entity_lexicon: Lexicon | None = None,
) -> QueryProfile:
    """Profile one user input; a pure function of ``(text, state, lexicons)``."""
    lx = lexicon or default_query_lexicon()
    entities = extract_entities(
        text,
        entity_lexicon or default_lexicon(),
        extra=tuple(state.known_entities) + tuple(state.recent_entities),
    )
    reference = lx.hit("reference", text)
    overlap = _overlap(entities, state.recent_entities)
    active = state.active_task_id is not None
    intent = _intent(text, lx, active_task=active, reference=reference)
    session_recent = state.last_turn_at is not None and (
        state.now - state.last_turn_at <= state.session_recent_s
    )
    topic_shift = bool(entities) and bool(state.recent_entities) and overlap == 0 and not reference
    return QueryProfile(
        intent=intent,
        has_reference=reference,
        has_profile_request=intent == "profile_query" or lx.hit("profile", text),
        has_similarity_request=lx.hit("similarity", text),
        entities=entities,
        active_task_id=state.active_task_id,
        session_recent=session_recent,
        topic_shift=topic_shift,
        needs_exact_metadata=lx.hit("exact", text)
        or intent in {"permission_query", "config_query"},
        recent_entity_overlap=overlap,
        profile_cache_missing=state.profile_cache_missing,
        profile_cache_stale=state.profile_cache_stale,
        redis_result_insufficient=state.last_recall_insufficient,
        fuzzy_history_reference=lx.hit("fuzzy_history", text),
        exact_identifiers=bool(exact_terms(text)),
    )
