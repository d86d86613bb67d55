"""Shell completion scripts and the man page, both generated from the CLI's own parser, so a
new option or command appears in them without anyone remembering to add it.

`cgpu completion bash|zsh|fish` prints a script to source; `cgpu man` prints the man page as
roff (`cgpu man > cgpu.1; man -l cgpu.1`). Stdlib only; imported only by those two commands.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh", "fish")
# Values completed as file names: the metavars of options that take a path.
_PATH_METAVARS = ("DIR", "PATH")


@dataclass
class Option:
    flags: list[str]
    help: str
    takes_value: bool
    choices: list[str]
    metavar: str

    @property
    def is_path(self) -> bool:
        return self.metavar in _PATH_METAVARS


@dataclass
class Command:
    path: list[str]  # ["probe"], ["image", "check"]; [] for cgpu itself
    help: str
    parser: argparse.ArgumentParser
    options: list[Option] = field(default_factory=list)
    positionals: list[Option] = field(default_factory=list)
    subcommands: list[Command] = field(default_factory=list)


def commands(parser: argparse.ArgumentParser, path: list[str] | None = None, help: str = "") -> Command:
    """The parser as a tree of commands, each with its options."""
    node = Command(path or [], help or (parser.description or ""), parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                node.subcommands.append(commands(sub, [*node.path, name], helps.get(name, "")))
            continue
        choices = [str(c) for c in action.choices] if action.choices else []
        metavar = action.metavar if isinstance(action.metavar, str) else ""
        metavar = metavar or ("" if action.option_strings else action.dest.upper())
        option = Option(list(action.option_strings), action.help or "", action.nargs != 0, choices, metavar)
        if action.help == argparse.SUPPRESS:
            continue
        (node.options if action.option_strings else node.positionals).append(option)
    return node


def walk(node: Command) -> list[Command]:
    return [node, *(c for sub in node.subcommands for c in walk(sub))]


# --- completion ----------------------------------------------------------------------------------


def completion(parser: argparse.ArgumentParser, shell: str) -> str:
    tree = commands(parser)
    if shell == "fish":
        return _fish(tree)
    script = _bash(tree)
    if shell == "zsh":  # zsh runs the bash function through its own bashcompinit
        return "# cgpu completion for zsh\nautoload -U +X bashcompinit && bashcompinit\n" + script
    return script


def _bash(tree: Command) -> str:
    cases, values = [], []
    for node in walk(tree):
        key = " ".join(node.path)
        words = [s.path[-1] for s in node.subcommands] + [f for o in node.options for f in o.flags]
        cases.append(f'        "{key}") words="{" ".join(words)}" ;;')
        for option in node.options:
            if not option.takes_value:
                continue
            pattern = "|".join(f'"{key}:{flag}"' for flag in option.flags)
            if option.choices:
                reply = f'COMPREPLY=($(compgen -W "{" ".join(option.choices)}" -- "$cur"))'
            elif option.is_path:
                reply = 'COMPREPLY=($(compgen -f -- "$cur"))'
            else:
                reply = "COMPREPLY=()"
            values.append(f"        {pattern}) {reply}; return ;;")
    value_cases = "\n".join(values) or '        ":") ;;'
    subcommands = " ".join(sorted({s.path[-1] for n in walk(tree) for s in n.subcommands}))
    return f"""# cgpu completion for bash: source it, or put it in ~/.local/share/bash-completion/completions/cgpu
