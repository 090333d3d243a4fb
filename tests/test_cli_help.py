"""Every option of every `relay` command says what it does in `--help` (issue 20: `--log-level`
and `demo --color` had no help text)."""

from __future__ import annotations

import argparse

from relay.cli import COMMANDS, build_parser


def options_without_help(parser: argparse.ArgumentParser, path: str = "relay") -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += options_without_help(sub, f"{path} {name}")
        elif not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_option_of_every_command_has_help() -> None:
    parser = build_parser()
    assert options_without_help(parser) == []
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == set(COMMANDS)   # the walk saw every command


def test_the_walk_finds_an_option_without_help() -> None:
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers().add_parser("y")
    sub.add_argument("--quiet", action="store_true")
    assert options_without_help(parser) == ["relay y --quiet"]
