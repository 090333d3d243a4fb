#!/bin/sh
# The mock model (no key needed), the relay with the MCP server's tools, and a client. Run in this
# directory; stops both servers at the end.
set -e
MOCK_PORT=${MOCK_PORT:-8765} RELAY_PORT=${RELAY_PORT:-8000}
export RELAY_PORT
relay mock --port "$MOCK_PORT" --script script.json > /dev/null &
MOCK=$!
relay serve --upstream "ws://127.0.0.1:$MOCK_PORT/v1/realtime" --dialect openai --mcp-config mcp.toml \
    --port "$RELAY_PORT" --log-level warning 2> relay.log &
RELAY=$!
trap 'kill $RELAY $MOCK' EXIT
until python -c "import socket; socket.create_connection(('127.0.0.1', $RELAY_PORT))" 2> /dev/null; do
    kill -0 $RELAY 2> /dev/null || { cat relay.log; exit 1; }   # the relay refused to start: why
    sleep 0.2
done
python talk.py
