"""How `relay serve` treats clients that keep failing to authenticate: a token bucket per client
address (its host, the port aside), which each failed authentication empties by one and which
fills again at `per_second`. An address whose bucket is empty is refused at once with 429 (and a
`Retry-After`), before its token is looked at, until the bucket holds one failure again: a
client guessing tokens gets `burst` guesses, then one every `1 / per_second` seconds.

The log says so without a line per attempt: the first refusal after a quiet spell is logged as it
comes, later ones are counted and told in one summary line once `summary_seconds` have passed
since the last line (at the next refusal, or at `flush`, when the server stops). The table of
addresses is bounded (`max_addresses`): full buckets are forgotten first, then the oldest.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

log = logging.getLogger("relay.server")

DEFAULT_BURST = 10            # failed authentications an address may make at once
DEFAULT_PER_SECOND = 1.0      # and then this many a second
DEFAULT_SUMMARY_SECONDS = 60.0
DEFAULT_MAX_ADDRESSES = 10_000


def client_host(remote: str) -> str:
    """The address part of a `host:port` (an IPv6 host keeps its colons)."""
    host, separator, port = remote.rpartition(":")
    return host.strip("[]") if separator and port.isdigit() else remote


class FailedAuthentication:
    """Failed authentications per client address (see the module)."""

    def __init__(self, *, burst: int = DEFAULT_BURST, per_second: float = DEFAULT_PER_SECOND,
                 summary_seconds: float = DEFAULT_SUMMARY_SECONDS, max_addresses: int = DEFAULT_MAX_ADDRESSES,
                 clock: Callable[[], float] = time.monotonic, logger: logging.Logger = log) -> None:
        self.burst = burst
        self.per_second = per_second
        self.summary_seconds = summary_seconds
        self.max_addresses = max_addresses
        self._clock = clock
        self._log = logger
        self._buckets: dict[str, tuple[float, float]] = {}   # host -> (failures it may still make, when counted)
        self._last_line: float | None = None   # when a line was last logged
        self._failed = 0      # failures since that line
        self._throttled = 0   # refusals with 429 since that line
        self._hosts: set[str] = set()   # the hosts of those (at most max_addresses)

    def __len__(self) -> int:
        """Addresses tracked (for the tests)."""
        return len(self._buckets)

    def _left(self, host: str, now: float) -> float:
        left, when = self._buckets.get(host, (float(self.burst), now))
        return min(float(self.burst), left + (now - when) * self.per_second)

    def retry_after(self, remote: str) -> float | None:
        """None when this client may try its token; else the seconds until it may, and the
        refusal is counted."""
        host = client_host(remote)
        if host not in self._buckets:
            return None
        now = self._clock()
        left = self._left(host, now)
        if left >= 1.0:
            return None
        self._throttled += 1
        self._note(host, now, "refused with 429: too many failed authentications from %s", host)
        return (1.0 - left) / self.per_second

    def failed(self, remote: str, message: str) -> None:
        """This client presented no token or a wrong one (`message`: why, for the log)."""
        host = client_host(remote)
        now = self._clock()
        left = self._left(host, now) - 1.0
        self._buckets.pop(host, None)   # re-inserted last: the dict's order is the addresses' age
        self._buckets[host] = (left, now)
        if len(self._buckets) > self.max_addresses:
            self._forget(now)
        self._failed += 1
        self._note(host, now, "handshake refused: %s", message)

    def _forget(self, now: float) -> None:
        for host in [host for host in self._buckets if self._left(host, now) >= self.burst]:
            del self._buckets[host]
        while len(self._buckets) > self.max_addresses:
            del self._buckets[next(iter(self._buckets))]

    def _note(self, host: str, now: float, line: str, argument: str) -> None:
        if len(self._hosts) < self.max_addresses:
            self._hosts.add(host)
        if self._last_line is None or now - self._last_line >= self.summary_seconds:
            if self._failed + self._throttled > 1:
                self.flush(now)
            else:   # the first after a quiet spell: as it comes
                self._log.info(line, argument, extra={"remote": host})
                self._reset(now)

    def flush(self, now: float | None = None) -> None:
        """Log what was counted since the last line, if anything (and start counting anew)."""
        now = self._clock() if now is None else now
        if self._failed or self._throttled:
            since = now - self._last_line if self._last_line is not None else 0.0
            hosts = len(self._hosts)
            self._log.info("handshakes refused in the last %.0f s: %d without the right relay token, %d with 429 "
                           "(too many failures), from %s addresses", since, self._failed, self._throttled,
                           f"{hosts} or more" if hosts >= self.max_addresses else hosts,
                           extra={"failed": self._failed, "throttled": self._throttled, "addresses": hosts})
        self._reset(now)

    def _reset(self, now: float) -> None:
        self._last_line = now
        self._failed = self._throttled = 0
        self._hosts.clear()
