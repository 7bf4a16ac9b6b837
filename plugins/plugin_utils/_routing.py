# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Which worker URLs a router registers (controller side: the action ``router_workers`` resolves
its ``deployment_hosts`` and ``deployments`` with it). Pure functions over the server hosts' deployment manifests;
the URL form is module_utils/_router/workers.py's (``normalize_url``)."""
from __future__ import annotations

import urllib.parse
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._router.workers import RouterError, normalize_url
from ansible_collections.llmops.sglang.plugins.module_utils._server.layout import is_loopback


def node_rank(instance: dict[str, Any]) -> int:
    """An instance's node rank: its ``node_rank`` field (the manifest's, with ``rank0``), else
    ``--node-rank`` in its argv, else 0.
    Only rank 0 of a multi-node server serves the API; ranks above 0 answer 200 to every
    health probe whatever their state, so a router must never get them."""
    if instance.get("node_rank") is not None:
        return int(instance["node_rank"])
    argv = [str(a) for a in instance.get("argv") or []]
    for i, word in enumerate(argv):
        if word == "--node-rank" and i + 1 < len(argv):
            return int(argv[i + 1])
        if word.startswith("--node-rank="):
            return int(word.split("=", 1)[1])
    return 0


NOT_READ = object()


def worker_url(inst: dict[str, Any], host: str, router_host: str) -> str | None:
    """The URL a router on inventory host ``router_host`` reaches an instance of ``host`` at: its
    ``connect_url`` on the router's own host (loopback for a wildcard or loopback bind), else its
    ``advertise_url``; normalized. None when the instance has no such URL."""
    url = inst.get("connect_url") if host == router_host else inst.get("advertise_url")
    return normalize_url(str(url)) if url else None


def worker_urls(deployments: dict[str, Any], router_host: str) -> list[str]:
    """The worker URLs a router on inventory host ``router_host`` registers: every rank-0
    instance of every server host's deployment (host -> manifest, None for a host with no
    deployment, ``NOT_READ`` for one whose deployment was not read). An instance on the
    router's own host is reached at its ``connect_url`` (loopback for a wildcard or loopback
    bind), one on another host at its ``advertise_url``. Raises RouterError naming every host
    and instance that cannot be registered, so that a partial list never replaces a router's
    workers."""
    urls: list[str] = []
    problems: list[str] = []
    for host, manifest in deployments.items():
        if manifest is NOT_READ:
            problems.append(f"the deployment of {host} was not read (the host was left out of the play, "
                            "by --limit or because it failed)")
            continue
        for inst in (manifest or {}).get("instances") or []:
            # ranks above 0 serve no API; a live instance its manifest does not list (left by an
            # interrupted deploy) was never checked ready: neither goes to a router
            if inst.get("rank0") is False or node_rank(inst) > 0 or inst.get("in_manifest") is False:
                continue
            same = host == router_host
            url = worker_url(inst, host, router_host)
            if not url:
                problems.append(f"instance {inst.get('name')} of {host} has no {'connect_url' if same else 'advertise_url'}"
                                + ("" if same else f": it listens on loopback only, which the router on {router_host} "
                                   "cannot reach; bind the servers to an address other hosts reach "
                                   "(sglang_host_address)"))
                continue
            urls.append(url)
    if problems:
        raise RouterError(f"cannot list the workers of the router on {router_host}: " + "; ".join(problems))
    return list(dict.fromkeys(urls))


def worker_types(deployments: dict[str, Any], router_host: str) -> dict[str, dict[str, Any]]:
    """The prefill/decode side of each PD worker a router on ``router_host`` registers (URL ->
    ``{worker_type, bootstrap_port}``, from each instance's ``pd_role`` and ``bootstrap_port`` in its
    deployment.json); empty for a unified deployment."""
    out: dict[str, dict[str, Any]] = {}
    hosts: dict[str, set[str]] = {"prefill": set(), "decode": set()}
    loopback_prefills: list[str] = []
    for host, manifest in deployments.items():
        if manifest is NOT_READ:
            continue
        for inst in (manifest or {}).get("instances") or []:
            role = inst.get("pd_role")
            url = worker_url(inst, host, router_host) if role else None
            if url and inst.get("rank0") is not False and node_rank(inst) == 0:
                out[url] = {"worker_type": str(role), "bootstrap_port": inst.get("bootstrap_port")}
                hosts[str(role)].add(host)
                if role == "prefill" and is_loopback(urllib.parse.urlsplit(url).hostname or ""):
                    loopback_prefills.append(f"{inst.get('name')} of {host}")
    # the router gives a decode the prefill URL's host as bootstrap_host: a decode on another host
    # than a prefill registered at loopback would ask its own loopback
    if loopback_prefills and hosts["decode"] - hosts["prefill"]:
        raise RouterError(f"prefill instance(s) {', '.join(loopback_prefills)} are registered at a loopback URL, which "
                          f"the decode instances of {', '.join(sorted(hosts['decode'] - hosts['prefill']))} cannot "
                          "reach for their KV (the router sends that host as bootstrap_host): bind the prefill hosts "
                          "to an address the decode hosts reach (sglang_host_address), or run the router elsewhere")
    return out
