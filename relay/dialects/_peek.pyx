# cython: language_level=3, boundscheck=False, wraparound=False
"""`relay.dialects.peek.pass_through_test`, compiled: the test every audio frame of the websockets
transport's express lane (and of the engine's round) takes, in C over the str's own ASCII data.

Why: the Python test costs a few thousand instructions a frame, nearly all of them the
interpreter's (a slice compared, a method's arguments parsed), a few percent of what the relay
spends on a frame; the scans themselves (`_peek.pxd`, the picows lane's too) cost a few hundred.

Only the common case is taken here: a str of ASCII (its characters are its bytes) that starts
with one of the prefixes (`{"type":"<kind>"`); its verdict is `compact_passes`'s, the Python
test's compact case. Any other frame (another type or not compact, not ASCII, bytes) is handed to
the Python test, which decides it as before. tests/test_peek_single_type.py checks that both
decide alike on generated frames.

Built by setup.py where Cython and a C compiler are (an optional extension, no other dependency);
without it, or with RELAY_COMPILED=0, `pass_through_test` returns the Python test.
"""

from libc.string cimport memcmp

from relay.dialects._peek cimport compact_passes


cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object unicode)
    void* PyUnicode_DATA(object unicode)
    Py_ssize_t PyUnicode_GET_LENGTH(object unicode)
    char* PyBytes_AS_STRING(object data)
    Py_ssize_t PyBytes_GET_SIZE(object data)


cdef class CompactTest:
    """A frame's test for the kinds of `prefixes` (the Python test's own: `{"type":"<kind>"`),
    called as the Python test is (`test(frame) -> bool`), with its `prefixes` and `after_type`
    (what a `ForwardRule` reads)."""
    cdef readonly tuple prefixes
    cdef readonly Py_ssize_t after_type
    cdef tuple ascii_prefixes     # the prefixes' bytes
    cdef object python            # the Python test: every frame this does not decide

    def __init__(self, tuple prefixes, Py_ssize_t after_type, python):
        self.prefixes = prefixes
        self.after_type = after_type
        self.ascii_prefixes = tuple(prefix.encode("ascii") for prefix in prefixes)
        self.python = python

    def __call__(self, frame):
        cdef const char* data
        cdef Py_ssize_t size, prefix_size
        cdef bytes prefix
        if type(frame) is str and PyUnicode_IS_COMPACT_ASCII(frame):
            data = <const char*>PyUnicode_DATA(frame)
            size = PyUnicode_GET_LENGTH(frame)
            for prefix in self.ascii_prefixes:
                prefix_size = PyBytes_GET_SIZE(prefix)
                if size >= prefix_size and memcmp(data, PyBytes_AS_STRING(prefix), prefix_size) == 0:
                    return compact_passes(data, size, self.after_type)
        return self.python(frame)
