"""Fixtures of the fleet tests: hosts on this machine (network namespaces with their own sshd),
driven by the real playbooks over real SSH. See tests/fleet/README.md and harness.py."""
from __future__ import annotations

import atexit
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .harness import Fleet, FleetError


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fleet")
    group.addoption("--fleet-servers", type=int, default=3, help="hosts in sglang_servers (default 3)")
    group.addoption("--fleet-routers", type=int, default=1, help="hosts in sglang_routers (default 1)")


def _close_all(fleets: list[Fleet]) -> list[str]:
    left: list[str] = []
    for fleet in reversed(fleets):
        try:
            left += fleet.close()
        except Exception as exc:  # keep closing the others
            left.append(f"fleet {fleet.tag}: {exc!r}")
    return left


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    # a SIGTERM (CI cancelling, `timeout`) unwinds like Ctrl-C, so the finalizers run
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def fleet_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Fleet]]:
    """`fleet_factory(servers=3, routers=1, hostvars={...}, host_overrides={name: {...}})` builds
    a fleet of its own (its own subnet, names and sshd's); all are removed at the end of the
    session, on an exception, Ctrl-C or SIGTERM (finalizer, and atexit as a last resort)."""
    fleets: list[Fleet] = []
    atexit.register(_close_all, fleets)
    previous = signal.signal(signal.SIGTERM, _sigterm_to_interrupt)

    def make(**kwargs: Any) -> Fleet:
        run_dir = tmp_path_factory.mktemp(f"fleet{len(fleets)}", numbered=False)
        try:
            fleet = Fleet.create(run_dir, index=len(fleets), **kwargs)
        except FleetError as exc:
            pytest.fail(f"fleet harness: {exc}", pytrace=False)
        fleets.append(fleet)
        return fleet

    try:
        yield make
    finally:
        left = _close_all(fleets)
        signal.signal(signal.SIGTERM, previous)
        if left:
            print("fleet harness: could not remove: " + "; ".join(left), file=sys.stderr)


@pytest.fixture(scope="session")
def fleet_session(fleet_factory: Callable[..., Fleet], pytestconfig: pytest.Config) -> Fleet:
    """The session's fleet: --fleet-servers hosts in sglang_servers, --fleet-routers in
    sglang_routers (3 and 1 by default)."""
    fleet = fleet_factory(servers=pytestconfig.getoption("--fleet-servers"),
                          routers=pytestconfig.getoption("--fleet-routers"))
    with pytestconfig.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():  # type: ignore[union-attr]
        print(f"\nfleet {fleet.tag}: {fleet.subnet} via {fleet.bridge} ({fleet.gateway}); "
              + ", ".join(f"{h.name}={h.address}" for h in fleet.hosts.values())
              + f"; built in {fleet.setup_seconds:.1f} s; inventory {fleet.inventory}")
    return fleet


@pytest.fixture
def fleet(fleet_session: Fleet) -> Iterator[Fleet]:
    """The session's fleet for one scenario, reset afterwards (links up, sshd's running, every
    other process in the hosts killed, their base dirs removed), pass or fail."""
    yield fleet_session
    fleet_session.reset()
