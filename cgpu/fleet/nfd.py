"""The report as a Node Feature Discovery feature file, so pods can select nodes by what containers get.

nfd-worker's local source (`source/local/local.go`) reads every non-hidden file in its features.d
dir: `key=value` lines, a bare key meaning `true`, `# +expiry-time=<RFC 3339>` dropping the lines
after it once that time has passed, and nothing over 64 KiB. nfd-master keeps a label only when its
key is a Kubernetes qualified name in an allowed namespace (`pkg/apis/nfd/validate/validate.go`):
`feature.node.kubernetes.io` and its sub-namespaces are allowed by default, so cgpu's labels live
in `cgpu.feature.node.kubernetes.io/`.

Labels (stable; documented in docs/kubernetes.md):
  <ns>/<api>=true      containers get the API
  <ns>/<api>=unknown   cgpu could not tell (no label at all: the API is absent)
  <ns>/backend=<name>, <ns>/version=<cgpu version>, <ns>/format=<report format_version>
  <ns>/devices=<n>     distinct devices a container can be given with at least one API (alias
                       names not counted)
  <ns>/devices-blocked=<n>  distinct devices whose container cannot start (only where there are any)
  <ns>/problem=<kind>  where devices are blocked: cdi-off, spec-too-new, stale-spec,
                       missing-host-files (the first that applies, in that order: the problems'
                       `kind`, never their wording), else blocked; and where no device gives any
                       API, the first of NO_API_KINDS among the errors and warnings
  <ns>/engine=<name>, <ns>/engine-version=<version>, <ns>/engine-max-cdi=<cdiVersion|off|none>
                       the engine that judged the specs (the report's `engines`, where it has one)
  <ns>/cuda.driver-version.{major,minor,revision,full}, <ns>/cuda.runtime-version.{major,minor,full}
                       the NVIDIA driver and the highest CUDA it supports (the report's `nvidia_driver`),
                       named as GPU Feature Discovery names them (internal/lm/nvml.go); where that CUDA is
                       unknown only cuda.runtime-version.full=unknown
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any, Final

from cgpu.apis import API_ORDER
from cgpu.errors import CgpuValueError

NAMESPACE: Final = "cgpu.feature.node.kubernetes.io"
MAX_FILE_BYTES: Final = 65536  # nfd-worker's MaxFeatureFileSize
# Kubernetes label names and values: at most 63 characters, alphanumerics at both ends, and
# `-`, `_`, `.` between (apimachinery's validation.IsValidLabelValue / IsQualifiedName).
_LABEL_TEXT = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def labels(report: Mapping[str, Any]) -> dict[str, str]:
    """The node labels for one report, names with their namespace."""
    found: dict[str, str] = {}
    for api in API_ORDER:
        state = report["apis"][api]["state"]
        if state == "provided":
            found[api] = "true"
        elif state == "unknown":
            found[api] = "unknown"
    found["backend"] = report["backend"]
    found["version"] = label_value(report["cgpu_version"])
    found["format"] = str(report["format_version"])
    found["devices"] = str(device_count(report))
    blocked = device_count(report, blocked=True)
    if blocked:
        found["devices-blocked"] = str(blocked)
    judge = judging_engine(report)
    kind = blocking_problem(report, judge)
    if kind:
        found["problem"] = kind
    if judge is not None:
        found["engine"] = label_value(str(judge.get("name") or "")) or "unknown"
        found["engine-version"] = label_value(str(judge.get("version") or "")) or "unknown"
        ceiling = judge.get("max_cdi_version")
        if judge.get("cdi_enabled") is False:
            found["engine-max-cdi"] = "off"
        else:
            found["engine-max-cdi"] = label_value(str(ceiling)) if ceiling else "none"
    found.update(driver_cuda_labels(report.get("nvidia_driver")))
    return {f"{NAMESPACE}/{name}": value for name, value in found.items()}


def driver_cuda_labels(driver: Any) -> dict[str, str]:
    """GFD's version labels from the report's `nvidia_driver`: `cuda.driver-version.*` is the driver's own
    version, `cuda.runtime-version.*` the highest CUDA it supports (what GFD reads from cuDriverGetVersion)."""
    if not isinstance(driver, Mapping):
        return {}
    found: dict[str, str] = {}
    version = str(driver.get("version") or "")
    parts = version.split(".")
    if 2 <= len(parts) <= 3 and len(version) <= 63 and all(part.isascii() and part.isdigit() for part in parts):
        found["cuda.driver-version.major"], found["cuda.driver-version.minor"] = parts[0], parts[1]
        if len(parts) == 3:
            found["cuda.driver-version.revision"] = parts[2]
        found["cuda.driver-version.full"] = version
    cuda = str(driver.get("cuda") or "")
    major, dot, minor = cuda.partition(".")
    if (
        driver.get("cuda_state") in ("known", "at-least")
        and dot
        and f"{major}{minor}".isascii()
        and major.isdigit()
        and minor.isdigit()
    ):
        found["cuda.runtime-version.major"], found["cuda.runtime-version.minor"] = major, minor
        found["cuda.runtime-version.full"] = cuda
    else:
        found["cuda.runtime-version.full"] = "unknown"
    return found


def judging_engine(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The entry of the report's `engines` with `judged: true`, or None (no such field or entry)."""
    engines = report.get("engines")
    if not isinstance(engines, list):
        return None
    return next((e for e in engines if isinstance(e, Mapping) and e.get("judged") is True), None)


