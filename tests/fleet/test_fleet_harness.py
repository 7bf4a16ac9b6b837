"""The harness itself: hosts that are separate, reachable over SSH by their keys, and that a
scenario can make unreachable and bring back; a second fleet beside the first; clean-up."""
from __future__ import annotations

import ipaddress
import sys
import time
from collections.abc import Callable

from . import harness
from .harness import Fleet


def test_hosts_are_separate_and_can_be_made_unreachable(fleet: Fleet) -> None:
    names = list(fleet.hosts)
    ping = fleet.adhoc("all", "-m", "ansible.builtin.ping")
    assert ping.rc == 0 and ping.out.count("SUCCESS") == len(names), ping.out[-3000:]
    # over SSH, each its own address and interface; the host key is checked (known_hosts)
    for name in names:
        res = fleet.ssh(name, "echo $SSH_CONNECTION; ip -o -4 addr show dev eth0")
        assert res.returncode == 0, res.stderr
        assert res.stdout.split()[2] == fleet.address(name) and f"inet {fleet.address(name)}/24" in res.stdout
    # a listener on one host's loopback is that host's only; its address is reachable from others
    server = fleet.popen("server1", [sys.executable, "-m", "http.server", "--bind", "0.0.0.0", "18080"])
    deadline = time.monotonic() + 20
    while not fleet.port_open(fleet.address("server1"), 18080) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fleet.http_get("server1", "http://127.0.0.1:18080/")[0] == 200
    assert fleet.http_get("router1", f"http://{fleet.address('server1')}:18080/")[0] == 200
    assert fleet.http_get("router1", "http://127.0.0.1:18080/", timeout=3)[0] == 0
    assert fleet.processes("server1") and server.poll() is None

    fleet.stop_sshd("server1")
    down = fleet.adhoc("all", "-m", "ansible.builtin.ping")
    assert down.rc != 0 and "server1 | UNREACHABLE" in down.out and down.out.count("SUCCESS") == len(names) - 1
    fleet.start_sshd("server1")
    fleet.link_down("server2")
    cut = fleet.adhoc("server2", "-m", "ansible.builtin.ping", timeout=90)
    assert cut.rc != 0 and "server2 | UNREACHABLE" in cut.out, cut.out[-2000:]
    assert fleet.http_get("router1", f"http://{fleet.address('server1')}:18080/")[0] == 200  # the others are fine
    fleet.link_up("server2")
    back = fleet.adhoc("all", "-m", "ansible.builtin.ping")
    assert back.rc == 0 and back.out.count("SUCCESS") == len(names), back.out[-3000:]


def test_reset_left_a_fresh_fleet(fleet: Fleet) -> None:
    """After the previous test (a background server, a stopped sshd, a cut link): nothing but
    the sshd listeners in the namespaces, every host reachable."""
    assert fleet.processes() == {}
    assert all(fleet.sshd_pid(name) for name in fleet.hosts)
    assert fleet.adhoc("all", "-m", "ansible.builtin.ping").rc == 0


def test_a_second_fleet_lives_beside_the_first(fleet: Fleet, fleet_factory: Callable[..., Fleet]) -> None:
    other = fleet_factory(servers=2, routers=0, host_overrides={"server2": {"sglang_base_port": 31000}})
    assert [h.name for h in other.servers] == ["server1", "server2"] and not other.routers
    assert not ipaddress.ip_network(other.subnet).overlaps(ipaddress.ip_network(fleet.subnet))
    assert other.hosts["server2"].hostvars["sglang_base_port"] == 31000
    assert {h.ns for h in other.hosts.values()}.isdisjoint(h.ns for h in fleet.hosts.values())
    assert other.adhoc("all", "-m", "ansible.builtin.ping").rc == 0
    made = [h.ns for h in other.hosts.values()]
    assert other.close() == []
    assert not set(made) & set(harness.netns_list()) and not harness.link_exists(other.bridge)
    assert not other.state.path.exists() and fleet.state.path.exists()
    assert fleet.adhoc("all", "-m", "ansible.builtin.ping").rc == 0
