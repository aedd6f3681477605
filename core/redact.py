"""Passwords out of text that is shown to people: error lines, ``degraded`` reasons, logs.

Vendor errors quote the URL they failed on (redis-py: "Error 111 connecting to
redis://:pw@host…"; our own messages name the configured URL), so every message that
leaves the process through the CLI or a recall result goes through :func:`redact`.
"""

from __future__ import annotations

import re

MASK = "***"

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:@/\s]*):[^@\s]*@")


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` URL masked.

    The user name stays (it helps to see who connected); over-masking a URL that merely
    looks like one is harmless, a leaked password is not.
    """
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
