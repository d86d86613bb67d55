"""The report contract as pydantic models (design §1): what `cgpu schema` prints and what
`cgpu.probe()` returns. Imported only by the library call, `cgpu schema` and the tests."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cgpu.apis import API_ORDER

Api = Literal["cuda", "rocm", "vulkan", "opencl", "directml", "metal"]


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

    containers: list[Api] = Field(description="APIs a container gets, canonical order, no duplicates")
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

    @field_validator("evidence")
    @classmethod
    def _all_six(cls, value: dict[str, str]) -> dict[str, str]:
        missing = [api for api in API_ORDER if not value.get(api)]
        if missing:
            raise ValueError(f"evidence missing for {', '.join(missing)}")
        return value


def report_schema() -> dict[str, Any]:
    schema = Report.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
