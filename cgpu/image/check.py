"""`cgpu image check REF`: would this image get `vulkan` in a krunkit VM (Mesa's Venus driver)?

The image is read without running it (cgpu.image.source), the checks look at its files
(cgpu.image.checks), and the answer is one dict:

  image, source, os, architecture, status, verdict (yes|no|unknown), reason,
  checks [{name, status (pass|fail|unknown|skip), evidence, fix, required}],
  problems [{severity, source, message}], cgpu_version, checked_at

With --machine, cgpu's probe also runs in the image inside that krunkit VM (through the
krunkit backend, `probe_image=REF`), and a probe that ran decides the verdict.

`status` says whether the check was done: `checked`, `unreadable` (the image could not be
read: the verdict is `unknown` for want of an image, not for want of evidence in it),
`probe_failed` (the probe asked for with --machine did not run; the verdict is the files')
or `internal_error`. The CLI maps status and verdict to its exit status.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from cgpu import __version__

DEFAULT_TIMEOUT = 300.0  # the whole check; exporting a multi-GB image from engine storage takes a while


def check_image(
    ref: str, *, machine: str | None = None, timeout: float | None = None, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    from cgpu.image.checks import check_dicts, run_checks, verdict
    from cgpu.image.fs import Deadline, DeadlineExceeded, ImageReadError
    from cgpu.image.source import open_image

    result: dict[str, Any] = {
        "image": ref,
        "source": "",
        "os": "",
        "architecture": "",
        "status": "checked",
        "verdict": "unknown",
        "reason": "",
        "checks": [],
        "problems": [],
        "cgpu_version": __version__,
        "checked_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    problems: list[dict[str, str]] = result["problems"]
    try:
        deadline = Deadline(timeout or DEFAULT_TIMEOUT)  # one for the whole check: every read asks it
        with open_image(ref, deadline=deadline, progress=progress) as image:
            result["source"] = image.source
            problems += [{"severity": s, "source": image.source, "message": m} for s, m in image.notes]
            checks, found, info = run_checks(image)
    except (ImageReadError, DeadlineExceeded) as exc:
        result["reason"] = f"could not read the image: {exc}"
        problems.append({"severity": "error", "source": ref, "message": str(exc)})
        result["status"] = "unreadable"
        return result
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug in cgpu: still one answer, never a traceback
        result["reason"] = "internal error"
        problems.append(
            {
                "severity": "error",
                "source": "cgpu",
                "message": f"internal error, please report it: {type(exc).__name__}: {exc}",
            }
        )
        result["status"] = "internal_error"
        return result
    problems += found
    result["os"], result["architecture"] = info["os"], info["architecture"]
    result["checks"] = check_dicts(checks)
    result["verdict"], result["reason"] = verdict(checks)
    if machine is not None and not _probe_in_machine(result, ref, machine, timeout=timeout, progress=progress):
        result["status"] = "probe_failed"
    return result


def _probe_in_machine(
    result: dict[str, Any], ref: str, machine: str, *, timeout: float | None, progress: Callable[[str], None] | None
) -> bool:
    """Run cgpu's probe in this image inside a krunkit VM (the krunkit backend) and let it decide."""
    source = f"--machine {machine}"
    if ref.partition(":")[0] in ("dir", "oci", "oci-archive", "docker-archive"):
        result["problems"].append(
            {
                "severity": "error",
                "source": source,
                "message": (
                    "the probe runs the image from the machine's podman storage: give the image's name there "
                    f"(`podman load -i ...` it first), not {ref}"
                ),
            }
        )
        return False
    from cgpu.backends import run_backend

    options = {"machine": machine, "probe_image": ref, **({"timeout": timeout} if timeout else {})}
    return merge_machine_probe(result, run_backend("krunkit", options, progress=progress), source)


def merge_machine_probe(result: dict[str, Any], builder: Any, source: str) -> bool:
    """Fold the krunkit backend's report into the answer: a probe that ran decides the verdict."""
    report = builder.build()
    result["problems"] += [{**p, "source": f"{source}: {p['source']}"} for p in report["problems"]]
    if builder.could_not_run:
        result["problems"].append(
            {
                "severity": "error",
                "source": source,
                "message": ("the probe did not run in the VM; the verdict above is from the image's files only"),
            }
        )
        return False
    got = "vulkan" in report["containers"]
    evidence = report["evidence"]["vulkan"]
    if (result["verdict"] == "yes") != got and result["verdict"] != "unknown":
        result["problems"].append(
            {
                "severity": "warning",
                "source": source,
                "message": (
                    f"the image's files said {result['verdict']}, the probe in the VM says {'yes' if got else 'no'}; "
                    "the probe decides"
                ),
            }
        )
    result["verdict"] = "yes" if got else "no"
    result["reason"] = f"the probe in {source.split(' ', 1)[1]}: {evidence}"
    return True


_MARK = {"pass": "ok", "fail": "FAIL", "unknown": "??", "skip": "-"}


def render_image_check(result: dict[str, Any]) -> str:
    from cgpu.render import render_problems

    lines = [f"cgpu image check {result['image']}"]
    about = [part for part in (result.get("source"), result.get("os"), result.get("architecture")) if part]
    if about:
        lines.append("  " + " · ".join(about))
    checks = result.get("checks") or []
    if checks:
        lines.append("")
        width = max(len(c["name"]) for c in checks)
        for check in checks:
            advisory = "" if check["required"] else " (advisory)"
            lines.append(f"  {_MARK[check['status']]:<4} {check['name']:<{width}}  {check['evidence']}{advisory}")
            if check["fix"] and check["status"] in ("fail", "unknown"):
                lines.append(f"       {'':<{width}}  fix: {check['fix']}")
    lines.append("")
    answer = {"yes": "YES", "no": "NO", "unknown": "UNKNOWN"}[result["verdict"]]
    lines.append(f"vulkan under krunkit: {answer}: {result['reason']}")
    lines.extend(render_problems(result["problems"]))
    return "\n".join(lines)
