"""One memory, one identity across layers: the fingerprint and canonical key of a memory.

An STM item and the LTM card promoted from it are the same memory, so recall's pool must
be able to tell (DESIGN §5: dedup on canonical key, then fingerprint, STM > LTM).  Both
layers therefore take these two values from here:

* :func:`fingerprint` - the near-duplicate key of seed 四.1, computed once when the item
  is written and carried unchanged onto every card promoted from it;
* :func:`card_key` / :func:`memory_key` - a card promoted from an item is stored under
  ``<route>:<canonical key>`` (so a path-B card and an episode card of one item never
  share a card id), and :func:`memory_key` gives back the item's canonical key.

Pure: imports nothing but the standard library.
"""

from __future__ import annotations

import hashlib

PROMOTED = "stm"
"""Route prefix of a path-B card (an STM item promoted as it is)."""
EPISODE = "episode"
"""Route prefix of an episode card (a conversation statement, made when its session ends)."""
SESSION_TAG = "session:"
"""Tag prefix naming the session a card was written from (``core.lifecycle.episodes``)."""
_FROM_ITEM = (PROMOTED, EPISODE)
MAX_KEY_CHARS = 256


def fingerprint(user_id: str, scope: str, subtype: str, summary: str) -> str:
    """Near-duplicate key: hash(user + task + subtype + normalised fact) (seed 四.1)."""
    text = " ".join(summary.casefold().split()).strip(" .。!！")
    raw = f"{user_id}|{scope}|{subtype}|{text}"
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:24]


def text_fingerprint(user_id: str, summary: str) -> str:
    """The fingerprint of a card made from no STM item (summaries, merges, imports)."""
    return fingerprint(user_id, "", "", summary)


def card_key(route: str, canonical_fact_key: str) -> str:
    """The ledger key of a card promoted from the item with ``canonical_fact_key``."""
    return f"{route}:{canonical_fact_key}"[:MAX_KEY_CHARS]


def memory_key(card_canonical_key: str) -> str:
    """The canonical key of the memory a card stands for (its item's, if it has one)."""
    route, sep, rest = card_canonical_key.partition(":")
    return rest if sep and route in _FROM_ITEM and rest else card_canonical_key
