"""The mock upstream's Gemini Live mode: one BidiGenerateContent session as a sans-I/O state
machine. `MockUpstream(dialect="gemini")` does the I/O and sends what this returns as binary
JSON frames, as the real service does.

What it plays, from the same `MockScript` as the OpenAI modes:

- `setup` (first message, once) is checked and answered with `setupComplete`;
- a user turn (`clientContent` with `turnComplete`, or `realtimeInput.text`) gets the script's
  reply: the words as `serverContent.modelTurn` parts (text, or audio `inlineData` chunks with an
  `outputTranscription` when the setup asks for one), then the scripted calls in one `toolCall`;
- a call to a BLOCKING function makes the model wait: once every blocking call of the `toolCall`
  has its final answer (`toolResponse`), the model speaks the `after_outputs` reply. An answer for
  a NON_BLOCKING function is spoken about right away unless its `scheduling` is `SILENT`;
- a user turn arriving while a turn is open (the model waits for its blocking calls' answers, or
  a held turn) is a barge-in: `serverContent.interrupted`, then `toolCallCancellation` for the
  unanswered calls, then `turnComplete` for the turn it stopped (no `generationComplete`:
  google-genai's `LiveServerContent` says an interrupted turn "will go through interrupted >
  turn_complete"); `MockUpstream.interrupt()` plays the same from a test. With no turn open there
  is nothing to interrupt: no `interrupted`, no cancellation (a NON_BLOCKING call stays open);
- `MockUpstream.go_away()` sends `goAway`;
- a setup with `sessionResumption` gets `sessionResumptionUpdate`s: a new handle, `resumable`,
  after `setupComplete` and at each turn's end; `resumable: false` and no handle while the model
  waits for its calls' answers (as the service says it cannot be resumed then). A new connection
  whose setup carries one of the session's handles continues it (`MockUpstream` routes it by the
  handle): `setupComplete`, and the session as it is, except the calls made after that handle,
  which are lost (the service's "data loss" when resuming from an earlier handle); the earlier
  connections get nothing more. A session whose connections all closed is resumed so too (the
  service keeps a session's handles valid for a while after it ended);
- with `Quirks.call_parts` (relay/mock/quirks.py) the calls come twice, as Gemini Live may deliver
  them: as `functionCall` parts of the model's turn (beside its text), then in the `toolCall`;
- with `Quirks.drops_blocking` a barge-in drops the unanswered BLOCKING calls instead: no
  `toolCallCancellation` names them, and an answer for one gets no reply (it is kept in `unheard`),
  as a user reports of the service (docs/gemini.md, "A call dropped with no cancellation");
- a reply with `hold_before_done` leaves its turn open (no `turnComplete`) until `release()`;
  `withdraw()` cancels the open calls (`toolCallCancellation`) without an interruption.

It reads and writes the wire through the family's codec (relay/dialects/gemini_codec.py): what
a client sends arrives as a typed message, and what the mock says is built as one and handed to
the server as the frame's object (`frame_of`), which the server records and sends.

Like the real service it has no error events: a message it cannot accept closes the socket
(1007 with the reason), including an answer for an unknown call, or a function the setup
declared twice. A second final answer to one call is not refused: no source reports the service
closing for one; the reference matches each answer "to the respective FunctionCall" by its id, and
an answer for a call the service no longer waits on is reported to get no reply (docs/gemini.md,
"A second answer to one call"). The mock takes no notice of it and keeps its id in `repeated`.
`willContinue` on a BLOCKING function's answer is ignored (the answer is final), as
`google-genai`'s `FunctionResponse.will_continue` says: "only applicable to NON_BLOCKING function
calls, is ignored otherwise". An answer for a
call it cancelled is not refused: no source reports the service closing for one, and its own
SDKs say no answer is needed for a cancelled call (docs/gemini.md, "An answer crossing a
cancellation"). The mock takes no notice of it (the model neither hears nor speaks of it) and
keeps its id in `ignored`. With `options.strict_tools` a scripted call to a function the setup
did not declare is not made.
"""

from __future__ import annotations

import base64
import copy
import re
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from msgspec.structs import replace

