"""`cgpu image check REF`: would this image get `vulkan` in a krunkit VM (Mesa's Venus driver)?

The image is read without running it (cgpu.image.source), the checks look at its files
(cgpu.image.checks), and the answer is one dict:

  image, source, os, architecture, status, verdict (yes|no|unknown), reason,
  checks [{name, status (pass|fail|unknown|skip), evidence, fix, required}],
  problems [{severity, source, message}], cgpu_version, checked_at

While the check runs, `problems` holds `cgpu.problem.Problem`s; the answer gives their dicts.

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

from cgpu.problem import Problem
from cgpu.version import __version__

DEFAULT_TIMEOUT = 300.0  # the whole check; exporting a multi-GB image from engine storage takes a while


def check_image(
    ref: str, *, machine: str | None = None, timeout: float | None = None, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """The answer for REF (see above); CgpuValueError when REF is no image reference at all.
    Every evidence, fix, reason and problem text is capped (`cgpu.report.cap`)."""
    from cgpu.report import cap

    result = _check(ref, machine=machine, timeout=timeout, progress=progress)
    result["reason"] = cap(result["reason"])
    result["checks"] = [{**c, "evidence": cap(c["evidence"]), "fix": cap(c["fix"])} for c in result["checks"]]
    result["problems"] = [
        Problem(p.severity, cap(p.source), cap(p.message), p.kind).as_dict() for p in result["problems"]
    ]
    return result


def _check(
    ref: str, *, machine: str | None, timeout: float | None, progress: Callable[[str], None] | None
) -> dict[str, Any]:
    from cgpu.clock import limit_start
    from cgpu.image.checks import check_dicts, run_checks, verdict
    from cgpu.image.fs import Deadline, DeadlineExceeded, ImageReadError
    from cgpu.image.source import check_reference, open_image

    check_reference(ref)  # not a reference at all: bad usage, raised (CgpuValueError)
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
    problems: list[Problem] = result["problems"]
    try:
        # one for the whole check, every read asks it; in the CLI it counts from the process's start
        deadline = Deadline(timeout or DEFAULT_TIMEOUT, start=limit_start())
        with open_image(ref, deadline=deadline, progress=progress) as image:
            result["source"] = image.source
            problems += [Problem(severity, image.source, note, "image") for severity, note in image.notes]
            checks, found, info = run_checks(image)
    except (ImageReadError, DeadlineExceeded) as exc:
        result["reason"] = f"could not read the image: {exc}"
        problems.append(Problem("error", ref, str(exc), "image"))
        result["status"] = "unreadable"
        return result
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug in cgpu: still one answer, never a traceback
        result["reason"] = "internal error"
        problems.append(
            Problem("error", "cgpu", f"internal error, please report it: {type(exc).__name__}: {exc}", "internal-error")
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
            Problem(
                "error",
                source,
                "the probe runs the image from the machine's podman storage: give the image's name there "
                f"(`podman load -i ...` it first), not {ref}",
                "probe",
            )
        )
        return False
    from cgpu.backends import run_backend

    options = {"machine": machine, "probe_image": ref, **({"timeout": timeout} if timeout else {})}
    return merge_machine_probe(result, run_backend("krunkit", options, progress=progress), source)


def merge_machine_probe(result: dict[str, Any], builder: Any, source: str) -> bool:
    """Fold the krunkit backend's report into the answer: a probe that ran decides the verdict."""
    report = builder.build()
    result["problems"] += [Problem(p.severity, f"{source}: {p.source}", p.message, p.kind) for p in builder.problems]
    if builder.could_not_run:
        result["problems"].append(
            Problem(
                "error",
                source,
                "the probe did not run in the VM; the verdict above is from the image's files only",
                "probe",
            )
        )
        return False
    got = "vulkan" in report["containers"]
    evidence = report["evidence"]["vulkan"]
    if (result["verdict"] == "yes") != got and result["verdict"] != "unknown":
        result["problems"].append(
            Problem(
                "warning",
                source,
                f"the image's files said {result['verdict']}, the probe in the VM says {'yes' if got else 'no'}; "
                "the probe decides",
                "probe",
            )
        )
    result["verdict"] = "yes" if got else "no"
    result["reason"] = f"the probe in {source.split(' ', 1)[1]}: {evidence}"
    return True


_MARK = {"pass": "ok", "fail": "FAIL", "unknown": "??", "skip": "-"}
_MARK_STYLE = {"pass": ("green",), "fail": ("bold", "red"), "unknown": ("yellow",), "skip": ("dim",)}
_ANSWER_STYLE = {"yes": ("bold", "green"), "no": ("bold", "red"), "unknown": ("bold", "yellow")}


def render_image_check(result: dict[str, Any], *, columns: int = 80, style: Any = None) -> str:
    """The answer first, then each check (evidence and fix wrapped under it), then problems.
    Image names, tags, os-release and file paths come from the image: all pass through `escape`."""
    from cgpu.render import render_problems
    from cgpu.terminal import PLAIN, escape, wrap

    style = style or PLAIN
    answer = {"yes": "YES", "no": "NO", "unknown": "UNKNOWN"}[result["verdict"]]
    head = f"vulkan under krunkit: {answer}:"
    lines = wrap(f"{head} {escape(result['reason'])}", columns, indent=2)
    lines[0] = style(head, *_ANSWER_STYLE[result["verdict"]]) + lines[0][len(head) :]
    lines += wrap(f"cgpu image check {escape(result['image'])}", columns, indent=2)
    about = [escape(part) for part in (result.get("source"), result.get("os"), result.get("architecture")) if part]
    if about:
        lines += wrap(" · ".join(about), columns, first="  ")
    checks = result.get("checks") or []
    if checks:
        lines.append("")
        name_width = max(len(c["name"]) for c in checks)
        for check in checks:
            advisory = "" if check["required"] else " (advisory)"
            mark = f"  {_MARK[check['status']]:<4}"
            first = f"{mark} {escape(check['name']):<{name_width}}  "
            row = wrap(f"{escape(check['evidence'])}{advisory}", columns, first=first)
            row[0] = style(mark, *_MARK_STYLE[check["status"]]) + row[0][len(mark) :]
            lines += row
            if check["fix"] and check["status"] in ("fail", "unknown"):
                lines += wrap(f"fix: {escape(check['fix'])}", columns, first=" " * len(first))
    lines.extend(render_problems(result["problems"], columns=columns, style=style))
    return "\n".join(lines)
