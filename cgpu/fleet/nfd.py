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
    return {f"{NAMESPACE}/{name}": value for name, value in found.items()}


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
