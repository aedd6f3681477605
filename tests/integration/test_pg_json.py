"""The engine parses JSON and JSONB columns with pydantic-core, to the values json.loads gives.

``core.authority.db.make_engine`` installs the parser on each connection (a card's four
JSONB lists were a sixth of recall's ledger read; docs/PERFORMANCE.md).  What a row
reads must not change with it: every document below is read back through the engine and
compared with the standard library's reading of the same text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pydantic_core import from_json
from sqlalchemy import Engine, text

from memstrata.core.authority.db import make_engine
from tests.integration.authority_db import PG_HOST, PG_PORT, PG_USER

DOCUMENTS = [
    '{"entities": ["createOrder", "张三", "Café", "😀"], "ids": ["t1.0", "t1.1"]}',
    "[1, -0.0, 2.5, 1e-07, 0.1, 3.141592653589793, 123456789012345678901234567890]",
    '{"k": null, "t": true, "f": false, "empty": {}, "none": [], "nested": {"a": [{"b": 1}]}}',
    '["a\\"b", "tab\\tnew\\nline", "\\u00e9", "back\\\\slash"]',
    "1.7976931348623157e308",
    '"just a string"',
]


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    eng = make_engine(f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/test", pool_size=1)
    yield eng
    eng.dispose()


@pytest.mark.parametrize("kind", ["jsonb", "json"])
@pytest.mark.parametrize("doc", DOCUMENTS)
def test_a_json_column_reads_as_the_standard_parser_reads_it(
    engine: Engine, kind: str, doc: str
) -> None:
    # compared with the server's own text of the value: jsonb rewrites some numbers
    # (1.7976931348623157e308 comes back as its 309 digits)
    stmt = text(f"SELECT CAST(:doc AS {kind}), CAST(CAST(:doc AS {kind}) AS text)")
    with engine.connect() as conn:
        value, as_text = conn.execute(stmt, {"doc": doc}).one()
    assert value == json.loads(as_text)
    assert type(value) is type(json.loads(as_text))


def test_the_engines_connections_parse_with_pydantic_core(engine: Engine) -> None:
    with engine.connect() as conn:
        adapters = conn.connection.dbapi_connection.adapters  # type: ignore[union-attr]
        for name in ("json", "jsonb"):
            oid = adapters.types[name].oid
            for fmt in (0, 1):  # text and binary results
                loader = adapters.get_loader(oid, fmt)
                assert loader is not None
                assert loader._loads is from_json, (name, fmt)
