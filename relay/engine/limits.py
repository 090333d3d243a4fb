"""How much one session's engine keeps of what a peer sends it, at most.

The engine keeps some of what a client sends until the upstream answers it: the `response.create`s
it holds while a response is active (`holding.HeldCreates`), the ids of the items the client
created until they come back into the conversation (`conversation.ItemOrigins`). A client that
sends those faster than they are answered, or items the upstream refuses, would grow them without
end; the frame and queue limits do not cover them, as they are kept after the frame was read. Past
a limit the event is refused with an `error` event (`session_limit_exceeded`, the limit named in
its message) and not forwarded; the session goes on, and the first refusal of each kind in a
session is logged (the `limit` notice). What the engine records of anomalies is bounded too: past
`MAX_ANOMALIES_KEPT` they are counted (`SessionContext.anomalies_dropped`), still told as notices.
"""

from __future__ import annotations

LIMIT_CODE = "session_limit_exceeded"

# client creates held at once (only the first of them is ever sent: the others are refused when
# they are released), and the characters they keep: the first one's frame, the others' event ids
MAX_HELD_CREATES = 32
MAX_HELD_CHARS = 4 * 1024 * 1024

# items the client created that are not in the conversation yet (their ids, and the call ids of
# its function_call items), and the characters of those ids
MAX_PENDING_CLIENT_ITEMS = 1024
MAX_PENDING_CLIENT_ID_CHARS = 1024 * 1024

# anomalies kept on the engine (`engine.anomalies`); later ones are counted
MAX_ANOMALIES_KEPT = 1000
