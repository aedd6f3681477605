"""Log output: ``MEMSTRATA_LOG_FORMAT=text|json``, and no password in any line.

* ``text`` keeps Celery's line format; ``json`` writes one JSON object a line with the
  ``extra`` fields the task and recall lines carry (``tenant_id``, ``user_id``,
  ``session_id``, ``celery_task_id``, ``duration_ms``, ``outcome`` ...), for a log shipper.
* :class:`RedactFilter` masks URL passwords (``core.redact``) in every record, whatever
  the format: a vendor error that quotes ``redis://:pw@host`` is logged without ``pw``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from memstrata.core.redact import redact

TEXT_FORMAT = "[%(asctime)s: %(levelname)s/%(processName)s] %(message)s"
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(processName)s %(message)s"


class RedactFilter(logging.Filter):
    """Formats the message once, masks URL passwords in it and in the traceback text."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            # formatters (the JSON one too) then print exc_text instead of formatting anew
            record.exc_text, record.exc_info = redact(record.exc_text), None
        return True


def formatter(fmt: str) -> logging.Formatter:
    """The formatter of ``fmt`` (``text`` or ``json``)."""
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        return JsonFormatter(JSON_FIELDS, rename_fields={"levelname": "level", "name": "logger"})
    return logging.Formatter(TEXT_FORMAT)


def apply(handlers: Iterable[logging.Handler], fmt: str) -> None:
    """Give ``handlers`` the format and the redaction filter (idempotent)."""
    for handler in handlers:
        if fmt == "json":
            handler.setFormatter(formatter(fmt))
        if not any(isinstance(f, RedactFilter) for f in handler.filters):
            handler.addFilter(RedactFilter())


def configure(fmt: str, *, level: int = logging.INFO) -> None:
    """For processes that set up their own logging (the CLI, an API server)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(formatter(fmt))
        root.addHandler(handler)
        root.setLevel(level)
    apply(root.handlers, fmt)
