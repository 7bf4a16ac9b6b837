# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The one owner of a deployment's layout on a host, and of how clients reach an instance.

A deployment lives under one base folder (``sglang_base_dir``)::

    <base>/deployment.json          the manifest (written by the server role)
    <base>/engine/                  the embedded engine's code (engine "sim" only)
    <base>/<instance>/launch.sh     the instance's launch script
    <base>/<instance>/env           its environment (mode 0600: HF_TOKEN and the like)
    <base>/<instance>/secrets.yaml  SGLang's --config file with its API key (mode 0600; never argv)
    <base>/<instance>/server.pid    its pid file (process backend)
    <base>/<instance>/server.log    its log

Instance ``gpu0`` runs as the systemd unit ``sglang@gpu0.service`` or as the detached service
``sglang-gpu0`` (whose marker variable its processes carry). Every task, filter and module
takes these names and paths from here (through the plan, the manifest or ``discover``), so
they are spelled once.

A router (the role ``llmops.sglang.router``) lives in one folder under its own base folder
(``sglang_router_base_dir``; it may be the servers' base folder too: ``router`` is never an
instance name)::

    <router base>/router/launch.sh  the router's launch script
    <router base>/router/env        its environment (mode 0600: the API key lives only here)
    <router base>/router/router.pid its pid file (process backend)
    <router base>/router/router.log its log

It runs as the systemd unit ``sglang-router.service`` or as the detached service
``sglang-router``.

Stdlib only, Python >= 3.10: modules ship this file to hosts.
"""
from __future__ import annotations

import ipaddress
import os
import re

MANIFEST_FILE = "deployment.json"
ENGINE_DIR = "engine"
LAUNCH_SCRIPT = "launch.sh"
ENV_FILE = "env"
SECRETS_FILE = "secrets.yaml"  # SGLang's --config file: must end in .yaml or .yml
PID_FILE = "server.pid"
LOG_FILE = "server.log"
UNIT_TEMPLATE = "sglang@.service"
UNIT_PREFIX = "sglang@"
SERVICE_PREFIX = "sglang-"
ROUTER_DIR = "router"
ROUTER_PID_FILE = "router.pid"
ROUTER_LOG_FILE = "router.log"
ROUTER_SERVICE = "sglang-router"
ROUTER_UNIT = f"{ROUTER_SERVICE}.service"
# launch_router renames its process (setproctitle) to this, and the launch script does so first
# thing: how the router is recognized among the processes of its folder
ROUTER_MATCH = "sglang::router"
# The storage tier's master (mooncake), when this host runs it for its instances: a service of
# its own beside them, never an instance
KVSTORE_DIR = "kvstore"
KVSTORE_PID_FILE = "master.pid"
KVSTORE_LOG_FILE = "master.log"
KVSTORE_SERVICE = "sglang-kvstore"
# Instance names are made by the plan ("gpu0", "gpu0-1"); anything else under the base folder
# (the engine, a user's notes) is not an instance.
INSTANCE_NAME = re.compile(r"gpu[0-9]+(?:-[0-9]+)*")
WILDCARD_BINDS = ("", "0.0.0.0", "::", "[::]")


def manifest_path(base_dir: str) -> str:
    return os.path.join(base_dir, MANIFEST_FILE)


def engine_root(base_dir: str) -> str:
    return os.path.join(base_dir, ENGINE_DIR)


def instance_dir(base_dir: str, name: str) -> str:
    return os.path.join(base_dir, name)


def instance_paths(base_dir: str, name: str) -> dict[str, str]:
    """{dir, launch_script, env_file, secrets_file, pid_file, log_file} of one instance."""
    folder = instance_dir(base_dir, name)
    return {
        "dir": folder,
        "launch_script": os.path.join(folder, LAUNCH_SCRIPT),
        "env_file": os.path.join(folder, ENV_FILE),
        "secrets_file": os.path.join(folder, SECRETS_FILE),
        "pid_file": os.path.join(folder, PID_FILE),
        "log_file": os.path.join(folder, LOG_FILE),
    }


def kvstore_paths(base_dir: str) -> dict[str, str]:
    """{dir, pid_file, log_file} of the storage tier's master under ``base_dir``."""
    folder = os.path.join(base_dir, KVSTORE_DIR)
    return {"dir": folder, "pid_file": os.path.join(folder, KVSTORE_PID_FILE),
            "log_file": os.path.join(folder, KVSTORE_LOG_FILE)}


