"""metav1.Condition: the model (every field, as the CRDs require) and setting one in a list, with
lastTransitionTime moved only when the status flips. The PlaceholderJob's conditions are typed
(slurm_bridge/kube/placeholderjob.py); PodGroups' and TenantPolicies' are set as the API's dicts
(``set_condition_dicts``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel, to_snake

from slurm_bridge.kube.times import now_iso


class Camel(BaseModel):
    """The API form of a model: camelCase names."""

    # Fields the schema does not know are pruned by the API server; reading ignores them so an
    # object written by a newer bridge still parses.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def dump(self) -> dict[str, Any]:
        """The API form: camelCase, only the fields that were set (a merge patch keeps the rest)."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


# What a condition written before every field was required reads as (see Condition).
LEGACY_CONDITION: dict[str, Any] = {
    "reason": "Unknown", "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z", "observedGeneration": 0,
}  # fmt: skip


_SNAKE = {k: to_snake(k) for k in LEGACY_CONDITION}  # the field names of LEGACY_CONDITION's keys


class Condition(Camel):
    """A metav1.Condition: the CRD requires every field.

    Conditions written by bridge versions that left some out still parse, with the missing
    fields filled from LEGACY_CONDITION, so the next status write (which sends the whole list)
    is valid under the stricter schema instead of being refused after an upgrade."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    last_transition_time: str
    observed_generation: int = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _fill_legacy(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = {k: v for k, v in data.items() if v is not None}
            missing = {k: v for k, v in LEGACY_CONDITION.items() if k not in given and _SNAKE[k] not in given}
            return {**missing, **given}
        return data


def set_condition(
    conditions: Sequence[Condition] | None,
    ctype: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
) -> list[Condition]:
    """Conditions with ``ctype`` set; lastTransitionTime moves only when the status flips.

    ``generation`` (the object's metadata.generation) is required: the CRD requires each
    condition's observedGeneration, and a caller that forgets it would write an invalid status."""
    value = "Unknown" if status is None else "True" if status else "False"
    now = now_iso()
    out: list[Condition] = []
    found = False
    for c in conditions or []:
        if c.type != ctype:
            out.append(c)
            continue
        found = True
        update: dict[str, Any] = {"status": value, "reason": reason, "message": message}
        if c.status != value:
            update["last_transition_time"] = now
        if generation is not None:
            update["observed_generation"] = generation
        out.append(c.model_copy(update=update))
    if not found:
        out.append(
            Condition(
                type=ctype,
                status=value,
                reason=reason,
                message=message,
                last_transition_time=now,
                observed_generation=generation or 0,
            )
        )
    return out


def set_condition_dicts(
    conditions: Sequence[dict[str, Any]] | None,
    ctype: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    """:func:`set_condition` on conditions held as the API's dicts (every field set on each)."""
    typed = [Condition.model_validate(c) for c in conditions or []]
    return [c.dump() for c in set_condition(typed, ctype, status, reason, message, generation)]
