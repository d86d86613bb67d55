"""What a cdi answer depends on, for `cgpu watch`: the spec dirs it reads, the host files whose
text decides it (the NVIDIA driver version) and the engines' files it was learned from (binaries,
package databases, configuration), so that a change to any of them is answered again."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from cgpu.backends import AnswerInputs
from cgpu.backends.cdi.backend import spec_dirs_read
from cgpu.engines.option import ENGINE_CONFIGS, EngineOption
from cgpu.node.host import DRIVER_VERSION_FILES
from cgpu.options import DEFAULT_ROOT

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any

LEARN_TIMEOUT = 10.0  # as the probe's own default: the engines' files are usually remembered


def answer_inputs(
    report: Mapping[str, Any] | None = None,
    *,
    spec_dirs: Sequence[str] | None = None,
    root: str | None = DEFAULT_ROOT,
    engine: str | EngineOption | None = None,
    timeout: float | None = None,
    devices: object = None,
    verify: object = False,
    probe_image: object = None,
) -> AnswerInputs:
    """What the answer for these options (the backend's, as `probe` takes them) depends on;
    `report`, the last answer, says which engine judged and so which spec dirs it read (None,
    before the first: the spec dirs given, else the defaults). `devices`, `verify` and
    `probe_image` change what is asked of the inputs, not which they are."""
    from cgpu.engines.option import NONE, parse_engine

    root = root or DEFAULT_ROOT
    try:
        option = parse_engine(engine)
    except ValueError:  # the probe says why; nothing to watch but the spec dirs given
        option = EngineOption(NONE)
    on_host = os.path.abspath(root) == os.path.abspath(os.sep)
    dirs = list(spec_dirs) if spec_dirs else _judged_dirs(report, root)
    files: list[str] = []
    if option.mode != NONE and not (on_host and option.version is not None):  # as the judging reads them
        from cgpu.engines.option import learn_engines

        _, node = learn_engines(None if on_host else root, timeout=timeout or LEARN_TIMEOUT)
        identity = node.get("identity") if isinstance(node, dict) else None
        files = [path for path in identity or () if isinstance(path, str) and path.startswith("/")]
        if on_host:  # podman's and Docker's own configuration decides which of them answers
            files += [os.path.expanduser(path) for path in ENGINE_CONFIGS]
    return AnswerInputs(dirs, list(DRIVER_VERSION_FILES), list(dict.fromkeys(files)))


def _judged_dirs(report: Mapping[str, Any] | None, root: str) -> list[str]:
    """The spec dirs the answer read without --spec-dir, as the report's judging engine says;
    before the first report, the defaults (inside the root)."""
    if report is None:
        return spec_dirs_read(None, root, None)
    engines = report.get("engines")
    judging = (
        next((e for e in engines if isinstance(e, Mapping) and e.get("judged") is True), None)
        if isinstance(engines, list)
        else None
    )
    named = judging.get("spec_dirs") if judging is not None else None
    if judging is not None and not (isinstance(named, list) and all(isinstance(d, str) for d in named)):
        judging = None  # not a report of this backend's: as if no engine judged
    return spec_dirs_read(None, root, named if judging is not None else None)
