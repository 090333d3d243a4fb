"""The pytest plugin grows with the harness: an expectations file beside a recording is applied to
its replay, promotion levels are markers selected with `-m`, and a failing item ends with the
`relay inspect` command that shows the session. All through `pytester`, as a user runs pytest."""

from __future__ import annotations

import asyncio
import shutil
import textwrap

import pytest

from relay.testing import Script, Turn, call
from relay.tools import tool

pytest_plugins = ["pytester"]

QUIET = ("-p", "no:hypothesispytest", "-p", "no:cacheprovider")

TOOLS = '''
import asyncio
from relay import tool

@tool(on_delay=(300, "One moment."))
async def lookup_order(order_id: str) -> dict:
    await asyncio.sleep(0.5)      # a replay runs the tool in real time
    return {"order_id": order_id, "status": "shipped"}
'''


@tool(on_delay=(300, "One moment."))
async def lookup_order(order_id: str) -> dict:
    await asyncio.sleep(0.5)      # a replay runs the tool in real time
    return {"order_id": order_id, "status": "shipped"}


PASSING = """
promotion: blocking
invariants: all
expect:
  - call: {name: lookup_order, arguments: {order_id: "42"}}
  - filler: 0.3
  - output: {contains: shipped, error: false}
  - follow_up: lookup_order
  - spoken: {matches: "Order 42 is .*shipped"}
  - no_more_events: true
"""

FAILING_TOML = """
promotion = "nightly"
expect = [
  { call = "lookup_order" },
  { output = { contains = "delivered" } },
]
"""


@pytest.fixture
def project(pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> pytest.Pytester:
    """recordings/ with the same scripted session twice (refund, late), tools.py as recorded."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    script = Script(Turn(calls=[call("lookup_order", order_id="42")]), Turn(say="Order 42 is {output}"))
    with script.start([lookup_order]) as session:
        session.user("Where is order 42?")
        session.advance(1)
    recorded = session.save(tmp_path_factory.mktemp("recorded"))
    recordings = pytester.mkdir("recordings")
    for name in ("refund", "late"):
        shutil.copy(recorded, recordings / f"{name}.jsonl")
    pytester.makepyfile(tools=TOOLS)
    return pytester


def run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest(*QUIET, "--relay-recordings", "recordings", "--relay-tools", "tools.py", *args)


def test_an_expectations_file_is_applied_to_the_replay(project: pytest.Pytester) -> None:
    (project.path / "recordings" / "refund.expect.yaml").write_text(PASSING)
    (project.path / "recordings" / "late.expect.toml").write_text(FAILING_TOML)
    result = run(project, "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "recordings/late.jsonl::replay FAILED*",
        "recordings/refund.jsonl::replay PASSED*",
    ])
    result.stdout.fnmatch_lines([
        "*_ replay of late.jsonl _*",
        "replay of late.jsonl against late.expect.toml:",
        'expected: an output containing "delivered"',
        "came: *output * (lookup_order) by the relay [[]completed] ok: {*shipped*}  <- its text does not contain*",
        "where:    replay of *late.jsonl, event * of *:",
        "*>> *output*",
        "look at it: relay inspect *recordings/late.jsonl",
    ])
    assert "Traceback" not in result.stdout.str()


def test_promotion_levels_are_markers_selected_with_m(project: pytest.Pytester) -> None:
    (project.path / "recordings" / "refund.expect.yaml").write_text(PASSING)
    (project.path / "recordings" / "late.expect.json").write_text(
        '{"promotion": "nightly", "expect": [{"call": "lookup_order"}]}')
    blocking = run(project, "-m", "blocking", "--strict-markers", "-v")
    blocking.assert_outcomes(passed=1, deselected=1)
    blocking.stdout.fnmatch_lines(["recordings/refund.jsonl::replay PASSED*"])
    nightly = run(project, "-m", "nightly", "--strict-markers", "-v")
    nightly.assert_outcomes(passed=1, deselected=1)
    nightly.stdout.fnmatch_lines(["recordings/late.jsonl::replay PASSED*"])
    markers = project.runpytest(*QUIET, "--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.blocking: *", "@pytest.mark.nightly: *", "@pytest.mark.manual: *"])


def test_a_diverging_replay_prints_the_inspect_command(project: pytest.Pytester) -> None:
    project.makepyfile(tools=TOOLS.replace('"shipped"', '"lost"'))
    result = run(project, "-k", "refund")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["replay of refund.jsonl (relay): * divergence* from the recording",
                                 "look at the session: relay inspect *recordings/refund.jsonl"])


@pytest.mark.parametrize("name, content, message", [
    ("refund.expect.yaml", "expect:\n  - speak: hello\n",
     "*refund.expect.yaml: step 1: unknown step 'speak' (one of: call, output, spoken, *"),
    ("refund.expect.toml", "promotion = 'weekly'\n",
     "*refund.expect.toml: promotion is one of blocking, nightly, manual, not 'weekly'"),
    ("refund.expect.json", "{not json",
     "*refund.expect.json: not valid JSON: *"),
])
def test_an_unusable_expectations_file_fails_its_item_in_one_line(project: pytest.Pytester, name: str, content: str,
                                                                  message: str) -> None:
    (project.path / "recordings" / name).write_text(content)
    result = run(project, "-k", "refund")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines([message])
    assert "Traceback" not in result.stdout.str()


def test_yaml_without_pyyaml_says_what_to_install_or_write_instead(project: pytest.Pytester) -> None:
    project.makeconftest("import sys\nsys.modules['yaml'] = None   # as if PyYAML were not installed\n")
    (project.path / "recordings" / "refund.expect.yaml").write_text(PASSING)
    result = run(project, "-k", "refund")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(["*refund.expect.yaml: reading YAML needs PyYAML (pip install 'realtime-relay[[]yaml]'); "
                                 "or write the same document as .expect.toml or .expect.json"])


def test_a_python_test_next_to_the_recordings_uses_the_same_expectations(project: pytest.Pytester) -> None:
    project.makepyfile(test_refund=textwrap.dedent("""
        from relay.testing import expect

        def test_refund(relay_replay):
            result = relay_replay.check(relay_replay("recordings/refund.jsonl"))
            expect(result).next_call("lookup_order").filler(after=0.3).output(contains="shipped").follow_up().spoken("shipped")

        def test_refund_says_delivered(relay_replay):
            expect(relay_replay("recordings/refund.jsonl")).next_call().output(contains="delivered")
    """))
    result = project.runpytest(*QUIET, "--relay-tools", "tools.py", "test_refund.py")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(['*expected: an output containing "delivered"',
                                 "*look at it: relay inspect *recordings/refund.jsonl"])
