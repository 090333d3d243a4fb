"""The wire is spelt in relay/dialects/ only: outside it, a module reads and writes frames through
a family's codec (`relay.dialects.openai_codec`, `relay.dialects.gemini_codec`, `relay.dialects.live`)
and its typed events, not by the wire's names.

The count is of string literals (docstrings excluded, read from the AST) that are a name of a
family's wire: an OpenAI-family event type in any vocabulary, an item type the relay acts on, a
Gemini Live message in either spelling or a member of one named in camelCase (the Gemini codec's
`WIRE_NAMES`), a GPT-Live event (the Responses events its envelope nests too). The bound is the count today: it may only go down (issue 45's aim: at most 20,
in at most 4 modules)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from relay.dialects import DIALECTS
from relay.dialects.gemini import CLIENT_MESSAGE_KEYS, SERVER_MESSAGE_KEYS, snake_case
from relay.dialects.gemini_codec import WIRE_NAMES as GEMINI_CODEC_NAMES
from relay.dialects.live import WIRE_NAMES as LIVE_NAMES
from relay.dialects.openai_codec import WIRE_NAMES as OPENAI_NAMES
from tests.support.paths import REPO

GEMINI_NAMES = frozenset({*CLIENT_MESSAGE_KEYS, *SERVER_MESSAGE_KEYS,
                          *(snake_case(name) for name in (*CLIENT_MESSAGE_KEYS, *SERVER_MESSAGE_KEYS)),
                          *GEMINI_CODEC_NAMES})
WIRE_NAMES = (OPENAI_NAMES | GEMINI_NAMES | LIVE_NAMES) - {"error"}
"""`error` is left out: the event's name is also the member every error shape holds."""
BOUND = 2
"""The count when the offline layer read and wrote Gemini Live through its codec, the
`generateContent` export and the redaction's streamed text too (57 before it; 352 before the
first codec landed): what is left is the relay's own notice kind `tool_call` (engine/actions.py,
recording/format.py), which Gemini's snake_case `toolCall` happens to spell too. Lower it as
consumers move to codecs. (The Gemini codec's camelCase members joined the vocabulary at 195.)"""
MODULES = 2
"""The modules outside relay/dialects/ that spell the wire today (issue 45's aim: at most 4); it
may only go down."""


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def wire_literals(root: Path) -> Counter[str]:
    """Module (relative to `root`'s parent) -> how many wire-name literals it holds, outside
    `root/dialects/`."""
    counts: Counter[str] = Counter()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("dialects/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                    and node.value in WIRE_NAMES):
                counts[relative] += 1
    return counts


def test_the_wire_is_spelt_in_the_dialects_only() -> None:
    counts = wire_literals(REPO / "relay")
    total = sum(counts.values())
    report = ", ".join(f"{module} {count}" for module, count in counts.most_common())
    assert total <= BOUND, f"{total} wire-name literals outside relay/dialects/ (bound {BOUND}): {report}"
    assert len(counts) <= MODULES, f"{len(counts)} modules spell the wire (bound {MODULES}): {report}"


def test_the_mock_writes_every_family_s_wire_through_its_codec() -> None:
    """The mock's per-family modules build typed events and write them by the codecs: they spell
    no name of a family's wire (issue 45)."""
    spelt = {module: count for module, count in wire_literals(REPO / "relay").items() if module.startswith("mock/")}
    assert not spelt, f"wire names spelt in the mock: {spelt}"


def test_the_count_reads_literals_not_docstrings(tmp_path: Path) -> None:
    package = tmp_path / "relay"
    (package / "dialects").mkdir(parents=True)
    (package / "dialects" / "wire.py").write_text('KIND = "response.create"\n')
    (package / "reader.py").write_text(
        '"""Reads response.done."""\n'
        'def read(event):\n'
        '    """"response.create" is not counted here."""\n'
        '    return event["type"] in ("response.done", "toolCall", "tool_call", "function_call", "other")\n')
    assert wire_literals(package) == Counter({"reader.py": 4})


FAMILY_WORDS = {word for name in DIALECTS for word in name.split("-")} - {"beta", "preview"}
"""The providers' names, as the dialects are registered: openai, azure, foundry, xai, voicelive,
gemini, live."""
LIVE_AS_RUNNING = ("inspector/live/", "offline/explore_live.py")
"""Where `live` says "as the session runs" (the inspector's live view, the explorer over live
sessions), not GPT-Live."""


def family_named(root: Path) -> list[str]:
    """The modules under `root` (outside dialects/ and the mock's per-family scripts) with a
    provider's name among the words of their path."""
    named = []
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.pyx")]):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(("dialects/", "mock/")):
            continue
        words = set(re.split(r"[/_.]", relative.rsplit(".", 1)[0]))
        if relative.startswith(LIVE_AS_RUNNING):
            words.discard("live")
        if words & FAMILY_WORDS:
            named.append(relative)
    return named


def test_no_module_outside_the_dialects_is_named_after_a_provider_family() -> None:
    """Issue 45's acceptance: modules are named after what they do (a tool flow, a way to resume),
    the provider's name is the dialects' (and the mock's per-family scripts')."""
    assert family_named(REPO / "relay") == []


def test_the_name_check_sees_a_family_in_a_path(tmp_path: Path) -> None:
    for relative in ("edges/gemini_resume.py", "engine/live_records.py", "openai/x.py", "inspector/live/feed.py",
                     "dialects/gemini.py", "mock/live.py", "engine/delegations.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    assert family_named(tmp_path) == ["edges/gemini_resume.py", "engine/live_records.py", "openai/x.py"]
