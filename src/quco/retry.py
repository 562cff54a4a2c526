"""One retry policy for quco's HTTP clients (the OpenAI-compatible generator and the Infini-gram API client).

A request is sent again after a failure worth another try (a timeout, a connection error, or an answer the
caller judges transient: HTTP 429/5xx, an unreadable body), with exponential backoff and jitter, honouring a
``Retry-After`` header. Each client keeps its own wording: ``judge`` describes what went wrong, and the last
attempt comes back to the caller, who turns it into its own error or result.

The loop wraps the client's call rather than its transport: an httpx client given a transport of its own
ignores its connection limits and the proxy settings of the environment.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

log = logging.getLogger(__name__)

# Judges what one attempt gave: the answer, or the exception the request raised (one of ``retry_on``).
# It returns why the attempt is worth repeating, or None when the answer is final (good or refused).
Judge = Callable[[httpx.Response | None, Exception | None], str | None]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to try again."""

    retries: int = 3  # attempts after the first
    backoff_s: float = 0.5  # the first wait; it doubles with every retry
    max_backoff_s: float = 8.0
    retry_on: tuple[type[Exception], ...] = (httpx.TransportError,)  # exceptions worth another try
    retry_after: bool = True  # honour a Retry-After header (up to 4 x max_backoff_s)

    def delay(self, retry: int, response: httpx.Response | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first), jittered to 50-100 %."""
        if self.retry_after and response is not None:
            header = response.headers.get("retry-after")
            try:
                return (
                    min(self.max_backoff_s * 4, max(0.0, float(header))) if header else self._backoff(retry)
                )
            except ValueError:
                pass
        return self._backoff(retry)

    def _backoff(self, retry: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2**retry) * (0.5 + random.random() / 2)


@dataclass
class Attempt:
    """The last attempt of a retried request."""

    response: httpx.Response | None
    error: Exception | None
    problem: str | None  # why it failed, if it did (then retries are spent); None: ``response`` is final
    attempts: int  # requests sent, this one included


def send_with_retries(
    send: Callable[[], httpx.Response], policy: RetryPolicy, judge: Judge, what: str
) -> Attempt:
    """Call ``send`` until ``judge`` finds the answer final or the retries are spent; returns the last attempt.

    ``what`` names the server in the warning logged before each retry.
    """
    attempt = Attempt(None, None, None, 0)
    for retry in range(policy.retries + 1):
        response: httpx.Response | None = None
        error: Exception | None = None
        try:
            response = send()
        except policy.retry_on as exc:
            error = exc
        attempt = Attempt(response, error, judge(response, error), retry + 1)
        if attempt.problem is None:
            return attempt
        if retry < policy.retries:
            delay = policy.delay(retry, response)
            log.warning("%s: %s; retrying in %.1f s", what, attempt.problem, delay)
            time.sleep(delay)
    return attempt
