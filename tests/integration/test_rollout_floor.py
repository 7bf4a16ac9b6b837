"""deploy.yml's rollout check in its gate (action router_plan, option rollout; issue 19): a
capacity floor that cannot hold is refused before anything starts, one that holds deploys, and
--check prints the rollout estimate, with the load time measured once instances have started.
localhost: two embedded-engine instances behind a real SGLang router (test_router.py's inventory)."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from .test_router import router_inventory, router_pid, stop_all

pytestmark = pytest.mark.integration


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_capacity_floor_refused_before_anything_starts_and_check_prints_the_estimate(tmp_path: Path) -> None:
    dep = router_inventory(tmp_path)
    base, router = dep.extra["sglang_base_port"], dep.extra["sglang_router_port"]
    ports = [base, base + 1, router, router + 1]
    try:
        # 1 host x 2 instances, one replaced at a time: at most 1 of 2 can be kept in the routers
        refused = dep.play("deploy.yml", sglang_rollout_min_available=2)
        assert refused.rc != 0, refused.out[-4000:]
        assert "rollout refused: sglang_rollout_min_available=2 keeps 2 of 2 instances" in refused.out, \
            refused.out[-4000:]
        assert "lower the floor to at most 1 or 50%" in refused.out
        assert not any(listening(p) for p in ports), ports
        assert router_pid(dep) is None and not (dep.base / "deployment.json").exists()
        assert not (tmp_path / "router" / "router").exists()

        check = dep.play("deploy.yml", "--check")
        assert check.rc == 0, check.out[-4000:]
        text = " ".join(check.out.split())  # the YAML callback folds long lines
        assert "rollout estimate: 1 hosts x 2 instances, 1 host(s) per batch (1 batches)" in text, check.out[-4000:]
        assert "load time L 3 min: a default (nothing measured yet" in text
        assert "capacity floor: none" in text
        assert not any(listening(p) for p in ports)

        # a floor that holds (1 of 2) deploys; then the estimate uses the measured load time
        run = dep.play("deploy.yml", sglang_rollout_min_available="50%")
        assert run.rc == 0, run.out[-4000:]
        again = dep.play("deploy.yml", "--check", sglang_rollout_min_available=1,
                         sglang_rollout_estimate={"host_fixed_s": 20})
        assert again.rc == 0, again.out[-4000:]
        text = " ".join(again.out.split())
        slowest = max(dep.manifest()["instances"], key=lambda i: i["ready_after_s"])
        assert (f"measured (the longest ready_after_s of the last deploy: localhost {slowest['name']})"
                in text), again.out[-4000:]
        assert "fixed F 20 s, step S 15 s, run P 2 min (sglang_rollout_estimate)" in text
        assert "capacity floor: sglang_rollout_min_available=1 = 1 of 2 instances, holds" in text
    finally:
        stop_all(dep)