from relay.dialects.gemini import CLIENT_PATHS, DEFAULT_PATH, response_text
from relay.dialects.gemini_codec import (
    CLIENT_MESSAGES,
    MESSAGES,
    Blob,
    ClientContent,
    Content,
    FunctionCall,
    FunctionDeclaration,
    FunctionResponse,
    GenerationConfig,
    GoAway,
    Message,
    Part,
    RealtimeInput,
    ServerContent,
    Setup,
    SessionResumptionUpdate,
    SetupComplete,
    Tool,
    ToolCallCancellation,
    ToolResponse,
    Transcription,
    UNSET,
    Unknown,
    event_of,
    frame_of,
    given,
    member_names,
    plain,
    resumption_handle,
)
from relay.dialects.gemini_codec import ToolCall as CallsMessage
from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT   # the script reads OpenAI-shaped items
from relay.errors import RelayError
from relay.mock.faults import Faults
from relay.mock.quirks import Quirks
from relay.mock.requests import Emit
from relay.mock.script import MockScript, Reply, ToolCall, warn_not_offered
from relay.mock.session import MockConnection
from relay.mock.wire import new_digits, new_id
from relay.session.policy import INTERNAL_ERROR
from relay.tools.render import json_copy

GEMINI = "gemini"
PATHS = tuple(sorted(CLIENT_PATHS))
URL_PATH = DEFAULT_PATH
INVALID_ARGUMENT = 1007   # Gemini Live closes with it for a bad request (what it says of its own)
OUTPUT_AUDIO_MIME = "audio/pcm;rate=24000"
_FUNCTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
_BEHAVIORS = ("BLOCKING", "NON_BLOCKING", "UNSPECIFIED")
_SCHEDULINGS = ("SILENT", "WHEN_IDLE", "INTERRUPT", "SCHEDULING_UNSPECIFIED")
_MODALITIES = ("TEXT", "AUDIO")
_ANSWER_MEMBERS = member_names(FunctionResponse) | {"parts"}   # what a FunctionResponse may hold


@dataclass(frozen=True)
class Hangup:
    """Close every socket of the session with this code and reason."""

    code: int
    reason: str


class GeminiProtocolError(RelayError):
    """A client message the service refuses: it closes the socket with `code` and `reason`."""

    def __init__(self, reason: str, code: int = INVALID_ARGUMENT) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass
class MockCall:
    """A function call the mock model made, and what became of it."""

    id: str
    name: str
    args: Any
    blocking: bool
    state: str = "pending"     # pending | continuing (interim answers came) | answered | cancelled | dropped
    answers: list[dict[str, Any]] = dataclass_field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.state in ("pending", "continuing")


def new_function_call_id() -> str:
    """Shaped like the service's: `function-call-` and 19 digits (seeded with the ids: `seed_ids`)."""
    return "function-call-" + new_digits(19)


