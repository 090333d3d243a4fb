"""The sans-I/O engine: conversation state, call ledger, sequencer, actions, frame peeking."""

from relay.engine.actions import (
    Action,
    CancelHandler,
    Close,
    Notice,
    Outcome,
    SendClient,
    SendUpstream,
    StartHandler,
)
from relay.engine.core import DEFAULT_HISTORY_LIMIT, Anomaly, Engine, EngineConfig
from relay.engine.ledger import CallEntry, CallLedger, CallState, Owner

__all__ = [
    "DEFAULT_HISTORY_LIMIT", "Action", "Anomaly", "CallEntry", "CallLedger", "CallState", "CancelHandler", "Close", "Engine",
    "EngineConfig", "Notice", "Outcome", "Owner", "SendClient", "SendUpstream", "StartHandler",
]
