"""The krunkit answer, cached: booting a VM or running a container for every doctor run is too
slow, so an answer is kept (24 h) under a key of everything it depends on."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any, Final

from cgpu.backends.krunkit.answer_cache import AnswerCache
from cgpu.gpu_probe.answer import ProbeAnswer, apply_answer
from cgpu.report import ReportBuilder, current_platform

CACHE_TTL_S: Final = 24 * 3600


def host() -> dict[str, str]:
    """This host, as the cache key names it."""
    return {"name": socket.gethostname(), "platform": current_platform()}


def answer(
    report: ReportBuilder,
    key: dict[str, Any],
    compute: Callable[[], ProbeAnswer],
    *,
    refresh: bool,
    lock_timeout: float,
) -> None:
    cache = AnswerCache(
        "krunkit", ttl=CACHE_TTL_S, warn=lambda source, message: report.problem("warning", source, message, "probe")
    )
    with cache.locked(key, timeout=lock_timeout):
        cached = None if refresh else cache.get(key)
        answer = None
        if cached is not None:
            answer = from_cache(cached[0])
            if answer is None:
                report.problem(
                    "warning",
                    str(cache.path(key)),
                    "the cached answer has an unexpected shape; checking afresh",
                    "probe",
                )
            else:
                when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(cached[1]))
                report.problem(
                    "info",
                    str(cache.path(key)),
                    f"answer cached at {when} (kept {CACHE_TTL_S // 3600} h); --refresh checks again",
                    "probe",
                )
        if answer is None:
            answer = compute()
            cache.put(key, answer.to_json())
    apply_answer(report, answer)


def from_cache(value: Any) -> ProbeAnswer | None:
    """A cached krunkit answer (`ProbeAnswer.to_json`, Vulkan only), or None for any other shape:
    the cache file can hold anything."""
    try:
        answer = ProbeAnswer.from_json(value)
    except ValueError:
        return None
    return answer if set(answer.apis) == {"vulkan"} and answer.unusable is None else None
