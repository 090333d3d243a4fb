# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The picows transport's per-frame path, compiled: what `PicowsTransport._on_frame` and the
forwarding pipe's Python lane (`relay.session.pipe.express_lane`) do with a realtime audio frame,
done on the bytes of picows' read buffer, without the interpreter.

Why: on picows, the relay's own work in Python (the decoding of the payload into a str, the test
of its type, the budget, the lane's counts and the write) costs more per frame than picows' own
framing. Here the same decisions are taken in C over the raw payload, and the frame leaves as a
copy of those bytes.

Only the common case is taken here: a whole text frame of ASCII (UTF-8 then needs no check) whose
type is one the engine forwards as it came, compact with `type` first. Anything else, or anything
that needs more (a redaction that applies, a sidecar with no peer, a recorder outside a chain),
is handed to the Python path (`PicowsTransport._on_frame`) unchanged, before any state changed:
the decisions are the Python lane's, taken in the same order, so the two paths forward the same
frames the same way (tests/test_picows_lane.py compares them).

Built by setup.py when Cython and a C compiler are there (an optional extension); without it the
transport runs the same in Python.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memchr, memcmp, memcpy

from picows.picows cimport WSFrame, WSListener, WSMsgType, WSTransport

from relay.dialects._peek cimport compact_passes, holds_type_key

from relay.session.transport import BATCH_BYTES, QueueOverflow

# a burst is written once it holds this much (what a flush writes at once). Its buffer is made on
# a lane's first burst and kept for the next read; grown past BURST_KEPT by a flood, it is given
# back after the first burst of BURST_KEPT or less (the flood over: a session at realtime pace
# keeps a few KB, one that never forwarded audio none)
cdef Py_ssize_t BURST_BYTES = BATCH_BYTES
cdef Py_ssize_t BURST_KEPT = 16 * 1024


cdef extern from "string.h" nogil:
    # GNU extensions (Python.h defines _GNU_SOURCE on Linux)
    void* memmem(const void* haystack, size_t haystack_len, const void* needle, size_t needle_len)
    void* memrchr(const void* s, int c, size_t n)


cdef extern from *:
    """
    #ifndef RELAY_PICOWS_BUILT_WITH
    #define RELAY_PICOWS_BUILT_WITH ""
    #endif
    """
    const char* RELAY_PICOWS_BUILT_WITH

# the version of picows this was built against (setup.py); picows_connection.py compares it with
# the installed one before it uses this module
BUILT_WITH_PICOWS = RELAY_PICOWS_BUILT_WITH.decode("ascii")


cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void* PyUnicode_DATA(object unicode)


cdef inline bint is_ascii(const char* data, Py_ssize_t size) noexcept nogil:
    """No byte of `data` has its high bit set: the bytes OR-ed together, 32 at a time, and one
    test at the end (no branch per word, which the compiler vectorises)."""
    cdef uint64_t seen = 0, word0, word1, word2, word3
    cdef Py_ssize_t i = 0
    while i + 32 <= size:
        memcpy(&word0, data + i, 8)
        memcpy(&word1, data + i + 8, 8)
        memcpy(&word2, data + i + 16, 8)
        memcpy(&word3, data + i + 24, 8)
        seen |= word0 | word1 | word2 | word3
        i += 32
    while i + 8 <= size:
        memcpy(&word0, data + i, 8)
        seen |= word0
        i += 8
    while i < size:
        seen |= <unsigned char>data[i]
        i += 1
    return (seen & 0x8080808080808080ULL) == 0


cdef inline str ascii_text(const char* data, Py_ssize_t size):
    """The str of ASCII bytes, copied as they are (`PyUnicode_DecodeASCII` would check them
    again)."""
    cdef object text = PyUnicode_New(size, 127)
    memcpy(PyUnicode_DATA(text), data, size)
    return <str>text


