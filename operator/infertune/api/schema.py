"""What every model of the API shares: camelCase on the wire with unknown fields refused, the CEL rule
helper crdgen attaches, the string and integer forms Kubernetes conventions ask for (no floats), and the
limits several resources state.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from infertune.api.quantities import DECIMAL_PATTERN, DURATION_PATTERN

ALLOWED_TP_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
# The most streams a replica may be given (max-num-seqs): vLLM's own default on GPUs of 70 GiB and more
# (docs/sources.md). It bounds what one resource's plan costs (docs/reliability.md).
CONCURRENCY_MAX = 1024

Duration = Annotated[str, Field(pattern=DURATION_PATTERN)]
Decimal = Annotated[str, Field(pattern=DECIMAL_PATTERN)]
Percent = Annotated[int, Field(ge=0, le=100)]

# How a duration is written (DURATION_PATTERN), for the description of every duration field.
DURATION_FORMAT = "A duration: numbers with units h, m, s or ms, no spaces, e.g. '90s', '1m30s', '1.5h', '800ms'."


class TuningMode(StrEnum):
    """Auto applies decisions; Recommend only writes them to status; Off holds the workload as it is."""

    AUTO = "Auto"
    RECOMMEND = "Recommend"
    OFF = "Off"


def rule(expression: str, message: str, field_path: str | None = None) -> dict[str, Any]:
    """One CEL `x-kubernetes-validations` entry, attached to the schema by crdgen."""
    entry: dict[str, Any] = {"rule": expression, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are an error, not a silent drop."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class KeyRef(ApiModel):
    """A key in a Secret or ConfigMap of the resource's namespace."""

    name: str = Field(min_length=1, description="Name of the object in the resource's namespace.")
    key: str = Field(min_length=1, description="Key inside the object.")
