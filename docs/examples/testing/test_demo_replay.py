"""A Python test beside the recordings: the replay of a recorded call, and what it must show."""

from relay.testing import expect


def test_the_flight_search_is_covered_by_a_filler(relay_replay):
    result = relay_replay.check(relay_replay("tests/recordings/demo.jsonl"))   # no divergence
    flights = expect(result).skip_to_call("search_flights", arguments={"destination": "Rome"})
    flights.filler(after=0.4, within=0.1).output(contains="RL 318").follow_up().spoken("98 euros")
