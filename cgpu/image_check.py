"""`cgpu image check REF`: would this image get `vulkan` in a krunkit VM (Mesa's Venus driver)?

The image is read without running it (cgpu.image.source), the checks look at its files
(cgpu.image.checks), and the answer is one dict:

  image, source, os, architecture, verdict (yes|no|unknown), reason,
  checks [{name, status (pass|fail|unknown|skip), evidence, fix, required}],
  problems [{severity, source, message}], cgpu_version, checked_at

Exit status (cgpu.cli.ExitCode): 0 yes; 4 no; 5 unknown; 1 the image could not be read (or
--machine could not run); 2 bad usage; 3 internal error.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable

from cgpu import __version__


def check_image(ref: str, *, machine: str | None = None, timeout: float | None = None,
                progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any], int]:
    from cgpu.cli import ExitCode
    from cgpu.image.checks import check_dicts, run_checks, verdict
    from cgpu.image.fs import ImageReadError
    from cgpu.image.source import open_image

    result: dict[str, Any] = {
        "image": ref, "source": "", "os": "", "architecture": "", "verdict": "unknown", "reason": "",
        "checks": [], "problems": [], "cgpu_version": __version__,
        "checked_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    problems: list[dict[str, str]] = result["problems"]
    try:
        with open_image(ref, timeout=timeout, progress=progress) as image:
            result["source"] = image.source
            problems += [{"severity": s, "source": image.source, "message": m} for s, m in image.notes]
            checks, found, info = run_checks(image)
    except ImageReadError as exc:
        result["reason"] = f"could not read the image: {exc}"
        problems.append({"severity": "error", "source": ref, "message": str(exc)})
        return result, ExitCode.COULD_NOT_RUN
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug in cgpu: still one answer, never a traceback
        result["reason"] = "internal error"
        problems.append({"severity": "error", "source": "cgpu",
                         "message": f"internal error, please report it: {type(exc).__name__}: {exc}"})
        return result, ExitCode.INTERNAL
    problems += found
    result["os"], result["architecture"] = info["os"], info["architecture"]
    result["checks"] = check_dicts(checks)
    result["verdict"], result["reason"] = verdict(checks)
    code = {"yes": ExitCode.OK, "no": ExitCode.IMAGE_NO, "unknown": ExitCode.IMAGE_UNKNOWN}[result["verdict"]]
    if machine is not None:
        problems.append({"severity": "error", "source": "--machine",
                         "message": f"running the probe in krunkit VM {machine!r} needs cgpu's krunkit backend, "
                                    "which this build does not have yet; the answer above is from the image's "
                                    "files only"})
        code = ExitCode.COULD_NOT_RUN
    return result, code


_MARK = {"pass": "ok", "fail": "FAIL", "unknown": "??", "skip": "-"}


def render_image_check(result: dict[str, Any]) -> str:
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
    if result["problems"]:
        lines.append("")
        lines.append("problems:")
        for problem in result["problems"]:
            lines.append(f"  {problem['severity']:<7} {problem['source']}: {problem['message']}")
    return "\n".join(lines)
