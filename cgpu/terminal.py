"""Text for a person's terminal: the one sanitiser, the width, wrapping and colour.

Every value that came from outside cgpu (spec files and their names, image tags, os-release,
ICD paths, adapter names, a container's or VM's stderr) passes through `escape` before it is
printed for a person: a control character in it could otherwise move the cursor, hide or
forge lines, or write the clipboard (OSC 52). The JSON output needs none of this: `json.dumps`
escapes every control character and every non-ASCII one.

Stdlib only and cheap to import: the CDI CLI's start-up cost includes it.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time
if TYPE_CHECKING:
    from typing import TextIO

# Shown escaped: every character Python does not call printable. That is C0 (newline included:
# inside one value a newline could forge a line of cgpu's own), DEL, C1, the bidi marks and
# overrides that reorder what is shown (Trojan Source, CVE-2021-42574), other invisible format
# characters, and lone surrogates (undecodable bytes of a file name) no terminal encoding prints.
# `str.isprintable` keeps the common case fast and needs no regex compiled at start-up.
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _shown(char: str) -> str:
    if char.isprintable() or char == " ":
        return char
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: object) -> str:
    """`text` with every control character, bidi override, invisible format character and lone
    surrogate shown escaped (`\\e`, `\\n`, `\\x9b`, `\\u202e`): safe to print, and one line."""
    value = str(text)
    return value if value.isprintable() else "".join(map(_shown, value))


def escape_lines(text: object) -> str:
    """`escape`, keeping newlines: for text printed as several lines (a build log, stderr)."""
    return "\n".join(escape(line) for line in str(text).split("\n"))


MAX_COLUMNS = 1000


def width(stream: TextIO | None = None) -> int:
    """Columns to fill: `COLUMNS` when it is a number (40 to 1000; anything else is ignored), the
    terminal's width on a terminal, else 80."""
    stream = stream or sys.stdout
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdecimal() and len(columns) < 6 and int(columns) > 0:  # `²`, `-5`, `abc`, 10**9: ignored
        return min(max(int(columns), 40), MAX_COLUMNS)
    try:
        if stream.isatty():
            return min(max(os.get_terminal_size(stream.fileno()).columns, 40), MAX_COLUMNS)
    except (AttributeError, OSError, ValueError):
        pass
    return 80


def wrap(text: str, columns: int, first: str = "", indent: int | None = None) -> list[str]:
    """`first` + `text` wrapped to `columns`, later lines indented to where the text began
    (or by `indent`). Paths stay whole when they fit; a word longer than a line is split."""
    import textwrap  # only where text is wrapped: the help formatter imports this module

    hang = " " * (len(first) if indent is None else indent)
    return textwrap.wrap(
        text,
        width=columns,
        initial_indent=first,
        subsequent_indent=hang,
        break_on_hyphens=False,
        break_long_words=True,
    ) or [first.rstrip()]


_CODES = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "dim": "2", "cyan": "36"}


class Style:
    """Colour on a terminal only. `--color auto` (the default) colours a terminal unless `NO_COLOR`
    is set (no-color.org); `always` and `never` are the user's explicit choice and win over it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def choose(cls, mode: str = "auto", stream: TextIO | None = None) -> Style:
        if mode in ("always", "never"):
            return cls(mode == "always")
        stream = stream or sys.stdout
        if os.environ.get("NO_COLOR"):
            return cls(False)
        try:
            return cls(stream.isatty() and os.environ.get("TERM") != "dumb")
        except (AttributeError, ValueError):
            return cls(False)

    def __call__(self, text: str, *styles: str) -> str:
        if not self.enabled or not styles or not text:
            return text
        return f"\x1b[{';'.join(_CODES[s] for s in styles)}m{text}\x1b[0m"


PLAIN = Style(False)
