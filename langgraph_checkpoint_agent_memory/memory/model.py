"""What memory is made of: scopes, facts, episodes, and the namespaces that hold them.

A **scope** (any subset of ``user_id``, ``agent_id`` and ``workflow_id``) becomes the middle
of every namespace, in a fixed order, so a scope's items sit under exactly one namespace per
kind::

    ("memory", "user=alice", "agent=support", "facts")     current facts
    ("memory", "user=alice", "agent=support", "history")   superseded values
    ("memory", "user=alice", "agent=support", "episodes")  what happened, turn by turn

Label values are percent-encoded (``.`` is not allowed in a LangGraph namespace label), so a
user id such as ``alice@example.com`` is data, never structure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, unquote

from langgraph_checkpoint_agent_memory.errors import ConfigurationError, InvalidValueError
from langgraph_checkpoint_agent_memory.text import dated_text, episode_text, fact_text

if TYPE_CHECKING:
    from langgraph_checkpoint_agent_memory.memory.candidates import EpisodeEntry as EpisodeEntry
    from langgraph_checkpoint_agent_memory.memory.candidates import EpisodeSummary as EpisodeSummary
    from langgraph_checkpoint_agent_memory.memory.candidates import Extraction as Extraction
    from langgraph_checkpoint_agent_memory.memory.candidates import FactCandidate as FactCandidate

#: The extractor's pydantic models (:mod:`.candidates`), loaded on first use: reading needs none.
_CANDIDATES = frozenset({"EpisodeEntry", "EpisodeSummary", "Extraction", "FactCandidate"})


def __getattr__(name: str) -> Any:
    if name in _CANDIDATES:
        from langgraph_checkpoint_agent_memory.memory import candidates

        return getattr(candidates, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The scope keys, in namespace order.
SCOPE_KEYS = ("user_id", "agent_id", "workflow_id")
_SHORT = {"user": "user_id", "agent": "agent_id", "workflow": "workflow_id"}
_LONG = {v: k for k, v in _SHORT.items()}

KINDS: tuple[str, ...] = ("facts", "history", "episodes")


#: The longest identifiers memory keeps, in characters: the column sizes on PostgreSQL and SAP
#: HANA, checked before anything is written so every backend gives one outcome.
#: What an episode's ``status`` can be: ``pending`` (not consolidated yet) -> ``done``;
#: ``parked`` after repeated failures.
EPISODE_STATUSES: tuple[str, ...] = ("pending", "done", "parked")
MAX_THREAD_ID = 255
MAX_EPISODE_KEY = 255
MAX_NAMESPACE = 1024


#: A lone surrogate: what UTF-8 cannot encode.
_SURROGATE = re.compile("[\ud800-\udfff]")


def checked_identifier(value: Any, name: str, longest: int) -> str:
    """``value`` as an identifier every backend stores (a thread id may also be an int or
    a UUID, stored as its text, as the checkpointers do), else an :class:`InvalidValueError`."""
    if name == "thread_id" and (
        isinstance(value, uuid.UUID) or (isinstance(value, int) and not isinstance(value, bool))
    ):
        value = str(value)
    if not isinstance(value, str):
        raise InvalidValueError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    if not value:
        raise InvalidValueError(f"{name} must not be empty")
    if len(value) > longest:
        raise InvalidValueError(f"{name} is {len(value)} characters; at most {longest}")
    if "\x00" in value:
        raise InvalidValueError(f"{name} contains a NUL character")
    if not value.isascii() and _SURROGATE.search(value):
        raise InvalidValueError(f"{name} is not valid Unicode (a lone surrogate)")
    return value


def check_count(value: Any, name: str) -> int:
    """``value`` if it is a whole number >= 1, else a :class:`ConfigurationError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


class ScopeError(ConfigurationError):
    """A scope is missing, empty or malformed."""


def _encode(value: str) -> str:
    return quote(value, safe="@:+-_~!$'()").replace(".", "%2E")


@dataclass(frozen=True, order=True)
class Scope:
    """Whose memory: any non-empty subset of user, agent and workflow."""

    user_id: str | None = None
    agent_id: str | None = None
    workflow_id: str | None = None

    def __post_init__(self) -> None:
        for name in SCOPE_KEYS:
            value = getattr(self, name)
            if isinstance(value, int | uuid.UUID) and not isinstance(value, bool):
                # the one rule for the API and a graph's config: 42 is the id "42"
                object.__setattr__(self, name, value := str(value))
            if value is not None and (not isinstance(value, str) or not value):
                raise ScopeError(
                    f"scope {name} must be a non-empty string (or an integer or UUID), "
                    f"got {value!r}"
                )
            if value is not None and not value.isascii() and _SURROGATE.search(value):
                raise InvalidValueError(f"scope {name} is not valid Unicode (a lone surrogate)")
        if self.empty:
            raise ScopeError("a scope needs at least one of user_id, agent_id, workflow_id")

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in SCOPE_KEYS)

    @classmethod
    def of(cls, scope: ScopeLike) -> Scope:
        """A ``Scope`` from a ``Scope``, a mapping or a ``user=alice,agent=support`` string."""
        if isinstance(scope, Scope):
            return scope
        if isinstance(scope, str):
            return cls.parse(scope)
        if isinstance(scope, Mapping):
            if unknown := [k for k in scope if _SHORT.get(k, k) not in SCOPE_KEYS]:
                raise ScopeError(
                    f"unknown scope key {unknown[0]!r}; use user_id, agent_id, workflow_id"
                )
            return cls(**{_SHORT.get(k, k): v for k, v in scope.items() if v is not None})
        raise ScopeError(f"a scope is a mapping, a Scope or a string, not {type(scope).__name__}")

    @classmethod
    def parse(cls, text: str) -> Scope:
        """Parse ``user=alice,agent=support`` (``user_id=`` etc. work too)."""
        values: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            key = _SHORT.get(name.strip(), name.strip())
            if not sep or key not in SCOPE_KEYS or not value:
                raise ScopeError(
                    f"cannot read scope {text!r}: write it as user=alice,agent=support "
                    "(keys: user, agent, workflow)"
                )
            if key in values:
                raise ScopeError(f"scope {text!r} names {name.strip()} twice")
            values[key] = unquote(value.strip())
        return cls(**values)

    @property
    def labels(self) -> tuple[str, ...]:
        """Namespace labels, one per key present, in a fixed order."""
        return tuple(
            f"{_LONG[k]}={_encode(v)}" for k in SCOPE_KEYS if (v := getattr(self, k)) is not None
        )

    @property
    def key(self) -> str:
        """The canonical text form, ``user=alice,agent=support``; parses back to this scope."""
        return ",".join(self.labels)

    def as_dict(self) -> dict[str, str]:
        return {k: v for k in SCOPE_KEYS if (v := getattr(self, k)) is not None}

    def covers(self, other: Scope) -> bool:
        """Whether ``other`` is this scope or narrower (erasing this scope erases it)."""
        return all(getattr(other, k) == v for k, v in self.as_dict().items())

    @classmethod
    def from_labels(cls, labels: Sequence[str]) -> Scope:
        return cls.parse(",".join(labels))

    def __str__(self) -> str:
        return self.key


ScopeLike = Scope | Mapping[str, Any] | str


def namespace(root: str, scope: Scope, kind: str) -> tuple[str, ...]:
    """Where ``scope``'s items of ``kind`` live under ``root``; an :class:`InvalidValueError`
    when that is longer than :data:`MAX_NAMESPACE` characters joined with dots."""
    if kind not in KINDS:
        raise ConfigurationError(f"unknown memory kind {kind!r}; one of {', '.join(KINDS)}")
    labels = (root, *scope.labels, kind)
    joined = sum(map(len, labels)) + len(labels) - 1
    # the longest kind decides, so that a scope fits all of its namespaces or none
    longest = joined - len(kind) + max(map(len, KINDS))
    if longest > MAX_NAMESPACE:
        raise InvalidValueError(
            f"scope {scope.key[:40]!r}... is too long: its namespaces would be {longest} "
            f"characters; at most {MAX_NAMESPACE} (shorter user, agent or workflow ids)"
        )
    return labels


def normalize_attribute(name: str) -> str:
    """``"Home City"`` and ``home_city`` are one attribute."""
    cleaned = re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_")
    if not cleaned:
        raise InvalidValueError(f"a fact attribute needs letters or digits, got {name!r}")
    return cleaned


def normalize_value(value: str) -> str:
    return " ".join(str(value).split()).casefold()


def digest(*parts: str, size: int = 16) -> str:
    joined = "".join(f"{part}\x1f" for part in parts)
    return hashlib.blake2b(joined.encode(), digest_size=size).hexdigest()


def fact_key(attribute: str, value: str, multi: bool) -> str:
    """One current fact per single-valued attribute; one per value of a multi-valued one."""
    return f"{attribute}#{digest(normalize_value(value), size=8)}" if multi else attribute


def default_statement(attribute: str, value: str) -> str:
    """The statement of a fact the extractor stated without a sentence."""
    return f"{attribute.replace('_', ' ')}: {value}"


#: A moment: seconds since the epoch, or a timezone-aware ``datetime``.
AsOf = float | datetime


#: The first and the last second ``datetime`` can name (0001-01-01T00:00:00 and
#: 9999-12-31T23:59:59 UTC): the moments the package's dates hold.
EARLIEST_SECONDS = -62_135_596_800
LATEST_SECONDS = 253_402_300_799


def as_timestamp(
    when: AsOf, name: str = "as_of", error: type[ValueError] = ConfigurationError
) -> float:
    """Seconds since the epoch of ``when`` (seconds, or a timezone-aware ``datetime``).

    Raises:
        ConfigurationError: (or ``error``) ``when`` is a naive ``datetime`` (its moment
            depends on the machine's time zone), not finite, or outside the years 1 to 9999
            (milliseconds, most likely), naming the argument ``name``.

    Example:
        ```python
        from datetime import datetime, timezone

        assert as_timestamp(datetime(1970, 1, 2, tzinfo=timezone.utc)) == 86400.0
        ```
    """
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise error(
                f"{name}={when!r} is a naive datetime: give it a time zone "
                "(datetime(..., tzinfo=timezone.utc)) or pass seconds since the epoch"
            )
        when = when.timestamp()  # a moment in UTC: still within the years 1 to 9999?
    if isinstance(when, (int, float)) and not isinstance(when, bool):
        if not math.isfinite(when):
            raise error(f"{name} must be a finite number of seconds, got {when!r}")
        if not EARLIEST_SECONDS <= when <= LATEST_SECONDS:
            raise error(  # past the year 9999: milliseconds, most likely
                f"{name}={when!r} is not between the years 1 and 9999 in seconds since the "
                "epoch (UTC); milliseconds? divide by 1000"
            )
        return float(when)
    raise error(
        f"{name} is seconds since the epoch or a timezone-aware datetime, not {type(when).__name__}"
    )


def since_timestamp(since: str) -> float:
    """Seconds since the epoch of an ISO date or date and time (``2023-11-01``,
    ``2023-11-01T08:00:00+01:00``), or of the first day of a month (``2023-11``) or a year
    (``2023``); a date, or a time without a zone, is read in UTC.

    Raises:
        ValueError: ``since`` is none of these.

    Example:
        >>> since_timestamp("1970-01-02"), since_timestamp("1970-02"), since_timestamp("1971")
        (86400.0, 2678400.0, 31536000.0)
    """
    text = since.strip()
    if re.fullmatch(r"\d{4}", text):
        text += "-01-01"
    elif re.fullmatch(r"\d{4}-\d{2}", text):
        text += "-01"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"since={since!r} is not a date (YYYY-MM-DD)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds")


class StoredMemory:
    """What facts and episodes share: each is stored as an item of its fields but its key."""

    KIND: ClassVar[str]
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def to_value(self) -> dict[str, Any]:
        """The JSON value stored for this memory (lists copied)."""
        value = dataclasses.asdict(self)
        del value["key"]
        return {"kind": self.KIND, **value}


@dataclass
class Fact(StoredMemory):
    """A fact as stored. ``valid_to`` and ``superseded_by`` are set once it is history.

    Two times (bi-temporal): *valid time*, when the fact held in the world (``valid_from``
    to ``valid_to``: when it was said, or the ``since`` a source gave), and *transaction
    time*, when the memory believed it (``learned_at``: this version was written;
    ``ended_at``: its ``valid_to`` was recorded; ``retracted_at``: a correction replaced it,
    so from then on it is only a past belief). Rows written before these fields existed read
    ``learned_at`` as ``valid_from`` and ``ended_at`` as ``valid_to``.
    """

    KIND: ClassVar[str] = "fact"

    key: str
    attribute: str
    value: str
    statement: str
    multi: bool = False
    importance: float = 0.5
    confirmations: int = 1
    valid_from: float = 0.0
    valid_to: float | None = None
    last_confirmed: float = 0.0
    superseded_by: str | None = None
    source_episodes: list[str] = field(default_factory=list)
    pinned: bool = False
    learned_at: float | None = None
    ended_at: float | None = None
    retracted_at: float | None = None

    @property
    def current(self) -> bool:
        return self.valid_to is None

    @property
    def learned(self) -> float:
        """When the memory learned this version (``valid_from`` for rows written before
        transaction time was kept)."""
        return self.valid_from if self.learned_at is None else self.learned_at

    @property
    def ended(self) -> float | None:
        """When the memory recorded this version's end (``None`` while current)."""
        if self.valid_to is None:
            return None
        return self.valid_to if self.ended_at is None else self.ended_at

    @classmethod
    def from_value(cls, key: str, value: Mapping[str, Any]) -> Fact:
        return cls(
            key=key,
            attribute=value["attribute"],
            value=value["value"],
            statement=value.get("statement") or "",
            multi=bool(value.get("multi")),
            importance=float(value.get("importance", 0.5)),
            confirmations=int(value.get("confirmations", 1)),
            valid_from=float(value.get("valid_from") or 0.0),
            valid_to=value.get("valid_to"),
            last_confirmed=float(value.get("last_confirmed") or 0.0),
            superseded_by=value.get("superseded_by"),
            source_episodes=list(value.get("source_episodes") or []),
            pinned=bool(value.get("pinned")),
            learned_at=_seconds(value.get("learned_at")),
            ended_at=_seconds(value.get("ended_at")),
            retracted_at=_seconds(value.get("retracted_at")),
        )

    def text(self) -> str:
        """The fact as a sentence: its statement (what the context block shows)."""
        return self.statement or default_statement(self.attribute, self.value)

    def search_text(self) -> str:
        """What search indexes for this fact: its attribute as words, its value and its
        statement, so ``query="city"`` finds the fact ``home_city``."""
        return fact_text(self.attribute, self.value, self.statement)


@dataclass
class Episode(StoredMemory):
    """One recorded turn (or a batch of turns) and, once consolidated, its summary."""

    KIND: ClassVar[str] = "episode"

    key: str
    messages: list[dict[str, str]]
    occurred_at: float
    thread_id: str | None = None
    status: str = "pending"  # pending -> done; parked after repeated failures
    summary: str | None = None
    outcome: str | None = None
    importance: float = 0.5

    @classmethod
    def from_value(cls, key: str, value: Mapping[str, Any]) -> Episode:
        return cls(
            key=key,
            messages=list(value.get("messages") or []),
            occurred_at=float(value.get("occurred_at") or 0.0),
            thread_id=value.get("thread_id"),
            status=value.get("status", "pending"),
            summary=value.get("summary"),
            outcome=value.get("outcome"),
            importance=float(value.get("importance", 0.5)),
        )

    def transcript(self) -> str:
        return episode_text(None, self.messages)

    def text(self) -> str:
        """What search indexes: the summary once there is one, and the words said."""
        return episode_text(self.summary, self.messages)


def lexical_text(memory: Fact | Episode) -> str:
    """What the lexical index keeps for a fact or an episode: the text its vector is
    embedded from (:meth:`Fact.search_text`, :meth:`Episode.text`) and the day the fact
    became true (``valid_from``) or the episode happened (``occurred_at``) as words a
    question says (:func:`~..text.date_words`), so "what did she do in May 2023?" finds it
    by its date. The date stays out of the vector's text: measured on LoCoMo, it costs
    vector search what it gains lexical search. Every write of a fact, a past fact or an
    episode indexes this text.

    Example:
        ```python
        fact = Fact("city", "city", "Berlin", "Alice lives in Berlin", valid_from=1683460800.0)
        assert lexical_text(fact) == "city: Berlin\\nAlice lives in Berlin\\nMay 7 7th 2023-05-07"
        assert fact.search_text() == "city: Berlin\\nAlice lives in Berlin"
        ```
    """
    if isinstance(memory, Fact):
        return dated_text(memory.search_text(), memory.valid_from)
    return dated_text(memory.text(), memory.occurred_at)


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)
