"""Client-side request rate limit for an Infini-gram API server: one limiter per server per process.

The hosted API lets each IP address through at 5 requests per second (burst multiplier 1; allenai/infinigram-api,
"Rate limit requests to infinigram-api", PR #101). QuCo-RAG makes several corpus queries per generated
sentence and ``quco eval --workers N`` runs N questions at once, so without a limit a run sends faster than
that and every excess request comes back 429. A :class:`RateLimiter` spaces the requests of every thread of
the process that talks to one server: each request reserves the next free slot, ``1 / rate`` seconds after the
previous one, and waits for it.

When the server answers 429 anyway (another process on the same address, a server with a lower limit), the
limiter pauses every thread until the answer's ``Retry-After`` has passed and halves its rate, once per
pause. Each answered request then raises the rate again by a twentieth of its ceiling, up to the configured
rate (additive increase, multiplicative decrease). An unlimited limiter that meets a 429 starts at half the
rate it was sending at and, once it is back at four times that rate, is unlimited again.

``corpus_stats.rate_limit: auto`` (the default) means the public API's published limit for the public API's
host (:data:`PUBLIC_API_HOSTS`) and no limit for any other URL, such as a ``quco serve stats`` of one's own;
a number sets the rate in requests per second, ``off`` turns the limit off.
"""

from __future__ import annotations

import email.utils
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

PUBLIC_API_HOSTS = frozenset({"api.infini-gram.io"})
PUBLIC_API_RATE = 5.0  # requests per second per IP address, the hosted API's published limit
MIN_RATE = 0.1  # the slowest a limiter gets after repeated 429s
MAX_PAUSE_S = 60.0  # a Retry-After longer than this is capped
_UNLIMITED_AGAIN = 4.0  # an unlimited limiter is unlimited again at this multiple of the rate it was cut to

RateSetting = float | Literal["auto", "off"] | None


def resolve_rate(setting: RateSetting, url: str) -> float | None:
    """Requests per second for ``url`` under ``setting`` (None: unlimited)."""
    if setting is None or setting == "off":
        return None
    if setting == "auto":
        return PUBLIC_API_RATE if (urlsplit(url).hostname or "").lower() in PUBLIC_API_HOSTS else None
    rate = float(setting)
    if not rate > 0:
        raise ValueError(
            f"rate limit must be a positive number of requests per second, 'auto' or 'off'; got {setting!r}"
        )
    return rate


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The ``Retry-After`` of an answer in seconds (delta-seconds or an HTTP date), or None if absent or unreadable."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class RateLimiter:
    """A shared schedule of request slots: at most ``rate`` requests per second from all threads together."""

    def __init__(self, rate: float | None, name: str = "") -> None:
        self.ceiling = rate  # the configured rate (None: unlimited)
        self.rate = rate  # the current rate, below the ceiling after a 429
        self.name = name
        self._lock = threading.Lock()
        self._next = 0.0  # monotonic time of the next free slot
        self._paused_until = 0.0
        self._cut_until = 0.0  # 429s of requests sent before this time do not cut the rate again
        self._unlimited_at: float | None = None
        self._recent: deque[float] = deque()  # send times of the last second (to know how fast we went)
        self.throttled = 0  # 429 answers seen
        self.waited_s = 0.0  # time threads spent waiting for a slot

    def acquire(self) -> float:
        """Wait for this request's slot; returns the seconds waited."""
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._paused_until)
            if self.rate is not None:
                slot = max(slot, self._next)
                self._next = slot + 1.0 / self.rate
            self._recent.append(slot)
            while self._recent and self._recent[0] < now - 1.0:
                self._recent.popleft()
        wait = slot - now
        if wait > 0:
            time.sleep(wait)
            with self._lock:
                self.waited_s += wait
        return max(0.0, wait)

    def throttled_by_server(self, retry_after: float | None) -> float:
        """The server answered 429: pause everyone for ``retry_after`` (else one slot, at least 1 s) and halve
        the rate, once per pause. Returns the pause in seconds."""
        with self._lock:
            now = time.monotonic()
            self.throttled += 1
            pause = min(
                MAX_PAUSE_S, retry_after if retry_after is not None else max(1.0, 1.0 / (self.rate or 1.0))
            )
            self._paused_until = max(self._paused_until, now + pause)
            if now >= self._cut_until:
                current = self.rate if self.rate is not None else max(float(len(self._recent)), 2 * MIN_RATE)
                self.rate = max(MIN_RATE, current / 2)
                if self.ceiling is None:
                    self._unlimited_at = self.rate * _UNLIMITED_AGAIN
                self._cut_until = self._paused_until
                log.warning(
                    "%s answered 429: pausing %.1f s, then %.2f requests/s",
                    self.name or "server",
                    pause,
                    self.rate,
                )
            self._next = max(self._next, self._paused_until)
            return pause

    def answered(self) -> None:
        """A request went through: raise a reduced rate a step towards its ceiling."""
        if self.rate == self.ceiling:
            return
        with self._lock:
            if self.rate is None:
                return
            if self.ceiling is not None:
                self.rate = min(self.ceiling, self.rate + self.ceiling / 20)
            else:
                self.rate *= 1.05
                if self._unlimited_at is not None and self.rate >= self._unlimited_at:
                    self.rate, self._unlimited_at = None, None


_LIMITERS: dict[str, RateLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def limiter_for(url: str, rate: float | None) -> RateLimiter:
    """The process's limiter for the server at ``url`` (scheme, host and port), created on first use.

    Every client of one server shares it, so the limit holds for the process whatever the number of threads
    and clients. A second client asking a lower rate lowers it for all.
    """
    parts = urlsplit(url)
    key = f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port or ''}"
    with _LIMITERS_LOCK:
        limiter = _LIMITERS.get(key)
        if limiter is None:
            limiter = _LIMITERS[key] = RateLimiter(rate, name=key)
        elif rate is not None and (limiter.ceiling is None or rate < limiter.ceiling):
            log.info("rate limit of %s lowered from %s to %g requests/s", key, limiter.ceiling, rate)
            limiter.ceiling = rate
            limiter.rate = rate if limiter.rate is None else min(limiter.rate, rate)
        return limiter
