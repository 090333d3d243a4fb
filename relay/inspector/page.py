"""The inspector page: one self-contained HTML file (no network: styles, script, model and audio
inline) that renders a `SessionModel`.

The model goes in as JSON in a `<script type="application/json">`; each side's audio goes beside
it as base64 in its own script element, so the model parses fast however much audio there is and
the browser decodes the audio only after the timeline is drawn.
"""

from __future__ import annotations

import base64
import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

from relay.inspector.model import SessionModel


def _asset(name: str) -> str:
    return resources.files("relay.inspector").joinpath("assets", name).read_text(encoding="utf-8")


def _script_json(value: Any) -> str:
    """JSON that cannot end its `<script>` element early."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_page(model: SessionModel, *, title: str | None = None) -> str:
    """The page for `model`, as text."""
    snapshot = model.snapshot(audio_data=False)
    audio = {side: base64.b64encode(model.audio_bytes(side)).decode("ascii") if model.embed_audio else ""
             for side in ("caller", "assistant")}
    page = _asset("inspector.html")
    replacements = {
        "__TITLE__": html.escape(title or f"relay inspector: {snapshot['source']['name']}"),
        "__CSS__": _asset("inspector.css"),
        "__MODEL__": _script_json(snapshot),
        "__AUDIO_CALLER__": audio["caller"],
        "__AUDIO_ASSISTANT__": audio["assistant"],
        "__JS__": _asset("inspector.js"),
    }
    # one pass, so nothing inserted is read again as a placeholder
    pieces = []
    rest = page
    while True:
        positions = [(rest.find(key), key) for key in replacements if rest.find(key) >= 0]
        if not positions:
            pieces.append(rest)
            break
        position, key = min(positions)
        pieces.append(rest[:position])
        pieces.append(replacements[key])
        rest = rest[position + len(key):]
    return "".join(pieces)


def write_page(model: SessionModel, path: str | Path, *, title: str | None = None) -> Path:
    """Write the page for `model` to `path` and return it."""
    target = Path(path)
    target.write_text(render_page(model, title=title), encoding="utf-8")
    return target
