"""The integration harness's ports (tests/integration/conftest.py): each xdist worker of a run has
its own slice, within the run's share (LLMOPS_TEST_PORT_SHARE), so that integration and e2e can
run side by side (.ci/run) without handing out the same port."""
from __future__ import annotations

import pytest

from ...integration import conftest as harness


def _span(monkeypatch: pytest.MonkeyPatch, share: str, worker: str, count: int) -> tuple[int, int]:
    monkeypatch.setenv("LLMOPS_TEST_PORT_SHARE", share)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    return harness._worker_span()


def test_runs_side_by_side_and_their_workers_never_share_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = [_span(monkeypatch, share, f"gw{index}", 2) for share in ("0/2", "1/2") for index in range(2)]
    low, _ = harness._ephemeral_range()
    for index, (start, end) in enumerate(spans):
        assert 10000 <= start < end < low
        for other_start, other_end in spans[index + 1:]:
            assert end <= other_start or other_end <= start, spans


def test_without_a_share_a_run_has_every_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMOPS_TEST_PORT_SHARE", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    assert harness._worker_span() == (10000, 10000 + max(harness._ephemeral_range()[0] - 1, 10001) - 10000)


@pytest.mark.parametrize("share", ["2/2", "half", "1/0"])
def test_a_bad_share_is_refused_with_what_is_expected(monkeypatch: pytest.MonkeyPatch, share: str) -> None:
    monkeypatch.setenv("LLMOPS_TEST_PORT_SHARE", share)
    with pytest.raises(RuntimeError, match="LLMOPS_TEST_PORT_SHARE"):
        harness._share()