cdef inline void masked_copy(char* to, const char* data, Py_ssize_t size, uint32_t mask) noexcept nogil:
    """`data` masked with `mask` (RFC 6455 5.3: byte i XOR byte i % 4 of the key as it lies in the
    header), 8 bytes at a time."""
    cdef uint64_t key = (<uint64_t>mask << 32) | mask, word
    cdef const uint8_t* key_bytes = <const uint8_t*>&mask
    cdef Py_ssize_t i = 0
    while i + 8 <= size:
        memcpy(&word, data + i, 8)
        word ^= key
        memcpy(to + i, &word, 8)
        i += 8
    while i < size:
        to[i] = <char>(<uint8_t>data[i] ^ key_bytes[i & 3])
        i += 1


cdef inline bint contains(const char* data, Py_ssize_t size, bytes needle) noexcept:
    cdef Py_ssize_t needle_size = PyBytes_GET_SIZE(needle)
    if needle_size == 0:
        return True
    return memmem(data, size, PyBytes_AS_STRING(needle), needle_size) != NULL


# The benchmark's switch (scripts/bench_framing.py), never an option of the relay: while it is on,
# `passes` is the test the framing check replaced (issue 50 item 9), the prefix, ASCII, no
# backslash and no second `"type"` before the payload, so that the framing check's cost is
# measured beside it in one run.
cdef bint PREFIX_ONLY = False


def bench_prefix_only(bint on):
    """Turn the benchmark's switch on or off (see PREFIX_ONLY); returns what it was."""
    global PREFIX_ONLY
    cdef bint was = PREFIX_ONLY
    PREFIX_ONLY = on
    return was


# the dialects' prefixes as bytes, made once and shared by every session's lanes
cdef dict PREFIXES_AS_BYTES = {}


