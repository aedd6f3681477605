"""Pydantic models at every boundary: transcript records, STM items, candidates, decisions."""
