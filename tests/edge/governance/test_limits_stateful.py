"""A hypothesis state machine against the limiter, checked by a naive reference.

Requests from two tokens of one principal (one with an override of its own) and to two models
(one with an override) are admitted, settled with at most what they reserved, and the clock
moves. The limiter must admit exactly when the reference, which recounts every admission from
scratch, says the request fits every limit that governs it; at the end nothing is held.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from edge.config.policies import LIMIT_KEYS, PolicyEntry, Resolved, Settings, resolve
from edge.governance.limits import WINDOW_S, Admission, Cell, Limiter

ENTRY = PolicyEntry(
    "p",
    Settings(
        requests_per_minute=4,
        tokens_per_minute=60,
        max_concurrent=3,
        tokens_per_day=150,
        tokens_per_month=400,
        weight=1.0,
        priority_class="interactive",
    ),
    {"t2": Settings(requests_per_minute=2, max_concurrent=1)},
    {"m2": Settings(tokens_per_minute=25, tokens_per_day=60)},
)
POLICIES = {"p": ENTRY}
CELLS = [Cell("p", token, model) for token in ("t1", "t2") for model in ("m1", "m2")]


@dataclass
class Held:
    cell: Cell
    at: float
    day: date
    tokens: int
    admission: Admission | None
    settled: bool = False


def in_scope(scope: tuple[str, str], cell: Cell) -> bool:
    kind, name = scope
    return (
        name
        == {
            "principal": cell.principal_ref,
            "token": cell.token_ref,
            "model": f"{cell.principal_ref}\n{cell.model}",
        }[kind]
    )


class LimiterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.wall = datetime(2025, 1, 31, 23, 50, tzinfo=UTC)
        self.limiter = Limiter(lambda: self.now, lambda: self.wall)
        self.held: list[Held] = []

    def fits(self, resolved: Resolved, cell: Cell, reserve: int) -> bool:
        policy = resolved.policy
        for key in LIMIT_KEYS:
            limit = getattr(policy, key)
            if limit is None:
                continue
            mine = [h for h in self.held if in_scope(resolved.scopes[key], h.cell)]
            recent = [h for h in mine if h.at > self.now - WINDOW_S]
            today = self.wall.date()
            if key == "requests_per_minute" and len(recent) >= limit:
                return False
            if key == "tokens_per_minute" and sum(h.tokens for h in recent) + reserve > limit:
                return False
            if key == "max_concurrent" and sum(not h.settled for h in mine) >= limit:
                return False
            # A reservation in flight counts against today's budgets; settled tokens against
            # the day and month they were settled in.
            if key == "tokens_per_day":
                used = sum(h.tokens for h in mine if not h.settled or h.day == today)
                if used + reserve > limit:
                    return False
            if key == "tokens_per_month":
                month = (today.year, today.month)
                used = sum(
                    h.tokens for h in mine if not h.settled or (h.day.year, h.day.month) == month
                )
                if used + reserve > limit:
                    return False
        return True

    @rule(cell=st.sampled_from(CELLS), reserve=st.integers(0, 30))
    def admit(self, cell: Cell, reserve: int) -> None:
        resolved = resolve(POLICIES, cell.principal_ref, cell.token_ref, cell.model)
        expected = self.fits(resolved, cell, reserve)
        outcome = self.limiter.admit(resolved, cell, reserve)
        assert isinstance(outcome, Admission) == expected, (cell, reserve, outcome)
        if isinstance(outcome, Admission):
            self.held.append(Held(cell, self.now, self.wall.date(), reserve, outcome))
        else:
            assert 0 < outcome.retry_after_s <= 60

    @precondition(lambda self: any(not h.settled for h in self.held))
    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        open_ = [h for h in self.held if not h.settled]
        held = data.draw(st.sampled_from(open_))
        used = data.draw(st.integers(0, held.tokens))
        assert held.admission is not None
        held.admission.settle(used)
        held.settled = True
        held.tokens = used
        # A budget counts settled tokens on the day the run ends.
        held.day = self.wall.date()

    @rule(seconds=st.sampled_from([0.5, 5.0, 20.0, 59.9, 60.0, 300.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += timedelta(seconds=seconds)

    @invariant()
    def in_flight_matches(self) -> None:
        assert self.limiter.in_flight("p") == sum(not h.settled for h in self.held)

    def teardown(self) -> None:
        for held in self.held:
            if held.admission is not None and not held.settled:
                held.admission.settle(0)
        self.now += WINDOW_S + 1
        assert self.limiter.in_flight("p") == 0
        assert not self.limiter._in_flight and not self.limiter._reserved
        for cell in CELLS:
            for scope in cell.scopes():
                window = self.limiter._window(scope, self.now)
                assert not window.events and window.tokens == 0


LimiterMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestLimiter = LimiterMachine.TestCase