cdef class FrameLane:
    """One reader's express lane over raw payloads (built by `PicowsTransport.receive` from the
    `Pipe` the Python lane carries, relay/session/pipe.py): `offer` forwards a frame the Python
    lane would forward as it came, or says why it did not. It reads the pipe and its
    `ForwardRule`, public fields both, and nothing of the session (tests/test_forwarding_rule.py
    reads this source, and runs it against a session that refuses every read)."""

    cdef object pipe             # its `peer` is read for each frame (the sidecar replaces the upstream)
    cdef object rule             # its `cut_off` is read for each frame of a budgeted client
    cdef object queue
    cdef object frames           # the queue's deque
    cdef object budget
    cdef object redactor
    cdef object counts           # the recorder chain's ForwardLane, or None (no recorder)
    cdef tuple prefixes          # of bytes: `{"type":"KIND"` for each kind forwarded as it came
    cdef Py_ssize_t after_type
    cdef object received
    cdef object sent_as
    cdef readonly Py_ssize_t forwarded   # frames this lane took (for the tests and the curious)
    # the frames of the read in progress for a picows peer, framed, not yet written (see `offer`)
    cdef char* burst
    cdef readonly Py_ssize_t burst_size
    cdef Py_ssize_t burst_capacity
    cdef WSTransport burst_to
    cdef readonly Py_ssize_t bursts_written   # writes of bursts (for the tests, beside `forwarded`)

    def __init__(self, pipe):
        rule = pipe.rule
        self.pipe = pipe
        self.rule = rule
        self.queue = pipe.queue
        self.frames = pipe.queue.frames
        self.budget = rule.budget
        self.redactor = rule.redactor
        self.counts = pipe.counts
        prefixes = PREFIXES_AS_BYTES.get(rule.prefixes)
        if prefixes is None:
            prefixes = PREFIXES_AS_BYTES[rule.prefixes] = tuple(prefix.encode("ascii") for prefix in rule.prefixes)
        self.prefixes = prefixes
        self.after_type = rule.after_type
        self.received = pipe.received
        self.sent_as = pipe.sent_as

    def __dealloc__(self):
        free(self.burst)

    def passes_bytes(self, bytes frame):
        """`passes` over a bytes object (for the tests, which compare it with the Python test)."""
        return self.passes(PyBytes_AS_STRING(frame), PyBytes_GET_SIZE(frame))

    def offer_bytes(self, bytes frame, bint more):
        """`offer` over a bytes object (for the tests, which run the session's lane scenarios
        through it as through the Python lane)."""
        return self.offer(PyBytes_AS_STRING(frame), PyBytes_GET_SIZE(frame), more)

    cdef bint passes(self, const char* data, Py_ssize_t size):
        """`relay.dialects.peek.pass_through_test`'s compact case over bytes, for ASCII frames:
        the frame starts with one of the prefixes, and the rest is `compact_passes`'s (the C scans
        `relay/dialects/_peek.pyx` runs on a str's data, shared through `_peek.pxd`)."""
        cdef bytes prefix
        cdef Py_ssize_t prefix_size
        cdef const char* quote
        cdef bint typed = False
        for prefix in self.prefixes:
            prefix_size = PyBytes_GET_SIZE(prefix)
            if size >= prefix_size and memcmp(data, PyBytes_AS_STRING(prefix), prefix_size) == 0:
                typed = True
                break
        if not typed or not is_ascii(data, size):
            return False
        if PREFIX_ONLY:
            if memchr(data, b'\\', size) != NULL:
                return False
            quote = <const char*>memrchr(data, b'"', size - 2)
            return not holds_type_key(data, self.after_type, (quote - data) + 1 if quote != NULL else 0)
        return compact_passes(data, size, self.after_type)

    cdef int offer(self, const char* data, Py_ssize_t size, bint more) except -2:
        """1: forwarded (written, added to the read's burst or queued) and counted; 0: not taken,
        nothing changed (the Python lane decides); -1: the Python lane would leave it to `deliver`
        and the budget was spent already (`deliver` takes it from here). `more`: another data
        frame of this read comes to this lane next.

        The burst: while the peer is a picows connection that takes data, its queue is empty and
        its writer asleep, the frames of one read are framed into the lane's buffer and written
        together after the read's last (one socket call a read, as a flush would make, without
        the queue's round trip). Whatever else happens first (a frame for the Python lane, a
        frame queued, the end of the read) writes the burst before it, so order holds."""
        cdef int taken
        try:
            taken = self.take(data, size, more)
        except BaseException:
            self.write_burst()
            raise
        if self.burst_size and (taken <= 0 or not more):
            self.write_burst()
        return taken

    cdef int take(self, const char* data, Py_ssize_t size, bint more) except -2:
        cdef FastListener listener
        cdef WSTransport ws
        cdef bint written = False
        if not self.passes(data, size):
            return 0
        peer = self.pipe.peer
        if peer is None:
            return 0   # a sidecar: the frame is only recorded
        redactor = self.redactor
        if redactor is not None:
            for anchor, secret in redactor.byte_texts:
                if contains(data, size, anchor) and contains(data, size, secret):
                    return 0   # the Python lane redacts it
        queue = self.queue
        budget = self.budget
        if budget is not None:
            if self.rule.cut_off or queue.size + size > queue.max_bytes or not budget.take():
                return -1
        counts = self.counts
        others = counts.others if counts is not None else None
        text = None
        if others is not None:
            text = ascii_text(data, size)
        waiting = 0
        if not self.frames and queue.waiter is not None:   # nothing queued, the writer asleep
            if isinstance(peer, FastListener):
                listener = <FastListener>peer
                ws = listener.ws
                if not listener._paused and ws is not None and not ws.is_close_frame_sent and not ws.is_disconnected:
                    self.add_to_burst(ws, data, size)
                    written = True
            elif not more:
                if text is None:
                    text = ascii_text(data, size)
                written = bool(peer.write(queue, text))
        if not written:
            if self.burst_size:
                self.write_burst()   # before what the queue will write
            if text is None:
                text = ascii_text(data, size)
            try:
                waiting = queue.hold(text)
            except QueueOverflow:
                return -1 if budget is not None else 0
        if counts is not None:
            sent = counts.frames + 1
            counts.frames = sent
            counts.bytes += size
            if others is not None:
                others(self.received, text, self.sent_as, text)
            if sent >= counts.settle_at:
                counts.settle()
        if waiting:   # the writer task sleeps: the reader writes
            if not more:
                peer.write(queue)
            elif waiting == 1:
                peer.write(queue, None, True)
        self.forwarded += 1
        return 1

    cdef int add_to_burst(self, WSTransport ws, const char* data, Py_ssize_t size) except -1:
        """The frame of `data`, framed for `ws` as picows frames it (masked on a client's side),
        at the end of the burst; the burst written once it holds BURST_BYTES."""
        cdef Py_ssize_t header_size = ws._get_header_size(size)
        cdef Py_ssize_t needed, capacity
        cdef char* grown
        cdef char* at
        cdef uint32_t mask
        if self.burst_size and ws is not self.burst_to:
            self.write_burst()
        needed = self.burst_size + header_size + size
        if needed > self.burst_capacity:
            # doubling, but not past what a burst holds (BURST_BYTES and a frame of a few KB):
            # at 128 KB glibc would map the buffer's pages for itself, a system call each time
            capacity = max(needed, min(2 * self.burst_capacity, BURST_BYTES + 8192), 4096)
            grown = <char*>realloc(self.burst, capacity)
            if grown == NULL:
                raise MemoryError()
            self.burst, self.burst_capacity = grown, capacity
        at = self.burst + self.burst_size
        mask = ws._prepare_header(<uint8_t*>at, WSMsgType.TEXT, size, True, False, False, False)
        if mask:
            masked_copy(at + header_size, data, size, mask)
        else:
            memcpy(at + header_size, data, size)
        self.burst_size = needed
        self.burst_to = ws
        if needed >= BURST_BYTES:
            self.write_burst()
        return 0

    cdef int write_burst(self) except -1:
        """Write the burst (in one socket call when the socket takes it, as picows writes a
        frame); a buffer grown past BURST_KEPT is given back once a burst no longer needs it."""
        cdef WSTransport ws = self.burst_to
        cdef Py_ssize_t size = self.burst_size
        if size == 0:
            return 0
        self.burst_size = 0
        self.burst_to = None
        try:
            if not (ws.is_close_frame_sent or ws.is_disconnected):
                ws._fast_write(self.burst, size)
                self.bursts_written += 1
        finally:
            if self.burst_capacity > BURST_KEPT and size <= BURST_KEPT:
                free(self.burst)
                self.burst, self.burst_capacity = NULL, 0
        return 0


