"""Per-principal admission: requests and tokens per minute, concurrency, day and month budgets.

One Edge process admits every request, so the counts here are exact, not per replica. Each limit
a request's policy sets is checked against its scope (``edge.config.policies``): the principal,
one token, or the principal's requests for one model. A scope counts every request inside it.

- Minute windows are sliding: a request is admitted while fewer than ``requests_per_minute``
  were admitted in the last 60 s, and while the tokens of the last 60 s plus its reservation fit
  ``tokens_per_minute``. The reservation (estimated input + requested output) is settled with the
  run's real usage when it ends.
- Budgets count settled tokens per UTC day and month, loaded from the usage rollups at start,
  plus the reservations in flight.
- ``max_concurrent`` counts admitted requests not yet released.

Plain Python; the clocks are injected, so the tests drive time themselves.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from edge.config.policies import Policy, Resolved, Scope

WINDOW_S = 60.0
MAX_RETRY_AFTER_S = 60.0
RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"
INSUFFICIENT_QUOTA = "insufficient_quota"
# A request over max_concurrent waits for a release, which no clock predicts.
CONCURRENCY_RETRY_AFTER_S = 1.0


@dataclass(frozen=True, slots=True)
class Cell:
    """Who asked for what: the finest grain usage is counted in."""

    principal_ref: str
    token_ref: str
    model: str

    def scopes(self) -> tuple[Scope, Scope, Scope]:
        return (
            ("principal", self.principal_ref),
            ("token", self.token_ref),
            ("model", f"{self.principal_ref}\n{self.model}"),
        )


@dataclass(frozen=True, slots=True)
class UsedTokens:
    """Settled tokens of one cell on one UTC day (a day rollup row's prompt + completion)."""

    day: date
    cell: Cell
    tokens: int


@dataclass(frozen=True, slots=True)
class RateState:
    """The minute-window figures OpenAI's ``x-ratelimit-*`` headers carry, for one request."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float = 0.0
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Refusal:
    code: str  # RATE_LIMIT_EXCEEDED or INSUFFICIENT_QUOTA
    key: str  # the policy key that refused
    message: str
    retry_after_s: float
    rate: RateState


@dataclass(slots=True)
class _Event:
    at: float
    tokens: int


@dataclass(slots=True)
class _Window:
    """One scope's last minute: admission times and their (reserved, then settled) tokens."""

    events: deque[_Event] = field(default_factory=deque)
    tokens: int = 0

    def prune(self, now: float) -> None:
        events = self.events
        while events and events[0].at <= now - WINDOW_S:
            self.tokens -= events.popleft().tokens


@dataclass(slots=True)
class _Counts:
    """What the limiter knows of one principal, for /status and /metrics."""

    admitted: int = 0
    limited: int = 0
    in_flight: int = 0


class Admission:
    """An admitted request's hold on its scopes: settle it exactly once, on every path."""

    __slots__ = ("_event", "_limiter", "_reserved", "_settled", "cell", "policy", "rate")

    def __init__(
        self,
        limiter: Limiter,
        cell: Cell,
        policy: Policy,
        rate: RateState,
        event: _Event | None,
        reserved: int,
    ) -> None:
        self._limiter = limiter
        self.cell = cell
        self.policy = policy
        self.rate = rate
        self._event = event
        self._reserved = reserved
        self._settled = False

    @property
    def settled(self) -> bool:
        return self._settled

    def settle(self, used_tokens: int) -> None:
        """The run ended having used ``used_tokens``: release its slot, replace its
        reservation by what it used. A second call does nothing."""
        if self._settled:
            return
        self._settled = True
        self._limiter._settle(self, self._event, self._reserved, max(0, used_tokens))


class Limiter:
    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._monotonic = monotonic
        self._wall = wall
        self._windows: dict[Scope, _Window] = defaultdict(_Window)
        self._in_flight: dict[Scope, int] = defaultdict(int)
        # Settled tokens per (scope, UTC day) and per (scope, month as (year, month)).
        self._day_used: dict[tuple[Scope, date], int] = defaultdict(int)
        self._month_used: dict[tuple[Scope, tuple[int, int]], int] = defaultdict(int)
        self._reserved: dict[Scope, int] = defaultdict(int)  # budget reservations in flight
        self.counts: dict[str, _Counts] = defaultdict(_Counts)

    def load_usage(self, rows: Iterable[UsedTokens]) -> None:
        """Add usage settled before this process started (the day rollup since the month
        began)."""
        for row in rows:
            self._add_used(row.cell, row.day, row.tokens)

    def admit(self, resolved: Resolved, cell: Cell, reserve_tokens: int) -> Admission | Refusal:
        """Admit a request that reserves ``reserve_tokens``, or say which limit refuses it."""
        policy, scopes = resolved.policy, resolved.scopes
        reserve = max(0, reserve_tokens)
        if not scopes:
            admission = Admission(self, cell, policy, RateState(), None, 0)
            self._hold(cell, admission, None, 0)
            return admission
        now = self._monotonic()
        rate = self._rate_state(policy, scopes, now, reserve)
        refusal = self._refusal(policy, scopes, now, reserve, rate)
        if refusal is not None:
            self.counts[cell.principal_ref].limited += 1
            return refusal
        event = _Event(now, reserve)
        admission = Admission(self, cell, policy, rate, event, reserve)
        self._hold(cell, admission, event, reserve)
        return admission

    def remaining_budget(self, resolved: Resolved) -> dict[str, int]:
        """``tokens_per_day`` / ``tokens_per_month`` left for a request with this policy."""
        left = {}
        today = self._wall().date()
        for key in ("tokens_per_day", "tokens_per_month"):
            limit = getattr(resolved.policy, key)
            scope = resolved.scopes.get(key)
            if limit is not None and scope is not None:
                left[key] = max(0, limit - self._budget_used(key, scope, today))
        return left

    def in_flight(self, principal_ref: str) -> int:
        return self.counts[principal_ref].in_flight if principal_ref in self.counts else 0

    # -- inside --------------------------------------------------------------------------

    def _hold(self, cell: Cell, admission: Admission, event: _Event | None, reserve: int) -> None:
        counts = self.counts[cell.principal_ref]
        counts.admitted += 1
        counts.in_flight += 1
        for scope in cell.scopes():
            self._in_flight[scope] += 1
            self._reserved[scope] += reserve
            if event is not None:
                window = self._windows[scope]
                window.events.append(event)
                window.tokens += reserve

    def _settle(self, admission: Admission, event: _Event | None, reserved: int, used: int) -> None:
        cell = admission.cell
        self.counts[cell.principal_ref].in_flight -= 1
        now = self._monotonic()
        for scope in cell.scopes():
            self._in_flight[scope] -= 1
            if not self._in_flight[scope]:
                del self._in_flight[scope]
            self._reserved[scope] -= reserved
            if not self._reserved[scope]:
                del self._reserved[scope]
            window = self._windows.get(scope)
            if window is not None and event is not None:
                window.prune(now)
                if event.at > now - WINDOW_S:
                    window.tokens += used - event.tokens  # still in the window: its real cost
                if not window.events:
                    del self._windows[scope]
        if event is not None:
            event.tokens = used
        self._add_used(cell, self._wall().date(), used)

    def _add_used(self, cell: Cell, day: date, tokens: int) -> None:
        if not tokens:
            return
        for scope in cell.scopes():
            self._day_used[(scope, day)] += tokens
            self._month_used[(scope, (day.year, day.month))] += tokens

    def _budget_used(self, key: str, scope: Scope, today: date) -> int:
        settled = (
            self._day_used.get((scope, today), 0)
            if key == "tokens_per_day"
            else self._month_used.get((scope, (today.year, today.month)), 0)
        )
        return settled + self._reserved.get(scope, 0)

    def _rate_state(
        self, policy: Policy, scopes: Mapping[str, Scope], now: float, reserve: int
    ) -> RateState:
        """The window figures after this request would be admitted."""
        state: dict[str, object] = {}
        if (limit := policy.requests_per_minute) is not None:
            window = self._window(scopes["requests_per_minute"], now)
            state |= {
                "limit_requests": limit,
                "remaining_requests": max(0, limit - len(window.events) - 1),
                "reset_requests_s": _reset_s(window, now),
            }
        if (limit := policy.tokens_per_minute) is not None:
            window = self._window(scopes["tokens_per_minute"], now)
            state |= {
                "limit_tokens": limit,
                "remaining_tokens": max(0, limit - window.tokens - reserve),
                "reset_tokens_s": _reset_s(window, now),
            }
        return RateState(**state)  # type: ignore[arg-type]

    def _window(self, scope: Scope, now: float) -> _Window:
        window = self._windows.get(scope)
        if window is None:
            return _Window()
        window.prune(now)
        return window

    def _refusal(
        self,
        policy: Policy,
        scopes: Mapping[str, Scope],
        now: float,
        reserve: int,
        rate: RateState,
    ) -> Refusal | None:
        if (limit := policy.requests_per_minute) is not None:
            window = self._window(scopes["requests_per_minute"], now)
            if len(window.events) >= limit:
                wait = window.events[-limit].at + WINDOW_S - now
                return _refused(
                    RATE_LIMIT_EXCEEDED,
                    "requests_per_minute",
                    f"Rate limit reached: {limit} requests per minute.",
                    wait,
                    rate,
                )
        if (limit := policy.tokens_per_minute) is not None:
            window = self._window(scopes["tokens_per_minute"], now)
            if reserve > limit:
                return _refused(
                    RATE_LIMIT_EXCEEDED,
                    "tokens_per_minute",
                    f"Request too large: it reserves {reserve} tokens and the limit is "
                    f"{limit} tokens per minute; send fewer input or output tokens.",
                    MAX_RETRY_AFTER_S,
                    rate,
                )
            if window.tokens + reserve > limit:
                return _refused(
                    RATE_LIMIT_EXCEEDED,
                    "tokens_per_minute",
                    f"Rate limit reached: {limit} tokens per minute (this request reserves "
                    f"{reserve}).",
                    _tokens_free_in(window, limit - reserve, now),
                    rate,
                )
        limit = policy.max_concurrent
        if limit is not None and self._in_flight.get(scopes["max_concurrent"], 0) >= limit:
            return _refused(
                RATE_LIMIT_EXCEEDED,
                "max_concurrent",
                f"Concurrency limit reached: {limit} requests at a time.",
                CONCURRENCY_RETRY_AFTER_S,
                rate,
            )
        today = self._wall()
        for key, period, resets in (
            ("tokens_per_day", "day", _next_day(today)),
            ("tokens_per_month", "month", _next_month(today)),
        ):
            limit = getattr(policy, key)
            if limit is None:
                continue
            used = self._budget_used(key, scopes[key], today.date())
            if used + reserve > limit:
                return _refused(
                    INSUFFICIENT_QUOTA,
                    key,
                    f"Token budget exhausted: {used} of {limit} tokens per {period} used or "
                    f"reserved (this request reserves {reserve}); it resets at "
                    f"{resets:%Y-%m-%dT%H:%M:%SZ}.",
                    (resets - today).total_seconds(),
                    rate,
                )
        return None


def _refused(code: str, key: str, message: str, wait_s: float, rate: RateState) -> Refusal:
    return Refusal(code, key, message, min(MAX_RETRY_AFTER_S, max(0.001, wait_s)), rate)


def _reset_s(window: _Window, now: float) -> float:
    """Until the window is empty again (what OpenAI's ``x-ratelimit-reset-*`` say)."""
    return max(0.0, window.events[-1].at + WINDOW_S - now) if window.events else 0.0


def _tokens_free_in(window: _Window, target: int, now: float) -> float:
    """Seconds until the window's tokens drop to ``target`` as its oldest events leave it."""
    tokens = window.tokens
    for event in window.events:
        if tokens <= target:
            break
        tokens -= event.tokens
        wait = event.at + WINDOW_S - now
        if tokens <= target:
            return wait
    return MAX_RETRY_AFTER_S


def _next_day(moment: datetime) -> datetime:
    return datetime(moment.year, moment.month, moment.day, tzinfo=UTC) + timedelta(days=1)


def _next_month(moment: datetime) -> datetime:
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC)


def format_reset(seconds: float) -> str:
    """A duration as OpenAI's reset headers spell it: ``20ms``, ``1.5s``, ``1m0s``."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s"
