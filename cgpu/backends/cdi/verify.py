"""Live verification (`cgpu probe --backend cdi --verify`): run the probe in a real container
per CDI device, through the engine's API, and compare its answer with the static one.

The static answer is a prediction from the spec files; this is the check. Each device gets
one container (no network, labelled `cgpu.verify=$CGPU_VERIFY_LABEL`, default 1; removed on every path) that starts
from the probe image with only that device injected and runs `python3 /cgpu-probe.py`.
`verify_devices` returns one `LiveCheck` per device it tried; the backend puts its live APIs
beside the static ones when it builds the device entry. Every disagreement is a problem naming
the device, the API and both answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from cgpu.apis import API_ORDER
from cgpu.clock import limit_start
from cgpu.engines.client import ContainerTimeout, Engine, EngineError, open_engine
from cgpu.engines.option import EngineOption, parse_engine
from cgpu.report import ReportBuilder
from cgpu.run import decode

PROBE_PATH = "/cgpu-probe.py"
DEFAULT_TIMEOUT = 60.0  # per device: the probe gives each API its own, shorter, limit
MIN_CONTAINER_S = 0.5  # less time than this left for a device: its container is not even created
API_TIMEOUT = 30.0  # per engine API call, unless --timeout asks for less
SOURCE = "--verify"

Outcome = Literal["agrees", "disagrees", "failed"]


@dataclass(frozen=True)
class LiveCheck:
    """What the live check found for one device: whether the probe in its container agrees with
    the static answer, the container's whole life in seconds, and what the probe found (the live
    APIs, its sentence per API, the devices it saw), or, when it failed, why (also a problem)."""

    name: str
    outcome: Outcome
    seconds: float
    apis: list[str] | None = None
    evidence: dict[str, str] | None = None
    devices: list[dict[str, Any]] | None = None
    reason: str | None = None

    def entry_fields(self) -> dict[str, Any]:
        """The device entry's `live_*` fields, as the report gives them."""
        if self.outcome == "failed":
            return {"live_status": self.outcome, "live_seconds": self.seconds}
        return {
            "live_seconds": self.seconds,
            "live_apis": self.apis,
            "live_evidence": self.evidence,
            "live_devices": self.devices,
            "live_status": self.outcome,
        }


def verify_devices(
    report: ReportBuilder,
    devices: list[str],
    static: dict[str, list[str]],
    *,
    engine: str | EngineOption | None = None,
    probe_image: str | None = None,
    timeout: float | None = None,
) -> list[LiveCheck]:
    """Run the probe in one container per device: what it found, one result per device tried (in
    order), with the problems in `report`. Fewer results than devices when it could not run at all."""
    checks: list[LiveCheck] = []
    if not devices:
        report.problem("info", SOURCE, "no CDI device that can start a container, so none was started", "verify")
        return checks
    container_timeout = timeout or DEFAULT_TIMEOUT
    # The whole of --verify fits in the timeout per device: connecting to the engine counts
    # against it (and in the CLI cgpu's own start-up too), building the probe image (once per
    # package change) does not.
    deadline = limit_start() + container_timeout * len(devices)
    try:
        probe_source = _probe_source()
    except (OSError, ImportError) as exc:
        report.problem("error", SOURCE, f"cannot read the probe script: {exc}", "verify")
        return checks
    from cgpu.engines.registry import engine as engine_named

    option = parse_engine(engine)
    choice = option.live_engine
    if choice is not None and not engine_named(choice).reached_by_client:
        report.problem(
            "error",
            SOURCE,
            f"did not run: the live check runs containers through podman or Docker, and cgpu has no client for "
            f"{choice}'s CRI; the static answer stands (--engine auto, podman or docker to verify through those)",
            "verify",
        )
        return checks
    report.progress(f"verify: connecting to {choice or 'the container engine'}")
    try:
        with open_engine(
            choice, timeout=min(API_TIMEOUT, container_timeout), progress=report.progress, deadline=deadline
        ) as eng:
            _verify_with(
                report, eng, devices, static, probe_source, probe_image, container_timeout, option, deadline, checks
            )
    except EngineError as exc:
        report.problem("error", SOURCE, f"could not run: {exc}", "verify")
    return checks


