"""What an extractor returns, as pydantic models: the schema structured output is asked
for, and what any answer is validated against. :mod:`.model` loads this module on first use:
reading stored memory needs no pydantic.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, field_validator, model_validator

from langgraph_checkpoint_agent_memory.memory.model import (
    default_statement,
    normalize_attribute,
    since_timestamp,
)
from langgraph_checkpoint_agent_memory.text import fact_text, storable

logger = logging.getLogger(__name__)
#: Text as the database stores it (see :func:`~..text.storable`).
Storable = Annotated[str, AfterValidator(storable)]


class EpisodeSummary(BaseModel):
    """What happened in one episode, in a sentence or two."""

    summary: Storable = Field(description="What happened, in one or two sentences")
    outcome: Storable = Field(default="", description="How it ended: resolved, open, ...")
    importance: float = Field(default=0.5, ge=0.0, le=1.0, description="0 trivial .. 1 vital")


class EpisodeEntry(EpisodeSummary):
    """One episode's summary in an answer about several: which episode, by its number (1
    for the first episode shown to the extractor) or by its key, and what happened in it.

    When no entry of an answer names its episode, the entries are the episodes in order."""

    episode: int | None = Field(
        default=None, ge=1, description="The episode's number: 1 for the first episode"
    )
    key: str | None = Field(default=None, description="The episode's key, instead of its number")


class FactCandidate(BaseModel):
    """One thing that is true about the scope now."""

    attribute: str = Field(description="snake_case name, e.g. city, employer, likes")
    value: str = Field(description="The value, e.g. Berlin")
    statement: Storable = Field(default="", description="A sentence, e.g. Alice lives in Berlin")
    multi: bool = Field(default=False, description="True if the attribute holds many values")
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    episode: int | None = Field(
        default=None,
        ge=1,
        description="The number of the episode that states it (default: the last episode)",
    )
    since: str | None = Field(
        default=None,
        description="When it became true, if said: a date, YYYY-MM-DD (default: when said)",
    )

    @field_validator("since", mode="before")
    @classmethod
    def _since(cls, v: Any) -> str | None:
        """A date that names no day is left out (the fact is kept, dated when it was
        said), never the reason to lose the extraction."""
        if v is None or not str(v).strip():
            return None
        try:
            since_timestamp(str(v))
        except ValueError:
            logger.warning("a fact's since=%r names no date; it is dated when it was said", v)
            return None
        return str(v).strip()

    @property
    def valid_from(self) -> float | None:
        """When the fact became true, if the candidate says (``since``), in seconds."""
        return None if self.since is None else since_timestamp(self.since)

    @field_validator("attribute")
    @classmethod
    def _attribute(cls, v: str) -> str:
        return normalize_attribute(storable(v))

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        if not str(v).strip():
            raise ValueError("a fact value must not be empty")
        return storable(str(v).strip())

    def search_text(self) -> str:
        """What search will index for the fact this candidate becomes (see
        :meth:`Fact.search_text`)."""
        statement = self.statement or default_statement(self.attribute, self.value)
        return fact_text(self.attribute, self.value, statement)


class Extraction(BaseModel):
    """The extractor's answer: a summary of each episode and the facts they state.

    ``episodes`` holds one entry per episode (by number or key). ``episode``, a single
    summary, is the older form: it is accepted for a job of one episode and refused for a job
    of several, since one summary cannot tell several episodes apart. An answer gives one
    form or the other, not both.
    """

    episodes: list[EpisodeEntry] = Field(
        default_factory=list, description="One entry per episode, each about that episode alone"
    )
    episode: EpisodeSummary | None = Field(
        default=None, description="The older single-summary form, for one episode only"
    )
    facts: list[FactCandidate] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_form(self) -> Extraction:
        if self.episode is not None and self.episodes:
            raise ValueError(
                "give either 'episodes' (one entry per episode) or 'episode', not both"
            )
        if self.episode is None and not self.episodes:
            raise ValueError("no episode summary: give 'episodes', one entry per episode")
        return self
