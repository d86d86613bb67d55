"""The report contract as pydantic models (design §1): what `cgpu schema` prints and what
`cgpu.probe()` returns. Imported only by the library call, `cgpu schema` and the tests."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cgpu.apis import API_ORDER, IMAGE_NEEDS

Api = Literal["cuda", "rocm", "vulkan", "opencl", "directml", "metal"]


class ApiState(BaseModel):
    """What containers get of one API, as data: a scheduler never parses `evidence` to tell
    "no" from "could not tell"."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: Literal["provided", "absent", "unknown"] = Field(
        description=(
            "provided: containers get it (exactly the APIs in `containers`); absent: the backend looked and "
            "they do not; unknown: the backend could not tell (timeout, crash, unreadable input, no answer)"
        )
    )
    image_needs: list[str] = Field(
        default_factory=list,
        description=(
            "for a provided API, what the container image must bring for it to work; empty otherwise. "
            "Tokens: "
            + "; ".join(f"`{token}`: {text}" for token, text in IMAGE_NEEDS.items())
            + ". A token not listed here (added later) still means the image must bring something."
        ),
    )


class Problem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    severity: Literal["error", "warning", "info"]
    source: str = Field(description="the file, command or device the problem concerns")
    message: str


class Device(BaseModel):
    """One device the backend saw; backends add their own details (status, spec, ...)."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="CDI: vendor/class=name; WSL: the adapter; krunkit: the VM's GPU")
    apis: list[Api]


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: Literal[2] = Field(
        description="the report format; fields added later keep it, a field removed or changed raises it"
    )
    containers: list[Api] = Field(description="APIs a container gets, canonical order, no duplicates")
    apis: dict[Api, ApiState] = Field(description="the state of each of the six APIs")
    evidence: dict[Api, str] = Field(description="one sentence per API, for all six")
    backend: Literal["cdi", "wsl", "krunkit", "local"]
    platform: str
    devices: list[Device]
    problems: list[Problem]
    cgpu_version: str
    checked_at: str

    @field_validator("containers")
    @classmethod
    def _canonical(cls, value: list[str]) -> list[str]:
        if value != [api for api in API_ORDER if api in value]:
            raise ValueError(f"containers must be in the order {', '.join(API_ORDER)}, without duplicates")
        return value

    @field_validator("evidence", "apis")
    @classmethod
    def _all_six(cls, value: dict[str, Any]) -> dict[str, Any]:
        missing = [api for api in API_ORDER if not value.get(api)]
        if missing:
            raise ValueError(f"missing for {', '.join(missing)}")
        return value

    @model_validator(mode="after")
    def _containers_are_the_provided(self) -> Report:
        provided = [api for api in API_ORDER if self.apis[api].state == "provided"]
        if self.containers != provided:
            raise ValueError(f"containers {self.containers} are not the provided APIs {provided}")
        return self


def report_schema() -> dict[str, Any]:
    schema = Report.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
