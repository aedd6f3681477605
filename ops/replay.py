"""Replay public agent sessions through ``record_turn()`` and report what STM kept.

Why: the extractor and the write policy were tuned on scripted turns; real tool-using
sessions (``/work/shared/bench/agent-sessions``, five formats, see its ``FORMAT.md``) show
what they store and refuse in the wild.  The loaders follow the FORMAT.md recipes
(tau-bench: trial 0 only) and make tool-call ids unique within a session.  Replay groups
messages into turns as an agent would hand them over: a user message starts a turn; an
assistant message and its tool results belong to the current one.  Turns over the
configured limits are adapted (split at assistant boundaries, long texts cut) and the
report counts each adaptation.  Data is read in place, never copied.

    python -m ops.replay --source tau-bench --limit 3 --report docs/replay-report.md
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import logging
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.api import Kicker, MemoryClient
from core.errors import MemstrataError
from core.ingest.drain import drain_shard
from core.ingest.pipeline import read_decisions
from core.models.candidate import Verdict
from core.models.transcript import MessageIn, Role, ToolCall
from core.runtime import Runtime
from core.settings import load_settings

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/work/shared/bench/agent-sessions")
Raw = dict[str, Any]  # one message in FORMAT.md's common target format


def _msg(role: str, content: str | None, tool_call_id: str | None = None, **kw: Any) -> Raw:
    return {"role": role, "content": content or "", "tool_call_id": tool_call_id, **kw}


# ----------------------------------------------------------------------------- loaders
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


# ----------------------------------------------------------------------------- turns
TRUNCATION = "\n…[cut by replay: {n} chars over the message limit]"


def _cut(text: str, keep: int) -> str:
    if len(text) <= keep:
        return text
    marker = TRUNCATION.format(n=len(text) - keep)
    return text[: max(0, keep - len(marker))] + marker


def to_message(raw: Raw, max_chars: int) -> tuple[MessageIn, bool]:
    """Build a :class:`MessageIn`, cutting text that exceeds ``max_chars`` (reported)."""
    content = raw.get("content") or ""
    calls = [dict(c) for c in raw.get("tool_calls") or []]
    size = len(content) + sum(len(c["arguments"]) for c in calls)
    cut = size > max_chars
    if cut:
        args_total = sum(len(c["arguments"]) for c in calls)
        content = _cut(content, max(max_chars - args_total, max_chars // 2))
        share = (max_chars - len(content)) // max(1, len(calls))
        for c in calls:
            c["arguments"] = _cut(c["arguments"], share)
    role = Role(raw["role"])
    msg = MessageIn(
        role=role,
        content=content,
        tool_call_id=raw.get("tool_call_id") if role is Role.TOOL else None,
        tool_calls=[ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in calls],
    )
    return msg, cut


def group_turns(messages: Sequence[Raw], *, max_messages: int) -> list[list[Raw]]:
    """Split a session into turns; a turn longer than ``max_messages`` is continued.

    A user message starts a turn; an assistant message with its tool results stays in one
    turn (continuations split before an assistant message, never between call and result).
    System prompts are left out: they are per-deployment boilerplate, not turns.
    """
    turns: list[list[list[Raw]]] = []  # turn → units (a message plus its tool results)
    for m in messages:
        if m["role"] == "system":
            continue
        if m["role"] == "user" or not turns:
            turns.append([[m]])
        elif m["role"] == "tool" and turns[-1][-1][0]["role"] == "assistant":
            turns[-1][-1].append(m)
        else:
            turns[-1].append([m])
    out: list[list[Raw]] = []
    for units in turns:
        chunk: list[Raw] = []
        for unit in units:
            if chunk and len(chunk) + len(unit) > max_messages:
                out.append(chunk)
                chunk = []
            while len(unit) > max_messages:  # one unit over the limit: split it anyway
                out.append(unit[:max_messages])
                unit = unit[max_messages:]
            chunk.extend(unit)
        if chunk:
            out.append(chunk)
    return out


# ----------------------------------------------------------------------------- replay
def safe_id(text: str) -> str:
    """A key-safe id for a free-form name; long names keep a hash suffix."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "x"
    if len(cleaned) <= 100:
        return cleaned
    return f"{cleaned[:80]}_{hashlib.sha1(text.encode()).hexdigest()[:12]}"


@dataclass
class SessionReport:
    """What one replayed session produced, for the markdown report and for tests."""

    source: str
    session_id: str
    user_id: str
    stm_session_id: str
    messages: int = 0
    system_skipped: int = 0
    turns: int = 0
    continuations: int = 0
    cut_messages: int = 0
    errors: list[str] = field(default_factory=list)
    decisions: int = 0
    written: int = 0
    refused: int = 0
    refusal_reasons: Counter[str] = field(default_factory=Counter)
    written_rules: Counter[str] = field(default_factory=Counter)
    stored_items: int = 0
    stored_types: Counter[str] = field(default_factory=Counter)
    samples: list[tuple[str, str, str]] = field(default_factory=list)  # type, subtype, summary
    seconds: float = 0.0


