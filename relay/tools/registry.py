"""The tools of one relay, by name (`ToolRegistry`): what serve, attach, the sidecar, replay and
export hand to every session's engine; and GPT-Live's delegate beside them, if any
(relay/tools/delegation.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from relay.tools.errors import ToolDefinitionError
from relay.tools.loading import load_tools
from relay.tools.spec import ToolSpec, build_spec, handler_name, spec_of


class ToolRegistry:
    """The tools of one relay, by name, in registration order. Read-only once sessions start:
    sessions share it and keep their own state elsewhere.

    A delegate (`ToolSpec.delegate`) is kept apart: it is `delegate`, found by `get` under its
    name (the engine runs it as it runs a call) but not a tool: not iterated, not in `names`,
    not `in` the registry, so no session declares it to a model."""

    def __init__(self, tools: Iterable[ToolSpec | Callable[..., Any]] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self.delegate: ToolSpec | None = None
        for item in tools:
            self.add(item)

    def add(self, tool: ToolSpec | Callable[..., Any]) -> ToolSpec:
        """Register a spec, a decorated function, or a plain function (decorated with defaults,
        without modifying it)."""
        if isinstance(tool, ToolSpec):
            spec = tool
        elif (attached := spec_of(tool)) is not None:
            spec = attached
        elif callable(tool):
            spec = build_spec(tool)
        else:
            raise ToolDefinitionError(f"cannot register {tool!r}: not a function or ToolSpec")
        existing = self.get(spec.name)
        if spec.delegate and self.delegate is not None and existing is None:
            raise ToolDefinitionError(
                f"two delegates: {_origin(spec.handler)} and {_origin(self.delegate.handler)}; "
                "a session has one"
            )
        if existing is not None:
            raise ToolDefinitionError(
                f"duplicate tool name {spec.name!r}: {_origin(spec.handler)} and "
                f"{_origin(existing.handler)} both use it"
            )
        if spec.delegate:
            self.delegate = spec
        else:
            self._specs[spec.name] = spec
        return spec

    def get(self, name: object) -> ToolSpec | None:
        """The tool of this name, or the delegate if it is its name."""
        if not isinstance(name, str):
            return None
        found = self._specs.get(name)
        if found is None and self.delegate is not None and self.delegate.name == name:
            return self.delegate
        return found

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names!r})"

    @property
    def names(self) -> list[str]:
        return list(self._specs)

    def definitions(self) -> list[dict[str, Any]]:
        return [spec.definition() for spec in self._specs.values()]

    @classmethod
    def load(cls, specs: Iterable[str]) -> ToolRegistry:
        """A registry of every tool in the given files or modules (see `load_tools`)."""
        return cls(spec for source in specs for spec in load_tools(source))


def _origin(handler: Callable[..., Any]) -> str:
    module = getattr(handler, "__module__", None)
    return f"{module}.{handler_name(handler)}" if module else handler_name(handler)
