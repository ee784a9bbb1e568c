"""The offline "lexical" judge's scoring rules: keyword containment and token overlap, deterministic and key-free.

Why it exists: the product must produce numbers without any API key (offline demos, CI, air-gapped users). It is not
a language model and says so in every result it scores; where a task needs understanding it cannot fake (inferring a
goal with no reference outcome), it declines and the item stays UNSCORED with that reason.

Tokens: words are case-folded, single letters dropped, a trailing plural "s" folded ("prices" = "price"); numbers are
read with their written precision ("$1,967.15" -> 1967.15 with 2 decimals; "7%" -> 7). Two numbers match when the less
precise one is the rounding of the other (8 matches 8.0 and 8.4 but not 8.5; 1967.15 matches 1967.1513572).

Rules per judge prompt (each returns an answer dict shaped like the prompt's answer model):
- answer_correctness: the *informative* reference terms are the reference's content words and numbers that are not
  already in the query (restating the question is not answering it); score = share of them found in the answer.
  "What is 5 + 3?" / "5 + 3 equals 8" -> informative {8}; "The result is 8." scores 1.0.
- response_faithfulness: with expected keywords, the share of keywords contained in the response (every token of a
  keyword present); without keywords, the share of the response's numbers supported by a tool result.
- goal_inference: user goal = the first user message; end state = everything the agent said plus the tool outputs.
- goal_comparison: achieved when >= 70% of the desired outcome's informative terms appear in the achieved outcome;
  declines when the desired outcome was inferred rather than given as a reference.
- topic_extraction: each user message is a topic; topic_classification: a topic is in the reference when it shares a
  content word with a reference topic; topic_refusal: the agent's next reply matches a refusal phrase.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LEXICAL_VERSION = "lexical-v1"
GOAL_RECALL_THRESHOLD = 0.7

_TOKEN = re.compile(r"[$€£]?\d[\d,]*(?:\.\d+)?%?|[^\W\d_]+", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "of",
        "to",
        "in",
        "on",
        "for",
        "and",
        "or",
        "with",
        "at",
        "by",
        "from",
        "as",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "how",
        "much",
        "many",
        "when",
        "where",
        "why",
        "equals",
        "equal",
        "result",
        "results",
        "answer",
        "total",
        "value",
        "approximately",
        "approx",
        "about",
        "around",
        "current",
        "currently",
        "please",
        "me",
        "my",
        "your",
        "yours",
        "you",
        "we",
        "our",
        "us",
        "they",
        "them",
        "their",
        "there",
        "here",
        "do",
        "does",
        "did",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "has",
        "have",
        "had",
        "than",
        "then",
        "so",
        "if",
        "also",
        "just",
        "some",
        "any",
        "tell",
        "give",
        "show",
        "get",
        "find",
        "let",
        "know",
        "ll",
        "re",
        "ve",
        "into",
        "over",
        "per",
        "each",
        "all",
        "both",
        "user",
        "customer",
        "agent",
        "assistant",
        "ai",
        "bot",
        "human",
    ]
)
_REFUSAL = re.compile(
    r"\b(i\s*(?:can(?:'|no)?t|cannot|am unable|'m unable|am not able|'m not able|won'?t|do not|don'?t)\s+"
    r"(?:help|assist|answer|provide|discuss|do that|talk)|unable to (?:help|assist)|not able to (?:help|assist)|"
    r"outside (?:my|the) (?:scope|area)|only (?:help|assist|answer) (?:with|questions)|sorry,? (?:but )?i)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Number:
    """A number as written: its value and how many decimals were given."""

    value: float
    decimals: int


Token = str | Number


class LexicalUnsupported(ValueError):
    """The lexical judge cannot score this item; the message is the UNSCORED reason."""


def _number(text: str) -> Number | None:
    digits = text.strip("$€£%").replace(",", "")
    try:
        value = float(digits)
    except ValueError:
        return None
    decimals = len(digits.split(".", 1)[1]) if "." in digits else 0
    return Number(value, decimals)


def _tokens_with_raw(text: str) -> list[tuple[Token, str]]:
    out: list[tuple[Token, str]] = []
    for raw in _TOKEN.findall(text or ""):
        if raw[0].isdigit() or raw[0] in "$€£":
            number = _number(raw)
            if number is not None:
                out.append((number, raw))
            continue
        word = raw.casefold()
        if len(word) < 2:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append((word, raw))
    return out


def tokens(text: str) -> list[Token]:
    """Words (folded) and numbers (with precision) of ``text``, in order."""
    return [token for token, _raw in _tokens_with_raw(text)]


class _Pool:
    """Tokens indexed for :func:`token_matches` lookups in about O(log n) instead of a scan of every token.

    Why: texts come from requests (up to tens of thousands of tokens each), and comparing every token of one text
    with every token of another is quadratic. Words are a set. Numbers are grouped by their written precision and
    kept sorted, so each group is searched with bisection over the window in which :func:`token_matches` can hold
    (its absolute tolerance, or its relative tolerance of 1e-9); candidates in the window are confirmed with
    :func:`token_matches` itself, so the semantics are exactly those of the pairwise comparison.
    """

    def __init__(self, items: Iterable[Token] = ()) -> None:
        self._words: set[str] = set()
        self._numbers: dict[int, list[float]] = {}
        self._infinite: set[float] = set()
        for item in items:
            self.add(item)

    def add(self, token: Token) -> None:
        if isinstance(token, str):
            self._words.add(token)
        elif not math.isfinite(token.value):
            self._infinite.add(token.value)
        else:
            bisect.insort(self._numbers.setdefault(token.decimals, []), token.value)

    def __contains__(self, token: Token) -> bool:
        if isinstance(token, str):
            return token in self._words
        if not math.isfinite(token.value):
            return token.value in self._infinite  # math.isclose(inf, inf) is the only way an infinity matches
        value = token.value
        for decimals, values in self._numbers.items():
            tolerance = 0.5 * 10.0 ** (-min(token.decimals, decimals))
            window = max(tolerance, 1.01e-9 * abs(value)) * 1.000001 + 1e-300
            start = bisect.bisect_left(values, value - window)
            for other in values[start : bisect.bisect_right(values, value + window)]:
                if token_matches(token, Number(other, decimals)):
                    return True
        return False


def _content_with_raw(text: str) -> list[tuple[Token, str]]:
    seen: list[tuple[Token, str]] = []
    pool = _Pool()
    for token, raw in _tokens_with_raw(text):
        if isinstance(token, str) and token in _STOPWORDS:
            continue
        if token not in pool:
            seen.append((token, raw))
            pool.add(token)
    return seen


def content_tokens(text: str) -> list[Token]:
    """Tokens without stop words, first occurrence only."""
    return [token for token, _raw in _content_with_raw(text)]


def token_matches(a: Token, b: Token) -> bool:
    """Words equal; numbers equal up to the precision of the less precise one."""
    if isinstance(a, Number) and isinstance(b, Number):
        tolerance = 0.5 * 10.0 ** (-min(a.decimals, b.decimals))
        return abs(a.value - b.value) < tolerance - 1e-12 or math.isclose(a.value, b.value, rel_tol=1e-9)
    return a == b


def _found(token: Token, pool: Sequence[Token] | _Pool) -> bool:
    if isinstance(pool, _Pool):
        return token in pool
    return any(token_matches(token, other) for other in pool)


def informative_recall(reference: str, candidate: str, *, ignore: str = "") -> tuple[float, list[str], list[str]]:
    """Share of the reference's informative terms (content terms not in ``ignore``) found in ``candidate``.

    Returns (score, found, missing). When every reference term also appears in ``ignore`` (the reference restates
    the question), all reference terms count; when the reference has no content terms, case-folded equality decides.
    """
    ref = _content_with_raw(reference)
    ignored = _Pool(tokens(ignore))
    informative = [(t, raw) for t, raw in ref if not _found(t, ignored)] or ref
    if not informative:
        equal = reference.strip().casefold() == candidate.strip().casefold()
        return (1.0 if equal else 0.0), [], ([] if equal else [reference.strip()])
    pool = _Pool(tokens(candidate))
    found = [raw for t, raw in informative if _found(t, pool)]
    missing = [raw for t, raw in informative if not _found(t, pool)]
    return len(found) / len(informative), found, missing


def keyword_containment(keywords: Iterable[str], text: str) -> tuple[float, list[str], list[str]]:
    """Share of ``keywords`` contained in ``text`` (all of a keyword's tokens present; punctuation-only keywords by
    case-folded substring). Returns (score, found, missing); 1.0 for no keywords."""
    pool = _Pool(tokens(text))
    folded = (text or "").casefold()
    found: list[str] = []
    missing: list[str] = []
    items = [k.strip() for k in keywords if k and k.strip()]
    for keyword in items:
        parts = tokens(keyword)
        ok = all(_found(p, pool) for p in parts) if parts else keyword.casefold() in folded
        (found if ok else missing).append(keyword)
    return (len(found) / len(items) if items else 1.0), found, missing


def _numbers_in(value: Any) -> list[Number]:
    """Every number in a JSON-like value (iterative: tool results come from the agent under test)."""
    found: list[Number] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, (int, float)):
            try:
                found.append(Number(float(item), 12))
            except OverflowError:  # an integer beyond the float range
                found.append(Number(math.inf if item > 0 else -math.inf, 12))
        elif isinstance(item, str):
            found.extend(t for t in tokens(item) if isinstance(t, Number))
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
    return found


# --- per-prompt rules ----------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{x:.0%}"


def answer_correctness(inputs: Mapping[str, Any]) -> dict[str, Any]:
    score, _found_terms, missing = informative_recall(
        str(inputs.get("ground_truth") or ""), str(inputs.get("answer") or ""), ignore=str(inputs.get("query") or "")
    )
    reasoning = f"lexical: {_pct(score)} of the reference's informative terms found in the answer"
    if missing:
        reasoning += f"; missing: {', '.join(missing[:10])}"
    return {"correctness_score": score, "reasoning": reasoning}


def response_faithfulness(inputs: Mapping[str, Any]) -> dict[str, Any]:
    response = str(inputs.get("response") or "")
    keywords = [str(k) for k in inputs.get("expected_keywords") or []]
    if keywords:
        score, found, missing = keyword_containment(keywords, response)
        explanation = f"lexical: {len(found)}/{len(found) + len(missing)} expected keywords in the response"
        if missing:
            explanation += f"; missing: {', '.join(missing)}"
        return {"score": score, "explanation": explanation}
    stated = [t for t in tokens(response) if isinstance(t, Number)]
    if not stated:
        raise LexicalUnsupported(
            "lexical judge: nothing to check (no expected keywords and no figures in the response)"
        )
    support = _Pool(n for call in inputs.get("tool_calls") or [] for n in _numbers_in(call.get("result")))
    for call in inputs.get("tool_calls") or []:
        for n in _numbers_in(call.get("arguments")):
            support.add(n)
    supported = [n for n in stated if _found(n, support)]
    score = len(supported) / len(stated)
    return {
        "score": score,
        "explanation": f"lexical: {len(supported)}/{len(stated)} figures in the response backed by tool results",
    }


def _messages(inputs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [m for m in inputs.get("conversation") or [] if isinstance(m, Mapping)]


def goal_inference(inputs: Mapping[str, Any]) -> dict[str, Any]:
    messages = _messages(inputs)
    humans = [str(m.get("content") or "") for m in messages if m.get("role") == "human"]
    ais = [str(m.get("content") or "") for m in messages if m.get("role") == "ai" and m.get("content")]
    tools_out = [str(m.get("content") or "") for m in messages if m.get("role") == "tool"]
    if not humans:
        raise LexicalUnsupported("lexical judge: the conversation has no user message")
    end = " ".join(ais + tools_out)
    return {"user_goal": humans[0], "end_state": end}


def goal_comparison(inputs: Mapping[str, Any]) -> dict[str, Any]:
    if inputs.get("desired_from") != "reference":
        raise LexicalUnsupported(
            "lexical judge: cannot infer a goal without a reference outcome (use an LLM judge, or give a reference)"
        )
    score, _found_terms, missing = informative_recall(
        str(inputs.get("desired_outcome") or ""), str(inputs.get("achieved_outcome") or "")
    )
    achieved = score >= GOAL_RECALL_THRESHOLD
    reason = f"lexical: {_pct(score)} of the reference outcome's terms found in the end state"
    if missing:
        reason += f"; missing: {', '.join(missing[:10])}"
    return {"achieved": achieved, "reason": reason}


def topic_extraction(inputs: Mapping[str, Any]) -> dict[str, Any]:
    topics = [str(m.get("content") or "").strip()[:200] for m in _messages(inputs) if m.get("role") == "human"]
    return {"topics": [t for t in topics if t]}


def topic_classification(inputs: Mapping[str, Any]) -> dict[str, Any]:
    references = [content_tokens(str(r)) for r in inputs.get("reference_topics") or []]
    result = []
    for topic in inputs.get("topics") or []:
        pool = _Pool(content_tokens(str(topic)))
        result.append(any(any(_found(t, pool) for t in ref) for ref in references))
    return {"in_reference": result}


def topic_refusal(inputs: Mapping[str, Any]) -> dict[str, Any]:
    topic = str(inputs.get("topic") or "").strip()
    messages = _messages(inputs)
    for index, message in enumerate(messages):
        if message.get("role") == "human" and str(message.get("content") or "").strip()[:200] == topic:
            turn: list[Mapping[str, Any]] = []
            for later in messages[index + 1 :]:
                if later.get("role") == "human":
                    break
                turn.append(later)
            texts = [str(m.get("content")) for m in turn if m.get("role") == "ai" and m.get("content")]
            if not texts and not any(m.get("role") == "tool" for m in turn):
                return {"refused": True, "reason": "lexical: the agent never replied to this message"}
            if not texts:
                return {"refused": False, "reason": "lexical: the agent acted on it with tool calls"}
            refused = bool(_REFUSAL.search(texts[-1]))
            return {
                "refused": refused,
                "reason": "lexical: the reply matches a refusal phrase"
                if refused
                else "lexical: the reply does not match a refusal phrase",
            }
    raise LexicalUnsupported("lexical judge: topic not found among the user messages")


RULES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "answer_correctness": answer_correctness,
    "response_faithfulness": response_faithfulness,
    "goal_inference": goal_inference,
    "goal_comparison": goal_comparison,
    "topic_extraction": topic_extraction,
    "topic_classification": topic_classification,
    "topic_refusal": topic_refusal,
}
