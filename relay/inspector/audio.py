"""Audio for the inspector page: the session's formats, G.711 tables, and the page's own encoding.

A realtime session's audio is PCM16 (24 kHz on OpenAI, 16 kHz in / 24 kHz out on Gemini) or
G.711 (8 kHz mu-law or A-law, for telephony). An hour of 24 kHz PCM16 is 173 MB per side, too much
for one HTML file, so the page carries every side as 8-bit mu-law (G.711 is made for speech) at
the session's rate divided by the smallest whole number that brings it to `max_rate` or below
(24 kHz -> 12 kHz with the default 16 kHz), averaging the samples it merges. G.711 audio goes in
as it came (A-law through a 256-entry translation). The browser decodes mu-law back to PCM16 with
the same table. Only the audio the recording holds is embedded, not the silence between chunks;
each side keeps segments that say where on the session's time axis each stretch of it was played.

Nothing here decodes audio on the relay's path: this runs when a page is made.
"""

from __future__ import annotations

import copy
import functools
import operator
import re
import sys
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Literal

from relay.dialects import AudioSlot

Encoding = Literal["pcm16", "mulaw", "alaw"]

ELIDED_AUDIO = "<{} bytes of audio elided>"
DEFAULT_MAX_RATE = 16_000
LEVEL_WINDOW_SECONDS = 0.05          # one level (0-255) per 50 ms of a side's audio
_MULAW_BIAS = 0x84


def _mulaw_decode(byte: int) -> int:
    byte = ~byte & 0xFF
    magnitude = (((byte & 0x0F) << 3) + _MULAW_BIAS) << ((byte >> 4) & 0x07)
    return _MULAW_BIAS - magnitude if byte & 0x80 else magnitude - _MULAW_BIAS


def _alaw_decode(byte: int) -> int:
    byte ^= 0x55
    exponent = (byte >> 4) & 0x07
    mantissa = byte & 0x0F
    magnitude = (mantissa << 4) + 8 if exponent == 0 else ((mantissa << 4) + 0x108) << (exponent - 1)
    return magnitude if byte & 0x80 else -magnitude


def mulaw_encode(sample: int) -> int:
    """One 16-bit linear sample as a G.711 mu-law byte (the CCITT reference rounding, on the top
    14 bits)."""
    value = sample >> 2
    if value < 0:
        value, mask = -value, 0x7F
    else:
        mask = 0xFF
    value = min(value, 8159) + (_MULAW_BIAS >> 2)
    segment = max(value.bit_length() - 6, 0)
    if segment >= 8:
        return 0x7F ^ mask
    return ((segment << 4) | ((value >> (segment + 1)) & 0x0F)) ^ mask


ULAW_TO_LINEAR: tuple[int, ...] = tuple(_mulaw_decode(byte) for byte in range(256))
"""G.711 mu-law byte -> 16-bit linear sample (0xFF and 0x7F are silence, 0x00 is -32124)."""
ALAW_TO_LINEAR: tuple[int, ...] = tuple(_alaw_decode(byte) for byte in range(256))
"""G.711 A-law byte -> 16-bit linear sample (0xD5 is +8, 0x55 is -8)."""

# A-law bytes straight to mu-law bytes, and a mu-law byte to its loudness (0-255) for levels.
_ALAW_TO_MULAW = bytes(mulaw_encode(sample) for sample in ALAW_TO_LINEAR)
_MULAW_LOUDNESS = bytes(min(255, abs(sample) >> 7) for sample in ULAW_TO_LINEAR)


