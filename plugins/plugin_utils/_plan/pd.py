# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Prefill/decode disaggregation (issue 32): an instance's PD role and the flags that must agree
across the processes of a pair (docs/fleet.md "Prefill and decode").

A prefill instance computes a prompt's KV and hands it to a decode instance, which generates the
tokens; the router in PD mode sends each request to one of each with a bootstrap room, the decode
side fetches the KV from the prefill side's bootstrap server (``--disaggregation-bootstrap-port``
on the prefill's ``--host``) through the transfer backend. So per instance the plan renders
``--disaggregation-mode``, ``--disaggregation-transfer-backend`` (every instance of a deployment
the same), ``--disaggregation-bootstrap-port`` (a host's prefill instances each their own, from
``bootstrap_port`` on, in GPU order; a decode gets the first, its fallback when the router sends
none) and ``--disaggregation-ib-device`` for RDMA. What the release has comes from its trait
``pd`` (data/releases.json: its transfer backends, each one's package and import), so a release
without the flags, or a backend it does not have, is refused with the fix.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError, option_dict

ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class PdOption:
    """A key of ``sglang_pd``: its default and what it means (docs/fleet.md's table of the keys is
    written from these: ``make generated``)."""
    default: Any
    meaning: str


# ``sglang_pd``: {} (the default) is a unified deployment; ``role`` makes it a PD one. Adding a key
# is a row here and the code that reads it.
OPTIONS: dict[str, PdOption] = {
    "role": PdOption("", "`prefill` or `decode` for every instance of the host, or a list with one of them per "
                         "instance in GPU order (e.g. `[prefill, decode]` on a two-GPU host); empty: unified"),
    "transfer_backend": PdOption("mooncake_tcp", "`--disaggregation-transfer-backend`: `mooncake_tcp` (Mooncake over "
                                                 "TCP: no RDMA needed; SGLang 0.5.17 or later), `mooncake` (RDMA, "
                                                 "with `ib_device`) or `nixl`; the same on every instance"),
    "bootstrap_port": PdOption(8998, "the first prefill instance's `--disaggregation-bootstrap-port`; a host's "
                                     "other prefill instances take the next ports, in order"),
    "ib_device": PdOption("", "`--disaggregation-ib-device` (e.g. `mlx5_0`) for `mooncake` over RDMA; empty: "
                              "found by the transfer engine"),
}


@dataclass(frozen=True)
class PdRequest:
    """The checked ``sglang_pd`` (``pd_request``); every default is OPTIONS'."""

    roles: tuple[str, ...]  # one role for every instance, or one per instance
    transfer_backend: str = OPTIONS["transfer_backend"].default
    bootstrap_port: int = OPTIONS["bootstrap_port"].default
    ib_device: str = OPTIONS["ib_device"].default


def pd_request(value: Any) -> PdRequest | None:
    """The checked ``sglang_pd``: None for a unified deployment ({} or no role)."""
    value = option_dict("sglang_pd", value, tuple(OPTIONS), "a unified deployment")
    if value is None:
        return None
    role = value.get("role", OPTIONS["role"].default)
    roles = tuple(str(r) for r in role) if isinstance(role, (list, tuple)) else ((str(role),) if role else ())
    if not roles:
        return None
    bad = [r for r in roles if r not in ROLES]
    if bad:
        raise PlanError(f"sglang_pd.role={role!r}: each role is one of {', '.join(ROLES)} (empty: unified)")
    port = value.get("bootstrap_port", OPTIONS["bootstrap_port"].default)
    if isinstance(port, bool) or not str(port).isdigit() or not 1 <= int(port) <= 65535:
        raise PlanError(f"sglang_pd.bootstrap_port={port!r}: must be a TCP port, 1-65535 (default "
                        f"{OPTIONS['bootstrap_port'].default})")
    texts = {key: value.get(key, OPTIONS[key].default) for key in ("transfer_backend", "ib_device")}
    for key, text in texts.items():
        if not isinstance(text, str):
            raise PlanError(f"sglang_pd.{key}={text!r}: must be a string")
    return PdRequest(roles=roles, transfer_backend=texts["transfer_backend"] or OPTIONS["transfer_backend"].default,
                     bootstrap_port=int(port), ib_device=texts["ib_device"])


def pd_traits(request: PdRequest, release: str, traits: Mapping[str, Any]) -> Mapping[str, Any]:
    """The release's trait of the backend asked for, or PlanError naming what the release has."""
    pd = traits.get("pd") or {}
    backends = pd.get("transfer_backends") or {}
    if not backends:
        raise PlanError(f"sglang_pd on release {release}: this collection renders prefill/decode disaggregation for "
                        "SGLang 0.5.17 and later (trait pd); pin sglang_version 0.5.17, or set sglang_pd: {}")
    found = backends.get(request.transfer_backend)
    if not isinstance(found, Mapping):
        raise PlanError(f"sglang_pd.transfer_backend={request.transfer_backend!r}: release {release} has "
                        f"{', '.join(sorted(backends))}")
    if request.ib_device and not found.get("rdma"):
        raise PlanError(f"sglang_pd.ib_device={request.ib_device!r} with transfer_backend "
                        f"{request.transfer_backend!r}, which uses no RDMA device: use mooncake (RDMA), or leave "
                        "ib_device empty")
    return found


def pd_roles(request: PdRequest | None, names: Sequence[str]) -> list[str]:
    """Each instance's role in GPU order ("" for every one of a unified deployment), or PlanError
    when ``role`` is a list that is not one per instance."""
    if request is None:
        return [""] * len(names)
    if len(request.roles) not in (1, len(names)):
        raise PlanError(f"sglang_pd.role={list(request.roles)!r}: one role for every instance, or one per "
                        f"instance; this host plans {len(names)} instance(s) ({', '.join(names)})")
    return list(request.roles) * len(names) if len(request.roles) == 1 else list(request.roles)


def pd_plan(request: PdRequest, *, instances: Sequence[Mapping[str, Any]], release: str,
            traits: Mapping[str, Any]) -> dict[str, Any]:
    """Each instance's role, bootstrap port and flags, the backend's package and import (for the
    install and the pre-flight), and how many of each role the host has."""
    backend = pd_traits(request, release, traits)
    roles = pd_roles(request, [str(inst["name"]) for inst in instances])
    planned: dict[str, dict[str, Any]] = {}
    next_port = request.bootstrap_port
    for inst, role in zip(instances, roles, strict=True):
        port = next_port if role == "prefill" else request.bootstrap_port
        if role == "prefill":
            next_port += 1
        flags = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", request.transfer_backend,
                 "--disaggregation-bootstrap-port", str(port)]
        if request.ib_device:
            flags += ["--disaggregation-ib-device", request.ib_device]
        planned[str(inst["name"])] = {"role": role, "bootstrap_port": port if role == "prefill" else None,
                                      "flags": flags}
    ports = {item["bootstrap_port"] for item in planned.values() if item["bootstrap_port"]}
    taken = {int(inst["port"]) for inst in instances} | {int(inst.get("nccl_port") or 0) for inst in instances}
    clash = sorted(ports & taken)
    if clash:
        raise PlanError(f"sglang_pd.bootstrap_port={request.bootstrap_port}: bootstrap port(s) {clash} are ports the "
                        "instances serve on (sglang_base_port, sglang_nccl_port_base): choose another bootstrap_port")
    return {
        "transfer_backend": request.transfer_backend, "instances": planned,
        "counts": {role: roles.count(role) for role in ROLES},
        "package": str(backend.get("package") or ""), "import": str(backend.get("import") or ""),
    }
