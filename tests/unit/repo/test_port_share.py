"""The tests' ports (tests/ports.py): each xdist worker of a run has its own slice, within the
run's share of its span (LLMOPS_TEST_PORT_SHARE for the integration harness, LLMOPS_UNIT_PORT_SHARE
for unit tests), so that the runs .ci/run puts side by side never hand out the same port, and none
is in the kernel's ephemeral range."""
from __future__ import annotations

import socket

import pytest

from ... import ports


def _span(monkeypatch: pytest.MonkeyPatch, variable: str, share: str, worker: str, count: int) -> tuple[int, int]:
    monkeypatch.setenv(variable, share)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    return ports.worker_span(variable)


def test_runs_side_by_side_and_their_workers_never_share_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = [_span(monkeypatch, ports.HARNESS, share, f"gw{index}", 3) for share in ("0/3", "1/3", "2/3")
             for index in range(3)]
    spans += [_span(monkeypatch, ports.UNIT, share, f"gw{index}", 4) for share in ("0/2", "1/2") for index in range(4)]
    low, _ = ports.ephemeral_range()
    for index, (start, end) in enumerate(spans):
        assert 2000 <= start < end < low
        for other_start, other_end in spans[index + 1:]:
            assert end <= other_start or other_end <= start, spans


def test_without_a_share_a_run_has_every_port(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (ports.HARNESS, ports.UNIT):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    assert ports.worker_span(ports.HARNESS) == (10000, max(ports.ephemeral_range()[0] - 1, 10001))
    assert ports.worker_span(ports.UNIT) == ports.UNIT_SPAN


@pytest.mark.parametrize("share", ["2/2", "half", "1/0"])
def test_a_bad_share_is_refused_with_what_is_expected(monkeypatch: pytest.MonkeyPatch, share: str) -> None:
    monkeypatch.setenv(ports.UNIT, share)
    with pytest.raises(RuntimeError, match=ports.UNIT):
        ports.share(ports.UNIT)


def test_a_unit_port_is_free_in_its_slice_and_never_handed_out_twice() -> None:
    start, end = ports.worker_span(ports.UNIT)
    given = [ports.free_port() for _ in range(20)]
    assert len(set(given)) == 20 and all(start <= port < end for port in given)
    base = ports.free_port_block(2)
    assert {base, base + 1, base + 1000, base + 1001}.isdisjoint(given)
    with socket.socket() as held:  # a port another program holds is not bindable, so never handed out
        held.bind(("127.0.0.1", given[0]))
        assert not ports.bindable(given[0]) and ports.bindable(given[1])
