"""CDI names as the reference library's parser checks them (pkg/parser/parser.go):
vendor and class (the two halves of `kind`), device names, and qualified device names
`vendor/class=name`. Error texts are the library's own."""

from __future__ import annotations

import re

from cgpu.errors import CgpuValueError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Final

# The grammar, as regular expressions (ASCII only; "letter" and "digit" are ASCII ones).
# A one-character vendor or class is valid on CDI main; see OLD_LIBRARY_CRASH.
VENDOR_OR_CLASS: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
DEVICE_NAME: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")

# Every released library up to v1.1.0 slices name[1:len(name)-1] without a length guard, so
# a one-character vendor or class panics the engine that loads the spec (fixed on main).
OLD_LIBRARY_CRASH: Final = "crashes engines whose CDI library is <= 1.1.0"

_GO_ESCAPES: Final = {
    "\a": r"\a",
    "\b": r"\b",
    "\f": r"\f",
    "\n": r"\n",
    "\r": r"\r",
    "\t": r"\t",
    "\v": r"\v",
    "\\": r"\\",
    '"': r"\"",
}


def go_quote(text: str) -> str:
    """`text` quoted as Go's %q writes it, so messages match the library's."""
    out = ['"']
    for ch in text:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


EXCERPT_CHARS: Final = 60


def excerpt(text: str) -> str:
    """`text` quoted as go_quote does, cut to EXCERPT_CHARS characters: what messages quote of a
    file's content (a symlinked spec can be any file; an error must not print it whole)."""
    if len(text) <= EXCERPT_CHARS:
        return go_quote(text)
    return f'{go_quote(text[:EXCERPT_CHARS])[:-1]}..." ({len(text):,} characters)'


def is_letter(ch: str) -> bool:
    return ("A" <= ch <= "Z") or ("a" <= ch <= "z")


def _is_alnum(ch: str) -> bool:
    return is_letter(ch) or ("0" <= ch <= "9")


def _middle(name: str) -> str:
    """name[1:len(name)-1] as Go slices it, in bytes: a multi-byte first or last character is
    cut, and Go's range reads each broken piece as U+FFFD."""
    return name.encode("utf-8", "surrogateescape")[1:-1].decode("utf-8", "replace")


def _edge(name: str, index: int) -> str:
    """rune(name[index]) in Go: one byte, read as the character of that code (0xC3 -> "Ã")."""
    return chr(name.encode("utf-8", "surrogateescape")[index])


def _vendor_or_class_error(name: str) -> str | None:
    if VENDOR_OR_CLASS.fullmatch(name):
        return None
    if name == "":
        return "empty name"
    if not is_letter(_edge(name, 0)):
        return f"{excerpt(name)}, should start with letter"
    for ch in _middle(name):
        if not (_is_alnum(ch) or ch in "_-."):
            return f"invalid character '{ch}' in name {excerpt(name)}"
    if not _is_alnum(_edge(name, -1)):
        return f"{excerpt(name)}, should end with a letter or digit"
    return None


def vendor_error(vendor: str) -> str | None:
    """Why `vendor` is not a valid vendor name (the library's text), or None."""
    error = _vendor_or_class_error(vendor)
    return None if error is None else f"invalid vendor. {error}"


def class_error(device_class: str) -> str | None:
    """Why `device_class` is not a valid class name (the library's text), or None."""
    error = _vendor_or_class_error(device_class)
    return None if error is None else f"invalid class. {error}"


def device_name_error(name: str) -> str | None:
    """Why `name` is not a valid device name (the library's text), or None."""
    if DEVICE_NAME.fullmatch(name):
        return None
    if name == "":
        return "invalid (empty) device name"
    if not _is_alnum(_edge(name, 0)):
        # sic: the library says "class" here
        return f"invalid class {excerpt(name)}, should start with a letter or digit"
    if len(name.encode("utf-8", "surrogateescape")) == 1:
        return None
    for ch in _middle(name):
        if not (_is_alnum(ch) or ch in "_-.:"):
            return f"invalid character '{ch}' in device name {excerpt(name)}"
    if not _is_alnum(_edge(name, -1)):
        return f"invalid name {excerpt(name)}, should end with a letter or digit"
    return None


def parse_qualifier(kind: str) -> tuple[str, str]:
    """Split `kind` at the first "/" into (vendor, class); ("", kind) when it does not split."""
    vendor, sep, device_class = kind.partition("/")
    if not sep or not vendor or not device_class:
        return "", kind
    return vendor, device_class


def parse_device(device: str) -> tuple[str, str, str]:
    """Split `vendor/class=name` without validating; ("", "", device) when it does not split."""
    if device == "" or device[0] == "/":
        return "", "", device
    qualifier, sep, name = device.partition("=")
    if not sep or not qualifier or not name:
        return "", "", device
    vendor, device_class = parse_qualifier(qualifier)
    if vendor == "":
        return "", "", device
    return vendor, device_class, name


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """(vendor, class, name) of a qualified device name; ValueError with the library's text."""
    vendor, device_class, name = parse_device(device)
    if vendor == "":
        raise CgpuValueError(f"unqualified device {go_quote(device)}, missing vendor")
    if device_class == "":
        raise CgpuValueError(f"unqualified device {go_quote(device)}, missing class")
    if name == "":
        raise CgpuValueError(f"unqualified device {go_quote(device)}, missing device name")
    error = vendor_error(vendor) or class_error(device_class) or device_name_error(name)
    if error is not None:
        raise CgpuValueError(f"invalid device {go_quote(device)}: {error}")
    return vendor, device_class, name


def is_qualified_name(device: str) -> bool:
    """What docker and podman use to tell a CDI device from a device path."""
    try:
        parse_qualified_name(device)
    except ValueError:
        return False
    return True


def crashes_old_libraries(kind: str) -> bool:
    """A valid kind whose vendor or class has one character: see OLD_LIBRARY_CRASH."""
    vendor, device_class = parse_qualifier(kind)
    return len(vendor) == 1 or len(device_class) == 1
