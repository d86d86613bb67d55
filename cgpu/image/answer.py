"""The answer for one image on this node: `cgpu probe --image REF`, `cgpu.probe(image=REF)`.

The node's report says what the node injects per API; this reads the image REF (as `image check`
does: never run, never pulled) and checks, for each API the node provides, what that API's user
space needs from the image (cgpu.image.needs). The report gains an `image` section (the
reference, how it was read, per API the image's verdict and the checks behind it), and each
API's state becomes the answer for containers of that image:

  node provided + image has what it needs  -> provided
  node provided + image lacks a part       -> absent (the evidence names the part)
  node provided + the image cannot tell    -> unknown
  node absent or unknown                   -> unchanged (the image cannot add what the node does not give)

An image that cannot be read makes every provided API unknown, with an error problem.
"""

from __future__ import annotations

import time
from typing import Any

from cgpu.apis import CONTAINER_APIS
from cgpu.problem import Problem

DEFAULT_TIMEOUT = 120.0  # reading the image; an engine's export of a multi-GB image takes a while


def image_section(report: dict[str, Any], ref: str, *, timeout: float | None = None) -> dict[str, Any]:
    """The report's `image` section for REF (the report itself is not changed), and the problems met."""
    from cgpu.image.checks import Facts, check_dicts
    from cgpu.image.fs import Deadline, DeadlineExceeded, ImageReadError
    from cgpu.image.needs import Node, api_checks, api_verdict, image_user
    from cgpu.image.source import check_reference, open_image
    from cgpu.report import cap

    check_reference(ref)  # not a reference at all: bad usage, raised (CgpuValueError)
    started = time.monotonic()
    section: dict[str, Any] = {
        "reference": ref,
        "source": "",
        "status": "read",
        "os": "",
        "architecture": "",
        "user": "",
        "seconds": 0.0,
        "apis": {},
        "problems": [],
    }
    problems: list[Problem] = []
    node = Node(report)
    try:
        with open_image(ref, deadline=Deadline(timeout or DEFAULT_TIMEOUT)) as image:
            section["source"] = image.source
            problems += [Problem(severity, image.source, note, "image") for severity, note in image.notes]
            facts = Facts(image)
            section["os"] = facts.os_name
            section["architecture"] = image.architecture or ""
            user = image_user(facts)
            section["user"] = user.spec
            for api in CONTAINER_APIS:
                state = report["apis"][api]["state"]
                entry: dict[str, Any] = {"node": state, "verdict": "not-checked", "state": state, "reason": ""}
                if state == "provided":
                    checks = api_checks(
                        api,
                        report["apis"][api].get("image_needs", []),
                        report["apis"][api].get("user_needs"),
                        facts,
                        node,
                    )
                    verdict, reason = api_verdict(checks)
                    entry.update(
                        verdict=verdict,
                        state={"yes": "provided", "no": "absent", "unknown": "unknown"}[verdict],
                        reason=cap(reason),
                        checks=[
                            {**c, "evidence": cap(c["evidence"]), "fix": cap(c["fix"])} for c in check_dicts(checks)
                        ],
                    )
                else:
                    entry["reason"] = f"the node does not provide it ({state}): nothing to check in the image"
                entry.setdefault("checks", [])
                section["apis"][api] = entry
            problems += facts.problems
    except (ImageReadError, DeadlineExceeded) as exc:
        _unread(section, report, "unreadable", f"could not read the image: {exc}")
        problems.append(Problem("error", ref, f"could not read the image: {exc}", "image"))
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a bug in cgpu: still one answer, never a traceback
        _unread(section, report, "internal_error", "internal error")
        problems.append(
            Problem("error", "cgpu", f"internal error, please report it: {type(exc).__name__}: {exc}", "internal-error")
        )
    section["seconds"] = round(time.monotonic() - started, 3)
    section["problems"] = [Problem(p.severity, cap(p.source), cap(p.message), p.kind).as_dict() for p in problems]
    return section


def _unread(section: dict[str, Any], report: dict[str, Any], status: str, reason: str) -> None:
    section["status"] = status
    for api in CONTAINER_APIS:
        state = report["apis"][api]["state"]
        unknown = state == "provided"
        section["apis"][api] = {
            "node": state,
            "verdict": "unknown" if unknown else "not-checked",
            "state": "unknown" if unknown else state,
            "reason": reason,
            "checks": [],
        }


def with_image(report: dict[str, Any], ref: str, *, timeout: float | None = None) -> dict[str, Any]:
    """The report for containers of image REF (a new dict; see above)."""
    from cgpu.apis import API_ORDER
    from cgpu.report import cap

    section = image_section(report, ref, timeout=timeout)
    problems = section.pop("problems")
    apis = {api: dict(value) for api, value in report["apis"].items()}
    evidence = dict(report["evidence"])
    for api, entry in section["apis"].items():
        if entry["state"] != entry["node"]:
            apis[api] = {**apis[api], "state": entry["state"], "image_needs": []}
            evidence[api] = cap(f"{evidence[api]}; with image {ref}: {entry['reason']}")
    order = {"error": 0, "warning": 1, "info": 2}
    merged = sorted([*report["problems"], *problems], key=lambda p: order.get(p["severity"], 3))
    containers = [api for api in API_ORDER if apis[api]["state"] == "provided"]
    result = {**report, "containers": containers, "apis": apis, "evidence": evidence, "problems": merged}
    result["image"] = section
    return result


_VERDICT_STYLE = {"yes": ("green",), "no": ("bold", "red"), "unknown": ("yellow",), "not-checked": ("dim",)}
_MARK = {"pass": "ok", "fail": "FAIL", "unknown": "??", "skip": "-"}


def render_image(section: dict[str, Any], *, columns: int = 80, style: Any = None) -> str:
    """The image part of `cgpu probe --image`: what was read, then per API the verdict and any check
    that did not pass, with its fix. Names and paths come from the image: all pass through `escape`."""
    from cgpu.terminal import PLAIN, escape, wrap

    style = style or PLAIN
    about = [escape(part) for part in (section["source"], section["os"], section["architecture"]) if part]
    user = f"user {escape(section['user'])}" if section["user"] else "user root"
    lines = wrap(
        f"image {escape(section['reference'])}: {' · '.join([*about, user])} (read in {section['seconds']:.2f} s)",
        columns,
        indent=2,
    )
    skipped = [api for api, entry in section["apis"].items() if entry["verdict"] == "not-checked"]
    for api, entry in section["apis"].items():
        verdict = entry["verdict"]
        if verdict == "not-checked":
            continue
        head = f"  {api:<9}"
        text = f"{head}{verdict:<12}{escape(entry['reason'])}"
        row = wrap(text, columns, indent=len(head) + 12)
        row[0] = head + style(f"{verdict:<12}", *_VERDICT_STYLE[verdict]) + row[0][len(head) + 12 :]
        lines += row
        for check in entry["checks"]:
            if check["status"] in ("fail", "unknown") and check["fix"]:
                lines += wrap(
                    f"fix ({escape(check['name'])}): {escape(check['fix'])}", columns, first=" " * (len(head) + 2)
                )
    if skipped:
        lines.append(style(f"  not given by the node, so not checked: {', '.join(skipped)}", "dim"))
    return "\n".join(lines)


def image_exit(section: dict[str, Any]) -> str:
    """The image's answer over the APIs the node gives: unread, no (it lacks a part of one), unknown, or yes."""
    if section["status"] != "read":
        return "unread"
    verdicts = {entry["verdict"] for entry in section["apis"].values()}
    return "no" if "no" in verdicts else "unknown" if "unknown" in verdicts else "yes"
