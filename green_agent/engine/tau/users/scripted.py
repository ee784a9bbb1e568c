"""A deterministic simulated user built from the task's structured user instructions: no network, no key.

Why: the offline demo and the tests need a customer that behaves the same way every time, so that a battle's result
depends only on the white agent. It is not a substitute for an LLM user when measuring a real agent: it cannot
negotiate, change its mind or follow the task's free-text instructions.

Rules (applied to each agent message in this order; the first that matches decides the reply):

0. Opening (the answer to tau2's greeting): the task's ``reason_for_call`` then its ``known_info``, turned into the
   first person ("You want to return..." -> "I want to return...", "your" -> "my"). Sentences that talk about the
   agent ("If the agent asks for confirmation, ...") or name a conversation-ending token ("use the
   '###OUT-OF-SCOPE###' tag to end the conversation", in banking_knowledge's free-text instructions) are
   instructions to a simulator, not things a customer says, and are left out (so are such tokens anywhere else in
   the text: the customer does not end the call in its first sentence).
1. Turn limit: after ``max_user_turns`` user messages (the opening included) the next reply is
   "I have to go now. ###STOP###".
2. Transfer: a message saying the customer is being transferred to a human agent (or naming
   ``transfer_to_human_agents``) gets "Thank you. ###TRANSFER###".
3. Device actions (only with an environment that has user tools, i.e. telecom): a message naming one of the user's
   tools by its exact name (e.g. ``toggle_airplane_mode``) makes the user run the first one named, through
   ``AttemptEnvironment.call_tool(requestor="user")`` (recorded as the user's tool call, like the LLM user's), and
   reply "I ran <tool>. It returned: <output>". The arguments are the ones the agent gave, when a JSON object
   follows the tool's name in the message ("... set_network_mode_preference with {"mode": "4g_5g_preferred"}"), as
   a customer does what they are told; otherwise those of the task's next unused gold user action of that name
   (``{}`` when there is none). Either way that gold action counts as used, so the customer follows the task's
   device steps in order. A call with the agent's arguments that kills, crashes or exhausts the tool sandbox is the
   agent's fault (it chose them), not the simulated user's.
4. Not a question: a message with no "?" and no request ("please provide", "could you", "let me know", ...) is a
   statement; the user ends the conversation: "Thank you, that's all I needed. ###STOP###".
5. Unknown information: a question about something the task's ``unknown_info`` mentions (e.g. the email address)
   gets "I'm sorry, I don't know that: <unknown_info in first person>", followed by the known information when
   the same question also asks for identification details.
6. Identification: a question asking for a name, zip code, email, user id, phone, order or reservation number,
   account or verification gets the ``known_info`` in the first person.
7. Confirmation: a question asking to confirm or proceed ("...confirm...?", "would you like to proceed?",
   "yes/no", "shall I", ...) gets "Yes.".
8. Any other question gets the reason for the call and the known information again (first person).

So an agent that does the work with tool calls and then sends one final message with no question (the replay
reference agent) ends the conversation with ``###STOP###`` (tau2's ``user_stop``).
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

from green_agent.body_limits import json_shape_problem
from green_agent.engine.tau.sandbox import ToolFault
from green_agent.engine.tau.tasks import TaskRef
from green_agent.engine.tau.users.base import STOP, TRANSFER, UserTurn

if TYPE_CHECKING:
    from green_agent.engine.tau.environment import AttemptEnvironment

_ABSENT = {"", ".", "none", "n/a"}

_PRONOUNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\byou are\b", re.IGNORECASE), "I am"),
    (re.compile(r"\byou were\b", re.IGNORECASE), "I was"),
    (re.compile(r"\byou're\b", re.IGNORECASE), "I'm"),
    (re.compile(r"\byou've\b", re.IGNORECASE), "I've"),
    (re.compile(r"\byou'll\b", re.IGNORECASE), "I'll"),
    (re.compile(r"\byou'd\b", re.IGNORECASE), "I'd"),
    (re.compile(r"\byourself\b", re.IGNORECASE), "myself"),
    (re.compile(r"\byours\b", re.IGNORECASE), "mine"),
    (re.compile(r"\byour\b", re.IGNORECASE), "my"),
]
_YOU = re.compile(r"\byou\b", re.IGNORECASE)
_CLAUSE_START = re.compile(
    r"(^\s*|[.!?;:,(]\s*|\n\s*|\b(and|but|or|if|that|because|when|so|then|unless|since|while|once|until|as)\s+)$",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")

_TRANSFER = re.compile(
    r"transfer_to_human_agents|\btransferr?(ing|ed)?\b[^.?!]*\b(human|agent|representative|specialist|supervisor)",
    re.IGNORECASE,
)
_REQUEST = re.compile(
    r"\b(please|kindly)\s+(provide|share|tell|give|send|confirm|let me know|specify|choose|select|verify|check)\b"
    r"|\b(could|can|would|will)\s+you\b|\blet me know\b|\bi (will )?need (your|you to|to know)\b",
    re.IGNORECASE,
)
_IDENTITY = re.compile(
    r"\b(name|zip|zip ?code|postal|e-?mail|user ?id|username|phone|order (id|number|#)|reservation|account"
    r"|identif\w*|verify|verification|authenticat\w*|locate your|look up your)\b",
    re.IGNORECASE,
)
_CONFIRM = re.compile(
    r"\b(confirm\w*|proceed|go ahead|yes/no|yes or no|is (that|this) (correct|right|ok|okay)|shall i|should i"
    r"|want me to|ok\?|okay\?)",
    re.IGNORECASE,
)
_STOPWORDS = frozenset(
    [
        "about",
        "also",
        "because",
        "cannot",
        "can't",
        "does",
        "doesn't",
        "don't",
        "have",
        "know",
        "remember",
        "that",
        "their",
        "them",
        "there",
        "they",
        "this",
        "what",
        "which",
        "with",
        "your",
        "yours",
        "user",
        "agent",
        "asks",
        "when",
        "will",
        "would",
        "should",
        "could",
        "from",
        "into",
        "only",
        "then",
        "than",
        "these",
        "those",
    ]
)


def first_person(text: str) -> str:
    """Turn a second-person scenario sentence ("You are X, your zip is Y") into the customer's own words."""
    for pattern, replacement in _PRONOUNS:
        text = pattern.sub(functools.partial(_replace_keeping_case, replacement=replacement), text)

    def you(match: re.Match[str]) -> str:
        before = text[: match.start()]
        word = "I" if _CLAUSE_START.search(before) else "me"
        return word

    return _YOU.sub(you, text)


