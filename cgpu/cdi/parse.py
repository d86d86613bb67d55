"""Read one CDI spec file as the reference library does (pkg/cdi/spec.go `ReadSpec`).

The library parses .json and .yaml alike with sigs.k8s.io/yaml `UnmarshalStrict`: YAML 1.1
(go-yaml v2) turned into JSON, then Go's encoding/json into the spec structs. What follows
from that, and what this module reproduces:

- only the first YAML document counts; duplicate keys are an error;
- plain scalars resolve as go-yaml v2 does (`y`/`yes`/`on` are booleans, `0x1F` and `010` are
  integers, `1_000` is 1000, timestamps stay text), and a number or boolean where a string is
  expected becomes that string (`name: 0` -> "0", `cdiVersion: 0.5` -> "0.5");
- the YAML scanner's rules are go-yaml's: libyaml reads first, and where it fails a
  go-yaml-flavoured PyYAML scanner decides, which never takes what both reject (an escape of a
  surrogate or above U+10FFFF, a directive other than %YAML and %TAG); an integer key from 2^63
  to 2^64-1 (a uint64) is an error, as sigs.k8s.io/yaml cannot make it a JSON key;
- struct keys match case-insensitively like encoding/json (`hostpath` is `hostPath`; we keep
  the spec and add a warning; of non-ASCII runes only the Kelvin sign and the long s fold); of
  two keys naming the same field (`kind`, `Kind`) the later in byte order wins, as json.Marshal
  sorts them; unknown keys are an error;
- then the library's validation: versions, names, edits, devices (pkg/cdi/spec.go `newSpec`,
  device.go, container-edits.go; docs/cdi-reading.md "The rules, and where cgpu decided").

Where the library panics (a null hook, a one-character vendor on <= v1.1.0), parse_spec
raises SpecError with `crash` set: the engine's whole spec-dir load dies, not just this file.

Guards the library lacks: a size cap, a cap on nodes reached through YAML aliases on top of
go-yaml's own ratio rule, libyaml's nesting limit, and every failure becomes a SpecError.
Deliberate gap: YAML merge keys (`<<`) are refused (the library merges them). Messages quote
at most an excerpt of any value (names.excerpt).
"""

from __future__ import annotations

import binascii
import gc
import math
import operator
from collections.abc import Callable

from cgpu.cdi import names, versions
from cgpu.cdi.goyaml import PLAIN_TAG, STR_TAG, goyaml_loader_class, loader_class
from cgpu.cdi.model import ContainerEdits, DeviceNode, Hook, Mount, Spec, SpecDevice
from cgpu.errors import CgpuError
from cgpu.patterns import lazy, lazy_bytes

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Final

MAX_SPEC_BYTES: Final = 4 * 1024 * 1024
# Nodes decoded through an alias. go-yaml's own limit is a ratio (ALIAS_RATIO_*), which cgpu
# applies too; this cap on top only bounds cgpu's memory (real specs have no aliases at all).
MAX_ALIAS_NODES: Final = 250_000
# go-yaml v2 decode.go: allowedAliasRatio and the check in (*decoder).unmarshal
ALIAS_RATIO_LOW: Final = 400_000
ALIAS_RATIO_HIGH: Final = 4_000_000

VALID_HOOK_NAMES: Final = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
VALID_NODE_TYPES: Final = frozenset({"", "b", "c", "u", "p"})


class SpecError(CgpuError, ValueError):
    """A spec file the reference library rejects (by_library), or one cgpu refuses to read
    (over the size cap, too many alias nodes, a YAML feature cgpu does not implement,
    unreadable). `crash`: the library panics on it, taking the engine's whole load with it."""

    def __init__(self, path: str, message: str, *, by_library: bool = True, crash: bool = False) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message
        self.by_library = by_library
        self.crash = crash


class _Invalid(CgpuError):
    """Raised inside the decoder; parse_spec turns it into a SpecError."""

    def __init__(self, message: str, *, by_library: bool = True, crash: bool = False) -> None:
        super().__init__(message)
        self.by_library = by_library
        self.crash = crash


def _null_entry_crash(where: str, reader: str) -> _Invalid:
    return _Invalid(
        f"a null entry in {where}: the CDI library (v1.1.0 and main) dereferences it in {reader} and panics",
        crash=True,
    )


# ---------------------------------------------------------------------------------------------
# YAML -> plain values, go-yaml v2 style


