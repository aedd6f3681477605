"""The five trace formats of ``/work/shared/bench/agent-sessions`` read into one shape.

Each loader follows its recipe in that folder's ``FORMAT.md`` (tau-bench: trial 0 only)
and yields ``(name, messages)`` in the common target format (:data:`Raw`);
:func:`load_source` then makes tool-call ids unique within a session.  Data is read in
place, never copied.
"""

from __future__ import annotations

import collections
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ROOT = Path("/work/shared/bench/agent-sessions")
Raw = dict[str, Any]  # one message in FORMAT.md's common target format


def _msg(role: str, content: str | None, tool_call_id: str | None = None, **kw: Any) -> Raw:
    return {"role": role, "content": content or "", "tool_call_id": tool_call_id, **kw}


def _swe_agent(path: Path) -> Iterator[tuple[str, list[Raw]]]:
    d = json.loads(path.read_text(encoding="utf-8"))
    hist = [m for m in d["history"] if not m.get("is_demo")]
    out = [
        _msg("system", next(m["content"] for m in hist if m["role"] == "system")),
        _msg("user", next(m["content"] for m in hist if m["role"] == "user")),
    ]
    for i, s in enumerate(d["trajectory"]):
        cid = f"step-{i}"
        call = {"id": cid, "name": "shell", "arguments": s["action"]}
        out.append(_msg("assistant", s["thought"] or s["response"], tool_calls=[call]))
        out.append(_msg("tool", s["observation"], cid))
    yield path.name, out


def _mini_swe_agent(path: Path) -> Iterator[tuple[str, list[Raw]]]:
    d = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for m in d["messages"]:
        if m["role"] == "exit":  # the submission repeated, not a conversational turn
            continue
        if m["role"] == "assistant":
            calls = [
                {
                    "id": t["id"],
                    "name": t["function"]["name"],
                    "arguments": t["function"]["arguments"],
                }
                for t in m.get("tool_calls") or []
            ]
            out.append(_msg("assistant", m.get("content"), tool_calls=calls))
        elif m["role"] == "tool":
            out.append(_msg("tool", m["content"], m["tool_call_id"]))
        else:
            out.append(_msg(m["role"], m["content"]))
    yield path.name, out


_OH_DROP = {
    "thought",
    "security_risk",
    "confirmation_state",
    "is_input",
    "hidden",
    "blocking",
    "impl_source",
}


def _openhands_event(e: Raw, out: list[Raw]) -> None:
    tm = e.get("tool_call_metadata") or {}
    a, o = e.get("action"), e.get("observation")
    if a == "system":
        out.append(_msg("system", e["args"].get("content")))
    elif a == "message" and e["source"] == "user":
        out.append(_msg("user", e["message"]))
    elif a == "recall" or o == "recall":  # workspace context, not conversation
        return
    elif a in ("finish", "message"):
        final = e["args"].get("final_thought") or e["message"]
        out.append(_msg("assistant", (e["args"].get("thought", "") + "\n" + final).strip()))
    elif a:
        args = {k: v for k, v in e["args"].items() if k not in _OH_DROP}
        call = {
            "id": tm.get("tool_call_id") or f"ev-{e['id']}",
            "name": tm.get("function_name") or a,
            "arguments": json.dumps(args),
        }
        out.append(_msg("assistant", e["args"].get("thought"), tool_calls=[call]))
    elif o:
        if not tm and e.get("cause") is None:  # feedback on a malformed call: no action to answer
            out.append(_msg("user", e["content"]))
        else:
            out.append(_msg("tool", e["content"], tm.get("tool_call_id") or f"ev-{e['cause']}"))


def _openhands(path: Path) -> Iterator[tuple[str, list[Raw]]]:
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        d = json.loads(line)
        out: list[Raw] = []
        pending: collections.deque[str] = collections.deque()
        for k, e in enumerate(d["history"]):
            if "id" in e or "source" in e:  # event-stream layout
                _openhands_event(e, out)
            elif e.get("action") == "message":  # resolver layout: pair actions by order
                out.append(_msg("user", e["content"]))
            elif e.get("action") == "finish":
                out.append(_msg("assistant", e["thought"]))
            elif "action" in e:
                cid = f"ev-{k}"
                pending.append(cid)
                args = {x: e[x] for x in ("command", "code") if x in e}
                call = {"id": cid, "name": e["action"], "arguments": json.dumps(args)}
                out.append(_msg("assistant", e.get("thought"), tool_calls=[call]))
            elif "observation" in e:
                out.append(_msg("tool", e["content"], pending.popleft()))
        inner = d.get("instance_id") or f"issue{(d.get('issue') or {}).get('number', n)}"
        yield f"{path.name}#{inner}", out