def _replace_keeping_case(match: re.Match[str], replacement: str) -> str:
    return _keep_case(match.group(0), replacement)


def _keep_case(original: str, replacement: str) -> str:
    if original[:1].isupper() and replacement[:1].islower():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def _present(value: str | None) -> str:
    return "" if value is None or value.strip().lower() in _ABSENT else value.strip()


def _sentence(text: str) -> str:
    """``text`` ending with punctuation, so that answers can be joined."""
    text = text.strip()
    return text if not text or text[-1] in ".!?" else f"{text}."


def _without_agent_sentences(text: str) -> str:
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()]
    kept = [s for s in sentences if not re.search(r"\bthe agent\b", s, re.IGNORECASE) and not _TOKEN.search(s)]
    return " ".join(kept)


_TOKEN = re.compile(r"###[A-Z_-]{1,40}###")
"""A conversation-control token (``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###``) in a task's text."""


def _without_tokens(text: str) -> str:
    return _TOKEN.sub("", text)


def _keywords(text: str) -> set[str]:
    words = {w.lower() for w in re.findall(r"[A-Za-z][A-Za-z'-]+", text)}
    return {w for w in words if len(w) >= 4 and w not in _STOPWORDS}


_ARGUMENTS_AFTER_NAME = re.compile(r"^[ \t]*(?:with[ \t]+(?:the[ \t]+)?(?:arguments?|settings?)?:?[ \t]*)?(?=\{)")
"""What may stand between a user tool's name and its JSON arguments: spaces and an optional "with (arguments:)"."""

MAX_GIVEN_ARGUMENTS_CHARS = 4096
"""Arguments longer than this are not read (no device tool takes more than a few short fields)."""