cdef class FastListener(WSListener):
    """The base of `PicowsTransport`: picows calls `on_ws_frame` here, in C; a frame the compiled
    lane takes goes no further, any other goes to `_on_frame` (Python) as it came. It holds the
    attributes both need."""

    cdef public WSTransport ws
    cdef public bint _paused          # flow control: the socket's buffer is over its high-water mark
    cdef public bint _held_back       # `hold_reading(True)`: the other side's queue is full
    cdef public bint _more            # the frame just delivered is not the last of its read
    cdef public object _message_type  # of a fragmented message being read
    cdef public FrameLane _fast_lane  # the reader's compiled lane, while `receive` runs

    cpdef on_ws_frame(self, WSTransport ws, WSFrame frame):
        cdef int taken = 0
        cdef bint more = not frame.last_in_buffer
        cdef FrameLane lane = self._fast_lane
        self._more = more
        if lane is None:
            self._on_frame(ws, frame, False)
            return
        try:
            if (frame.msg_type == WSMsgType.TEXT and frame.fin and not (frame.rsv1 or frame.rsv2 or frame.rsv3)
                    and not ws.is_close_frame_sent and not self._held_back and self._message_type is None):
                # picows reads a frame ahead: with `more`, the next frame lies whole after this
                # payload; a control frame (a ping picows answers itself) never comes here, so the
                # burst ends with this frame
                if more and (<const uint8_t*>frame.payload_ptr)[frame.payload_size] & 0x08:
                    more = False
                taken = lane.offer(frame.payload_ptr, frame.payload_size, more)
                if taken > 0:
                    return
            elif lane.burst_size:
                lane.write_burst()   # before this frame's way
        except BaseException as exc:   # ends `receive` with it, as the Python lane's would
            self._delivery_failed(exc)
            return
        self._on_frame(ws, frame, taken < 0)
