"""Gemini Live calls withdrawn before they reached the relay, and the words of a turn the caller
interrupted, in an explored session (relay/offline/explore_session.py's barge-in,
explore_quirks.py's `server_cancel`).

The mock model writes a whole turn at once, and the explorer delivers its frames one at a time,
with the server's answer to the caller's speech (or to a withdrawal) ahead of those still in
flight. So when the mock withdraws its open calls (or drops them with no cancellation:
`Quirks.drops_blocking`), one of them may not have reached the relay yet:
its `toolCall` still in flight, delivered after the `toolCallCancellation` that names it, would
show the relay a call cancelled before it was made (the cancellation passed to the client under an
id the relay then owns, its answer unheard). A real server sends in order, and a call it withdraws
was issued first. Here a call withdrawn before it was delivered was never issued: the frames in
flight that make it are not delivered, and the cancellation does not name it.

The same holds for the model's words: a barge-in lands while a turn's frames are still in flight,
and a real server stops that turn where it is. `serverContent.interrupted` "indicates that a client
message has interrupted current model generation", and "when model is interrupted while
generating there will be no generation_complete message in interrupted turn, it will go through
interrupted > turn_complete" (`LiveServerContent` in google-genai; docs/gemini.md, "The model
interrupted"). So the turn's output still in flight (its parts, their transcription, its
`generationComplete` and `turnComplete`) is not delivered (`interrupted_in_flight`): the mock's own
answer to the barge-in ends the turn with `turnComplete` after `interrupted` and the cancellation.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable

from msgspec.structs import replace

from relay.dialects import gemini_codec as gemini


def withdrawn_in_flight(paced: deque[Any], said: list[str | bytes], seen: set[str],
                        dropped: Iterable[str] = ()) -> list[str | bytes]:
    """`said` (the mock's frames, its `toolCallCancellation` among them) as it goes out, and
    `paced` (the frames in flight) without those that make a call it withdraws (in place); `seen`:
    the calls the relay was delivered, which stay named (a second delivery of one, still in
    flight, is dropped all the same). `dropped`: the calls the mock dropped with no cancellation
    (`Quirks.drops_blocking`), withdrawn too: a call the server drops at an interruption was
    issued before it."""
    cancelled = {call_id for frame in said for call_id in _cancelled(gemini.decode(frame))} | set(dropped)
    if not cancelled:
        return said
    withdrawn: set[str] = set()
    kept: list[Any] = []
    for item in paced:
        calls = set() if callable(item) else _calls(gemini.decode(item))
        if calls & cancelled:
            withdrawn.update(calls)
        else:
            kept.append(item)
    paced.clear()
    paced.extend(kept)
    withdrawn -= seen
    if not withdrawn:
        return said
    out: list[str | bytes] = []
    for frame in said:
        message = gemini.decode(frame)
        if isinstance(message, gemini.ToolCallCancellation) and isinstance(message.ids, list):
            ids = [call_id for call_id in message.ids if call_id not in withdrawn]
            if not ids:
                continue
            frame = gemini.encode(replace(message, ids=ids))
        out.append(frame)
    return out


def generating(paced: deque[Any]) -> bool:
    """Whether the model's output is still in flight (it is generating when the caller speaks)."""
    return any(not callable(item) and _output(gemini.decode(item)) for item in paced)


def interrupted_in_flight(paced: deque[Any]) -> None:
    """`paced` without the model's output in flight (in place): the turn the caller interrupted
    stops where it is, and the frames that are not its output (the caller's speech, a
    `sessionResumptionUpdate`, a `goAway`) still go."""
    kept = [item for item in paced if callable(item) or not _output(gemini.decode(item))]
    if len(kept) != len(paced):
        paced.clear()
        paced.extend(kept)


def ended_before_cancelled(said: list[str | bytes]) -> list[str | bytes]:
    """`said` (the mock's answer to a barge-in: `interrupted`, the cancellation, the interrupted
    turn's `turnComplete`, then whatever follows) with that `turnComplete` ahead of the
    cancellation: an order the service may send them in too, since it documents none
    (docs/gemini.md, "The model interrupted"). As it was when the two are not back to back."""
    messages = [gemini.decode(frame) for frame in said]
    cancel = next((index for index, message in enumerate(messages)
                   if isinstance(message, gemini.ToolCallCancellation)), None)
    if cancel is None or cancel + 1 >= len(messages):
        return said
    end = messages[cancel + 1]
    if not (isinstance(end, gemini.ServerContent) and end.turn_complete is True and end.model_turn is gemini.UNSET):
        return said
    return [*said[:cancel], said[cancel + 1], said[cancel], *said[cancel + 2:]]


def _output(message: Any) -> bool:
    """Whether a frame is the model's output of a turn: its parts (words, audio, a call's part),
    their transcription, the turn's `generationComplete` or `turnComplete`."""
    if not isinstance(message, gemini.ServerContent):
        return False
    return (message.model_turn is not gemini.UNSET or message.output_transcription is not gemini.UNSET
            or message.generation_complete is True or message.turn_complete is True)


def _cancelled(message: Any) -> list[str]:
    if isinstance(message, gemini.ToolCallCancellation) and isinstance(message.ids, list):
        return [call_id for call_id in message.ids if isinstance(call_id, str)]
    return []


def _calls(message: Any) -> set[str]:
    """The calls a frame makes: a `toolCall`'s, a model turn's `functionCall` parts."""
    if isinstance(message, gemini.ToolCall):
        return {call.id for call in gemini.entries(message.function_calls, gemini.FunctionCall)
                if isinstance(call.id, str)}
    turn = message.model_turn if isinstance(message, gemini.ServerContent) else None
    parts = gemini.entries(turn.parts, gemini.Part) if isinstance(turn, gemini.Content) else []
    return {part.function_call.id for part in parts
            if isinstance(part.function_call, gemini.FunctionCall) and isinstance(part.function_call.id, str)}


__all__ = ["ended_before_cancelled", "generating", "interrupted_in_flight", "withdrawn_in_flight"]
