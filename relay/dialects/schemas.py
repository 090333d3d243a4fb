"""What each provider's wire takes as a tool's parameters: the schema narrowing a dialect applies
to every tool it declares, `@tool` functions and MCP tools alike (`Dialect.tool_parameters`).

The relay's schemas are already self-contained JSON Schema objects (relay.tools.schema
`self_contained`: no `$ref`, no `$defs`, an object at the top). Beyond that:

- OpenAI Realtime takes JSON Schema, but refuses a function whose top level is not a plain
  object (`oneOf`/`anyOf`/`allOf`/`enum`/`not` at the top): `object_parameters`.
- Gemini Live refuses the whole setup (close 1007 before `setupComplete`) over one keyword it
  does not know, and what it knows is an OpenAPI 3.0 subset: `gemini_parameters` keeps only
  that subset. Type arrays become `anyOf` of single types; `oneOf` becomes `anyOf`; `allOf` is
  merged; `const` and non-string `enum`s (Gemini's enums are strings), formats other than
  `date-time` and `enum`, exclusive bounds, `multipleOf`, `uniqueItems` and the object
  keywords (`additionalProperties`, `patternProperties`, ...) are dropped, and what they said
  is added to the description, so the model still hears it. Sources: the keywords Gemini's
  `Schema` has (google-genai `types.Schema`) and the rejections reported by its users
  (docs/mcp.md lists them).
"""

from __future__ import annotations

import json
from typing import Any

_TOP_COMBINATORS = ("oneOf", "anyOf", "allOf", "enum", "not")


def object_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with a plain object at the top (what OpenAI's function tools require)."""
    if schema.get("type") == "object" and isinstance(schema.get("properties"), dict) and not any(
            key in schema for key in _TOP_COMBINATORS):
        return schema
    top = {key: value for key, value in schema.items() if key not in _TOP_COMBINATORS}
    top["type"] = "object"
    if not isinstance(top.get("properties"), dict):
        top["properties"] = {}
    return top


# Gemini's Schema: the keywords it has, by how their values are read.
_GEMINI_DATA = frozenset({"description", "default", "minItems", "maxItems", "minLength", "maxLength", "pattern",
                          "minimum", "maximum", "minProperties", "maxProperties", "nullable", "propertyOrdering"})
_GEMINI_FORMATS = frozenset({"date-time", "enum"})
_GEMINI_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
_NOTED = {"exclusiveMinimum": "greater than {}", "exclusiveMaximum": "less than {}", "multipleOf": "a multiple of {}",
          "const": "always {}", "format": "format {}"}


def gemini_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` narrowed to what Gemini Live's function declarations accept (see the module)."""
    narrowed = _gemini(object_parameters(schema))
    narrowed["type"] = "object"
    narrowed.setdefault("properties", {})
    return narrowed


def _gemini(node: Any) -> dict[str, Any]:
    if not isinstance(node, dict):
        return {}
    node = _merged_all_of(node)
    out: dict[str, Any] = {}
    notes: list[str] = []
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k in _GEMINI_TYPES]
        if len(kinds) == 1:
            kind = kinds[0]
        else:
            rest = {k: v for k, v in node.items() if k != "type"}
            alternatives = [_gemini({**rest, "type": k}) if k != "null" else {"type": "null"} for k in kinds]
            return {"anyOf": alternatives, **({"description": node["description"]}
                                              if isinstance(node.get("description"), str) else {})}
    if isinstance(kind, str) and kind in _GEMINI_TYPES:
        out["type"] = kind
    for key, value in node.items():
        if key in _GEMINI_DATA:
            out[key] = value
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: _gemini(sub) for name, sub in value.items()}
        elif key == "items" and isinstance(value, dict):
            out["items"] = _gemini(value)
        elif key in ("anyOf", "oneOf") and isinstance(value, list):
            out["anyOf"] = [*out.get("anyOf", []), *(_gemini(sub) for sub in value)]
        elif key == "enum" and isinstance(value, list):
            if all(isinstance(choice, str) for choice in value):
                out["enum"] = value
            else:
                notes.append("one of " + ", ".join(json.dumps(choice) for choice in value))
        elif key == "format" and isinstance(value, str):
            if value in _GEMINI_FORMATS and kind == "string":
                out["format"] = value
            else:
                notes.append(_NOTED[key].format(value))
        elif key in _NOTED and key != "format":
            notes.append(_NOTED[key].format(json.dumps(value)))
        elif key == "uniqueItems" and value is True:
            notes.append("items unique")
        elif key == "required" and isinstance(value, list):
            properties = node.get("properties")
            out["required"] = [name for name in value if isinstance(properties, dict) and name in properties]
    if not out.get("required"):
        out.pop("required", None)
    if notes:
        described = out.get("description")
        note = "; ".join(notes)
        out["description"] = f"{described} ({note})" if isinstance(described, str) and described else note[:1].upper() + note[1:]
    return out


def _merged_all_of(node: dict[str, Any]) -> dict[str, Any]:
    """`allOf` folded into its parent: properties and required joined, the first word on the rest."""
    parts = node.get("allOf")
    if not isinstance(parts, list):
        return node
    merged = {key: value for key, value in node.items() if key != "allOf"}
    for part in parts:
        if not isinstance(part, dict):
            continue
        part = _merged_all_of(part)
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                merged["properties"] = {**value, **merged.get("properties", {})}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [*merged.get("required", []), *(n for n in value if n not in merged.get("required", []))]
            else:
                merged.setdefault(key, value)
    return merged
