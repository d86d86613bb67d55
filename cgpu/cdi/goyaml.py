"""YAML as the CDI library's parser, go-yaml v2 (sigs.k8s.io/yaml v1.4.0's fork), reads it:
the loader classes `cgpu.cdi.parse` reads spec files with. The fast one is PyYAML's libyaml
loader; the fallback is PyYAML's pure-Python loader with go-yaml's scanner rules where libyaml's
and PyYAML's differ. Both give untagged plain scalars the PLAIN_TAG tag, for go-yaml's resolution."""

from __future__ import annotations

import functools

from cgpu.cdi import names
from cgpu.patterns import lazy

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import Any, Final

PLAIN_TAG: Final = "!cgpu-plain"  # tag our loader gives untagged plain scalars, resolved below
STR_TAG: Final = "tag:yaml.org,2002:str"


def plain_tags(base: type) -> type:
    """`base` whose untagged plain scalars keep their text under the PLAIN_TAG tag, for
    resolve_plain; quoted and block scalars are strings."""
    import yaml

    class Loader(base):  # type: ignore[misc]  # a loader class chosen at run time (C or pure Python)
        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            if kind is yaml.ScalarNode and implicit[0]:
                return PLAIN_TAG
            if kind is yaml.ScalarNode:
                return STR_TAG
            tag: str = super().resolve(kind, value, implicit)
            return tag

    return Loader


@functools.cache
def loader_class() -> type:
    """The fast loader: CSafeLoader (SafeLoader without a safe libyaml). libyaml and go-yaml v2
    disagree on a few inputs; goyaml_loader_class reads those."""
    import yaml

    if getattr(yaml, "CSafeLoader", None) is not None and yaml._yaml.get_version() >= (0, 2, 6):
        return plain_tags(yaml.CSafeLoader)
    # libyaml before 0.2.6 has no nesting limit (a deep spec crashes it); without libyaml, the
    # pure-Python loader with go-yaml's rules
    return goyaml_loader_class()


