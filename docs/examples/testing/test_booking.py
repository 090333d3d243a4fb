"""A scripted conversation: what the model does, turn by turn; the relay and the tools are real."""

import pytest

from relay.testing import Script, Turn, call
from tools import book_table

BOOKING = Script(
    Turn(say="Let me book that.", calls=[call("book_table", restaurant="Luigi", people=2)]),
    Turn(say="Your table for two at Luigi's is booked."),
)


@pytest.mark.parametrize("dialect", ["openai", "gemini"])
def test_the_caller_hears_a_filler_then_exactly_one_answer(dialect):
    with BOOKING.start([book_table], dialect=dialect) as session:
        session.user("A table for two at Luigi's tonight, please")
        session.advance(3.5)                  # virtual seconds: the test takes none of them

    expect = session.expect().next_call("book_table", arguments={"people": 2})
    if dialect == "openai":                   # Gemini Live has no response to say a filler in
        expect.filler(after=0.8, text="checking the book")
    expect.output(contains="booked").spoken("is booked").no_more_events()
    session.check_invariants()
