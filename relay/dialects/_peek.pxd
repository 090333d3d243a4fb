# cython: language_level=3
"""The C scans of a compact audio frame's framing, shared by the compiled modules that test one
(`relay/dialects/_peek.pyx` over a str's ASCII data, `relay/transports/_picows_lane.pyx` over
picows' read buffer): inline, so each module compiles its own copy and neither imports the other
at run time. `compact_passes` is `relay.dialects.peek.pass_through_test`'s compact case (the frame
already known to start with one of the prefixes, and to be ASCII)."""

from libc.string cimport memchr, memcmp


cdef extern from "string.h" nogil:
    # a GNU extension (Python.h defines _GNU_SOURCE on Linux)
    void* memrchr(const void* s, int c, size_t n)


cdef inline bint holds_type_key(const char* data, Py_ssize_t start, Py_ssize_t end) noexcept nogil:
    """`"type"` starts somewhere in data[start:end - 5]: from quote to quote. The test the framing
    check replaced, kept for the benchmark's switch (`bench_prefix_only`) alone."""
    cdef const char* at = data + start
    cdef const char* stop = data + end
    cdef const char* quote
    while stop - at >= 6:
        quote = <const char*>memchr(at, b'"', stop - at - 5)
        if quote == NULL:
            return False
        if memcmp(quote, b'"type"', 6) == 0:
            return True
        at = quote + 1
    return False


cdef inline Py_ssize_t string_end(const char* data, Py_ssize_t at, Py_ssize_t end) noexcept nogil:
    """Just past the JSON string whose opening quote is at `at` and which ends before `end`, or -1
    (a backslash is in no frame that gets here; control characters are not looked for, as in
    `relay.dialects.peek`)."""
    cdef const char* closing
    if at >= end or data[at] != b'"':
        return -1
    closing = <const char*>memchr(data + at + 1, b'"', end - at - 1)
    return (closing - data) + 1 if closing != NULL else -1


cdef inline Py_ssize_t digits_end(const char* data, Py_ssize_t at, Py_ssize_t end) noexcept nogil:
    """Just past the digits that start at `at` (at least one), or -1."""
    cdef Py_ssize_t i = at
    while i < end and b'0' <= data[i] <= b'9':
        i += 1
    return i if i > at else -1


cdef inline Py_ssize_t scalar_end(const char* data, Py_ssize_t at, Py_ssize_t end) noexcept nogil:
    """Just past the JSON string, number, `true`, `false` or `null` at `at`, or -1."""
    cdef char first
    if at >= end:
        return -1
    first = data[at]
    if first == b'"':
        return string_end(data, at, end)
    if first == b't':
        return at + 4 if end - at >= 4 and memcmp(data + at, b"true", 4) == 0 else -1
    if first == b'f':
        return at + 5 if end - at >= 5 and memcmp(data + at, b"false", 5) == 0 else -1
    if first == b'n':
        return at + 4 if end - at >= 4 and memcmp(data + at, b"null", 4) == 0 else -1
    if first == b'-':
        at += 1
    if at < end and data[at] == b'0':
        at += 1
    else:
        at = digits_end(data, at, end)
        if at < 0:
            return -1
    if at < end and data[at] == b'.':
        at = digits_end(data, at + 1, end)
        if at < 0:
            return -1
    if at < end and (data[at] == b'e' or data[at] == b'E'):
        at += 1
        if at < end and (data[at] == b'+' or data[at] == b'-'):
            at += 1
        at = digits_end(data, at, end)
    return at


cdef inline bint flat_members(const char* data, Py_ssize_t at, Py_ssize_t end, bint open_payload) noexcept nogil:
    """data[at:end] is what `relay.dialects.peek` matches after `{"type"`: `:"<kind>"`, then
    `,"<key>":<scalar>` any number of times, then with `open_payload` `,"<key>":` (the payload's
    key: its string follows `end`), else `}`; no key is `type`."""
    if at >= end or data[at] != b':':
        return False
    at = string_end(data, at + 1, end)
    while at >= 0:
        if not open_payload and at == end - 1 and data[at] == b'}':
            return True
        if at >= end or data[at] != b',':
            return False
        at += 1
        if end - at >= 6 and memcmp(data + at, b'"type"', 6) == 0:
            return False
        at = string_end(data, at, end)
        if at < 0 or at >= end or data[at] != b':':
            return False
        at += 1
        if open_payload and at == end:
            return True
        at = scalar_end(data, at, end)
    return False


cdef inline bint compact_passes(const char* data, Py_ssize_t size, Py_ssize_t after_type) noexcept nogil:
    """The rest of the compact case, after the prefix: no backslash; when the frame ends with
    `"}`, what lies between its type and the last quote before its last two characters (the
    payload's opening one) is a flat object's head, else the rest is a flat object
    (`flat_members`). The payload, between those two quotes, holds no quote by construction."""
    cdef const char* quote
    if memchr(data, b'\\', size) != NULL:
        return False
    if data[size - 2] == b'"' and data[size - 1] == b'}':
        quote = <const char*>memrchr(data, b'"', size - 2)
        return quote != NULL and flat_members(data, after_type, quote - data, True)
    return flat_members(data, after_type, size, False)