@functools.cache
def goyaml_loader_class() -> type:
    """PyYAML's pure-Python loader with go-yaml v2's scanner rules where libyaml's differ
    (scannerc.go): the escapes of double-quoted scalars (`\\'` yes, `\\/` no), and a plain scalar
    ends at ":" only before a blank, also inside [] and {} (`[PATH=/usr/bin:]` is one scalar).
    Where PyYAML is laxer than both libyaml and go-yaml it takes their rule: an escape of a
    surrogate or above U+10FFFF, and a directive other than %YAML and %TAG, are errors."""
    import yaml
    from yaml.scanner import ScannerError
    from yaml.tokens import ScalarToken

    class GoScanner(yaml.SafeLoader):
        ESCAPE_REPLACEMENTS = {  # type: ignore[misc]
            key: value for key, value in yaml.SafeLoader.ESCAPE_REPLACEMENTS.items() if key != "/"
        } | {"'": "'"}

        def compose_node(self, parent: Any, index: Any) -> Any:
            # go-yaml v2 decode.go (*parser).anchor stores each anchor in a map, so a name defined
            # again names the later node from there on (an alias before it keeps the earlier
            # one); PyYAML's composer (and libyaml's) rejects it: "found duplicate anchor"
            event = self.peek_event()
            if event.anchor is not None and not isinstance(event, yaml.AliasEvent):
                self.anchors.pop(event.anchor, None)
            return super().compose_node(parent, index)

        def scan_to_next_token(self) -> None:
            # yaml_parser_scan_to_next_token: a tab is a blank in flow context and where no simple
            # key may start (after ":", "-", "?"), so tab-indented JSON reads; PyYAML eats spaces only
            if self.index == 0 and self.peek() == "\ufeff":
                self.forward()
            while True:
                while self.peek() == " " or (self.peek() == "\t" and (self.flow_level or not self.allow_simple_key)):
                    self.forward()
                if self.peek() == "#":
                    while self.peek() not in "\0\r\n\x85\u2028\u2029":
                        self.forward()
                if not self.scan_line_break():
                    return
                if not self.flow_level:
                    self.allow_simple_key = True

        def scan_plain_spaces(self, indent: int, start_mark: Any) -> Any:
            # yaml_parser_scan_plain_scalar's blanks: spaces and tabs alike (PyYAML: spaces), a tab
            # among the leading blanks of a line left of the indentation an error
            length = 0
            while self.peek(length) in " \t":
                length += 1
            whitespaces = self.prefix(length)
            self.forward(length)
            if self.peek() not in "\r\n\x85\u2028\u2029":
                return [whitespaces] if whitespaces else []
            line_break = self.scan_line_break()
            self.allow_simple_key = True
            breaks = []
            while True:
                if (
                    self.column == 0
                    and self.prefix(3) in ("---", "...")
                    and self.peek(3) in "\0 \t\r\n\x85\u2028\u2029"
                ):
                    return None  # a document marker ends the scalar
                ch = self.peek()
                if ch == "\t" and self.column < indent:
                    raise ScannerError(
                        "while scanning a plain scalar",
                        start_mark,
                        "found a tab character that violates indentation",
                        self.get_mark(),
                    )
                if ch in " \t":
                    self.forward()
                elif ch in "\r\n\x85\u2028\u2029":
                    breaks.append(self.scan_line_break())
                else:
                    break
            chunks = [line_break] if line_break != "\n" else ([] if breaks else [" "])
            return chunks + breaks

        def scan_flow_scalar_non_spaces(self, double: bool, start_mark: Any) -> Any:
            # yaml_parser_scan_flow_scalar: "found invalid Unicode character escape code" for
            # \x, \u, \U of D800-DFFF or above 10FFFF. PyYAML's chr() makes the surrogate (the
            # reader already refused raw ones, so any here came from an escape) or fails.
            try:
                chunks = super().scan_flow_scalar_non_spaces(double, start_mark)
            except (ValueError, OverflowError):  # chr() above U+10FFFF
                chunks = None
            if chunks is None or (double and any(_SURROGATE.search(chunk) for chunk in chunks)):
                raise ScannerError(
                    "while parsing a quoted scalar",
                    start_mark,
                    "found invalid Unicode character escape code (a surrogate or above U+10FFFF)",
                    self.get_mark(),
                )
            return chunks

        def scan_directive_name(self, start_mark: Any) -> str:
            # yaml_parser_scan_directive_name, then yaml_parser_scan_directive's name check:
            # PyYAML ignores an unknown directive, go-yaml and libyaml reject the file
            length = 0
            while self.peek(length) in _DIRECTIVE_NAME:
                length += 1
            name: str = self.prefix(length)
            self.forward(length)
            if not name:
                problem = "could not find expected directive name"
            elif self.peek() not in "\0 \t\r\n\x85\u2028\u2029":
                problem = "found unexpected non-alphabetical character"
            elif name not in ("YAML", "TAG"):
                problem = f"found unknown directive name {names.excerpt('%' + name)}"
            else:
                return name
            raise ScannerError("while scanning a directive", start_mark, problem, self.get_mark())

        def scan_yaml_directive_value(self, start_mark: Any) -> tuple[int, int]:
            # yaml_parser_scan_version_directive_value: blanks are spaces and tabs (PyYAML: spaces);
            # _check_yaml_directive has judged the numbers already
            while self.peek() in " \t":
                self.forward()
            major = self.scan_yaml_directive_number(start_mark)
            if self.peek() != ".":
                raise ScannerError(
                    "while scanning a %YAML directive",
                    start_mark,
                    "did not find expected digit or '.' character",
                    self.get_mark(),
                )
            self.forward()
            return major, self.scan_yaml_directive_number(start_mark)

        def scan_directive_ignored_line(self, start_mark: Any) -> None:
            while self.peek() in " \t":
                self.forward()
            super().scan_directive_ignored_line(start_mark)

        def scan_plain(self) -> Any:  # PyYAML's scan_plain, with go-yaml's rule for ":"
            chunks: list[str] = []
            start_mark = self.get_mark()
            end_mark = start_mark
            indent = self.indent + 1
            spaces: list[str] | None = []
            breaks = "\0 \t\r\n\x85\u2028\u2029"
            while True:
                length = 0
                if self.peek() == "#":
                    break
                while True:
                    ch = self.peek(length)
                    if (
                        ch in breaks
                        or (ch == ":" and self.peek(length + 1) in breaks)
                        or (self.flow_level and ch in ",?[]{}")
                    ):
                        break
                    length += 1
                if length == 0:
                    break
                self.allow_simple_key = False
                chunks.extend(spaces or ())
                chunks.append(self.prefix(length))
                self.forward(length)
                end_mark = self.get_mark()
                spaces = self.scan_plain_spaces(indent, start_mark)
                if not spaces or self.peek() == "#" or (not self.flow_level and self.column < indent):
                    break
            return ScalarToken("".join(chunks), True, start_mark, end_mark)

    return plain_tags(GoScanner)


_DIRECTIVE_NAME: Final = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-")  # is_alpha
_SURROGATE: Final = lazy("[\ud800-\udfff]")