def router_paths(base_dir: str) -> dict[str, str]:
    """{dir, launch_script, env_file, pid_file, log_file} of the router under ``base_dir``."""
    folder = os.path.join(base_dir, ROUTER_DIR)
    return {
        "dir": folder,
        "launch_script": os.path.join(folder, LAUNCH_SCRIPT),
        "env_file": os.path.join(folder, ENV_FILE),
        "pid_file": os.path.join(folder, ROUTER_PID_FILE),
        "log_file": os.path.join(folder, ROUTER_LOG_FILE),
    }


def router_layout(base_dir: str, bind: str | None, port: int,
                  host_address: str | None = None) -> dict[str, object]:
    """The router's files (``router_paths``), its service names (``unit``: the systemd unit,
    ``service``: the detached service and its marker), ``connect_url``, where a client on
    the router's own host reaches it (a wildcard bind on loopback, as for an instance), and
    ``advertise_url``, where other hosts do (``advertise_url``; None on loopback only), and
    ``match``, the router's process title (how its process is told among those of its folder)."""
    return {
        "paths": router_paths(base_dir),
        "unit": ROUTER_UNIT,
        "service": ROUTER_SERVICE,
        "match": ROUTER_MATCH,
        "connect_url": connect_url(bind, port),
        "advertise_url": advertise_url(bind, port, host_address),
    }


def unit_name(name: str) -> str:
    """The systemd unit of an instance (an instance of the template unit)."""
    return f"{UNIT_PREFIX}{name}.service"


def service_name(name: str) -> str:
    """The detached service's name (also the marker its processes carry in their environment)."""
    return f"{SERVICE_PREFIX}{name}"


def is_instance_name(name: str) -> bool:
    return bool(INSTANCE_NAME.fullmatch(name))


def discover(base_dir: str) -> list[str]:
    """Names of the instance folders under ``base_dir`` (those holding a launch script, a pid
    file or a log), sorted; [] when the folder does not exist. The fallback when the manifest
    is missing or unreadable."""
    try:
        entries = os.listdir(base_dir)
    except OSError:
        return []
    found = []
    for entry in entries:
        if not is_instance_name(entry):
            continue
        paths = instance_paths(base_dir, entry)
        if any(os.path.exists(paths[key]) for key in ("launch_script", "pid_file", "log_file")):
            found.append(entry)
    return sorted(found, key=_natural)


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", name)]


def unit_instance(cgroup_text: str) -> str | None:
    """The instance whose unit a process runs in, from ``/proc/<pid>/cgroup`` text."""
    match = re.search(r"/" + re.escape(UNIT_PREFIX) + r"([^/\s]+)\.service(?:/|$)", cgroup_text, re.M)
    return match.group(1) if match else None


# --------------------------------------------------------------------------------------------
# Addresses


def is_wildcard(bind: str | None) -> bool:
    return (bind or "") in WILDCARD_BINDS


def url_host(address: str) -> str:
    """An address as the host part of a URL (IPv6 literals in brackets)."""
    bare = address.strip("[]")
    try:
        if ipaddress.ip_address(bare).version == 6:
            return f"[{bare}]"
    except ValueError:
        pass
    return address


def connect_url(bind: str | None, port: int) -> str:
    """Where a client on the instance's own host reaches it: a wildcard bind (0.0.0.0, ::)
    is reached on loopback of the same family; a specific address on itself."""
    if is_wildcard(bind):
        host = "[::1]" if (bind or "").strip("[]") == "::" else "127.0.0.1"
    else:
        host = url_host(str(bind))
    return f"http://{host}:{int(port)}"


def advertise_url(bind: str | None, port: int, host_address: str | None) -> str | None:
    """Where clients on other hosts (a router, a controller-side sweep) reach the instance:
    the bind address itself, or for a wildcard bind the host's own address
    (``host_address``: the inventory's ``ansible_host``). None when it listens on loopback
    only: no other host can reach it."""
    if is_wildcard(bind):
        return f"http://{url_host(host_address)}:{int(port)}" if host_address else None
    if is_loopback(str(bind)):
        return None
    return f"http://{url_host(str(bind))}:{int(port)}"


def is_loopback(address: str) -> bool:
    """Whether an address (or a URL's host) is loopback: ``localhost`` or a loopback IP; a host
    name is taken as reachable from other hosts."""
    bare = address.strip("[]")
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False
