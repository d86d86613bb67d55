"""The devices asked for (`--device`): checked as CDI names, unknown ones named with close matches."""

from __future__ import annotations

from collections.abc import Sequence

from cgpu.backends.cdi.problems import name_list
from cgpu.cdi.model import ResolvedDevice, ScanResult, Spec
from cgpu.report import ReportBuilder


def select_devices(
    report: ReportBuilder, scan: ScanResult, names: Sequence[str] | None, dirs: list[str], dropped: dict[str, Spec]
) -> list[ResolvedDevice] | None:
    if not names:
        return list(scan.devices.values())
    from cgpu.cdi.names import parse_qualified_name

    wanted = list(dict.fromkeys(names))
    for name in wanted:
        try:
            parse_qualified_name(name)
        except ValueError as exc:
            report.usage_error("devices", _bad_name(name, exc, scan))
            return None
    unknown = [name for name in wanted if name not in scan.devices and name not in dropped]
    if unknown:
        report.problem(
            "error",
            name_list(unknown, 5),
            f"unresolvable CDI devices {name_list(unknown, 5)}: no valid spec in {', '.join(dirs)} "
            f"defines them, so an engine refuses a container that requests them{_did_you_mean(unknown, scan)}",
            "unresolvable-device",
        )
    return [scan.devices[name] for name in wanted if name in scan.devices]


def _bad_name(name: str, error: ValueError, scan: ScanResult) -> str:
    """Why `name` is not a qualified CDI name, in the words of what is missing, and the names it may mean."""
    from cgpu.cdi.names import class_error, parse_device, vendor_error

    qualifier, sep, device = name.partition("=")
    vendor, device_class, _ = parse_device(name)
    if not sep and "/" in name:
        why = f"the =NAME part is missing (e.g. {name}=0 or {name}=all)"
    elif not sep:
        why = "it is not qualified: give vendor/class=name"
    elif not device:
        why = "the name after = is empty"
    elif "/" not in qualifier:
        why = f"the vendor/ part is missing before {qualifier}"
    elif vendor and not vendor_error(vendor) and not class_error(device_class):  # the library's text says "class"
        why = f"the name {device!r} must start and end with a letter or digit and hold only those and _ - . :"
    else:
        why = str(error)
    near = [known for known in scan.devices if known.endswith(("/" + name, "=" + name)) or known.startswith(name + "=")]
    hint = f"; did you mean {name_list(near)}?" if near else "; use vendor/class=name, e.g. nvidia.com/gpu=0"
    return f"{name!r} is not a CDI device name: {why}{hint}"


def _did_you_mean(unknown: list[str], scan: ScanResult) -> str:
    """Close names for the first few unknown ones (difflib is quadratic: a few, never 50,000)."""
    if not scan.devices:
        return ""
    import difflib

    known = list(scan.devices)
    hints = []
    for name in unknown[:3]:
        children = [k for k in known if k.startswith(name + ":")]  # a GPU's own MIG devices first
        close = [*children, *(c for c in difflib.get_close_matches(name, known, n=3, cutoff=0.6) if c not in children)]
        close = close[:3]
        if close:
            hints.append(f"{name}: did you mean {', '.join(close)}?")
    if hints:
        return "; " + "; ".join(hints)
    return f"; the names defined are {name_list(known, 5)} (`cgpu probe --list-devices` lists them all)"
