"""relay: runs an application's tools server-side inside realtime speech-to-speech sessions."""

from __future__ import annotations

__version__ = "0.1.0"