def _tau_bench(path: Path) -> Iterator[tuple[str, list[Raw]]]:
    for s in json.loads(path.read_text(encoding="utf-8")):
        if s["trial"] != 0:  # the other trials repeat the same 50 tasks
            continue
        out: list[Raw] = []
        for j, m in enumerate(s["traj"]):
            if m["role"] == "assistant":
                calls = [
                    {
                        "id": f"{j}:{t['id']}",
                        "name": t["function"]["name"],
                        "arguments": t["function"]["arguments"],
                    }
                    for t in m.get("tool_calls") or []
                ]
                out.append(_msg("assistant", m.get("content"), tool_calls=calls))
            elif m["role"] == "tool":  # OpenAI ids repeat: bind to the nearest preceding call
                prev = next(
                    o for o in reversed(out) if o["role"] == "assistant" and o["tool_calls"]
                )
                suffix = ":" + m["tool_call_id"]
                cid = next(t["id"] for t in prev["tool_calls"] if t["id"].endswith(suffix))
                out.append(_msg("tool", m["content"], cid))
            else:
                out.append(_msg(m["role"], m["content"]))
        yield f"{path.name}#task{s['task_id']}-trial{s['trial']}", out


_SEC = re.compile(r"(?m)^## (User|Assistant \((.*?)\))\n")
_TOOL = re.compile(
    r"(?s)```\nTool: (\S+)\n\n\*\*Input:\*\*\n```json\n(.*?)\n```\n"
    r"(?:\*\*Output:\*\*\n```\n(.*?)\n```\n)?```\n"
)


def _opencode(path: Path) -> Iterator[tuple[str, list[Raw]]]:
    text = path.read_text(encoding="utf-8")
    found = re.search(r"\*\*Session ID:\*\* (\S+)", text)
    sid = found.group(1) if found else path.stem
    parts = _SEC.split(text)  # [header, kind, agent, body, kind, agent, body, ...]
    out: list[Raw] = []
    k = 0
    for i in range(1, len(parts), 3):
        kind, body = parts[i], re.sub(r"\n---\n\s*$", "\n", parts[i + 2])
        if kind == "User":
            out.append(_msg("user", body.strip()))
            continue
        pos = 0
        for m in _TOOL.finditer(body):
            cid = f"{sid}-{k}"
            k += 1
            call = {"id": cid, "name": m.group(1), "arguments": m.group(2)}
            out.append(_msg("assistant", body[pos : m.start()].strip(), tool_calls=[call]))
            out.append(_msg("tool", m.group(3) or "", cid))
            pos = m.end()
        if body[pos:].strip():
            out.append(_msg("assistant", body[pos:].strip()))
    yield path.name, out


Loader = Callable[[Path], Iterator[tuple[str, list[Raw]]]]
SOURCES: dict[str, tuple[str, Loader]] = {
    "swe-agent": ("*.traj", _swe_agent),
    "mini-swe-agent": ("*.traj.json", _mini_swe_agent),
    "openhands": ("*.jsonl", _openhands),
    "tau-bench": ("*.json", _tau_bench),
    "opencode-zh": ("session-*.md", _opencode),
}


@dataclass(frozen=True)
class Session:
    """One agent session in the common format: ``session_id`` is ``<source>/<file>[#id]``."""

    source: str
    session_id: str
    messages: tuple[Raw, ...]


def unique_call_ids(session_id: str, messages: list[Raw]) -> list[Raw]:
    """Rename repeated tool-call ids and bind each result to its nearest earlier call.

    Raises ``ValueError`` if a tool result answers no earlier call (a broken recipe).
    """
    seen: Counter[str] = Counter()
    current: dict[str, str] = {}
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                orig = call["id"]
                seen[orig] += 1
                new = orig if seen[orig] == 1 else f"{orig}#{seen[orig]}"
                current[orig] = new
                calls.append({**call, "id": new})
            m = {**m, "tool_calls": calls}
        elif m["role"] == "tool":
            if m["tool_call_id"] not in current:
                raise ValueError(f"{session_id}: tool result {m['tool_call_id']!r} has no call")
            m = {**m, "tool_call_id": current[m["tool_call_id"]]}
        out.append(m)
    return out


def load_source(name: str, root: Path = DEFAULT_ROOT, *, limit: int | None = None) -> list[Session]:
    """The sessions of one source in file order (at most ``limit``), ids made unique."""
    if name not in SOURCES:
        raise ValueError(f"unknown source {name!r}; choose from {', '.join(SOURCES)}")
    pattern, loader = SOURCES[name]
    out: list[Session] = []
    for path in sorted((root / name).glob(pattern)):
        for inner, raw in loader(path):
            sid = f"{name}/{inner}"
            out.append(Session(name, sid, tuple(unique_call_ids(sid, raw))))
            if limit is not None and len(out) >= limit:
                return out
    return out
