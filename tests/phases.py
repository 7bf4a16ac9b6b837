"""Where a playbook-level test's time goes (issue 27): the harnesses (tests/integration's
`Deployment`, tests/fleet's `Fleet`) add each playbook run's wall seconds here under its
playbook's name; tests/conftest.py takes them per test and prints, after the run, each test's
time by phase: its playbook runs (per playbook), the rest of its call (load, waits, assertions),
its setup and its teardown."""
from __future__ import annotations

PLAYS: dict[str, float] = {}


def add(playbook: str, seconds: float) -> None:
    PLAYS[playbook] = PLAYS.get(playbook, 0.0) + seconds


def take() -> dict[str, float]:
    """What was added since the last take, and start again."""
    out = dict(PLAYS)
    PLAYS.clear()
    return out