_BOOL_NULL: Final[dict[str, Any]] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_GO_INT: Final = lazy(r"[+-]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
_YAML_FLOAT: Final = lazy(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT: Final = lazy(r"\.[0-9]+([eE][-+]?[0-9]+)?")


def _go_int(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    if len(digits) > 1 and digits[0] == "0" and digits[1] in "01234567":
        return sign * int(digits, 8)  # Go's base-0 "010" is octal
    return sign * int(digits, 0)


def resolve_plain(text: str) -> Any:
    """An untagged plain scalar as go-yaml v2 resolves it: bool, None, int, float or str."""
    if text in _BOOL_NULL:
        return _BOOL_NULL[text]
    first = text[0]
    if first == ".":
        return float(text) if _DOT_FLOAT.fullmatch(text) else text
    if not (first in "+-" or "0" <= first <= "9"):
        return text
    plain = text.replace("_", "")
    if _GO_INT.fullmatch(plain):
        value = _go_int(plain)
        # ParseInt takes int64 with a sign; ParseUint takes up to uint64 without one
        if -(2**63) <= value < 2**63 or (value < 2**64 and plain[0] not in "+-"):
            return value
    if _YAML_FLOAT.fullmatch(plain):
        return float(plain)
    return text


def _format_float32(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 32): what sigs.k8s.io/yaml makes of a YAML float
    stored in a string field."""
    import struct  # here: few specs hold a float where a string belongs

    if math.isnan(value):
        return "NaN"
    try:
        single = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        single = math.copysign(math.inf, value)
    if math.isinf(single):
        return "+Inf" if single > 0 else "-Inf"
    if single == 0:
        return "-0" if math.copysign(1, single) < 0 else "0"
    for precision in range(1, 10):  # shortest digits that read back as the same float32
        text = f"{single:.{precision - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            break
    mantissa, exponent_text = text.split("e")
    exponent = int(exponent_text)
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    if exponent < -4 or exponent >= 6:
        rest = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{rest}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    point = exponent + 1
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _line(node: Any) -> int:
    line: int = node.start_mark.line
    return line + 1


def _describe(value: Any) -> str:
    if isinstance(value, _Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    return f"the string {names.excerpt(str(value))}"


class _Mapping:
    """A YAML mapping, its keys stringified as sigs.k8s.io/yaml does, in document order."""

    __slots__ = ("items",)

    def __init__(self, items: list[tuple[str, Any]]) -> None:
        self.items = items


class _Reader:
    """Turns PyYAML nodes into plain values, with go-yaml v2's scalar rules, strict duplicate
    keys, and go-yaml's alias rule: it counts decoded nodes as (*decoder).unmarshal does (every
    node and key; those under an alias also as alias decodes) and stops on the same ratio."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.open: set[int] = set()  # the collections being read, to catch an alias to an ancestor
        self.alias_depth = 0
        self.decodes = 1  # go-yaml counts the document node
        self.aliases = 0

    def value(self, node: Any) -> Any:
        self.decodes += 1
        key = id(node)
        if self.alias_depth:
            self.aliases += 1
            self.check_aliasing()
            return self.node_value(node)
        if key in self.seen:  # PyYAML shares an anchored node: reaching it again is an alias
            return self.aliased(node)
        self.seen.add(key)
        if self.aliases > 100 and self.decodes > ALIAS_RATIO_LOW:
            self.check_aliasing()
        return self.node_value(node)

    def check_aliasing(self) -> None:
        decodes, aliases = self.decodes, self.aliases
        if aliases > MAX_ALIAS_NODES:
            raise _Invalid(
                f"YAML aliases expand to more than {MAX_ALIAS_NODES:,} nodes; cgpu stops there. The CDI "
                "library's own limit is a ratio of alias to all decoded nodes (go-yaml v2 decode.go "
                "allowedAliasRatio), which this file has not reached: the engine may read it",
                by_library=False,
            )
        if aliases > 100 and decodes > 1000:
            if decodes <= ALIAS_RATIO_LOW:
                allowed = 0.99
            elif decodes >= ALIAS_RATIO_HIGH:
                allowed = 0.10
            else:
                allowed = 0.99 - 0.89 * ((decodes - ALIAS_RATIO_LOW) / (ALIAS_RATIO_HIGH - ALIAS_RATIO_LOW))
            if aliases / decodes > allowed:
                raise _Invalid(
                    f"document contains excessive aliasing (go-yaml v2 stops when more than {allowed:.0%} "
                    f"of the nodes decoded come through aliases: {aliases:,} of {decodes:,})"
                )

    def node_value(self, node: Any) -> Any:
        kind = node.id  # PyYAML's node kinds: "scalar", "sequence", "mapping"
        if kind == "scalar":
            return self.scalar(node)
        key = id(node)
        if key in self.open:  # PyYAML builds the cycle; go-yaml refuses it
            raise _Invalid(f"line {_line(node)}: a YAML anchor's value contains an alias to itself")
        self.open.add(key)
        try:
            if kind == "sequence":
                return [self.value(child) for child in node.value]
            return self.mapping(node)
        finally:
            self.open.discard(key)

    def aliased(self, node: Any) -> Any:
        """A node reached through an alias: the alias node, then its target, counted as go-yaml's
        (*decoder).alias does."""
        self.alias_depth += 1
        try:
            return self.value(node)
        finally:
            self.alias_depth -= 1

    def scalar(self, node: Any) -> Any:
        tag, text = node.tag, node.value
        if tag == PLAIN_TAG:
            return resolve_plain(text)
        if tag == STR_TAG:
            return text
        if tag == "tag:yaml.org,2002:binary":
            import base64  # here: few specs hold a !!binary value

            try:
                return base64.b64decode("".join(text.split()), validate=True).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                raise _Invalid(f"line {_line(node)}: !!binary value contains invalid base64 data") from None
        expected = {
            "tag:yaml.org,2002:int": int,
            "tag:yaml.org,2002:float": float,
            "tag:yaml.org,2002:bool": bool,
            "tag:yaml.org,2002:null": type(None),
        }.get(tag)
        if expected is None:  # !!timestamp, or a tag go-yaml does not resolve: the text
            return text
        value = resolve_plain(text)
        if expected is float and type(value) is int:
            return float(value)
        if type(value) is not expected:
            short = "!!" + tag.rsplit(":", 1)[-1]
            raise _Invalid(f"line {_line(node)}: cannot decode {names.excerpt(text)} as a {short}")
        return value

    def mapping(self, node: Any) -> _Mapping:
        items: list[tuple[str, Any]] = []
        seen_keys: dict[tuple[type, Any], Any] = {}
        self.decodes += len(node.value)  # go-yaml decodes each key as a node too
        if self.alias_depth:
            self.aliases += len(node.value)
        for key_node, value_node in node.value:
            if key_node.id != "scalar":
                raise _Invalid(f"line {_line(key_node)}: a mapping key must be a plain value, not a list or mapping")
            if key_node.tag == PLAIN_TAG and key_node.value == "<<":
                raise _Invalid(
                    f"line {_line(key_node)}: YAML merge keys (<<) are not supported by cgpu; the CDI library "
                    "merges them (go-yaml v2 decode.go merge), so the engine reads this file",
                    by_library=False,
                )
            key = self.scalar(key_node)
            marker = (type(key), key)
            if marker in seen_keys:
                raise _Invalid(
                    f"line {_line(key_node)}: key {names.excerpt(str(key_node.value))} is already "
                    f"set on line {_line(seen_keys[marker])} (duplicate keys are an error)"
                )
            seen_keys[marker] = key_node
            items.append((key if type(key) is str else self.key_string(key, _line(key_node)), self.value(value_node)))
        return _Mapping(items)

    @staticmethod
    def key_string(key: Any, line: int) -> str:
        if key is None:
            raise _Invalid(f"line {line}: a null mapping key is not allowed")
        if isinstance(key, bool):
            return "true" if key else "false"
        if isinstance(key, int) and key >= 2**63:
            # go-yaml v2 resolves it to a uint64, and sigs.k8s.io/yaml's convertToJSONableObject
            # turns only string, int, int64, float64 and bool keys into JSON keys
            raise _Invalid(
                f"line {line}: error converting YAML to JSON: unsupported map key of type: uint64 "
                f"(key {key}; the CDI library's YAML reader, sigs.k8s.io/yaml, takes integer keys up to 2^63-1)"
            )
        if isinstance(key, float):
            return {"+Inf": ".inf", "-Inf": "-.inf", "NaN": ".nan"}.get(_format_float32(key), _format_float32(key))
        return str(key)


_DIRECTIVE: Final = lazy_bytes(rb"%YAML[ \t]+([0-9]+)\.([0-9]+)")


def _check_yaml_directive(data: bytes) -> None:
    """go-yaml v2 reads only `%YAML 1.1` documents (parserc.go yaml_parser_process_directives);
    PyYAML and libyaml also take 1.2."""
    for line in data.removeprefix(b"\xef\xbb\xbf").splitlines():
        text = line.strip()
        if not text or text.startswith(b"#"):
            continue
        if not line.startswith(b"%"):
            return  # the directives end where the document starts
        match = _DIRECTIVE.match(line)
        if match and max(len(match[1]), len(match[2])) > 2:  # max_number_length; libyaml takes 9 digits
            raise _Invalid(
                f"found extremely long version number: {names.excerpt(match[0].decode())} (the CDI library's "
                "YAML parser, go-yaml v2, reads at most two digits each)"
            )
        if match and (int(match[1]), int(match[2])) != (1, 1):
            raise _Invalid(
                f"found incompatible YAML document: %YAML {int(match[1])}.{int(match[2])} "
                "(the CDI library's YAML parser, go-yaml v2, reads only %YAML 1.1)"
            )


def _first_document(data: bytes) -> Any:
    """The first YAML document's node graph (aliases shared, not expanded), or None. The fast
    loader first; where it fails, or where libyaml reads on where go-yaml would not (`\\/`; a `?`
    in a file with a flow collection), go-yaml's rules decide."""

    if b"%YAML" in data:
        _check_yaml_directive(data)
    # libyaml takes the escape `\/`, which go-yaml lacks; libyaml >= 0.2.5 keeps a `?` inside a
    # plain scalar in [] or {} ([URL=http://x?a=1]), where go-yaml v2's yaml_parser_scan_plain_scalar
    # ends the scalar and the `?` starts a key the flow sequence does not take
    if b"\\/" not in data and not (b"?" in data and (b"[" in data or b"{" in data)):
        try:
            return _load_first(loader_class(), data)
        except _Invalid:
            pass  # also where libyaml's binding broke (a \U escape past 2^31): go-yaml's rules decide
    return _load_first(goyaml_loader_class(), data)


def _load_first(loader_type: type, data: bytes) -> Any:
    import yaml

    loader = None
    try:
        loader = loader_type(data)  # the pure-Python reader decodes here already
        return loader.get_node() if loader.check_node() else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = " ".join(part for part in (exc.context, exc.problem) if part)
        raise _Invalid(f"not valid YAML (the CDI library reads .json files as YAML too): {what}{where}") from None
    except yaml.reader.ReaderError as exc:
        if "not allowed" in str(exc.reason):  # decoded fine; YAML forbids the character itself
            code = ord(exc.character) if isinstance(exc.character, str) else exc.character
            raise _Invalid(
                f"a control character (U+{code:04X}) at offset {exc.position}, which YAML does not allow"
            ) from None
        raise _Invalid(f"not UTF-8 (or UTF-16) text: invalid bytes at offset {exc.position}") from None
    except yaml.YAMLError as exc:
        raise _Invalid(f"not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:  # the pure-Python parser; libyaml stops at 1000 levels itself
        raise _Invalid("not valid YAML: nested too deeply") from None
    except Exception as exc:  # libyaml's binding has raised odd errors (UnboundLocalError) on bad input
        raise _Invalid(f"the YAML parser failed: {type(exc).__name__}: {exc}", by_library=False) from None
    finally:
        if loader is not None:
            loader.dispose()


# ---------------------------------------------------------------------------------------------
# plain values -> typed fields, encoding/json style

_FOLD: Final = str.maketrans({**{chr(c): chr(c - 32) for c in range(ord("a"), ord("z") + 1)}, "ſ": "S", "\u212a": "K"})


def _fold(key: str) -> str:
    """encoding/json's case folding as far as ASCII field names can tell: ASCII case, plus the
    two non-ASCII runes whose simple case-folding orbit holds an ASCII letter, the long s (U+017F,
    with S and s) and the Kelvin sign (U+212A, with K and k). Go >= 1.21's foldName maps a rune to
    the smallest of its unicode.SimpleFold orbit; Go's caseOrbit table maps U+0130 (İ) and U+0131
    (ı) to themselves, so `KİND` and `kınd` match no field (unknown fields); older Go's
    equalFoldRight special-cases only k and s."""
    return key.translate(_FOLD)


if TYPE_CHECKING:
    Decoder = Callable[[Any, str, "_Decode"], Any]
_first = operator.itemgetter(0)


class _Decode:
    """State of one decode: where case-variant keys were matched (for a warning)."""

    def __init__(self) -> None:
        self.case_variants: list[str] = []


def _as_string(value: Any, where: str, _: _Decode) -> str:
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_float32(value)
    raise _Invalid(f"{where}: expected a string, found {_describe(value)}")


def _json_integer(value: float) -> str | None:
    """The text encoding/json's json.Marshal writes for a float64 (floatEncoder: the shortest
    digits that read back as the same float, 'f' format from 1e-6 to below 1e21) where that
    text is an integer, else None. It is not the float's exact value: -2^63 is written
    -9223372036854776000, and -0.0 keeps its sign."""
    if not value.is_integer() or abs(value) >= 1e21:
        return None  # a fraction, or 'e' format: no integer field takes it
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    from decimal import Decimal  # here: few specs hold a float where an integer belongs

    return str(int(Decimal(repr(value))))  # repr: the same shortest digits as Go's


def _integer(low: int, high: int, go_type: str) -> Decoder:
    def decode(value: Any, where: str, _: _Decode) -> int | None:
        if value is None:
            return None
        if isinstance(value, float):
            # sigs.k8s.io/yaml hands go-yaml's float64 to json.Marshal, and encoding/json reads
            # the field back from that text (ParseInt, or ParseUint: no sign at all, "-0" neither)
            if math.isnan(value) or math.isinf(value):
                raise _Invalid(f"{where}: {_describe(value)} cannot be written as JSON")
            text = _json_integer(value)
            if text is None:
                raise _Invalid(f"{where}: expected an integer ({go_type}), found {_describe(value)}")
            if int(text) < low or int(text) > high or (low == 0 and text.startswith("-")):
                raise _Invalid(
                    f"{where}: {text} does not fit a {go_type} (the CDI library's YAML reader makes the float "
                    f"{value!r} of it, and encoding/json writes that as {text} before reading the field)"
                )
            return int(text)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"{where}: expected an integer ({go_type}), found {_describe(value)}")
        if not low <= value <= high:
            raise _Invalid(f"{where}: {value} does not fit a {go_type}")
        return value

    return decode


_int64 = _integer(-(2**63), 2**63 - 1, "int64")
_uint32 = _integer(0, 2**32 - 1, "uint32")


def _as_bool(value: Any, where: str, _: _Decode) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _Invalid(f"{where}: expected true or false, found {_describe(value)}")
    return value


def _list_of(item: Decoder) -> Decoder:
    def decode(value: Any, where: str, state: _Decode) -> list[Any] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            raise _Invalid(f"{where}: expected a list, found {_describe(value)}")
        out = []
        for index, entry in enumerate(value):
            out.append(item(entry, f"{where}[{index}]", state))
        return out

    return decode


def _string_map(value: Any, where: str, state: _Decode) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, _Mapping):
        raise _Invalid(f"{where}: expected a mapping of strings, found {_describe(value)}")
    return {key: _as_string(entry, f"{where}.{key}", state) for key, entry in value.items}


_STRUCTS: set[Decoder] = set()  # the struct decoders: a second key decodes into the first's result


def _struct(fields: dict[str, Decoder]) -> Decoder:
    """A Go struct: known keys (matched like encoding/json), decoded in json.Marshal's
    sorted key order so the same key wins as in Go; absent keys are left out. Where two keys
    name one field, the later decodes into what the earlier set, as encoding/json does."""
    folded = {_fold(name): name for name in fields}

    def decode(value: Any, where: str, state: _Decode, into: dict[str, Any] | None = None) -> dict[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, _Mapping):
            raise _Invalid(f"{where or 'the document'}: expected a mapping, found {_describe(value)}")
        out: dict[str, Any] = dict(into or {})
        for key, entry in sorted(value.items, key=_first):  # code point order is UTF-8 byte order
            name = key if key in fields else folded.get(_fold(key))
            if name is None:
                raise _Invalid(
                    f"unknown field {names.excerpt(key)}" + (f" in {where}" if where else " at the top level")
                )
            if name != key:
                state.case_variants.append(f"{where}.{key} (for {name})" if where else f"{key} (for {name})")
            field = f"{where}.{name}" if where else name
            earlier = out.get(name)
            if name not in out or (entry is None and name in _NULL_RESETS):
                out[name] = fields[name](entry, field, state)
            elif entry is None:
                continue  # encoding/json ignores null for a string, number, bool or struct value
            elif fields[name] in _STRUCTS:
                out[name] = fields[name](entry, field, state, earlier)  # type: ignore[call-arg]
            elif isinstance(earlier, dict):  # a map: the later keys are added to it
                out[name] = {**earlier, **(fields[name](entry, field, state) or {})}
            elif isinstance(earlier, list) and earlier:
                raise _Invalid(
                    f"{field} is set twice, by keys in different case; the CDI library (encoding/json) decodes "
                    "the later list into the earlier one element by element (a null element keeps the earlier "
                    "one, a mapping is merged into it), which cgpu does not model. Use one key",
                    by_library=False,
                )
            else:
                out[name] = fields[name](entry, field, state)
        return out

    _STRUCTS.add(decode)
    return decode


# The spec structs' fields that are slices, maps or pointers (specs-go/config.go): null sets
# them to nil; on any other field encoding/json ignores a null, keeping what an earlier key
# in another case set.
_NULL_RESETS: Final = frozenset(
    {"annotations", "devices", "env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"}
    | {"fileMode", "uid", "gid", "options", "args", "timeout", "schemata"}
)

_device_node = _struct(
    {
        "path": _as_string,
        "hostPath": _as_string,
        "type": _as_string,
        "major": _int64,
        "minor": _int64,
        "fileMode": _uint32,
        "permissions": _as_string,
        "uid": _uint32,
        "gid": _uint32,
    }
)
_mount = _struct(
    {"hostPath": _as_string, "containerPath": _as_string, "options": _list_of(_as_string), "type": _as_string}
)
_hook = _struct(
    {
        "hookName": _as_string,
        "path": _as_string,
        "args": _list_of(_as_string),
        "env": _list_of(_as_string),
        "timeout": _int64,
    }
)
_intel_rdt = _struct(
    {
        "closID": _as_string,
        "l3CacheSchema": _as_string,
        "memBwSchema": _as_string,
        "schemata": _list_of(_as_string),
        "enableMonitoring": _as_bool,
    }
)
_net_device = _struct({"hostInterfaceName": _as_string, "name": _as_string})
_edits = _struct(
    {
        "env": _list_of(_as_string),
        "deviceNodes": _list_of(_device_node),
        "hooks": _list_of(_hook),
        "mounts": _list_of(_mount),
        "intelRdt": _intel_rdt,
        "additionalGids": _list_of(_uint32),
        "netDevices": _list_of(_net_device),
    }
)
_device = _struct({"name": _as_string, "annotations": _string_map, "containerEdits": _edits})
_spec = _struct(
    {
        "cdiVersion": _as_string,
        "kind": _as_string,
        "annotations": _string_map,
        "devices": _list_of(_device),
        "containerEdits": _edits,
    }
)


# ---------------------------------------------------------------------------------------------
# typed fields -> model, then the library's validation


def _edits_model(raw: dict[str, Any] | None) -> ContainerEdits:
    raw = raw or {}

    # A null entry stays None: it never reaches a valid Spec (the library panics on it), but
    # where it sits decides whether an earlier error wins.
    def node(entry: dict[str, Any] | None) -> DeviceNode | None:
        if entry is None:
            return None
        return DeviceNode(
            path=entry.get("path") or "",
            host_path=entry.get("hostPath") or None,
            type=entry.get("type") or None,
            major=entry.get("major") or None,
            minor=entry.get("minor") or None,
            file_mode=entry.get("fileMode"),
            permissions=entry.get("permissions") or None,
            uid=entry.get("uid"),
            gid=entry.get("gid"),
        )

    def mount(entry: dict[str, Any] | None) -> Mount | None:
        if entry is None:
            return None
        return Mount(
            host_path=entry.get("hostPath") or "",
            container_path=entry.get("containerPath") or "",
            type=entry.get("type") or None,
            options=tuple(entry.get("options") or ()),
        )

    def hook(entry: dict[str, Any] | None) -> Hook | None:
        if entry is None:
            return None
        return Hook(
            hook_name=entry.get("hookName") or "",
            path=entry.get("path") or "",
            args=tuple(entry.get("args") or ()),
            env=tuple(entry.get("env") or ()),
            timeout=entry.get("timeout"),
        )

    return ContainerEdits(
        env=tuple(raw.get("env") or ()),
        device_nodes=tuple(node(entry) for entry in raw.get("deviceNodes") or ()),  # type: ignore[misc]
        mounts=tuple(mount(entry) for entry in raw.get("mounts") or ()),  # type: ignore[misc]
        hooks=tuple(hook(entry) for entry in raw.get("hooks") or ()),  # type: ignore[misc]
        additional_gids=tuple(raw.get("additionalGids") or ()),
        intel_rdt=raw.get("intelRdt"),
        net_devices=tuple(raw.get("netDevices") or ()),
    )


def _device_model(raw: dict[str, Any]) -> SpecDevice:
    return SpecDevice(
        name=raw.get("name") or "",
        edits=_edits_model(raw.get("containerEdits")),
        annotations=raw.get("annotations") or {},
    )


def _env_error(env: tuple[str, ...]) -> str | None:
    for entry in env:
        if entry.find("=") <= 0:
            return f"invalid environment variable {names.excerpt(entry)}"
    return None


def _permissions_error(permissions: str, library: str) -> bool:
    """(*DeviceNode).Validate: v1.1.0 takes only r, w and m; main also takes "none"."""
    if library == versions.LIBRARY_MAIN and permissions == "none":
        return False
    return permissions.strip("rwm") != ""


def _edits_error(edits: ContainerEdits, where: str, library: str) -> str | None:
    """The first problem pkg/cdi's (*ContainerEdits).Validate finds, in its words; raises a
    crash where it dereferences a null entry."""
    error = _env_error(edits.env)
    if error:
        return f"invalid container edits: {error}"
    for node in edits.device_nodes:
        if node is None:
            raise _null_entry_crash(f"{where}.deviceNodes", "pkg/cdi/container-edits.go (*DeviceNode).Validate")
        if node.path == "":
            return "invalid (empty) device path"
        if (node.type or "") not in VALID_NODE_TYPES:
            return f"device {names.excerpt(node.path)}: invalid type {names.excerpt(node.type or '')}"
        if _permissions_error(node.permissions or "", library):
            return f"device {names.excerpt(node.path)}: invalid permissions {names.excerpt(node.permissions or '')}"
    for hook in edits.hooks:
        if hook is None:
            raise _null_entry_crash(f"{where}.hooks", "pkg/cdi/container-edits.go (*Hook).Validate")
        if hook.hook_name not in VALID_HOOK_NAMES:
            return f"invalid hook name {names.excerpt(hook.hook_name)}"
        if hook.path == "":
            return f"invalid hook {names.excerpt(hook.hook_name)} with empty path"
        error = _env_error(hook.env)
        if error:
            return f"invalid hook {names.excerpt(hook.hook_name)}: {error}"
    for mount in edits.mounts:
        if mount is None:
            raise _null_entry_crash(f"{where}.mounts", "pkg/cdi/container-edits.go (*Mount).Validate")
        if mount.host_path == "":
            return "invalid mount, empty host path"
        if mount.container_path == "":
            return "invalid mount, empty container path"
    if edits.intel_rdt is not None:
        clos = edits.intel_rdt.get("closID") or ""
        if clos != "/" and (len(clos.encode()) >= 4096 or clos in (".", "..") or "/" in clos or "\n" in clos):
            return "invalid ClosID"
    host_seen: dict[str, str] = {}
    name_seen: dict[str, str] = {}
    for net in edits.net_devices:
        if net is None:
            raise _null_entry_crash(
                f"{where}.netDevices", "pkg/cdi/container-edits.go ValidateNetDevices ((*LinuxNetDevice).Validate)"
            )
        host, name = net.get("hostInterfaceName") or "", net.get("name") or ""
        if host == "":
            return "invalid linux net device, empty HostInterfaceName"
        if name == "":
            return "invalid linux net device, empty Name"
        if host in host_seen:
            return (
                f"invalid linux net device, duplicate HostInterfaceName {names.excerpt(host)} "
                f"with names {names.excerpt(name)} and {names.excerpt(host_seen[host])}"
            )
        host_seen[host] = name
        if name in name_seen:
            return (
                f"invalid linux net device, duplicate Name {names.excerpt(name)} "
                f"with HostInterfaceName {names.excerpt(host)} and {names.excerpt(name_seen[name])}"
            )
        name_seen[name] = host
    return None


def _version_walk_crash(spec: Spec) -> _Invalid | None:
    """The panic of requiresV050 or requiresV040 at a null entry they reach
    (versions.version_walk), or None."""
    checks = [("mounts", "specs-go/version.go requiresV040")]
    if not versions.digit_first_name(spec):
        checks.insert(0, ("deviceNodes", "specs-go/version.go requiresV050"))
    for field, reader in checks:
        where = versions.version_walk(spec, field)[1]
        if where is not None:
            return _null_entry_crash(where, reader)
    return None


def _name_crash(name: str, what: str, library: str) -> None:
    """pkg/parser validateVendorOrClassName slices name[1:len(name)-1] unguarded in every release
    up to v1.1.0: a one-letter vendor or class panics (fixed on main)."""
    if library != versions.LIBRARY_MAIN and len(name) == 1 and names.is_letter(name):
        raise _Invalid(
            f"{what} {names.go_quote(name)} has one character: valid on CDI main, but the CDI library "
            f"{versions.LIBRARY} (pkg/parser validateVendorOrClassName) panics on it",
            crash=True,
        )


def _validate(spec: Spec, declared: str, library: str = versions.LIBRARY) -> None:
    """pkg/cdi (*Spec).validate, in its order; raises _Invalid with the library's words."""
    known = versions.normalize_version(declared)
    if known is None:
        raise _Invalid(
            f"invalid version {names.excerpt(declared)} (cdiVersion must be one of "
            f'{", ".join(versions.KNOWN_VERSIONS[2:])}, optionally with a leading "v")'
        )
    required, reason = versions.minimum_version(spec)
    walk_crash = _version_walk_crash(spec)
    if walk_crash is not None and required != "1.1.0":
        raise walk_crash  # the version check calls every requiresVxyz: it panics in every run
    # With a 1.1.0 feature, requiredVersion stops at requiresV110, and Go's random map order
    # decides whether requiresV050 and requiresV040 ran before it. The validation below reaches
    # the same null entry and panics too, so a run that skipped the walk panics all the same;
    # only an error the validation meets first makes the walk's panic one of some runs only.
    try:
        _validate_fields(spec, declared, known, required, reason, library)
    except _Invalid as exc:
        if walk_crash is None or exc.crash:
            raise
        walk_crash.args = (
            f"{walk_crash.args[0]} (in some runs only: Go's map order decides; the other runs reject the file: "
            f"{exc.args[0]})",
        )
        raise walk_crash from None
    if walk_crash is not None:  # the validation reaches every entry the walk does; never accept a panic
        raise walk_crash


def _validate_fields(spec: Spec, declared: str, known: str, required: str, reason: str, library: str) -> None:
    """_validate after the minimum version is known: the version, names and edits checks."""
    if versions.version_key(required) > versions.version_key(known):
        raise _Invalid(f"the spec version must be at least v{required} ({reason}) but declares {declared}")
    vendor, device_class = names.parse_qualifier(spec.kind)
    _name_crash(vendor, "vendor", library)
    error = names.vendor_error(vendor)
    if error is None:
        _name_crash(device_class, "class", library)
        error = names.class_error(device_class)
    if error:
        raise _Invalid(f"{error} (kind {names.excerpt(spec.kind)} must be vendor/class)")
    error = _edits_error(spec.edits, "containerEdits", library)
    if error:
        raise _Invalid(f"spec-level containerEdits: {error}")
    seen: set[str] = set()
    for index, device in enumerate(spec.devices):
        error = names.device_name_error(device.name)
        if error is None and device.edits.is_empty():
            error = "invalid device, empty device edits"
        if error is None:
            edits_error = _edits_error(device.edits, f"devices[{index}].containerEdits", library)
            error = edits_error and f"invalid device {names.excerpt(device.name)}: {edits_error}"
        if error:
            raise _Invalid(f"failed add device {names.excerpt(device.name)}: {error}")
        if device.name in seen:
            raise _Invalid(f"invalid spec, multiple device {names.excerpt(device.name)}")
        seen.add(device.name)
    if not seen:
        raise _Invalid("invalid spec, no devices")


def parse_spec(data: bytes, *, path: str, priority: int = 0, library: str = versions.LIBRARY) -> Spec:
    """Parse and validate one spec file's bytes as the reference library would.

    Raises SpecError(path, message) for anything the library rejects (`crash` where it panics),
    and for what cgpu refuses to read (over MAX_SPEC_BYTES, too many alias nodes); never
    anything else. library: versions.LIBRARY (what engines ship) or versions.LIBRARY_MAIN.
    """
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(
            path,
            too_big_message(len(data)),
            by_library=False,
        )
    # The cyclic GC would rescan the many young objects a parse makes, again and again:
    # measured 124 us/device on a 4,000-device spec with it, 45 us/device without.
    collecting = gc.isenabled()
    gc.disable()
    try:
        node = _first_document(data)
        reader = _Reader()
        document = reader.value(node) if node is not None else None
        if document is None:
            raise _Invalid("no Spec data (the file is empty or holds only null)")
        state = _Decode()
        raw = _spec(document, "", state)
        declared = raw.get("cdiVersion") or ""
        spec = Spec(
            path=path,
            version=declared.removeprefix("v"),
            kind=raw.get("kind") or "",
            devices=tuple(_device_model(entry or {}) for entry in raw.get("devices") or ()),
            edits=_edits_model(raw.get("containerEdits")),
            annotations=raw.get("annotations") or {},
            priority=priority,
            warnings=_warnings(raw, state, library),
        )
        _validate(spec, declared, library)
    except _Invalid as exc:
        raise SpecError(path, str(exc), by_library=exc.by_library, crash=exc.crash) from None
    except RecursionError:
        raise SpecError(path, "not valid YAML: nested too deeply") from None
    finally:
        if collecting:
            gc.enable()
    return spec


def too_big_message(size: int) -> str:
    return (
        f"the file is {size:,} bytes; cgpu reads spec files up to {MAX_SPEC_BYTES // (1024 * 1024)} MiB, "
        "but the engine reads files of any size (os.ReadFile) and may define devices here"
    )


def revalidate(spec: Spec, library: str = versions.LIBRARY) -> None:
    """Validate a spec built elsewhere (read back from the disk cache) as parse_spec does;
    raises SpecError."""
    try:
        _validate(spec, spec.version, library)
    except _Invalid as exc:
        raise SpecError(spec.path, str(exc), by_library=exc.by_library, crash=exc.crash) from None


def _warnings(raw: dict[str, Any], state: _Decode, library: str) -> tuple[str, ...]:
    out = []
    if state.case_variants:
        out.append(
            "keys spelled in another case: "
            + ", ".join(state.case_variants)
            + "; the CDI library matches keys case-insensitively and accepts them, "
            "but other readers may not"
        )
    kind = raw.get("kind") or ""
    if library == versions.LIBRARY_MAIN and names.crashes_old_libraries(kind):
        out.append(
            f"kind {names.go_quote(kind)} has a one-character vendor or class: valid on CDI main, "
            f"but it {names.OLD_LIBRARY_CRASH} (a slice-bounds panic when the spec dir is loaded)"
        )
    return tuple(out)
