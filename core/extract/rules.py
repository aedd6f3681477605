"""Rule-based candidate extractor over user, assistant and tool messages (zh + en).

Each clause of a message is tested against the lexicon rules in a fixed priority order
and yields at most one candidate.  The extractor only *proposes*: chit-chat, guesses and
raw tool dumps come out as candidates too, flagged, so the policy can refuse them with
a recorded reason (seed 十二: the extractor proposes, the policy engine decides).

A user message that none of those rules claims, and that is neither chit-chat nor only
questions, becomes one ``conversation_fact`` candidate: the clause rules were written for
debugging sessions and would otherwise propose nothing from casual conversation ("I went
to a support group yesterday").  ``RuleExtractor(conversation_facts=False)`` turns it off.

**Budget.**  Whatever a turn holds, extraction reads at most
``ExtractionBudget.message_chars`` of a message and ``turn_chars`` of the turn, in
clause-safe windows (:mod:`core.extract.windows`; the turn's budget is shared so that
short messages are read whole), and proposes at most ``message_candidates`` candidates
per message and ``turn_candidates`` per turn.  What the budget left out is reported per
message (:class:`BudgetNote`), so the pipeline can record it: nothing is dropped silently.
Stripping reasoning and code blocks is linear in the message's length.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from memstrata.core.extract.entities import extract_entities, topic_of
from memstrata.core.extract.lexicon import Lexicon, default_lexicon
from memstrata.core.extract.windows import Reading, read_windows
from memstrata.core.models.candidate import Candidate, CandidateSignals
from memstrata.core.models.memory import MemorySource, MemoryType
from memstrata.core.models.transcript import Role, TranscriptRecord
from memstrata.core.models.trusted import trusted
from memstrata.core.textcut import fair_shares

_SENTENCE_SPLIT = re.compile(
    r"(?<=[。！？；!?;])|\n+|(?<=[a-z0-9)\]'\"])\.\s+(?=[A-Z\u4e00-\u9fff])"
)
# a Chinese sentence strings its clauses together with "，"; each segment keeps its comma
_SEGMENT_SPLIT = re.compile(r"(?<=，)")
# a question that says something about the asker ("cancel my $12.99/month Canva Pro plan?")
_SELF_EN = re.compile(
    r"\b(my|mine|our|I'm|I am|I've|I have|I had|I was|I'll|I will|we're|we've|we have)\b",
    re.IGNORECASE,
)
_SELF_ZH = re.compile(r"我")
# who a sentence is about: the speaker (first person) or the listener (second person;
# not the 你 of 迷你, "mini")
_FIRST_PERSON = re.compile(
    r"\b(i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|we've|we'd|we'll|us|our|ours|"
    r"ourselves)\b|[我咱]",
    re.IGNORECASE,
)
_SECOND_PERSON = re.compile(
    r"\b(you|your|yours|yourself|yourselves|you're|you've|you'd|you'll|ya)\b|(?<!迷)你|您",
    re.IGNORECASE,
)
_EXCLAIMED = re.compile(r"[!！]\s*$")
_DIGIT = re.compile(r"\d")
# a day or month named after a preposition dates what a sentence says ("moved to Friday",
# "in March"): a detail, like a number; "Have a lovely Sunday!" names one in passing
_NAMED_DATE = re.compile(
    r"\b(on|by|to|until|till|since|before|after|next|last|this|in|from)\s+"
    r"(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|January|February|"
    r"March|April|May|June|July|August|September|October|November|December)\b"
)
# the parts of a sentence a comma or semicolon separates ("Don't worry about the cache,
# never restart prod."): a constraint in one part is not undone by a reaction in another
_PART_SPLIT = re.compile(r"\s*[,;，；]\s*")
_DETAIL = re.compile(r"\d|(?<=\s)(?!I\b)[A-Z][\w'&.-]+")
_REASONING_OPEN = re.compile(r"<(thought|think|thinking)>|_Thinking:_", re.IGNORECASE)
_REASONING_CLOSE = {
    tag: re.compile(f"</{tag}>", re.IGNORECASE) for tag in ("thought", "think", "thinking")
}
_PARAGRAPH_END = re.compile(r"\n\s*\n")
_CODE_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_WS = re.compile(r"\s+")
_BULLET = re.compile(r"^\s*(?:[-*•>]|\d+[.)])\s*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
# "<speaker>: " as chat transcripts are recorded: a short name, not a sentence
_SPEAKER_PREFIX = re.compile(r"^([^\s:：][^\n:：。!！?？,，;；]{0,57}?): ")
MAX_CLAUSE_CHARS = 300
MAX_SUMMARY_CHARS = 200
RAW_BLOB_CHARS = 1000
OBSERVATIONS_PER_TOOL_RESULT = 2
CONVERSATION_FACT_CHARS = 300
CONVERSATION_FACT_MIN_WORDS = 4  # a statement shorter than this carries no fact of its own
CONVERSATION_FACT_MIN_CJK_CHARS = 8  # the same bar for text without spaces between words
REACTION_MAX_WORDS = 6  # "Wow, what an amazing family pic!"; longer may be an elided "I …"
REACTION_MAX_CJK_CHARS = 5  # "哇，好厉害！"
SPEAKER_MAX_WORDS = 4
MAX_ENTITIES = 16


@dataclass(frozen=True)
class ExtractionContext:
    """What the extractor knows besides the turn itself."""

    user_id: str
    session_id: str
    task_id: str | None = None
    turn_index: int = 1
    known_entities: tuple[str, ...] = field(default_factory=tuple)

    @property
    def scope(self) -> str:
        return self.task_id or self.session_id


@dataclass(frozen=True)
class ExtractionBudget:
    """How much of a turn extraction reads and proposes (docs/WRITE_PATH.md §3)."""

    window_chars: int = 4096
    message_chars: int = 64 * 1024  # 16 windows: the head's 15 and the last one
    turn_chars: int = 256 * 1024  # shared by the turn's messages, short ones read whole
    message_candidates: int = 64
    turn_candidates: int = 256  # each message may propose turn_candidates // messages

    def candidates_per_message(self, messages: int) -> int:
        return min(self.message_candidates, max(1, self.turn_candidates // max(1, messages)))


@dataclass(frozen=True)
class BudgetNote:
    """What the budget left out of one message (only for messages it cut)."""

    message_id: str
    index: int  # the message's position in its turn
    chars: int  # characters extraction could have read (after stripping reasoning, code)
    read_chars: int
    windows: int
    clauses_skipped: int  # clauses past the candidate cap, never classified
    candidate_cap: int


@dataclass(frozen=True)
class Extraction:
    candidates: list[Candidate]
    notes: list[BudgetNote] = field(default_factory=list)
    read_chars: int = 0  # characters read, all messages together


class Extractor(Protocol):
    def extract_turn(self, turn: Sequence[TranscriptRecord], ctx: ExtractionContext) -> Extraction:
        """Propose candidate memories for one recorded turn, within a budget."""
        ...


def short_hash(text: str, n: int = 10) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:n]


def normalise_fact(text: str) -> str:
    """Case-folded, digit-masked, whitespace-collapsed text: the basis of slot hashes."""
    return _WS.sub(" ", re.sub(r"\d+", "#", text.casefold())).strip(" .。!！")


def clip(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    text = _WS.sub(" ", text).strip().rstrip("，,;；:")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def split_sentences(text: str) -> list[list[str]]:
    """Sentences (at 。！？；!?; line breaks and ". "), each as its "，"-joined segments.

    A Chinese sentence chains clauses with "，" where English uses one sentence with
    commas; the extractor classifies each segment, then gives a claimed segment the rest
    of its sentence, so ``数据库排除了：CPU 15%，连接数 60/800，没有慢查询。`` stays one
    statement (review D5) while a second claim in the same sentence stays its own."""
    out: list[list[str]] = []
    for part in _SENTENCE_SPLIT.split(text):
        part = _BULLET.sub("", part or "").strip()[:MAX_CLAUSE_CHARS]
        if len(part) >= 2:
            out.append([seg for seg in _SEGMENT_SPLIT.split(part) if seg.strip()])
    return out


def split_clauses(text: str) -> list[str]:
    """The sentences of :func:`split_sentences`, whole."""
    return ["".join(segments) for segments in split_sentences(text)]


def states_about_self(clause: str) -> bool:
    """A question that carries a fact about its asker: first person and a concrete detail
    (a number or a name), e.g. "Can you help me cancel my $12.99/month Canva Pro plan?"."""
    if _SELF_EN.search(clause):
        return _DETAIL.search(clause) is not None
    return bool(_SELF_ZH.search(clause)) and len(_WS.sub("", clause)) >= 2 * (
        CONVERSATION_FACT_MIN_CJK_CHARS
    )


def is_reaction(sentence: str, lexicon: Lexicon) -> bool:
    """A sentence that reacts to the listener or the moment and states nothing of the
    speaker's own: a word of praise, thanks, greeting or encouragement (the lexicon's
    ``reaction`` rule), no first person, no number and no named day or month, and either
    addressed to the listener ("Your kind words mean a lot.", "你太厉害了！") or a short
    exclamation ("Wow, what a fun moment!", "太好了！": at most :data:`REACTION_MAX_WORDS`
    words, or :data:`REACTION_MAX_CJK_CHARS` characters of CJK text).  The news it answers is the
    other party's own statement; what it adds is the speaker's reaction.  These stay:
    a longer exclamation, maybe a fact with its subject left out ("Took the kids to the
    museum last week, so fun!"); a statement about the speaker's world ("They were so
    excited to make something with clay."); an instruction to an assistant ("You can
    find the key in the vault.", no word of praise)."""
    if _FIRST_PERSON.search(sentence) or _DIGIT.search(sentence) or _NAMED_DATE.search(sentence):
        return False
    if not lexicon.matches("reaction", sentence):
        return False
    if _SECOND_PERSON.search(sentence):
        return True
    if not _EXCLAIMED.search(sentence):
        return False
    if _CJK.search(sentence):
        return len(_CJK.findall(sentence)) <= REACTION_MAX_CJK_CHARS
    return len(sentence.split()) <= REACTION_MAX_WORDS


def binds(clause: str, lexicon: Lexicon) -> bool:
    """Whether a clause the ``user_constraint`` rule matches binds the listener: some part
    of it that the rule matches on its own (the whole clause when none does) is neither
    a reaction (:func:`is_reaction`: "Never give up!", "You must really enjoy having them
    around - they're so cool!") nor an idiom of the ``constraint_idiom`` rule ("I can't
    wait", "you must have been thrilled", "never had a chance").  "Don't worry about the
    cache, never restart prod." binds by its second part."""
    body = _speaker_prefix(clause)[1]
    parts = [p for p in _PART_SPLIT.split(body) if lexicon.matches("user_constraint", p)]
    # the sentence's "!" is each part's ("Don't give up, buddy!")
    bang = "!" if _EXCLAIMED.search(body) else ""
    return any(
        not lexicon.matches("constraint_idiom", p)
        and not is_reaction(p if _EXCLAIMED.search(p) else p + bang, lexicon)
        for p in parts or [body]
    )


def says_nothing_of_its_own(text: str, lexicon: Lexicon) -> bool:
    """A message of pleasantries, reactions (:func:`is_reaction`) and questions about
    the listener alone: "Thanks, Mel! Your kind words mean a lot.", "Cool! What got you
    into running?".  Recall gives a raw message that no curated card holds a stand-in
    vote for the curated layer that could not see it (``core.recall.pool.corroborate``);
    a message like this one the write path read and judged empty (what it asks about is
    the other party's news, which their answer states), so that layer's silence is a
    judgement, not blindness.  Other questions are not empty: what a user asked an
    assistant ("how do I add a loading spinner?") is often what is asked about later."""
    _, body = _speaker_prefix(text)
    if lexicon.matches("chit_chat", body):
        return True
    sentences = split_clauses(body)
    return bool(sentences) and all(
        is_reaction(s, lexicon) or _asks_the_listener(s, lexicon) for s in sentences
    )


def _asks_the_listener(sentence: str, lexicon: Lexicon) -> bool:
    """A question about the listener and not the asker ("What type of music do you play?")."""
    return (
        lexicon.matches("question", sentence)
        and not _FIRST_PERSON.search(sentence)
        and bool(_SECOND_PERSON.search(sentence))
    )


def _strip_reasoning_blocks(text: str) -> str:
    """``<think>…</think>`` (thought, thinking) and ``_Thinking:_ …`` up to a blank line,
    each replaced by a space; an opening tag that is never closed is left as it is.

    One pass: once a tag has no closing tag after some point, no later opening tag of it
    is looked at again (a regex ``<think>.*?</think>`` rescans the rest of the text for
    every unclosed ``<think>``: quadratic, 5 s for 64 KiB of them)."""
    out: list[str] = []
    pos = search = 0
    unclosed: set[str] = set()
    while (m := _REASONING_OPEN.search(text, search)) is not None:
        tag = (m.group(1) or "").lower()
        if not tag:  # up to the first blank line, else up to ``$`` (before a final "\n")
            dollar = len(text) - 1 if text.endswith("\n") else len(text)
            block_end = _PARAGRAPH_END.search(text, m.end())
            end = block_end.end() if block_end and block_end.start() <= dollar else dollar
        else:
            close = None if tag in unclosed else _REASONING_CLOSE[tag].search(text, m.end())
            if close is None:
                unclosed.add(tag)
                search = m.start() + 1
                continue
            end = close.end()
        out += [text[pos : m.start()], " "]
        pos = search = end
    out.append(text[pos:])
    return "".join(out)


def strip_reasoning(text: str, lexicon: Lexicon) -> str:
    """Drop model reasoning and code blocks (seed 四.5: no reasoning, no raw text)."""
    text = _strip_reasoning_blocks(text)
    text = _CODE_FENCE.sub(" ", text)  # pasted code and logs are raw material, not facts
    for marker in lexicon.reasoning_markers:
        if text.lstrip().startswith(marker):
            return ""
    return text


def _speaker_prefix(text: str) -> tuple[str, str]:
    """``("Caroline", "I went …")`` for ``"Caroline: I went …"``; ``("", text)`` otherwise."""
    m = _SPEAKER_PREFIX.match(text)
    if m is None or len(m.group(1).split()) > SPEAKER_MAX_WORDS:
        return "", text
    return m.group(1).strip(), text[m.end() :].strip()


def _long_enough(statement: str) -> bool:
    """At least 4 words, or for CJK text (no spaces between words) at least 8 characters."""
    if len(statement.split()) >= CONVERSATION_FACT_MIN_WORDS:
        return True
    return bool(_CJK.search(statement)) and (
        len(_WS.sub("", statement)) >= CONVERSATION_FACT_MIN_CJK_CHARS
    )


@dataclass(frozen=True)
class _Rule:
    name: str
    memory_type: MemoryType
    subtype: str
    confidence: float


def _constraint_key(ctx: ExtractionContext, topic: str, entities: list[str]) -> str:
    """One slot per constraint topic and main entity: a newer rule about the same thing
    supersedes the older one, a rule about another thing does not."""
    main = entities[0].casefold() if entities else ""
    return f"{ctx.scope}:constraint:{topic}" + (f":{main}" if main and main != topic else "")


_USER_RULES = ("explicit_remember", "user_preference", "user_constraint")
_STATE_RULES = ("excluded_cause", "conclusion", "decision", "next_step")


class RuleExtractor:
    """The v1 extractor: lexicon rules, entity patterns, no model calls."""

    def __init__(
        self,
        lexicon: Lexicon | None = None,
        *,
        conversation_facts: bool = True,
        drop_reactions: bool = True,
        budget: ExtractionBudget | None = None,
    ) -> None:
        self.lexicon = lexicon or default_lexicon()
        self.conversation_facts = conversation_facts
        self.drop_reactions = drop_reactions
        self.budget = budget or ExtractionBudget()

    # ------------------------------------------------------------------ public
    def extract(self, turn: Sequence[TranscriptRecord], ctx: ExtractionContext) -> list[Candidate]:
        """The candidates of :meth:`extract_turn`."""
        return self.extract_turn(turn, ctx).candidates

    def extract_turn(self, turn: Sequence[TranscriptRecord], ctx: ExtractionContext) -> Extraction:
        budget = self.budget
        tool_names = {c.id: c.name for r in turn for c in r.tool_calls}
        has_tool_result = any(r.role is Role.TOOL for r in turn)
        # task state (next step, decision, excluded cause, guess) exists only in a task
        task = ctx.task_id is not None or has_tool_result or any(r.tool_calls for r in turn)
        texts = [self._prepare(record) for record in turn]
        shares = fair_shares(
            [len(t) for t in texts], each=budget.message_chars, total=budget.turn_chars
        )
        cap = budget.candidates_per_message(len(turn))
        out: list[Candidate] = []
        notes: list[BudgetNote] = []
        readings: list[Reading] = []
        found: list[int] = []
        statements: list[list[str]] = []  # per message: the sentences no rule claimed
        for index, (record, text, share) in enumerate(zip(turn, texts, shares, strict=True)):
            reading = read_windows(text, limit=share, window=budget.window_chars)
            readings.append(reading)
            unclaimed: list[str] = []
            if record.role is Role.USER:
                cands, skipped, unclaimed = self._from_user(
                    record, ctx, reading.text, cap, task=task
                )
            elif record.role is Role.ASSISTANT:
                cands, skipped = self._from_assistant(
                    record, ctx, reading.text, cap, verified=has_tool_result, task=task
                )
            elif record.role is Role.TOOL:
                name = tool_names.get(record.tool_call_id or "", record.name or "tool")
                cands, skipped = self._from_tool(record, ctx, name, reading.text)[:cap], 0
            else:
                cands, skipped = [], 0
            out.extend(cands)
            found.append(len(cands))
            statements.append(unclaimed)
            if reading.skipped or skipped:
                notes.append(
                    BudgetNote(
                        message_id=record.message_id,
                        index=index,
                        chars=reading.total,
                        read_chars=reading.read,
                        windows=len(reading.windows),
                        clauses_skipped=skipped,
                        candidate_cap=cap,
                    )
                )
        if self.conversation_facts:
            for record, reading, n, rest in zip(turn, readings, found, statements, strict=True):
                if record.role is Role.USER and rest and n < cap:
                    fact = self._conversation_fact(record, ctx, reading.text, rest)
                    if fact is not None:
                        out.append(fact)
        return Extraction(out, notes, sum(r.read for r in readings))

    def _prepare(self, rec: TranscriptRecord) -> str:
        """The text of a message that extraction may read: linear-time stripping only."""
        if rec.role is Role.USER:
            return _CODE_FENCE.sub(" ", rec.content).strip()
        if rec.role is Role.ASSISTANT:
            return strip_reasoning(rec.content, self.lexicon).strip()
        return rec.content

    # ------------------------------------------------------------------ per role
    def _clauses(
        self,
        sentences: list[list[str]],
        rec: TranscriptRecord,
        ctx: ExtractionContext,
        cap: int,
        *,
        user: bool,
        verified: bool,
        remember: bool,
        task: bool,
    ) -> tuple[list[Candidate], int, list[str]]:
        """Candidates of ``sentences`` up to ``cap``, how many sentences were left unread,
        and the sentences no rule claimed (a user's are a conversation fact's material).

        Each segment of a sentence is classified; a segment no rule claimed belongs to the
        nearest claimed segment before it (or else the first after it), so a claim keeps
        the figures and qualifiers of its sentence."""
        out: list[Candidate] = []
        unclaimed: list[str] = []
        for n, segments in enumerate(sentences):
            if len(out) >= cap:
                return out, len(sentences) - n, unclaimed
            claims = [
                self._classify(
                    seg, rec, ctx, user=user, verified=verified, remember=remember, task=task
                )
                for seg in segments
            ]
            claimed = [i for i, c in enumerate(claims) if c is not None]
            if not claimed:
                unclaimed.append("".join(segments))
                continue
            owner: list[int] = []
            for i in range(len(segments)):
                before = [j for j in claimed if j <= i]
                owner.append(before[-1] if before else claimed[0])
            for i in claimed:
                cand = claims[i]
                assert cand is not None
                whole = "".join(seg for seg, o in zip(segments, owner, strict=True) if o == i)
                if whole != segments[i]:
                    cand = cand.model_copy(update={"summary": clip(whole)})
                out.append(cand)
                if len(out) >= cap:
                    break
        return out, 0, unclaimed

    def _from_user(
        self, rec: TranscriptRecord, ctx: ExtractionContext, text: str, cap: int, *, task: bool
    ) -> tuple[list[Candidate], int, list[str]]:
        if not text:
            return [], 0, []
        if self.lexicon.matches("chit_chat", text):
            return [self._chit_chat(rec, ctx, text)], 0, []
        sentences = split_sentences(text)
        # "remember" covers a short note ("记住：A，B"), not every line of a long brief
        remember_all = len(sentences) <= 4 and self.lexicon.matches("explicit_remember", text)
        return self._clauses(
            sentences, rec, ctx, cap, user=True, verified=True, remember=remember_all, task=task
        )

    def _from_assistant(
        self,
        rec: TranscriptRecord,
        ctx: ExtractionContext,
        text: str,
        cap: int,
        *,
        verified: bool,
        task: bool,
    ) -> tuple[list[Candidate], int]:
        if not text or self.lexicon.matches("chit_chat", text):
            return [], 0
        cands, skipped, _ = self._clauses(
            split_sentences(text), rec, ctx, cap,
            user=False, verified=verified, remember=False, task=task,
        )  # fmt: skip
        return cands, skipped

    def _from_tool(
        self, rec: TranscriptRecord, ctx: ExtractionContext, tool: str, text: str
    ) -> list[Candidate]:
        if not text.strip():
            return []
        out: list[Candidate] = []
        seen: set[str] = set()
        for line in text.splitlines():
            line = line.strip()
            if not (8 <= len(line) <= 400) or not self.lexicon.matches("observation", line):
                continue
            norm = normalise_fact(line)
            if norm in seen:
                continue
            seen.add(norm)
            entities = self._entities(line, ctx)
            slot = (
                f"{entities[0].casefold()}:{short_hash(norm, 8)}" if entities else short_hash(norm)
            )
            out.append(
                self._candidate(
                    _Rule("tool_observation", MemoryType.OBSERVATION, "tool_result", 0.9),
                    summary=f"[{tool}] {clip(line)}",
                    rec=rec,
                    ctx=ctx,
                    entities=entities,
                    key=f"{ctx.scope}:obs:{tool.casefold()}:{slot}",
                    signals=CandidateSignals(is_verified=True, is_stable_for_current_task=True),
                    detail={"tool": tool, "line": clip(line, 400)},
                )
            )
            if len(out) >= OBSERVATIONS_PER_TOOL_RESULT:
                break
        size = len(rec.content)
        if not out or size > RAW_BLOB_CHARS:
            out.append(
                self._candidate(
                    _Rule("raw_tool_output", MemoryType.OBSERVATION, "raw_output", 0.5),
                    summary=f"raw output of {tool} ({size} chars)",
                    rec=rec,
                    ctx=ctx,
                    entities=[],
                    key=f"{ctx.scope}:raw:{rec.message_id}",
                    signals=CandidateSignals(
                        is_verified=True, raw_unstructured_blob=True, transient=True
                    ),
                    detail={"tool": tool, "chars": size},
                )
            )
        return out

    # ------------------------------------------------------------------ classification
    def _classify(
        self,
        clause: str,
        rec: TranscriptRecord,
        ctx: ExtractionContext,
        *,
        user: bool,
        verified: bool,
        remember: bool,
        task: bool,
    ) -> Candidate | None:
        """The candidate of the first rule that claims ``clause``; without a task, only
        what the user says about themselves and how to work (remember, preference,
        constraint) is claimed: the rest is a conversation fact's material."""
        lx = self.lexicon
        if lx.matches("question", clause):
            return None
        entities = self._entities(clause, ctx)
        norm = normalise_fact(clause)
        is_guess = lx.matches("hypothesis", clause) and not lx.matches("conclusion", clause)
        if user and (remember or lx.matches("explicit_remember", clause)):
            return self._user_memory(clause, rec, ctx, entities, norm, explicit=True)
        if user and lx.matches("user_preference", clause):
            return self._user_memory(clause, rec, ctx, entities, norm, explicit=False)
        # a constraint is pinned above every answer: not a reaction or an idiom
        if user and lx.matches("user_constraint", clause) and not is_guess and binds(clause, lx):
            topic = topic_of(clause, "constraint", lx) or (
                entities[0].casefold() if entities else short_hash(norm)
            )
            return self._candidate(
                _Rule("user_constraint", MemoryType.CONSTRAINT, "user_constraint", 0.95),
                summary=clip(clause), rec=rec, ctx=ctx, entities=entities,
                key=_constraint_key(ctx, topic, entities),
                signals=CandidateSignals(
                    is_verified=True, is_user_constraint=True, is_stable_for_current_task=True
                ),
                detail={"topic": topic},
            )  # fmt: skip
        if not task:
            return None
        if (
            user
            and entities
            and not is_guess
            and lx.matches("symptom", clause)
            and not (lx.matches("excluded_cause", clause) or lx.matches("conclusion", clause))
        ):
            # the user reports what they see: the fact the whole task is about (seed 四.1)
            return self._candidate(
                _Rule("user_symptom", MemoryType.FACT, "symptom", 0.9),
                summary=clip(clause), rec=rec, ctx=ctx, entities=entities,
                key=f"{ctx.scope}:symptom:{entities[0].casefold()}",
                signals=CandidateSignals(is_verified=True, is_stable_for_current_task=True),
                detail={"symptom_entities": entities[:4]},
            )  # fmt: skip
        if is_guess:
            return self._candidate(
                _Rule("hypothesis", MemoryType.HYPOTHESIS, "hypothesis", 0.4),
                summary=clip(clause), rec=rec, ctx=ctx, entities=entities,
                key=f"{ctx.scope}:hypothesis:{short_hash(norm)}",
                signals=CandidateSignals(transient=True),
            )  # fmt: skip
        if not entities and len(norm) < 6:
            return None  # a fragment like "已验证。" carries no fact of its own
        for rule_name in _STATE_RULES:
            if lx.matches(rule_name, clause):
                return self._state(rule_name, clause, rec, ctx, entities, norm, verified, user)
        return None

    def _state(
        self,
        rule_name: str,
        clause: str,
        rec: TranscriptRecord,
        ctx: ExtractionContext,
        entities: list[str],
        norm: str,
        verified: bool,
        user: bool,
    ) -> Candidate:
        main = entities[0].casefold() if entities else short_hash(norm)
        evidence = verified or user
        if rule_name == "excluded_cause":
            return self._candidate(
                _Rule(rule_name, MemoryType.FACT, "excluded_cause", 0.9 if evidence else 0.75),
                summary=clip(clause), rec=rec, ctx=ctx, entities=entities,
                key=f"{ctx.scope}:excluded:{main}",
                signals=CandidateSignals(is_verified=evidence, is_stable_for_current_task=True),
                detail={"excluded_root_causes": entities[:3]},
            )  # fmt: skip
        if rule_name == "conclusion":
            return self._candidate(
                _Rule(rule_name, MemoryType.FACT, "conclusion", 0.85 if evidence else 0.7),
                summary=clip(clause), rec=rec, ctx=ctx, entities=entities,
                key=f"{ctx.scope}:conclusion:{main}",
                signals=CandidateSignals(is_verified=evidence, is_stable_for_current_task=True),
            )  # fmt: skip
        if rule_name == "decision":
            return self._candidate(
                _Rule(rule_name, MemoryType.DECISION, "current_decision", 0.85),
                summary=clip(clause), rec=rec, ctx=ctx, entities=entities,
                key=f"{ctx.scope}:decision:{main}",
                signals=CandidateSignals(is_decision=True, is_stable_for_current_task=True),
            )  # fmt: skip
        # next step: one slot per scope, so a newer plan supersedes the older one
        return self._candidate(
            _Rule("next_step", MemoryType.DECISION, "next_step", 0.8),
            summary=clip(clause), rec=rec, ctx=ctx, entities=entities,
            key=f"{ctx.scope}:next_step",
            signals=CandidateSignals(is_decision=True, is_stable_for_current_task=True),
            detail={"next_focus": entities[:4]},
        )  # fmt: skip

    def _user_memory(
        self,
        clause: str,
        rec: TranscriptRecord,
        ctx: ExtractionContext,
        entities: list[str],
        norm: str,
        *,
        explicit: bool,
    ) -> Candidate:
        lx = self.lexicon
        pref_topic = topic_of(clause, "preference", lx)
        is_pref = lx.matches("user_preference", clause) or (explicit and pref_topic is not None)
        if is_pref:
            topic = pref_topic or short_hash(norm)
            rule = _Rule(
                "explicit_remember" if explicit else "user_preference",
                MemoryType.PREFERENCE,
                "user_preference",
                0.95 if explicit else 0.9,
            )
            key = f"user:pref:{topic}"
        elif lx.matches("user_constraint", clause):
            topic = topic_of(clause, "constraint", lx) or short_hash(norm)
            rule = _Rule("explicit_remember", MemoryType.CONSTRAINT, "user_constraint", 0.95)
            key = _constraint_key(ctx, topic, entities)
        else:
            topic = entities[0].casefold() if entities else short_hash(norm)
            rule = _Rule("explicit_remember", MemoryType.FACT, "user_stated", 0.95)
            key = f"user:fact:{topic}:{short_hash(norm, 6)}"
        return self._candidate(
            rule, summary=clip(clause), rec=rec, ctx=ctx, entities=entities, key=key,
            signals=CandidateSignals(
                is_verified=True, is_preference=is_pref, explicit_remember=explicit,
                is_user_constraint=rule.memory_type is MemoryType.CONSTRAINT,
                is_stable_for_current_task=True,
            ),
            detail={"topic": topic},
        )  # fmt: skip

    def _chit_chat(self, rec: TranscriptRecord, ctx: ExtractionContext, text: str) -> Candidate:
        return self._candidate(
            _Rule("chit_chat", MemoryType.FACT, "chit_chat", 0.2),
            summary=clip(text, 80), rec=rec, ctx=ctx, entities=[],
            key=f"{ctx.scope}:chat:{short_hash(normalise_fact(text))}",
            signals=CandidateSignals(chit_chat=True, transient=True),
        )  # fmt: skip

    def _conversation_fact(
        self, rec: TranscriptRecord, ctx: ExtractionContext, text: str, sentences: list[str]
    ) -> Candidate | None:
        """One ``conversation_fact`` for the user's sentences no other rule claimed.

        What the person said about themselves or their world ("My kids love painting")
        is verified by construction (they said it); questions are dropped unless they
        state something about the asker.  One candidate per message keeps the
        provenance per turn, and the key is the normalised statement, so a restated fact
        merges instead of duplicating.  ``text`` is what the budget let extraction read
        of the message; ``sentences`` are those of its sentences no rule claimed.
        """
        if not text or self.lexicon.matches("chit_chat", text):
            return None
        prefix, body = _speaker_prefix(text)
        if self.lexicon.matches("chit_chat", body):
            return None
        lead = f"{prefix}: "
        clauses = [
            c.removeprefix(lead) if prefix else c for c in sentences
            # "Here is the log:" introduces material (stripped code), it states nothing
            if not c.rstrip().endswith((":", "："))
            and (not self.lexicon.matches("question", c) or states_about_self(c))
            and not (self.drop_reactions and is_reaction(c.removeprefix(lead), self.lexicon))
        ]  # fmt: skip
        statement = " ".join(clauses)
        if not _long_enough(statement):
            return None
        summary = clip(f"{prefix}: {statement}" if prefix else statement, CONVERSATION_FACT_CHARS)
        speaker = (rec.name or "").strip() or prefix
        entities = extract_entities(summary, self.lexicon)
        if speaker:
            entities = [speaker, *(e for e in entities if e.casefold() != speaker.casefold())]
        return Candidate(
            memory_type=MemoryType.FACT,
            subtype="conversation_fact",
            summary=summary,
            detail={"speaker": speaker},
            entities=entities[:MAX_ENTITIES],
            tags=["conversation_fact"],
            canonical_fact_key=f"user:conv:{short_hash(normalise_fact(summary), 16)}",
            source=MemorySource(kind="conversation", message_ids=[rec.message_id]),
            confidence=0.7,
            signals=CandidateSignals(is_verified=True),
            rule="conversation_fact",
            turn_count=max(1, ctx.turn_index),
        )

    # ------------------------------------------------------------------ helpers
    def _entities(self, text: str, ctx: ExtractionContext) -> list[str]:
        return extract_entities(text, self.lexicon, extra=ctx.known_entities)

    def _candidate(
        self,
        rule: _Rule,
        *,
        summary: str,
        rec: TranscriptRecord,
        ctx: ExtractionContext,
        entities: list[str],
        key: str,
        signals: CandidateSignals,
        detail: dict[str, object] | None = None,
    ) -> Candidate:
        tool_ids = [rec.tool_call_id] if rec.tool_call_id else []
        # every part is valid already (the L0 record, the rule's constants): the hot path
        # sets the fields instead of re-validating them (core.models.trusted); a tool call
        # id is still checked (L0 may hold one the provenance refuses)
        src = dict(
            kind="tool" if rec.role is Role.TOOL else "conversation",
            message_ids=[rec.message_id],
            tool_call_ids=tool_ids,
        )
        source = MemorySource(**src) if tool_ids else trusted(MemorySource, src)
        return trusted(Candidate, dict(
            memory_type=rule.memory_type,
            subtype=rule.subtype,
            summary=summary,
            detail={"role": rec.role.value, **(detail or {})},
            entities=entities,
            tags=[rule.subtype],
            canonical_fact_key=key[:256],
            source=source,
            confidence=rule.confidence,
            signals=signals,
            rule=rule.name,
            turn_count=max(1, ctx.turn_index),
        ))  # fmt: skip
