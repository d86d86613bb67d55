"""A Vulkan ICD (driver) manifest as the Vulkan loader reads it.

Vulkan-Loader `loader/loader.c` `loader_parse_icd_manifest` and `loader_parse_version_string`
(the same rules from v1.3.239, Debian 12's loader, to main) and `loader/cJSON.c`
(`GetObjectItem`: of a key given twice, the first). A manifest that names a library is still
skipped without `file_format_version` (from 1.4.304 also where it is not a string), without
`ICD.api_version`, with a non-zero variant in it, with `is_portability_driver` true (unless the
application enables portability enumeration) or with a `library_arch` starting with "32" (a
64-bit process; a container's process is taken to be one).
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any


def _first_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def load(text: str) -> Any:
    """The manifest's JSON (a key given twice: the first, as cJSON finds it), or None where the
    loader's loader_get_json fails (and skips the file)."""
    try:
        return json.loads(text, object_pairs_hook=_first_keys)
    except (ValueError, RecursionError):
        return None


def library_path(document: Any) -> str | None:
    """ICD.library_path, where it is a non-empty string (else the manifest names no library)."""
    icd = document.get("ICD") if isinstance(document, dict) else None
    value = icd.get("library_path") if isinstance(icd, dict) else None
    return value if isinstance(value, str) and value else None


def skipped_because(document: Any) -> str | None:
    """Why loader_parse_icd_manifest skips a manifest that names a library, in its order, as a
    clause ("it has no ..."), or None where the loader takes it."""
    if not isinstance(document, dict) or library_path(document) is None:
        return "it names no library (ICD.library_path)"
    if "file_format_version" not in document:
        return "it has no file_format_version, and the loader skips a manifest without one"
    if not isinstance(document["file_format_version"], str):
        return (
            "its file_format_version is not a string, and loaders from 1.4.304 skip such a manifest "
            '(older ones read it): write it as a string, e.g. "1.0.1"'
        )
    icd = document["ICD"]
    if "api_version" not in icd:
        return "its ICD has no api_version, and the loader skips a driver manifest without one"
    version = icd["api_version"]
    variant = api_version_variant(version) if isinstance(version, str) else 0
    if variant:
        return (
            f"its api_version {json.dumps(version)} has variant {variant} (a four-part version's first part, "
            "or a major version over 127 that overflows into it), and the loader takes only variant 0, Vulkan itself"
        )
    if icd.get("is_portability_driver") is True:
        return (
            "it sets is_portability_driver, and the loader skips such a driver unless the application "
            "enables portability enumeration (VK_KHR_portability_enumeration)"
        )
    arch = icd.get("library_arch")
    if isinstance(arch, str) and arch.startswith("32"):
        return f"its library_arch is {json.dumps(arch)}, and a 64-bit process's loader skips a 32-bit driver"
    return None


C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale
ASCII_DIGITS = frozenset("0123456789")


def _strtoul16(token: str) -> int:
    """(uint16_t)strtoul(token, NULL, 10): leading blanks, a sign, the digits; the rest ignored."""
    rest = token.lstrip(C_SPACE)
    sign = rest[:1] if rest[:1] in ("+", "-") else ""
    rest = rest[len(sign) :]
    end = 0
    while end < len(rest) and rest[end] in ASCII_DIGITS:
        end += 1
    digits = rest[:end]
    value = int(digits) if digits else 0
    return (-value if sign == "-" else value) % (1 << 64) & 0xFFFF


def api_version_variant(text: str) -> int:
    """VK_API_VERSION_VARIANT of loader_parse_version_string(text): tokens split at . " CR LF
    (strtok), a fourth token makes the first the variant, and VK_MAKE_API_VERSION shifts in 32 bits
    (a major version over 127 reaches the variant's bits; a variant over 7 falls off)."""
    tokens = text.replace('"', ".").replace("\n", ".").replace("\r", ".").split(".")
    numbers = [_strtoul16(token) for token in tokens if token][:4]
    variant, major = (numbers[0], numbers[1]) if len(numbers) == 4 else (0, numbers[0] if numbers else 0)
    return (((variant << 29) | (major << 22)) & 0xFFFFFFFF) >> 29