class InlineKicker:
    """Remembers kicked shards so the replay drains them in this process (no worker)."""

    def __init__(self) -> None:
        self.shards: set[int] = set()

    def __call__(self, shard: int) -> None:
        self.shards.add(shard)


def _reason_bucket(reason: str) -> str:
    return re.sub(r"score -?[\d.]+ below", "score below", reason)


class Replayer:
    """Replays sessions into one namespace, inline or through a Celery kicker.

    With ``kicker=None`` the shards are drained in-process after each session (the same
    ``drain_shard`` the worker runs); with a Celery kicker the replay waits, polling with
    ``wait_s`` as the deadline, until the workers have drained them.
    """

    def __init__(
        self,
        res: Runtime,
        *,
        kicker: Kicker | None = None,
        wait_s: float = 120.0,
        samples: int = 5,
    ) -> None:
        self.res = res
        inline = InlineKicker()
        self.inline = inline if kicker is None else None
        self.client = MemoryClient(
            transcript=res.transcript,
            queue=res.queue,
            kicker=kicker if kicker is not None else inline,
        )
        self.wait_s = wait_s
        self.samples = samples

    def replay(self, session: Session, *, at0: float | None = None) -> SessionReport:
        started = time.monotonic()
        settings = self.res.settings
        sid = safe_id(session.session_id)
        rep = SessionReport(
            session.source, session.session_id, safe_id(f"replay-{session.source}"), sid
        )
        rep.messages = len(session.messages)
        rep.system_skipped = sum(1 for m in session.messages if m["role"] == "system")
        turns = group_turns(session.messages, max_messages=settings.max_turn_messages)
        rep.turns = len(turns)
        rep.continuations = sum(1 for t in turns if t[0]["role"] != "user")
        clock = time.time() if at0 is None else at0
        digest = hashlib.sha1(session.session_id.encode()).hexdigest()[:10]
        shards: set[int] = set()
        for k, turn in enumerate(turns):
            built = [to_message(m, settings.max_message_chars) for m in turn]
            rep.cut_messages += sum(1 for _m, cut in built if cut)
            try:
                receipt = self.client.record_turn(
                    user_id=rep.user_id,
                    session_id=sid,
                    task_id=sid,
                    turn_id=f"r{digest}-{k:05d}",
                    messages=[m for m, _cut in built],
                    at=clock + k,  # one second per turn keeps the turns in order
                )
                shards.add(receipt.shard)
            except MemstrataError as exc:
                rep.errors.append(f"turn {k}: {type(exc).__name__}: {exc}")
        self._drain(shards)
        self._collect(rep)
        rep.seconds = time.monotonic() - started
        log.info(
            "replayed %s: %s turns, %s written, %s refused",
            session.session_id,
            rep.turns,
            rep.written,
            rep.refused,
        )
        return rep

    def _drain(self, shards: set[int]) -> None:
        res = self.res
        if self.inline is not None:
            for shard in sorted(shards | self.inline.shards):
                while drain_shard(
                    shard,
                    queue=res.queue,
                    transcript=res.transcript,
                    pipeline=res.pipeline,
                    consumer="replay",
                    batch=res.settings.ingest_batch,
                    max_run_s=res.settings.ingest_max_run_s,
                ).continued:
                    pass
            self.inline.shards.clear()
            return
        deadline = time.monotonic() + self.wait_s
        for shard in sorted(shards):
            while res.redis.exists(res.queue.keys.ingest_kick(shard)) or any(
                res.queue.backlog(shard)
            ):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"shard {shard} not drained after {self.wait_s}s")
                time.sleep(0.05)

    def _collect(self, rep: SessionReport) -> None:
        for d in read_decisions(self.res.stm, rep.user_id, rep.stm_session_id):
            rep.decisions += 1
            if d.verdict is Verdict.WRITTEN:
                rep.written += 1
                rep.written_rules[d.rule] += 1
            else:
                rep.refused += 1
                rep.refusal_reasons[_reason_bucket(d.reason)] += 1
        items = self.res.stm.by_session(rep.user_id, rep.stm_session_id, limit=1000)
        rep.stored_items = len(items)
        rep.stored_types = Counter(i.memory_type.value for i in items)
        top = sorted(items, key=lambda i: (-i.importance, i.summary))[: self.samples]
        rep.samples = [(i.memory_type.value, i.subtype, i.summary) for i in top]


# ----------------------------------------------------------------------------- report
def _cell(text: str, width: int = 140) -> str:
    one_line = " ".join(text.split()).replace("|", "\\|")
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


_TOTALS = ("messages", "turns", "decisions", "written", "refused", "stored_items", "cut_messages")


def _counts(counter: Counter[str], sep: str = ", ", width: int = 80) -> str:
    return sep.join(f"{_cell(k, width)} {n}" for k, n in counter.most_common()) or "none"