_cgpu() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local path="" word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case " {subcommands} " in
            *" $word "*) path="${{path:+$path }}$word" ;;
        esac
    done
    case "$path:$prev" in
{value_cases}
    esac
    local words=""
    case "$path" in
{chr(10).join(cases)}
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _cgpu cgpu
"""


def _fish(tree: Command) -> str:
    lines = ["# cgpu completion for fish: source it, or put it in ~/.config/fish/completions/cgpu.fish"]
    lines.append("complete -c cgpu -f")
    for node in walk(tree):
        if node.path:
            parent = node.path[:-1]
            condition = _fish_condition(parent, tree)
            lines.append(
                f"complete -c cgpu -n {_fish_quote(condition)} -a {node.path[-1]} -d {_fish_quote(_first(node.help))}"
            )
        condition = _fish_condition(node.path, tree)
        for option in node.options:
            flags = []
            for flag in option.flags:
                flags.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
            value = ""
            if option.takes_value:
                value = f" -x -a {_fish_quote(' '.join(option.choices))}" if option.choices else " -r"
                if option.is_path:
                    value += " -F"
            help = _fish_quote(_first(option.help))
            lines.append(f"complete -c cgpu -n {_fish_quote(condition)} {' '.join(flags)}{value} -d {help}")
    return "\n".join(lines) + "\n"


def _fish_condition(path: list[str], tree: Command) -> str:
    """True when the words typed so far name exactly this command path."""
    if not path:
        return "__fish_use_subcommand"
    node = tree
    for name in path:
        node = next(s for s in node.subcommands if s.path[-1] == name)
    seen = " && ".join(f"__fish_seen_subcommand_from {name}" for name in path)
    below = [s.path[-1] for s in node.subcommands]
    return seen + (f" && not __fish_seen_subcommand_from {' '.join(below)}" if below else "")


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _first(text: str) -> str:
    """The help's first clause: what fits beside a completion."""
    first = re.split(r"; | \(", " ".join(text.split()), maxsplit=1)[0].strip()
    return first if len(first) <= 60 else first[:60].rsplit(" ", 1)[0] + "…"


# --- the man page --------------------------------------------------------------------------------


def man_page(parser: argparse.ArgumentParser, version: str) -> str:
    """The whole CLI as one roff man page (section 1)."""
    tree = commands(parser)
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")  # reproducible builds: the date they set
    if epoch.isdecimal() and len(epoch) < 12:
        today = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).date().isoformat()
    else:
        today = datetime.date.today().isoformat()
    out = [
        f'.TH CGPU 1 "{today}" "cgpu {_roff(version)}" "User Commands"',
        ".nh",
        ".ad l",
        ".SH NAME",
        r"cgpu \- " + _roff(parser.description or ""),
        ".SH SYNOPSIS",
    ]
    for node in walk(tree)[1:]:
        if not node.subcommands:
            out += [_roff(_usage(node.parser)), ".br"]
    out += [".SH DESCRIPTION", _roff(tree.parser.description or "")]
    out += _options(tree.options)
    for node in walk(tree)[1:]:
        if node.subcommands:
            continue
        out.append(f'.SH "CGPU {" ".join(node.path).upper()}"')
        out.append(_roff(" ".join((node.parser.description or node.help).split())))
        for positional in node.positionals:
            out += [".TP", f".I {_roff(positional.metavar or 'ARG')}", _roff(positional.help)]
        out += _options(node.options)
        if node.parser.epilog:
            out += [".PP", ".nf", *(_roff_line(line) for line in node.parser.epilog.splitlines()), ".fi"]
    out += [".SH SEE ALSO", "The README and docs/ of the cgpu source tree."]
    return "\n".join(out) + "\n"


def _options(options: list[Option]) -> list[str]:
    lines: list[str] = []
    for option in options:
        value = f" {option.metavar or '{' + ','.join(option.choices) + '}' if option.choices else 'VALUE'}"
        flags = ", ".join(r"\fB" + _roff(flag) + r"\fR" for flag in option.flags)
        lines += [".TP", flags + (_roff(value) if option.takes_value else ""), _roff(option.help)]
    return lines


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def _roff(text: str) -> str:
    """Text safe in roff: backslashes and hyphens escaped, no line taken for a request."""
    text = text.replace("\\", r"\e").replace("-", r"\-")
    return text if not text.startswith((".", "'")) else r"\&" + text


def _roff_line(line: str) -> str:
    return _roff(line) if line.strip() else ""
