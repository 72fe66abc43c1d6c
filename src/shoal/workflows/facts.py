"""What a step that asks must learn, in a workflow document, and where it must show again.

```yaml
- id: intake
  kind: agent
  role: asker                      # its output contract has a property for every fact
  asks:
    max: 5
    learn:
      destination: {description: where the trip goes}
      needs: {description: "what the traveller needs (visas, vaccinations)", kind: list}
      budget: {description: the money available, required: false}
- id: plan
  kind: agent
  role: planner
  after: [intake]
  requires_facts: {from: intake}   # its answer states every fact the intake learned
```

The conversation keeps a record of what its role learned, and from where (`learning`); the
engine asks only for what is still missing and never again for a fact known or declined. The
round's answer holds each known fact in its property and the record under `facts`. A step with
`requires_facts` must state each known fact's value in its answer (`mentions`). The checks that
need the whole document are `problems` (names a learn key the contract lacks, a fact the source
step does not learn, a source step this one does not come after), which `consistency.problems`
calls with the line named.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

NAME = r"^[a-z][a-z0-9_]{0,39}$"
MAX_FACTS = 20  # the most facts one step may learn
FACTS = "facts"  # the property of a round's answer holding the record (the engine's)
KNOWN = "known"  # what a turn reports it learned: {"fact": {"value": …, "from": …}}
UNKNOWN = "unknown"  # what a turn reports the person does not know: {"fact": {"from": n}}
RESERVED = frozenset({FACTS, KNOWN, UNKNOWN})
Name = Annotated[str, Field(pattern=NAME)]
Path = tuple[str | int, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FactKind(StrEnum):
    """The shape of a fact's value."""

    TEXT = "text"  # one text ("MSc in Urban Planning")
    LIST = "list"  # texts, the whole list reported each time ("a permit", "no travel")


class Fact(_Strict):
    """One thing a step that asks must learn."""

    description: str = Field(
        min_length=1, max_length=300,
        description="What the fact is, as a noun phrase: its role's prompt lists it, and the "
                    "engine's own question asks for it ('Could you tell me <description>?').")
    question: str | None = Field(
        default=None, min_length=1, max_length=300,
        description="The question the engine asks when it asks for this fact itself (its role "
                    "answered, or asked about a known fact, while this one was missing).")
    kind: FactKind = Field(
        default=FactKind.TEXT,
        description="`text`: one text; `list`: a list of texts (the contract's property is an "
                    "array of strings).")
    required: bool = Field(
        default=True,
        description="Whether the engine asks for it when its role does not. An optional fact "
                    "is recorded when said and may be asked by the role, never by the engine.")


class RequiresFacts(_Strict):
    """A later step's answer must state what a step that asks learned."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    source: Name = Field(alias="from", description="The step that learned the facts (its "
                                                   "`asks.learn`); this step comes after it.")
    facts: list[Name] = Field(
        default_factory=list, max_length=MAX_FACTS,
        description="The facts to state; empty: every fact the step learns. Only facts that "
                    "are known are required (not those the person did not know).")


LearnField = Annotated[dict[Name, Fact], Field(
    default_factory=dict, max_length=MAX_FACTS,
    description="The facts its role must learn by asking, by name: each a property of the "
                "role's output contract. The engine keeps a record of what is known and from "
                "which answer, asks only for what is missing, and puts the record under "
                "`facts` in the round's answer.")]


def problems(step: Any, i: int, roles: Mapping[str, Any], steps: Mapping[str, Any],
             before: set[str]) -> list[tuple[Path, str]]:
    """What is wrong with the `asks.learn` and `requires_facts` of step `i` (a `StepDoc`), in
    a document with `roles` (name → `Role`) and `steps` (id → `StepDoc`); `before` holds the
    steps it comes after."""
    found: list[tuple[Path, str]] = []
    if step.asks is not None and step.asks.learn:
        found += _learn_problems(step, ("steps", i, "asks", "learn"), roles.get(step.role))
    needs = step.requires_facts
    if needs is None:
        return found
    where: Path = ("steps", i, "requires_facts")
    if step.kind != "agent":
        return [*found, (where, "only an agent step's answer can be required to state facts")]
    source = steps.get(needs.source)
    learned = source.asks.learn if source is not None and source.asks is not None else {}
    if not learned:
        return [*found, ((*where, "from"), f"'{needs.source}' is not a step that learns facts "
                                            "(asks.learn)")]
    if needs.source not in before:
        return [*found, ((*where, "from"), f"this step does not come after '{needs.source}'")]
    for j, name in enumerate(needs.facts):
        if name not in learned:
            found.append(((*where, "facts", j), f"'{needs.source}' learns no fact '{name}' "
                                                f"(it learns {', '.join(learned)})"))
    return found


def _learn_problems(step: Any, where: Path, role: Any) -> list[tuple[Path, str]]:
    contract = role.output if role is not None and isinstance(role.output, Mapping) else {}
    properties = contract.get("properties")
    if not isinstance(properties, Mapping):
        return [(where, f"role '{step.role}' needs an output contract (an object with "
                        "properties) to hold what its step learns")]
    output: Path = ("roles", step.role, "output")
    if contract.get("additionalProperties") is False:
        return [((*output, "additionalProperties"), f"step '{step.id}' learns facts: the engine "
                 f"adds `{FACTS}` to its role's answer, and each turn reports `{KNOWN}` and "
                 f"`{UNKNOWN}`, so the contract may not forbid additional properties")]
    reserved = sorted(RESERVED & set(properties))
    if reserved:
        return [((*output, "properties", reserved[0]), f"step '{step.id}' learns facts: the "
                 f"engine writes '{reserved[0]}' in its role's answer; rename this property")]
    found: list[tuple[Path, str]] = []
    for name, fact in step.asks.learn.items():
        shape = properties.get(name)
        if not isinstance(shape, Mapping):
            found.append(((*where, name), f"the contract of role '{step.role}' has no "
                                          f"property '{name}' to hold this fact"))
            continue
        wanted = "array" if fact.kind is FactKind.LIST else "string"
        kinds = shape.get("type")
        if kinds is not None and wanted not in ([kinds] if isinstance(kinds, str) else kinds):
            article = "an" if wanted == "array" else "a"
            found.append(((*where, name), f"a {fact.kind.value} fact: the contract's property "
                                          f"'{name}' must accept {article} {wanted}"))
    return found
