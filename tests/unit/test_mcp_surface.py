"""The MCP server's pure parts and docs/AGENTS.md agreeing with the server it describes."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import create_engine

from memstrata.core.apikeys import ApiKeys
from memstrata.core.settings import McpSettings
from memstrata.mcp_server.auth import ApiKeyVerifier
from memstrata.mcp_server.port import MemoryPort
from memstrata.mcp_server.server import (
    LTM_URI,
    STM_URI,
    BearerKeyAuth,
    Owners,
    bearer_key,
    build_server,
    one_line,
)
from memstrata.ops.cli import build_parser

AGENTS = Path(__file__).resolve().parents[2] / "docs" / "AGENTS.md"


def mcp_section() -> str:
    text = AGENTS.read_text(encoding="utf-8")
    start = text.index("## From an MCP client")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_the_documented_tools_and_resource_are_the_servers() -> None:
    # tools are listed, never called: the port is not touched
    server = build_server(
        cast(MemoryPort, object()),
        settings=McpSettings(),
        owners=Owners(transport="stdio", tenant="acme", verifier=None),
    )
    tools = asyncio.run(server.list_tools())
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", mcp_section(), flags=re.M))
    assert documented == {t.name for t in tools} == {"remember", "recall", "explain", "forget"}
    assert f"`{STM_URI}`" in mcp_section() and f"`{LTM_URI}`" in mcp_section()
    for tool in tools:  # every argument the table names is in the tool's schema
        row = re.search(rf"^\| `{tool.name}` \| (.+?) \|", mcp_section(), flags=re.M)
        assert row is not None
        named = {a.rstrip("?") for a in re.findall(r"`([a-z_]+\??)`", row.group(1))}
        values = {"role", "content", "written", "refused"}  # values, not arguments
        assert named - values <= set(tool.input_schema["properties"]), tool.name


def test_the_config_snippets_are_json_and_start_the_server() -> None:
    blocks = re.findall(r"```json\n(.*?)```", mcp_section(), flags=re.S)
    configs = [json.loads(b)["mcpServers"]["memstrata"] for b in blocks]
    assert len(configs) == 2
    stdio, http = configs
    args = build_parser().parse_args(stdio["args"])
    assert (args.command, args.transport, args.tenant) == ("mcp", "stdio", "acme")
    assert http["url"].endswith(f":{McpSettings().port}/mcp")
    assert http["headers"]["Authorization"].startswith("Bearer ")


def test_one_line_turns_a_pydantic_report_into_field_and_problem() -> None:
    report = (
        "Error executing tool recall: 1 validation error for recallArguments\n"
        "top_k\n  Input should be greater than or equal to 1 [type=greater_than_equal, "
        "input_value=0, input_type=int]\n    For further information visit https://x"
    )
    assert one_line(report) == (
        "Error executing tool recall: invalid arguments: top_k: "
        "Input should be greater than or equal to 1"
    )
    assert one_line("a\nb\n\nc") == "a b c"
    assert len(one_line("x" * 10_000)) == 500


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({"authorization": "Bearer k1"}, "k1"),
        ({"Authorization": "bearer  k2 "}, "k2"),
        ({"authorization": "Basic k3"}, None),
        ({"authorization": "Bearer "}, None),
        ({"authorization": "Bearer " + "k" * 600}, None),
        ({}, None),
        (None, None),
    ],
)
def test_bearer_key(headers: dict[str, str] | None, key: str | None) -> None:
    assert bearer_key(headers) == key


def test_api_key_verifier_refuses_malformed_keys_without_a_query() -> None:
    # the engine never connects (nothing listens there): a malformed key fails before I/O;
    # keys that are looked up, revoked or forged are tests/integration/test_mcp.py's
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    v = ApiKeyVerifier(ApiKeys(engine))
    assert v.verify("") is None
    assert v.verify("not-a-memstrata-key") is None
    assert v.verify("msk_abc") is None
    assert v.verify("msk_" + "k" * 600) is None


def test_http_owners_need_a_verifier() -> None:
    with pytest.raises(ValueError, match="needs a key verifier"):
        Owners(transport="http", tenant="acme", verifier=None)


def test_http_answers_503_not_401_when_the_key_store_is_down() -> None:
    # a real connection failure: nothing listens on port 1, so the key cannot be checked
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    app = BearerKeyAuth(Starlette(), ApiKeyVerifier(ApiKeys(engine)))
    with TestClient(app) as client:
        down = client.post("/mcp", headers={"Authorization": "Bearer msk_0123456789ab_secret"})
        assert down.status_code == 503 and down.headers["retry-after"] == "1"
        assert client.post("/mcp", headers={"Authorization": "Bearer nope"}).status_code == 401