def device_count(report: Mapping[str, Any], *, blocked: bool = False) -> int:
    """Devices a container can be given with at least one API (`blocked`: those whose container
    cannot start), each once: not another name (`alias_of`: an index's UUID) for one already
    counted, and not an `all` device beside the ones it unites."""
    if blocked:
        chosen = [d for d in report.get("devices", []) if d.get("status") == "blocked"]
    else:
        chosen = [d for d in report.get("devices", []) if d.get("status") != "blocked" and d.get("apis")]
    distinct = [d for d in chosen if not d.get("alias_of")]
    singles = [d for d in distinct if not str(d.get("name", "")).endswith("=all")]
    return len(singles) if singles else len(distinct)


# Problem kinds that keep a spec's devices from containers, in the order the label prefers them
BLOCKING_KINDS: Final = ("spec-too-new", "stale-spec", "missing-host-files")
# Where no device gives any API and none is blocked: the kinds that say why, the most telling first
NO_API_KINDS: Final = (
    "cdi-off",
    "engine",
    "library-crash",
    "duplicate-device",
    "invalid-spec",
    "driver-mismatch",
    "unresolvable-device",
    "spec-dir",
    "unreadable-file",
    "no-spec",
)


def blocking_problem(report: Mapping[str, Any], judge: Mapping[str, Any] | None = None) -> str | None:
    """What keeps devices from containers here, as a label value. Read from the problems' `kind`
    (never their wording): where devices are blocked, the first of `BLOCKING_KINDS` that an error
    about a blocked device's spec has, else `blocked`; where none is blocked but no device gives any
    API, the first of `NO_API_KINDS` among the errors and warnings; else None."""
    devices = report.get("devices", [])
    blocked = [d for d in devices if d.get("status") == "blocked"]
    if judge is not None and judge.get("cdi_enabled") is False and (blocked or not report.get("containers")):
        return "cdi-off"
    if not blocked:
        if report.get("containers") or device_count(report):
            return None  # something is given: nothing keeps the node from its jobs
        kinds = {p.get("kind") for p in report.get("problems", []) if p.get("severity") in ("error", "warning")}
        return next((kind for kind in NO_API_KINDS if kind in kinds), None)  # a node without a GPU has none
    specs = {d.get("spec") for d in blocked}
    kinds = {
        problem.get("kind")
        for problem in report.get("problems", [])
        if problem.get("severity") == "error" and problem.get("source") in specs
    }
    return next((kind for kind in BLOCKING_KINDS if kind in kinds), "blocked")


def label_value(text: str) -> str:
    """`text` as a valid label value: other characters become `_`, trimmed to 63 characters."""
    value = re.sub(r"[^-A-Za-z0-9_.]", "_", text)[:63].strip("-_.")
    return value if _LABEL_TEXT.match(value) else ""


def feature_file(report: Mapping[str, Any], *, expires: datetime.datetime) -> str:
    """The feature file's text: a header, the expiry directive, then one label per line.

    The expiry makes nfd drop the labels of a node whose cgpu stopped refreshing them, instead
    of scheduling on an answer nobody keeps current."""
    stamp = expires.astimezone(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    lines = [
        f"# Written by cgpu {report['cgpu_version']} ({report['backend']} backend) at {report['checked_at']}.",
        f"# +expiry-time={stamp}",
        *(f"{name}={value}" for name, value in labels(report).items()),
    ]
    text = "\n".join(lines) + "\n"
    if len(text.encode()) > MAX_FILE_BYTES:  # cannot happen with today's labels; nfd would ignore the file
        raise CgpuValueError(
            f"the feature file would be {len(text.encode())} bytes; nfd reads at most {MAX_FILE_BYTES}"
        )
    return text
