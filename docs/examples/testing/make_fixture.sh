#!/bin/sh
# From a recorded call to a blocking test, as the guide walks it. Run in an empty directory.
set -e

# 1. Record a call: here the demo (the relay and the mock model, no key needed); in production,
#    `relay serve --record recordings/` or `relay attach --record recordings/`.
relay demo --record recordings --color never > /dev/null

# 2. Make it safe to keep: personal data replaced, audio dropped; the report counts what went.
mkdir -p tests/recordings
relay redact recordings/*.jsonl --out tests/recordings/demo.jsonl --patterns patterns.txt

# 3. Look at it (and check nothing personal is left: --check exits 1 if something is).
relay inspect tests/recordings/demo.jsonl --out demo.html > /dev/null
relay redact tests/recordings/demo.jsonl --check --patterns patterns.txt

# 4. Replay it against the tools as they are now: exit 1 when the relay would answer differently.
relay replay tests/recordings/demo.jsonl --tools relay.examples.tools > /dev/null

# 5. Say what must hold, and how much it matters: the expectations file beside the recording.
cp demo.expect.yaml tests/recordings/

# 6. In CI: the blocking recordings and the scripted conversations.
pytest -q -p no:cacheprovider -m blocking --relay-recordings tests/recordings --relay-tools relay.examples.tools
pytest -q -p no:cacheprovider --relay-tools relay.examples.tools test_booking.py test_faults.py test_demo_replay.py