def given_arguments(after_name: str) -> dict[str, Any] | None:
    """The JSON object right after a user tool's name in the agent's message, or None when there is none.

    The agent's text is hostile: only a bounded prefix is parsed, and a deep or malformed object counts as none
    given (the customer then falls back on the task's own step).
    """
    lead = _ARGUMENTS_AFTER_NAME.match(after_name)
    if lead is None:
        return None
    text = after_name[lead.end() : lead.end() + MAX_GIVEN_ARGUMENTS_CHARS]
    if json_shape_problem(text.encode("utf-8", "replace")) is not None:
        return None
    try:
        value, _end = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class ScriptedUser:
    """A rule-based customer for one attempt (rules in the module docstring). Deterministic: same task, same
    agent messages, same replies."""

    def __init__(
        self, ref: TaskRef, *, max_user_turns: int = 12, environment: AttemptEnvironment | None = None
    ) -> None:
        if max_user_turns < 1:
            raise ValueError("max_user_turns must be >= 1")
        instructions = ref.task.user_scenario.instructions
        if isinstance(instructions, str):  # mock tasks: free text only
            reason, known, unknown = instructions, "", ""
        else:
            reason = instructions.reason_for_call
            known = _present(instructions.known_info)
            unknown = _present(instructions.unknown_info)
        self._reason = _sentence(first_person(_without_agent_sentences(reason) or _without_tokens(reason).strip()))
        self._known = _sentence(first_person(_without_tokens(known)))
        self._unknown = _sentence(first_person(_without_tokens(unknown)))
        self._unknown_words = _keywords(unknown)
        self._max_user_turns = max_user_turns
        self._turns = 0
        self._environment = environment
        tools = environment.user_tools if environment is not None else []
        self._user_tools = [tool["function"]["name"] for tool in tools]
        actions = ref.task.evaluation_criteria.actions if ref.task.evaluation_criteria else None
        self._gold_user_actions: list[tuple[str, dict[str, Any]]] = [
            (action.name, dict(action.arguments)) for action in actions or [] if action.requestor == "user"
        ]

    def _turn(self, text: str) -> UserTurn:
        self._turns += 1
        return UserTurn.from_text(text)

    def _both(self) -> str:
        return " ".join(part for part in (self._reason, self._known) if part)

    async def opening(self) -> UserTurn:
        """Reason for the call plus the known information, in the first person."""
        return self._turn(f"Hi! {self._both()}".strip())

    async def reply(self, agent_message: str) -> UserTurn:
        """Apply the rules of the module docstring to ``agent_message``."""
        message = agent_message or ""
        if self._turns >= self._max_user_turns:
            return self._turn(f"I have to go now. {STOP}")
        if _TRANSFER.search(message):
            return self._turn(f"Thank you. {TRANSFER}")
        named = self._named_user_tool(message)
        if named is not None:
            return self._turn(await self._run_user_tool(*named))
        if "?" not in message and not _REQUEST.search(message):
            return self._turn(f"Thank you, that's all I needed. {STOP}")
        asks_identity = bool(_IDENTITY.search(message))
        if self._unknown_words and self._unknown_words & _keywords(message):
            text = f"I'm sorry, I don't know that: {self._unknown}"
            if asks_identity and self._known:
                text += f" {self._known}"
            return self._turn(text)
        if asks_identity and self._known:
            return self._turn(self._known)
        if _CONFIRM.search(message):
            return self._turn("Yes.")
        return self._turn(self._both() or "Yes.")

    def _named_user_tool(self, message: str) -> tuple[str, dict[str, Any] | None] | None:
        """The first user tool the message names and the arguments given after it (None: none given)."""
        if self._environment is None or not self._user_tools:
            return None
        positions = [
            (match.start(), match.end(), name)
            for name in self._user_tools
            if (match := re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message))
        ]
        if not positions:
            return None
        _start, end, name = min(positions)
        return name, given_arguments(message[end:])

    async def _run_user_tool(self, name: str, given: dict[str, Any] | None) -> str:
        assert self._environment is not None
        arguments: dict[str, Any] = {}
        for i, (gold_name, gold_arguments) in enumerate(self._gold_user_actions):
            if gold_name == name:
                arguments = gold_arguments
                del self._gold_user_actions[i]
                break
        if given is None:
            outcome = await self._environment.call_tool(name, arguments, requestor="user")
            return f"I ran {name}. It returned: {outcome.content}"
        try:
            outcome = await self._environment.call_tool(name, given, requestor="user")
        except ToolFault as fault:
            # The agent chose these arguments; the customer only typed them in: what they provoke is the agent's.
            raise ToolFault(
                fault.kind,
                f"{fault.detail} (the arguments the agent told the user to use)",
                requestor="assistant",
                tool=fault.tool,
            ) from None
        return f"I ran {name}. It returned: {outcome.content}"

    async def aclose(self) -> None:
        """Nothing to release."""
