"""The three ways a tool goes wrong, by when: defining it, loading it, calling it.

They live apart from the code that raises them because every stage raises some of them: a bad
parameter type is found while the schema is built, a duplicate name while the registry fills.
"""

from __future__ import annotations

from relay.errors import RelayError, UnusableInput


class ToolDefinitionError(UnusableInput, ValueError):
    """A tool cannot be defined as written: bad name, unsupported parameter, duplicate name..."""

    __module__ = "relay.tools"  # tracebacks name it where users import it from


class ToolLoadError(UnusableInput):
    """Tools could not be loaded from a file or module (`--tools`, `ToolRegistry.load`)."""

    __module__ = "relay.tools"


class ArgumentsError(RelayError, ValueError):
    """The model's arguments for a call do not fit the tool; the message is written for the
    model, so it can correct itself and call again."""
