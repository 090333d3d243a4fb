"""MkDocs hook: `<!-- options: COMMAND -->` on a page becomes the table of that command's options,
read from the parser `relay` itself builds, so a command's page cannot list an option the command
lacks or miss one it has."""

from __future__ import annotations

import argparse
import re

MARKER = re.compile(r"^<!-- options: (?P<command>[a-z]+) -->$", re.M)


def _parser_of(command: str) -> argparse.ArgumentParser:
    from relay.cli import build_parser

    parser = build_parser(only=command)
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers.choices[command]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def options_table(command: str) -> str:
    """The Markdown table of `relay COMMAND`'s arguments: name (with its value), what it does."""
    parser = _parser_of(command)
    formatter = parser._get_formatter()
    rows = ["| argument | what it does |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            value = "" if action.nargs == 0 else " " + formatter._format_args(action, action.dest.upper())
            name = ", ".join(f"`{flag}{value}`" for flag in action.option_strings)
        else:
            name = f"`{formatter._format_args(action, action.dest.upper())}`"
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| {_cell(name)} | {_cell(help_text)} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda found: options_table(found["command"]), markdown)
