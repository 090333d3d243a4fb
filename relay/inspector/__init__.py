"""The session inspector: a recorded (or replayed) session as a timeline to look at and listen to.

    model = build_model(read_recording(path))     # or SessionModel(...).feed(frame) frame by frame
    write_page(model, "session.html")             # one self-contained HTML file

`relay inspect` and `relay replay --html` are the commands; `relay/inspector/assets/` holds the
page's HTML, CSS and JavaScript.
"""

from relay.inspector.model import LANES, SessionModel, build_model, recording_dialect
from relay.inspector.page import render_page, write_page

__all__ = ["LANES", "SessionModel", "build_model", "recording_dialect", "render_page", "write_page"]