def _verify_with(
    report: ReportBuilder,
    eng: Engine,
    devices: list[str],
    static: dict[str, list[str]],
    probe_source: bytes,
    probe_image: str | None,
    timeout: float,
    engine_option: EngineOption,
    deadline: float,
    checks: list[LiveCheck],
) -> None:
    """Each device's check into `checks` as it ends, so those done stay when the engine fails."""
    refusal = eng.cdi_refusal()
    if refusal:
        report.problem("error", SOURCE, f"did not run: {refusal}", "verify")
        return
    for note in eng.notes:
        report.problem("warning", SOURCE, note, "verify")
    _note_engine_mismatch(report, eng, engine_option)
    image, how, building = _image(report, eng, probe_image, timeout)
    deadline += building
    for index, name in enumerate(devices, 1):
        budget = min(timeout, deadline - time.monotonic())
        if budget < MIN_CONTAINER_S:
            message = (
                f"not run: --timeout {timeout:g} s per device was used up (connecting to {eng.describe()} "
                "counts against it); run again with a longer --timeout"
            )
            checks.append(_failed(report, name, message, time.monotonic()))
            continue
        report.progress(f"verify [{index}/{len(devices)}]: running the probe in a {eng.name} container with {name}")
        checks.append(_verify_device(report, eng, image, name, static.get(name, []), probe_source, budget))
    report.problem("info", SOURCE, _summary(eng, image, how, [check.outcome for check in checks]), "verify")


def _summary(eng: Engine, image: str, how: str, outcomes: list[Outcome]) -> str:
    """What --verify ran and what it found, in one sentence for people."""
    words = {
        "agrees": "agree(s) with the static answer",
        "disagrees": "disagree(s) with it (see the warnings)",
        "failed": "could not be checked (see the errors)",
    }
    found = "; ".join(f"{outcomes.count(o)} {words[o]}" for o in words if o in outcomes)
    return (
        f"ran cgpu's probe in {len(outcomes)} {eng.describe()} container(s), one per CDI device, from the image "
        f"{image} ({how}): {found}"
    )


def _note_engine_mismatch(report: ReportBuilder, eng: Engine, engine_option: EngineOption) -> None:
    """`--engine podman@5.0` judges the specs as podman 5.0 would; the live run uses the
    engine that is here. Say so when they differ: their CDI version limits may too."""
    if engine_option.version is None:  # auto, none, or a bare name: judged as the engine here
        return
    if (engine_option.name, engine_option.version) != (eng.name, eng.version):
        report.problem(
            "info",
            SOURCE,
            f"the static answer judged the specs as {engine_option.name} {engine_option.version} would (--engine); "
            f"the live run used {eng.describe()}, the engine on this host",
            "verify",
        )


def _image(report: ReportBuilder, eng: Engine, probe_image: str | None, timeout: float) -> tuple[str, str, float]:
    """The image to run, how it came to be (for the summary) and the seconds spent building it."""
    if probe_image:
        if not eng.image_exists(probe_image):
            raise EngineError(
                f"the probe image {probe_image} is not in {eng.name}'s local storage; cgpu does not pull images: "
                f"`{eng.name} pull {probe_image}` first"
            )
        return probe_image, "given with --probe-image", 0.0
    from cgpu.backends.cdi.probe_image import ensure_probe_image

    ref, seconds = ensure_probe_image(eng, timeout=timeout, progress=report.progress)
    if seconds is None:
        return ref, "built earlier from this host's packages", 0.0
    return ref, f"built from this host's packages in {seconds:.1f} s", seconds