def render_markdown(reports: Sequence[SessionReport], *, command: str, cap: int) -> str:
    """A reviewer's report: per-source totals, then each session's counts and samples."""
    lines = [
        "# Replay of public agent sessions through `record_turn()`",
        "",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "Each session is split into turns (a user message starts one; an assistant message "
        "and its tool results stay together; turns over the message limit are continued), "
        "recorded to L0 and drained by the ingest pipeline. System prompts are left out. "
        "*Decisions* are the candidates the extractor proposed, each written or refused by "
        "the write policy; *in STM* counts the session's items in Redis afterwards (at most "
        f"{cap} per session, the least important are evicted). The sessions of one source "
        "share a user, so a fact restated in a later session merges into the earlier item.",
        "",
        "| source | sessions | messages | turns | decisions | written | refused | in STM "
        "| cut msgs | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_source: dict[str, list[SessionReport]] = collections.defaultdict(list)
    for r in reports:
        by_source[r.source].append(r)
    for source, group in by_source.items():
        totals = [str(sum(getattr(r, f) for r in group)) for f in _TOTALS]
        errors = sum(len(r.errors) for r in group)
        lines.append(f"| {source} | {len(group)} | {' | '.join(totals)} | {errors} |")
    reasons: Counter[str] = Counter()
    for r in reports:
        reasons.update(r.refusal_reasons)
    lines += ["", "Refusal reasons over all sessions:", ""]
    lines += [f"- {n} × {_cell(reason)}" for reason, n in reasons.most_common()] or ["- none"]
    for r in reports:
        lines += [
            "",
            f"## {r.session_id}",
            "",
            "| messages | system left out | turns | continued | cut msgs | decisions | written "
            "| refused | in STM | seconds |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {r.messages} | {r.system_skipped} | {r.turns} | {r.continuations} "
            f"| {r.cut_messages} | {r.decisions} | {r.written} | {r.refused} "
            f"| {r.stored_items} | {r.seconds:.1f} |",
            "",
            f"- in STM by type: {_counts(r.stored_types)}",
            f"- written by rule: {_counts(r.written_rules)}",
            f"- refused: {_counts(r.refusal_reasons, sep='; ')}",
        ]
        if r.errors:
            lines += ["", "Errors:", *[f"- {_cell(e)}" for e in r.errors]]
        if r.samples:
            lines += ["", "| most important items in STM | type | subtype |", "|---|---|---|"]
            lines += [f"| {_cell(s, 120)} | {t} | {st} |" for t, st, s in r.samples]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ops.replay", description=__doc__.split("\n")[0])
    p.add_argument("--source", default="all", help=f"all, or one of: {', '.join(SOURCES)}")
    p.add_argument("--limit", type=int, default=2, help="sessions per source (default 2)")
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="the agent-sessions folder")
    p.add_argument("--report", type=Path, help="write the markdown report here")
    p.add_argument(
        "--namespace", help="Redis key namespace, kept afterwards (default: a fresh one, purged)"
    )
    p.add_argument("--keep", action="store_true", help="keep the fresh namespace and transcripts")
    p.add_argument(
        "--celery",
        action="store_true",
        help="hand turns to running workers (uses MEMSTRATA_* settings) instead of draining here",
    )
    return p


def _replay_all(
    replayer: Replayer, names: Sequence[str], args: argparse.Namespace
) -> list[SessionReport]:
    reports = []
    for name in names:
        for session in load_source(name, args.root, limit=args.limit):
            rep = replayer.replay(session)
            reports.append(rep)
            print(
                f"{session.session_id}: {rep.turns} turns, {rep.written} written, "
                f"{rep.refused} refused, {rep.stored_items} in STM, {len(rep.errors)} errors"
            )
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = list(SOURCES) if args.source == "all" else [args.source]
    if any(n not in SOURCES for n in names):
        print(
            f"unknown source {args.source!r}; choose from all, {', '.join(SOURCES)}",
            file=sys.stderr,
        )
        return 2
    if args.celery:  # the workers' namespace and L0 folder, from MEMSTRATA_*; nothing purged
        from core.runtime import get_runtime
        from tasks.client import CeleryKicker

        res = get_runtime()
        reports = _replay_all(Replayer(res, kicker=CeleryKicker()), names, args)
    else:
        # only a namespace made here is purged; a named one may hold someone's data
        purge = not args.keep and not args.namespace
        ns = args.namespace or f"replay-{uuid.uuid4().hex[:8]}"
        l0 = Path(tempfile.mkdtemp(prefix="memstrata-replay-"))
        res = Runtime(load_settings(key_namespace=ns, transcript_dir=l0))
        try:
            reports = _replay_all(Replayer(res), names, args)
        finally:
            if purge:
                for key in res.redis.scan_iter(match=f"{ns}:*", count=1000):
                    res.redis.delete(key)
                shutil.rmtree(l0, ignore_errors=True)
            else:
                print(f"kept: Redis namespace {ns!r}, transcripts in {l0}")
            res.close()
    command = "python -m ops.replay " + " ".join(argv if argv is not None else sys.argv[1:])
    text = render_markdown(reports, command=command.strip(), cap=res.settings.stm_session_cap)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text, encoding="utf-8")
        print(f"report written to {args.report}")
    return 1 if any(r.errors for r in reports) else 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
