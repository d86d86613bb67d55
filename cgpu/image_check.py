"""`cgpu image check REF` (not implemented yet)."""

from __future__ import annotations

from typing import Any, Callable


def check_image(ref: str, *, machine: str | None = None, timeout: float | None = None,
                progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any], int]:
    return {"image": ref, "verdict": "unknown", "problems": [
        {"severity": "error", "source": "cgpu", "message": "image check is not implemented yet"}]}, 1


def render_image_check(result: dict[str, Any]) -> str:
    return "\n".join(p["message"] for p in result["problems"])