@functools.lru_cache(maxsize=8)
def _sum_to_mulaw(merged: int) -> bytes:
    """Index: the sum of `merged` int16 samples (negative sums wrap, as Python indexing does);
    value: the mu-law byte of their mean. One table lookup per output sample."""
    base = bytes(mulaw_encode(sample) for sample in range(-32768, 32768))
    span = 32768 * merged
    # base[s + 32768] is mu-law(s); sums 0.. first, then the negative sums (read as index - size)
    return bytes(base[total // merged + 32768] for total in range(0, span)) + bytes(
        base[total // merged + 32768] for total in range(-span, 0))


@dataclass(frozen=True)
class AudioFormat:
    encoding: Encoding
    rate: int

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self.encoding == "pcm16" else 1

    def seconds(self, byte_count: int) -> float:
        return byte_count / self.bytes_per_sample / self.rate

    def describe(self) -> str:
        names = {"pcm16": "PCM16", "mulaw": "G.711 mu-law", "alaw": "G.711 A-law"}
        return f"{names[self.encoding]} {self.rate} Hz"


PCM16_24K = AudioFormat("pcm16", 24_000)
GEMINI_INPUT = AudioFormat("pcm16", 16_000)
GEMINI_OUTPUT = AudioFormat("pcm16", 24_000)

_BETA_FORMATS = {
    "pcm16": PCM16_24K,
    "g711_ulaw": AudioFormat("mulaw", 8_000),
    "g711_alaw": AudioFormat("alaw", 8_000),
}
_GA_TYPES: dict[str, Encoding] = {"audio/pcm": "pcm16", "audio/pcmu": "mulaw", "audio/pcma": "alaw"}
_RATE = re.compile(r"rate\s*=\s*(\d+)")


def openai_format(session: Any, side: Literal["input", "output"]) -> AudioFormat | None:
    """The audio format a session object (GA `audio.<side>.format`, or beta
    `<side>_audio_format`) names for one side, or None when it names none."""
    if not isinstance(session, dict):
        return None
    audio = session.get("audio")
    described = audio.get(side) if isinstance(audio, dict) else None
    ga = described.get("format") if isinstance(described, dict) else None
    if isinstance(ga, dict) and ga.get("type") in _GA_TYPES:
        encoding = _GA_TYPES[ga["type"]]
        rate = ga.get("rate")
        if encoding != "pcm16":
            return AudioFormat(encoding, 8_000)
        return AudioFormat("pcm16", rate if isinstance(rate, int) and rate > 0 else 24_000)
    beta = session.get(f"{side}_audio_format")
    return _BETA_FORMATS.get(beta) if isinstance(beta, str) else None


def mime_format(mime: Any, default: AudioFormat) -> AudioFormat:
    """A Gemini blob's mime type (`audio/pcm;rate=16000`) as a format; `default` when it says
    nothing usable (Gemini's documented rates: 16 kHz in, 24 kHz out)."""
    if not isinstance(mime, str):
        return default
    lowered = mime.lower()
    if "pcmu" in lowered or "mulaw" in lowered or "ulaw" in lowered:
        return AudioFormat("mulaw", 8_000)
    if "pcma" in lowered or "alaw" in lowered:
        return AudioFormat("alaw", 8_000)
    match = _RATE.search(lowered)
    return AudioFormat("pcm16", int(match.group(1))) if match and int(match.group(1)) > 0 else default


def page_rate(rate: int, max_rate: int) -> int:
    """The rate a side is embedded at: `rate` divided by the smallest whole number that brings it
    to `max_rate` or below and divides it exactly."""
    for merged in range(1, rate + 1):
        if rate % merged == 0 and rate // merged <= max_rate:
            return rate // merged
    return rate


def to_mulaw(samples: array, merged: int) -> bytes:
    """int16 samples as mu-law bytes, each output the mean of `merged` inputs (len(samples) must
    be a multiple of `merged`)."""
    table = _sum_to_mulaw(merged)
    if merged == 1:
        return bytes(map(table.__getitem__, samples))
    total: Any = samples[0::merged]
    for phase in range(1, merged):
        total = map(operator.add, total, samples[phase::merged])
    return bytes(map(table.__getitem__, total))


def pcm16_samples(data: bytes) -> array:
    samples = array("h")
    samples.frombytes(data[: len(data) - len(data) % 2])
    if sys.byteorder == "big":
        samples.byteswap()
    return samples


class SideAudio:
    """One side's audio (caller or assistant) as the page carries it, built chunk by chunk.

    `add` takes a chunk as recorded (or only its size, when the recording dropped the audio) and
    lays it on the session's time axis: a chunk plays from when it arrived, or from when the one
    before it ends if that is later (a client queues what comes faster than real time);
    `restart` (a barge-in) makes the next chunk start at its arrival again."""

    def __init__(self, name: str, *, max_rate: int = DEFAULT_MAX_RATE, keep_data: bool = True) -> None:
        self.name = name
        self.max_rate = max_rate
        self.keep_data = keep_data
        self.rate: int | None = None          # the page's rate for this side
        self.source: AudioFormat | None = None
        self.samples = 0                      # page samples so far
        self.recorded_seconds = 0.0           # of the recording's own audio
        self.segments: list[list[float]] = []  # [start t, first sample, sample count]
        self.levels = bytearray()
        self.data = bytearray()
        self.dropped_chunks = 0
        self.chunks = 0
        self._cursor = 0.0
        self._carry = array("h")               # samples waiting to be merged with the next chunk
        self._restart = False

    def restart(self) -> None:
        self._restart = True

    def add(self, t: float, fmt: AudioFormat, data: bytes | None, dropped_bytes: int = 0) -> None:
        """A chunk arrived at `t`: its bytes, or (audio dropped) only how many there were."""
        if self.source is None:
            self.source = fmt
            self.rate = page_rate(fmt.rate, self.max_rate) if fmt.encoding == "pcm16" else fmt.rate
        assert self.rate is not None
        self.chunks += 1
        if data is None:
            self.dropped_chunks += 1
            seconds = fmt.seconds(dropped_bytes)
            self.recorded_seconds += seconds
            self._place(t, round(seconds * self.rate))
            return
        self.recorded_seconds += fmt.seconds(len(data))
        encoded = self._encode(fmt, data)
        if not encoded:
            return
        offset = self.samples
        self._place(t, len(encoded))
        self._levels(offset, encoded)
        if self.keep_data:
            self.data += encoded

    def _encode(self, fmt: AudioFormat, data: bytes) -> bytes:
        assert self.rate is not None
        if fmt.encoding == "mulaw" and fmt.rate == self.rate:
            return data
        if fmt.encoding == "alaw" and fmt.rate == self.rate:
            return data.translate(_ALAW_TO_MULAW)
        if fmt.encoding == "pcm16":
            samples = pcm16_samples(data)
        else:
            table = ULAW_TO_LINEAR if fmt.encoding == "mulaw" else ALAW_TO_LINEAR
            samples = array("h", map(table.__getitem__, data))
        if fmt.rate % self.rate == 0:
            merged = fmt.rate // self.rate
            if self._carry:
                samples = self._carry + samples
            usable = len(samples) - len(samples) % merged
            self._carry = samples[usable:]
            return to_mulaw(samples[:usable], merged) if usable else b""
        # a side whose rate changed mid-session to one that does not divide: nearest sample
        step = fmt.rate / self.rate
        count = int(len(samples) / step)
        picked = array("h", (samples[int(index * step)] for index in range(count)))
        return to_mulaw(picked, 1)

    def _place(self, t: float, count: int) -> None:
        assert self.rate is not None
        if count <= 0:
            return
        start = t if self._restart else max(t, self._cursor)
        self._restart = False
        last = self.segments[-1] if self.segments else None
        if last is not None and abs(start - self._cursor) < 1e-6 and last[1] + last[2] == self.samples:
            last[2] += count
        else:
            self.segments.append([round(start, 6), self.samples, count])
        self.samples += count
        self._cursor = start + count / self.rate

    def _levels(self, offset: int, encoded: bytes) -> None:
        assert self.rate is not None
        window = max(1, round(self.rate * LEVEL_WINDOW_SECONDS))
        loudness = encoded.translate(_MULAW_LOUDNESS)
        first = offset // window
        last = (offset + len(encoded) - 1) // window
        if len(self.levels) <= last:
            self.levels.extend(bytes(last + 1 - len(self.levels)))
        for index in range(first, last + 1):
            lo = max(index * window - offset, 0)
            hi = min((index + 1) * window - offset, len(encoded))
            peak = max(loudness[lo:hi])
            if peak > self.levels[index]:
                self.levels[index] = peak

    @property
    def seconds(self) -> float:
        return self.samples / self.rate if self.rate else 0.0


def elided(event: dict[str, Any], audio_slots: Callable[[dict[str, Any]], list[AudioSlot]]) -> dict[str, Any] | None:
    """`event` as the page shows it: a copy whose audio payloads (found by the dialect's
    `audio_slots`) are replaced by a note of their size; None when it holds no audio."""
    if not any(isinstance(slot.holder.get(slot.key), str) and slot.holder[slot.key] for slot in audio_slots(event)):
        return None
    shown = copy.deepcopy(event)
    for holder, key, _side, _mime in audio_slots(shown):
        data = holder.get(key)
        if isinstance(data, str) and data:
            holder[key] = ELIDED_AUDIO.format(len(data) * 3 // 4)
    return shown