def _verify_device(
    report: ReportBuilder,
    eng: Engine,
    image: str,
    name: str,
    static_apis: list[str],
    probe_source: bytes,
    timeout: float,
) -> LiveCheck:
    started = time.monotonic()
    try:
        result = eng.run_container(
            image, ["python3", PROBE_PATH], devices=[name], files={PROBE_PATH: probe_source}, timeout=timeout
        )
    except ContainerTimeout as exc:
        return _failed(report, name, f"{exc} (engine: {eng.describe()})", started)
    except EngineError as exc:
        message = f"{eng.describe()} could not run a container with {name}: {exc}"
        if "unresolvable CDI devices" in message:
            message += f" ({_unresolvable_hint(eng)})"
        return _failed(report, name, message, started)
    seconds = round(time.monotonic() - started, 2)
    live = _read_probe(report, name, result.stdout)
    if isinstance(live, str):
        tail = decode(result.stderr).strip()[-400:] or "nothing"
        message = (
            f"the probe in the container with {name} gave no usable answer: {live} "
            f"(exit status {result.returncode}; stderr: {tail})"
        )
        return _failed(report, name, message, started)
    live_apis, live_evidence, live_devices, stalled = live
    disagreements = [api for api in API_ORDER if (api in static_apis) != (api in live_apis)]
    for api in disagreements:
        said_static = "gives it" if api in static_apis else "does not give it"
        said_live = "has it" if api in live_apis else "does not have it"
        if api in static_apis and api in stalled:
            hint = (
                f"; the device starts but cannot run the check work ({stalled[api]}): the spec may not mount a "
                "compiler or JIT library the work needs (docs/probe.md)"
            )
        elif api in static_apis:
            hint = (
                "; if the probe image lacks the API's user-space part, run again with --probe-image REF of an "
                "image that has it"
            )
        else:
            hint = ""
        report.problem(
            "warning",
            name,
            f"{api}: the static answer from the spec {said_static}, but a {eng.name} container with this device "
            f"{said_live}: {live_evidence.get(api, '')}{hint}",
            "verify",
        )
    return LiveCheck(
        name,
        "disagrees" if disagreements else "agrees",
        seconds,
        apis=live_apis,
        evidence=live_evidence,
        devices=live_devices,
    )


def _unresolvable_hint(eng: Engine) -> str:
    from cgpu.engines.registry import max_cdi_version

    try:
        limit = max_cdi_version(eng.name, eng.version)
    except ValueError:
        limit = None
    newest = (
        f"cdiVersion above {limit}, the newest {eng.describe()} accepts"
        if limit
        else ("a cdiVersion newer than this engine accepts")
    )
    return (
        f"{eng.name} found no usable spec defining it: the spec may be missing from the engine's spec directories, "
        f"declare {newest}, or define the device twice in one directory"
    )


def _read_probe(
    report: ReportBuilder, name: str, stdout: bytes
) -> tuple[list[str], dict[str, str], list[dict[str, Any]], dict[str, str]] | str:
    """The live APIs, the probe's own summary per API, the devices seen and, per API, where the
    first device's check work stopped, from the probe's JSON (untrusted: it came out of a
    container), judged by the same rules as `cgpu probe --backend local`; or why there is no answer."""
    from cgpu.gpu_probe.answer import read_answer

    answer = read_answer(stdout, source=f"probe in the container with {name}")
    if answer.unusable:
        return answer.unusable
    report.add(*answer.problems)
    summaries = {api: entry.summary or entry.evidence for api, entry in answer.apis.items()}
    seen = [
        {"name": device.name, "api": device.api, "counted": device.counted, "reason": device.details.get("reason", "")}
        for device in answer.devices
    ]
    stalled: dict[str, str] = {}
    for device in answer.devices:
        if device.details.get("work") == "failed" and device.api not in stalled:
            step, error = device.details.get("work_step"), device.details.get("work_error")
            stalled[device.api] = f"{device.name} stopped at {step} with {error}"
    return answer.provided, summaries, seen, stalled


def _failed(report: ReportBuilder, name: str, message: str, started: float) -> LiveCheck:
    report.problem("error", name, message, "verify")
    return LiveCheck(name, "failed", round(time.monotonic() - started, 2), reason=message)


def _probe_source() -> bytes:
    from cgpu.gpu_probe import PROBE_SCRIPT

    return PROBE_SCRIPT.read_bytes()
