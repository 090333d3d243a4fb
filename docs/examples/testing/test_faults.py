"""The same conversation with something going wrong, and what the relay answers."""

from relay.testing import Script, Turn, call, faults
from tools import book_table, search_flights

BOOKING = Script(
    Turn(calls=[call("book_table", restaurant="Luigi", people=2)]),
    Turn(say="Sorry, the booking system is not answering."),
)


def test_a_booking_system_that_never_answers():
    with BOOKING.start([book_table], faults=[faults.timeout("book_table")]) as session:
        session.user("A table for two at Luigi's")
        session.advance(6)
    (session.expect().next_call("book_table").filler(after=0.8)
            .output(error=True, contains="timed out after 5 s").follow_up().spoken("not answering"))
    session.check_invariants()


FLIGHTS = Script(Turn(calls=[call("search_flights", origin="Paris", destination="Rome")]),
                 Turn(say="Sure, what else?"))


def test_a_caller_who_speaks_over_a_search():
    with FLIGHTS.start([search_flights], faults=[faults.barge_in(call=1, after=0.5)]) as session:
        session.user("Flights from Paris to Rome?")
        session.advance(3)
        session.user("Actually, never mind")
    (session.expect().next_call("search_flights").barge_in()
            .output(contains="cancelled", status="incomplete").spoken("what else"))
    session.check_invariants()
