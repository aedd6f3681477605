"""Search modes and the search policy: plain data, importable without numpy or clients
(settings load it in every process)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class SearchMode(StrEnum):
    LEXICAL = "lexical"
    VECTOR = "vector"
    HYBRID = "hybrid"


class Fusion(StrEnum):
    RRF = "rrf"
    WEIGHTED = "weighted"


class SearchPolicy(BaseModel):
    """Every knob of candidate retrieval, fusion and rerank (seconds for times)."""

    model_config = ConfigDict(frozen=True)

    candidates: int = Field(20, ge=1, le=1000)
    top_k: int = Field(5, ge=1, le=1000)
    fusion: Fusion = Fusion.RRF
    rrf_k: int = Field(10, ge=1)
    lexical_weight: float = Field(0.2, ge=0.0)
    vector_weight: float = Field(0.8, ge=0.0)
    exact_lexical_weight: float = Field(1.0, ge=0.0)
    # a short question ("when did Melanie paint a sunrise?") names what it wants: its
    # words are strong evidence; a long query (a whole dialogue) is vague: vectors lead
    short_query_terms: int = Field(16, ge=0)
    short_lexical_weight: float = Field(1.6, ge=0.0)
    short_rrf_k: int = Field(60, ge=1)  # flatter fusion: agreement of both lists counts more
    similarity_weight: float = Field(0.6, ge=0.0)
    importance_weight: float = Field(0.4, ge=0.0)
    recency_weight: float = Field(0.1, ge=0.0)
    recency_half_life_s: float = Field(30 * 86400.0, gt=0)
    max_query_chars: int = Field(4000, ge=16)