def _unknown_name(name: str) -> GeminiProtocolError:
    return GeminiProtocolError(f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.')


class GeminiMockSession:
    """One Gemini Live session: its setup, conversation, calls and connections."""

    is_call = False      # no SIP-like calls in Gemini: a session ends with its socket
    call_id = None

    def __init__(self, script: MockScript, faults: Faults, query: dict[str, str] | None = None,
                 quirks: Quirks | None = None) -> None:
        self.id = new_id("gsess")
        self.script = script
        self.faults = faults
        self.quirks = quirks or Quirks()
        self.query = dict(query or {})
        self.connections: list[MockConnection] = []
        self.setup: dict[str, Any] | None = None   # the setup as the client sent it
        self._setup: Setup | None = None
        self.declarations: dict[str, dict[str, Any]] = {}
        self.items: list[dict[str, Any]] = []   # the conversation, shaped as the script reads it
        self.calls: dict[str, MockCall] = {}
        self.ended = False
        self._batch: list[str] = []             # blocking calls of the latest toolCall
        self.held = False                       # a turn waits for `release()` before turnComplete
        self.picks: list[str] = []              # where each reply came from (`MockScript.pick`)
        self.handles: dict[str, frozenset[str]] = {}   # resumption handle -> the calls made before it
        self._warned_names: set[str] = set()    # scripted calls to functions it lacks, said in the log
        self.ignored: list[str] = []            # the calls answered after it had cancelled them
        self.repeated: list[str] = []           # the calls answered again after their final answer
        self.unheard: list[str] = []            # the calls answered after a barge-in dropped them (`drops_blocking`)

    def __repr__(self) -> str:
        return f"GeminiMockSession(id={self.id!r}, items={len(self.items)}, calls={len(self.calls)})"

    # -- views ---------------------------------------------------------------------------------
    @property
    def model(self) -> str | None:
        return self._setup.model if isinstance(self._setup, Setup) else None

    @property
    def auth(self) -> str | None:
        return self.connections[0].auth if self.connections else None

    @property
    def modality(self) -> str:
        modalities = _modalities(self._setup)
        return modalities[0] if isinstance(modalities, list) and modalities else "AUDIO"

    @property
    def open_calls(self) -> list[MockCall]:
        return [call for call in self.calls.values() if call.open]

    # -- entry points --------------------------------------------------------------------------
    def connected(self, connection: MockConnection) -> list[Any]:
        self.connections.append(connection)
        return []   # the service says nothing until the setup

    def invalid_frame(self, detail: str, origin: int) -> list[Any]:
        return [Hangup(INVALID_ARGUMENT, f"Invalid JSON payload received. {detail}"[:120])]

    def internal_error(self, event: Any, origin: int) -> list[Any]:
        return [Hangup(INTERNAL_ERROR, "Internal error encountered.")]

    def handle(self, event: Any, origin: int) -> list[Any]:
        try:
            return self._dispatch(event)
        except GeminiProtocolError as error:
            return [Hangup(error.code, error.reason[:120])]

    def interrupt(self, generating: bool = False) -> list[Any]:
        """The user barged in. While a turn is open (held, or waiting for its blocking calls'
        answers) or its frames are still on their way to the client (`generating`: the explorer's
        pacing), the model stops (`interrupted`), its unanswered calls are cancelled (with
        `Quirks.drops_blocking`, the BLOCKING ones are dropped: no cancellation names them), and
        the turn ends (`turnComplete`, with no `generationComplete`). With no turn open nothing is
        said: `interrupted` "indicates that a client message has interrupted current model
        generation" and a cancellation "occurs only in cases where the clients interrupt server
        turns" (google-genai's `LiveServerContent`, `LiveServerToolCallCancellation`), so a
        NON_BLOCKING call still open stays open."""
        stopped = generating or self.held or bool(self._batch)
        if not stopped:
            return []   # no turn to interrupt: the caller's words start a new one
        self.held = False
        if self.quirks.drops_blocking:
            for call in self.open_calls:
                if call.blocking:
                    call.state = "dropped"   # no cancellation names it; an answer for it is not heard
        return [_emit(ServerContent(interrupted=True)), *self.withdraw(), _emit(ServerContent(turn_complete=True)),
                *self._resumption_update()]

    def answer_unheard(self) -> list[Any]:
        """The user's turn ended with nothing the mock can read (speech: it has no ears): the model
        answers it, as the service answers a turn its voice activity detection ended, with the
        script's default reply."""
        self.picks.append("default")
        return self._model_turn(self.script.default)

    def withdraw(self) -> list[Any]:
        """The model withdraws its unanswered calls (`toolCallCancellation`); no answer may follow."""
        cancelled = self.open_calls
        for call in cancelled:
            call.state = "cancelled"
        self._batch = []
        return [_emit(ToolCallCancellation(ids=[call.id for call in cancelled]))] if cancelled else []

    def release(self) -> list[Any]:
        """A held turn ends (`turnComplete`); nothing when none is held."""
        if not self.held:
            return []
        self.held = False
        return self._complete()

    def _complete(self) -> list[Any]:
        return [_emit(ServerContent(generation_complete=True)), _emit(ServerContent(turn_complete=True)),
                *self._resumption_update()]

    def go_away(self, time_left: str) -> list[Any]:
        return [_emit(GoAway(time_left=time_left))]

    # -- messages ------------------------------------------------------------------------------
    def _dispatch(self, event: Any) -> list[Any]:
        if not isinstance(event, dict):
            raise GeminiProtocolError("Invalid JSON payload received. Expected an object.")
        if len(event) != 1:
            raise GeminiProtocolError("Invalid JSON payload received. A message carries exactly one of "
                                      "setup, clientContent, realtimeInput, toolResponse.")
        (key, _), = event.items()
        if MESSAGES.get(key) not in CLIENT_MESSAGES:
            raise _unknown_name(key)
        message = event_of(event)
        if isinstance(message, Unknown):
            raise GeminiProtocolError(f"Invalid value at '{key}': expected an object.")
        if isinstance(message, Setup):
            return self._setup_message(message)
        if self.setup is None:
            raise GeminiProtocolError("The first message must be setup.")
        if isinstance(message, ClientContent):
            return self._client_content(message)
        if isinstance(message, RealtimeInput):
            return self._realtime_input(message)
        assert isinstance(message, ToolResponse)
        return self._tool_response(message)

    def _setup_message(self, setup: Setup) -> list[Any]:
        handle = self.resumed_by(setup)
        if self.setup is not None and handle is not None:
            return self._resume(handle)
        if self.setup is not None:
            raise GeminiProtocolError("setup may be sent only once, as the first message.")
        model = setup.model
        if not isinstance(model, str) or not model:
            raise GeminiProtocolError("setup.model is required.")
        modalities = _modalities(setup)
        if modalities is not None and (not isinstance(modalities, list) or len(modalities) != 1
                                       or modalities[0] not in _MODALITIES):
            raise GeminiProtocolError("generationConfig.responseModalities takes one of TEXT, AUDIO.")
        self.declarations = self._check_tools(given(setup.tools))
        self.setup = json_copy(plain(setup))
        self._setup = setup
        return [_emit(SetupComplete()), *self._resumption_update()]

    def resumed_by(self, setup: Any) -> str | None:
        """The handle of this session a new connection's setup (a typed `Setup`) resumes with."""
        handle = resumption_handle(setup)
        return handle if handle in self.handles else None   # an ended session's too, as the service keeps them

    def _resume(self, handle: str) -> list[Any]:
        """A new connection continues the session from `handle`: the calls made after it are lost,
        and the earlier connections get nothing more."""
        for call in self.open_calls:
            if call.id not in self.handles[handle]:
                call.state = "cancelled"
        self._batch = [call_id for call_id in self._batch if self.calls[call_id].open]
        for connection in self.connections[:-1]:
            connection.closed = True
        return [_emit(SetupComplete()), *self._resumption_update()]

    def _resumption_update(self) -> list[Any]:
        """A `sessionResumptionUpdate` when the setup asked for them: a new handle while no call
        waits for its answer, else `resumable: false`."""
        if self._setup is None or not isinstance(given(self._setup.session_resumption), dict):
            return []
        if self.open_calls:
            return [_emit(SessionResumptionUpdate(new_handle="", resumable=False))]
        handle = f"{self.id}-{len(self.handles) + 1}"
        self.handles[handle] = frozenset(self.calls)
        return [_emit(SessionResumptionUpdate(new_handle=handle, resumable=True))]

    def _check_tools(self, tools: Any) -> dict[str, FunctionDeclaration]:
        if tools is None:
            return {}
        if not isinstance(tools, list):
            raise GeminiProtocolError("Invalid value at 'setup.tools': expected a list.")
        declared: dict[str, FunctionDeclaration] = {}
        for entry in tools:
            declarations = given(entry.function_declarations, []) if isinstance(entry, Tool) else None
            if not isinstance(declarations, list):
                raise GeminiProtocolError("Invalid value at 'setup.tools': expected Tool objects.")
            for declaration in declarations:
                name = given(declaration.name) if isinstance(declaration, FunctionDeclaration) else None
                if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
                    raise GeminiProtocolError(f"Invalid function name {name!r}.")
                if name in declared:
                    raise GeminiProtocolError(f"Duplicate function declaration: {name}.")
                if declaration.parameters is not UNSET and declaration.parameters_json_schema is not UNSET:
                    raise GeminiProtocolError(f"{name}: set parameters or parametersJsonSchema, not both.")
                if given(declaration.behavior, "BLOCKING") not in _BEHAVIORS:
                    raise GeminiProtocolError(f"{name}: unknown behavior {given(declaration.behavior)!r}.")
                declared[name] = declaration
        return declared

    def _client_content(self, content: ClientContent) -> list[Any]:
        turns = given(content.turns, [])
        if not isinstance(turns, list):
            raise GeminiProtocolError("Invalid value at 'clientContent.turns': expected a list.")
        for turn in turns:
            parts = turn.parts if isinstance(turn, Content) else None
            if not isinstance(parts, list):
                raise GeminiProtocolError("Invalid value at 'clientContent.turns': expected Content objects.")
            words = " ".join(p.text for p in parts if isinstance(p, Part) and isinstance(p.text, str))
            role = "assistant" if turn.role == "model" else "user"
            if words:
                self.items.append({"type": "message", "role": role,
                                   "content": [{"type": "input_text" if role == "user" else "text", "text": words}]})
        if content.turn_complete is not True:
            return []
        return self._user_turn_complete()

    def _realtime_input(self, realtime_input: RealtimeInput) -> list[Any]:
        text = realtime_input.text
        if not isinstance(text, str) or not text:
            return []   # audio, video and activity signals: the mock has no ears
        self.items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        return self._user_turn_complete()

    def _user_turn_complete(self) -> list[Any]:
        return self.interrupt() + self._model_turn(self._reply())

    def _tool_response(self, tool_response: ToolResponse) -> list[Any]:
        responses = tool_response.function_responses
        if not isinstance(responses, list) or not responses:
            raise GeminiProtocolError("toolResponse.functionResponses must be a non-empty list.")
        speak = False
        for response in responses:
            call = self._answered_call(response)
            if call is None:
                continue   # an answer for a call it cancelled: no notice taken of it
            will_continue = response.will_continue is True and not call.blocking   # ignored on a BLOCKING call
            call.answers.append(copy.deepcopy(plain(response)))
            call.state = "continuing" if will_continue else "answered"
            self.items.append({"type": FUNCTION_CALL_OUTPUT, "call_id": call.id, "name": call.name,
                               "output": response_text(given(response.response))})
            if not call.blocking and given(response.scheduling) != "SILENT":
                speak = True
        if self._batch and all(not self.calls[call_id].open for call_id in self._batch):
            self._batch = []
            speak = True
        return self._model_turn(self._reply()) if speak else []

    def _answered_call(self, response: Any) -> MockCall | None:
        """The call a FunctionResponse answers, checked as the service checks it; None for a call
        it cancelled (the answer is kept in `ignored`), one a barge-in dropped (kept in `unheard`)
        or one already answered (kept in `repeated`): such an answer changes nothing."""
        if not isinstance(response, FunctionResponse):
            raise GeminiProtocolError("Invalid value at 'toolResponse.functionResponses': expected objects.")
        for name in response.extra:
            if name not in _ANSWER_MEMBERS:
                raise _unknown_name(name)
        call_id, name = given(response.id), given(response.name)
        call = self.calls.get(call_id)
        if call is None:
            raise GeminiProtocolError(f"FunctionResponse for unknown function call id {call_id!r}.")
        if call.state == "cancelled":
            self.ignored.append(call.id)
            return None
        if call.state == "dropped":
            self.unheard.append(call.id)
            return None
        if not call.open:
            self.repeated.append(call.id)
            return None
        if name not in (None, call.name):
            raise GeminiProtocolError(f"FunctionResponse name {name!r} does not match the call "
                                      f"{call.id} to {call.name}.")
        if response.response is not UNSET and not isinstance(response.response, dict):
            raise GeminiProtocolError("FunctionResponse.response must be an object.")
        scheduling = given(response.scheduling)
        if scheduling is not None and scheduling not in _SCHEDULINGS:
            raise GeminiProtocolError(f"Invalid value at 'scheduling': {scheduling!r}.")
        return call

    # -- the model -----------------------------------------------------------------------------
    def _reply(self) -> Reply:
        call_names = {call.id: call.name for call in self.calls.values()}
        reply, source = self.script.pick(self.items, None, call_names, self.picks.count("turn"))
        self.picks.append(source)
        return reply

    def _model_turn(self, reply: Reply) -> list[Any]:
        calls = self._allowed(reply.calls)
        say = reply.say
        if not say and not calls and reply.calls:
            say = self.script.default.say
        said = self._speak(say) if say else []
        if calls:
            made = [MockCall(c.call_id or new_function_call_id(), c.name, c.arguments, self._blocking(c.name))
                    for c in calls]
            for call in made:
                self.calls[call.id] = call
                self.items.append({"type": FUNCTION_CALL, "call_id": call.id, "name": call.name,
                                   "arguments": ToolCall(name=call.name, arguments=call.args).arguments_text()})
            self._batch = [call.id for call in made if call.blocking]
            if self.quirks.call_parts:
                said += self._call_parts(said, made)
            said.append(CallsMessage(function_calls=[
                FunctionCall(id=call.id, name=call.name, args=copy.deepcopy(call.args)) for call in made]))
            if self._batch:   # the model waits for the blocking answers
                return [_emit(message) for message in said] + self._resumption_update()
        actions = [_emit(message) for message in said]
        if reply.hold_before_done:
            self.held = True
            return actions
        actions += self._complete()
        return actions

    def _call_parts(self, said: list[Message], made: list[MockCall]) -> list[Message]:
        """The double delivery (`Quirks.call_parts`): the calls as `functionCall` parts of the
        model's turn, beside its last words (text or audio) when it spoke first, else in a message
        of their own."""
        parts = [Part(function_call=FunctionCall(id=call.id, name=call.name, args=copy.deepcopy(call.args)))
                 for call in made]
        for index in range(len(said) - 1, -1, -1):
            message = said[index]
            if isinstance(message, ServerContent) and isinstance(message.model_turn, Content):
                turn = message.model_turn
                said[index] = replace(message, model_turn=replace(turn, parts=[*turn.parts, *parts]))
                return []
        return [_model_turn(parts)]

    def _blocking(self, name: str) -> bool:
        declaration = self.declarations.get(name)
        behavior = given(declaration.behavior, "BLOCKING") if declaration is not None else "BLOCKING"
        return behavior != "NON_BLOCKING"

    def _allowed(self, calls: tuple[ToolCall, ...]) -> list[ToolCall]:
        if not self.script.options.strict_tools:
            return list(calls)
        for call in calls:
            if call.name not in self.declarations:
                warn_not_offered(self._warned_names, call.name, self.declarations, self.id)
        return [call for call in calls if call.name in self.declarations]

    def _speak(self, text: str) -> list[Message]:
        """The model's words: text parts, or audio chunks followed by their transcription."""
        self.items.append({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}]})
        size = self.script.options.text_chunk_chars
        pieces = [text[start:start + size] for start in range(0, len(text), size)]
        if self.modality == "TEXT":
            return [_model_turn([Part(text=piece)]) for piece in pieces]
        audio = base64.b64encode(bytes(self.script.options.audio_chunk_bytes)).decode("ascii")
        said = [_model_turn([Part(inline_data=Blob(mime_type=OUTPUT_AUDIO_MIME, data=audio))])
                for _ in range(self.script.options.audio_chunks)]
        if self._setup is not None and self._setup.output_audio_transcription is not UNSET:
            said += [ServerContent(output_transcription=Transcription(text=piece)) for piece in pieces]
        return said


def _emit(message: Message) -> Emit:
    """A message the mock says, as the frame's object the server sends and records."""
    return Emit(frame_of(message))


def _model_turn(parts: list[Any]) -> ServerContent:
    return ServerContent(model_turn=Content(role="model", parts=parts))


def _modalities(setup: Setup | None) -> Any:
    """The response modalities a setup asks for (None: it names none)."""
    config = setup.generation_config if setup is not None else None
    return given(config.response_modalities) if isinstance(config, GenerationConfig) else None
