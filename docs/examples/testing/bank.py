"""The payment provider's side of the refund example (refunds.py, refunds_fixed.py): the refunds
it paid, and the explorer's invariant of those tools: no order is refunded twice."""

BANK: dict[str, list[str]] = {}
"""order -> the refunds paid for it, in order."""


def refunded_once(session: object) -> str | None:
    """What broke (an order refunded more than once), or None."""
    for order, refunds in BANK.items():
        if len(refunds) > 1:
            return f"order {order} was refunded {len(refunds)} times ({', '.join(refunds)})"
    return None


refunded_once.reset = BANK.clear  # type: ignore[attr-defined]   # `relay explore` empties the bank before each schedule
