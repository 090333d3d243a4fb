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

PAGE_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; media-src blob:; "
               "img-src data: blob:")
"""A page file may load nothing and connect nowhere: everything it shows is inside it."""


def asset(name: str) -> str:
    return resources.files("relay.inspector").joinpath("assets", name).read_text(encoding="utf-8")


def script_json(value: Any) -> str:
    """JSON that cannot end its `<script>` element early."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_page(model: SessionModel, *, title: str | None = None) -> str:
    """The page for `model`, as text."""
    snapshot = model.snapshot(audio_data=False)
    audio = {side: base64.b64encode(model.audio_bytes(side)).decode("ascii") if model.embed_audio else ""
             for side in ("caller", "assistant")}
    return fill_template({
        "__TITLE__": html.escape(title or f"relay inspector: {snapshot['source']['name']}"),
        "__CSP__": PAGE_POLICY,
        "__CSS__": asset("inspector.css"),
        "__MODEL__": script_json(snapshot),
        "__AUDIO_CALLER__": audio["caller"],
        "__AUDIO_ASSISTANT__": audio["assistant"],
        "__JS__": asset("inspector.js"),
        "__LIVE__": "",
    })


def fill_template(replacements: dict[str, str]) -> str:
    """The page's template with each placeholder replaced, in one pass, so nothing inserted is
    read again as a placeholder."""
    pieces = []
    rest = asset("inspector.html")
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
    # a lone surrogate a session carried (UTF-8 cannot encode one) as its escape, `\\udXXX`
    target.write_text(render_page(model, title=title), encoding="utf-8", errors="backslashreplace")
    return target
