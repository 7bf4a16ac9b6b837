# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""HiCache's storage tier (L3, ``--hicache-storage-backend``): the folder of each instance's pages
and the bytes they may take, sized from the facts of the file system they live on (host_facts'
``storage_paths`` -> ``filesystems``) as the host tier is sized from the memory facts, and the
flags and variables the pinned release reads for it.

    usable = free + what the tier already holds there - what staging still writes there - reserve
    budget = usable x fraction           (or size_gb x instances, refused when it is over usable)
    each instance: budget / instances;   each storage-owning rank's cap: that / its TP ranks

SGLang 0.5.17's file backend caps each storage-owning rank on its own (every TP rank of a model
without MLA writes files of its own; rank 0 alone for an MLA model), evicts the least recently
used pages down to the cap, and keeps ``min_free_space`` free on the file system: the plan gives
it the reserve, so the file system keeps it at run time too. 0.5.10's file backend has no cap at
all (its folder grows until the disk is full): refused.

The ``mooncake`` backend keeps pages in a store of host RAM that its clients lend it: each
instance mounts a global segment of ``segment_gib`` (split over its TP ranks by the release) into
a store a ``mooncake_master`` keeps the index of, so a page one instance wrote is a hit for every
other instance of the store. That RAM is host memory like the host tier's pinned pools: the
host tier is sized from what is left after the segments (``lent_bytes``, _plan/hicache.py), never
from the same bytes. The master is this host's own (a service the server role runs, empty
``master``) or another host's (``master: ADDRESS:PORT``).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server.layout import is_loopback
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import (
    GB,
    GIB,
    PlanError,
    flag_values,
    gb,
    option_dict,
)

MIN_INSTANCE_BYTES = GB  # less than this per instance caches too few pages to be worth the writes
MIN_SEGMENT_GIB = 1  # a mooncake segment smaller than this holds too few pages to share
# The readiness prime of an instance with a tier (wait_ready's `prime`): SGLang 0.5.17 compiles the
# tier's page-hash extension (hash_binding.cpp, torch's cpp_extension) at the first prefill whose
# pages reach the tier, not at start-up: a prompt of many full pages (the file backend's pages are
# 64 tokens; the prefetch threshold 256) makes it happen while the instance is not yet ready.
PRIME_WORDS = 1024
PRIME_TIMEOUT_S = 900  # the compile on a busy host, then the prefill
BACKENDS = ("file", "mooncake")
DEFAULT_FOLDER = "hicache-storage"  # under sglang_base_dir, when no path is given
# what the plan (and deployment.json) keeps of the file system's facts
FILESYSTEM_KEYS = ("mount_point", "fstype", "source", "network", "rotational", "total_bytes", "free_bytes",
                   "used_bytes")


@dataclass(frozen=True)
class StorageOption:
    """A key of ``sglang_hicache_storage``: its default, what it means and the backends it applies
    to (docs/planning.md's table of the keys is written from these: ``make generated``)."""
    default: Any
    meaning: str
    backends: tuple[str, ...] = BACKENDS


# ``sglang_hicache_storage``: {} (the default) leaves the tier off; a dict with `backend` turns it on,
# every other key optional. Adding a key is a row here and the code that reads it.
OPTIONS: dict[str, StorageOption] = {
    "backend": StorageOption("", "the storage backend: `file` (pages in a folder per instance; SGLang 0.5.17 or "
                                 "later, whose file backend can be capped), `mooncake` (pages in host RAM the "
                                 "instances lend a store shared through its master); empty: no storage tier"),
    "path": StorageOption("", "the folder that holds each instance's folder of pages (`<path>/<instance>`); "
                              f"empty: `<sglang_base_dir>/{DEFAULT_FOLDER}`. Its file system is the one sized",
                          ("file",)),
    "size_gb": StorageOption(0, "decimal GB of pages per instance; 0: sized from the file system's facts. One "
                                "that does not fit is refused with the largest that does", ("file",)),
    "fraction": StorageOption(0.5, "share of the usable space (free + the tier's own pages - what staging still "
                                   "writes there - reserve) the instances' caps add up to", ("file",)),
    "reserve_gib": StorageOption(50, "GiB kept free on the file system: left out of the sizing, and given to the "
                                     "release as its free-space floor (it evicts pages to keep it)", ("file",)),
    "prefetch_policy": StorageOption("", "`--hicache-storage-prefetch-policy` (`best_effort`, `wait_complete`, "
                                         "`timeout`); empty: the release's default. The write policy, which "
                                         "decides what reaches the tier, is the profile's `hicache.write_policy`"),
    "page_size": StorageOption(64, "`--page-size` with the tier, unless `sglang_extra_args` sets it (0: the "
                                   "release's, 1 token): the tier stores a page per file or key, and at 1 token a "
                                   "1,536-token prefix is 1,536 files to write and read (device run 10: TTFT p99 "
                                   "2.3 s and 2.4 % read from storage; at 64, run 12: 0.22 s and 9.8 %)"),
    "extra_config": StorageOption({}, "keys for `--hicache-storage-backend-extra-config` (JSON), e.g. "
                                      "`prefetch_threshold` (tokens; the release's is 256); the keys the plan "
                                      "sets (mooncake's master, segment, protocol, host, tag) are refused here"),
    "master": StorageOption("", "the store's master, `ADDRESS:PORT`, run elsewhere (another host's server role, "
                                "or by hand); empty: this host runs one for its instances (the pinned "
                                "`mooncake_master`, or the embedded engine's stand-in) on `sglang_host_address`",
                            ("mooncake",)),
    "master_port": StorageOption(50051, "the RPC port of the master this host runs (empty `master`)", ("mooncake",)),
    "metrics_port": StorageOption(9003, "the HTTP port of that master's /health and /metrics (and the "
                                        "`master_metrics_port` the instances are told)", ("mooncake",)),
    "segment_gib": StorageOption(4, "GiB of host RAM each instance lends the store (its global segment, split "
                                    "over its TP ranks by the release): taken out of the host-RAM budget before the "
                                    "host tier is sized", ("mooncake",)),
    "protocol": StorageOption("tcp", "the transfer protocol: `tcp`, or `rdma` on hosts with RDMA NICs (with "
                                     "`device_name`)", ("mooncake",)),
    "device_name": StorageOption("", "the RDMA device(s) for `rdma` (e.g. `mlx5_0`); empty: found by the transfer "
                                     "engine", ("mooncake",)),
}
PROTOCOLS = ("tcp", "rdma")
# the keys of mooncake's extra config the plan writes (SGLang 0.5.17 mooncake_store.py
# load_from_extra_config; extra_backend_tag prefixes every key, so pages of another layout never match)
MOONCAKE_KEYS = ("master_server_address", "local_hostname", "protocol", "device_name", "global_segment_size",
                 "metadata_server", "master_metrics_port", "extra_backend_tag")


# What a page's bytes depend on beyond its tokens (its file name has the served model name and the
# TP rank and size already): the release (0.5.17 changed the host layout's default, and pages are
# raw bytes without a header), the weights, and the flags that shape a KV page. Pages written
# under another of these are never reused: the launch script removes them before the server starts.
LAYOUT_FLAGS = ("--model-path", "--revision", "--served-model-name", "--tp-size", "--pp-size", "--dtype",
                "--kv-cache-dtype", "--quantization", "--page-size", "--hicache-mem-layout",
                "--speculative-algorithm", "--speculative-draft-model-path")
LAYOUT_STAMP = ".llmops-layout"  # in each instance's folder: the digest of the layout its pages have


def page_layout(argv: Sequence[str], release: str) -> dict[str, Any]:
    """An instance's page layout ({release, flag: value}, the flags of LAYOUT_FLAGS it sets) and its
    digest, which the launch script compares with the folder's stamp."""
    given = flag_values(argv)
    layout: dict[str, Any] = {"release": release}
    layout.update({flag: True if value is None else value for flag, value in given.items() if flag in LAYOUT_FLAGS})
    digest = hashlib.sha256(json.dumps(layout, sort_keys=True).encode()).hexdigest()[:16]
    return {"of": layout, "digest": digest}


# Flags the plan renders while the tier is on (sglang_extra_args may not set them then), and what
# sets each one
OWNED_FLAGS: dict[str, str] = {
    "--hicache-storage-backend": "sglang_hicache_storage.backend",
    "--hicache-storage-backend-extra-config": "sglang_hicache_storage.extra_config (and, for mooncake, its other keys)",
    "--hicache-storage-prefetch-policy": "sglang_hicache_storage.prefetch_policy (empty: the release's default)",
}


@dataclass(frozen=True)
class StorageRequest:
    """The storage tier the user asked for (the role's ``sglang_hicache_storage``, checked by
    ``storage_request``); every default is OPTIONS'."""

    backend: str  # one of BACKENDS
    root: str  # file: the folder that holds one folder of pages per instance; mooncake: ""
    size_gb: float = OPTIONS["size_gb"].default  # decimal GB per instance; 0: sized from the file system
    fraction: float = OPTIONS["fraction"].default  # of the usable space
    reserve_gib: float = OPTIONS["reserve_gib"].default  # kept free (also the release's free-space floor)
    prefetch_policy: str = OPTIONS["prefetch_policy"].default  # --hicache-storage-prefetch-policy
    master: str = OPTIONS["master"].default  # mooncake: ADDRESS:PORT, or "" (this host runs one)
    master_port: int = OPTIONS["master_port"].default
    metrics_port: int = OPTIONS["metrics_port"].default
    segment_gib: float = OPTIONS["segment_gib"].default
    protocol: str = OPTIONS["protocol"].default
    device_name: str = OPTIONS["device_name"].default
    extra_config: tuple[tuple[str, Any], ...] = ()  # OPTIONS["extra_config"], as sorted pairs (hashable)
    page_size: int = OPTIONS["page_size"].default  # --page-size unless extra_args sets it; 0: the release's

    @property
    def lent_bytes_per_instance(self) -> int:
        """Host RAM each instance lends the store (mooncake's global segment); 0 for the file tier."""
        return int(round(self.segment_gib * GIB)) if self.backend == "mooncake" else 0


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PlanError(f"sglang_hicache_storage.{key}={value!r}: must be a number (default "
                        f"{OPTIONS[key].default!r})")
    try:
        return float(value)
    except ValueError:
        raise PlanError(f"sglang_hicache_storage.{key}={value!r}: must be a number (default "
                        f"{OPTIONS[key].default!r})") from None


def _port(key: str, value: Any) -> int:
    number = _number(key, value)
    if number != int(number) or not 1 <= number <= 65535:
        raise PlanError(f"sglang_hicache_storage.{key}={value!r}: must be a TCP port, 1-65535 (default "
                        f"{OPTIONS[key].default!r})")
    return int(number)


def _master(value: str) -> str:
    """``ADDRESS:PORT`` (an IPv6 address in brackets), or "" (this host runs the master)."""
    if not value:
        return ""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise PlanError(f"sglang_hicache_storage.master={value!r}: must be ADDRESS:PORT of a mooncake_master (e.g. "
                        "10.0.0.5:50051), or empty for a master on this host")
    return value


def storage_request(value: Any, base_dir: str) -> StorageRequest | None:
    """The checked ``sglang_hicache_storage``: None where it leaves the tier off ({} or no backend);
    every key and value checked, each problem naming the key, the value and what it takes."""
    value = option_dict("sglang_hicache_storage", value, tuple(OPTIONS), "no storage tier")
    if value is None:
        return None
    backend = str(value.get("backend") or "")
    if not backend:
        return None
    if backend not in BACKENDS:
        raise PlanError(f"sglang_hicache_storage.backend={backend!r}: this collection renders {', '.join(BACKENDS)} "
                        "(empty: no storage tier)")
    foreign = sorted(str(key) for key in value if backend not in OPTIONS[str(key)].backends)
    if foreign:
        raise PlanError(f"sglang_hicache_storage: {', '.join(foreign)} do(es) not apply to backend {backend!r} "
                        f"(only to {', '.join(sorted({b for k in foreign for b in OPTIONS[k].backends}))}): "
                        "remove them")
    texts = {key: value.get(key, OPTIONS[key].default) for key in OPTIONS
             if isinstance(OPTIONS[key].default, str) and key != "backend"}
    extra = _extra_config(value.get("extra_config", OPTIONS["extra_config"].default))
    page = _number("page_size", value.get("page_size", OPTIONS["page_size"].default))
    if page != int(page) or page < 0:
        raise PlanError(f"sglang_hicache_storage.page_size={value.get('page_size')!r}: must be a whole number of "
                        f"tokens (default {OPTIONS['page_size'].default}; 0: the release's)")
    for key, text in texts.items():
        if not isinstance(text, str):
            raise PlanError(f"sglang_hicache_storage.{key}={text!r}: must be a string")
    if backend == "mooncake":
        if texts["protocol"] not in PROTOCOLS:
            raise PlanError(f"sglang_hicache_storage.protocol={texts['protocol']!r}: must be one of "
                            f"{', '.join(PROTOCOLS)} (tcp where the hosts have no RDMA NICs)")
        segment = _number("segment_gib", value.get("segment_gib", OPTIONS["segment_gib"].default))
        if segment < MIN_SEGMENT_GIB:
            raise PlanError(f"sglang_hicache_storage.segment_gib={segment:g}: each instance lends the store at least "
                            f"{MIN_SEGMENT_GIB} GiB (default {OPTIONS['segment_gib'].default})")
        return StorageRequest(
            backend=backend, root="", prefetch_policy=texts["prefetch_policy"], master=_master(texts["master"]),
            master_port=_port("master_port", value.get("master_port", OPTIONS["master_port"].default)),
            metrics_port=_port("metrics_port", value.get("metrics_port", OPTIONS["metrics_port"].default)),
            segment_gib=segment, protocol=texts["protocol"], device_name=texts["device_name"], extra_config=extra,
            page_size=int(page))
    root = texts["path"] or f"{base_dir.rstrip('/')}/{DEFAULT_FOLDER}"
    return StorageRequest(
        backend=backend, root=root,
        **{key: _number(key, value.get(key, OPTIONS[key].default)) for key in ("size_gb", "fraction", "reserve_gib")},
        prefetch_policy=texts["prefetch_policy"], extra_config=extra, page_size=int(page))


def _extra_config(value: Any) -> tuple[tuple[str, Any], ...]:
    if value in (None, ""):
        return ()
    if not isinstance(value, Mapping):
        raise PlanError(f"sglang_hicache_storage.extra_config={value!r}: must be a dict of the backend's keys "
                        "(e.g. {prefetch_threshold: 128})")
    owned = sorted(set(map(str, value)) & set(MOONCAKE_KEYS))
    if owned:
        raise PlanError(f"sglang_hicache_storage.extra_config sets {', '.join(owned)}, which the plan sets from "
                        "sglang_hicache_storage's own keys (master, segment_gib, protocol, device_name) and the "
                        "host's address: use those")
    try:
        json.dumps(dict(value))
    except (TypeError, ValueError):
        raise PlanError(f"sglang_hicache_storage.extra_config={value!r}: must be JSON (numbers, strings, lists, "
                        "dicts)") from None
    return tuple(sorted((str(k), v) for k, v in value.items()))


@dataclass(frozen=True)
class StorageInstance:
    name: str
    tp_size: int


def _filesystem(root: str, filesystems: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    for facts in filesystems:
        if facts.get("path") == root:
            return facts
    raise PlanError(f"no file system facts for the storage tier's folder {root}: gather llmops.sglang.host_facts "
                    f"with storage_paths including {root} first")


def backend_traits(release: str, traits: Mapping[str, Any], backend: str) -> Mapping[str, Any]:
    """The release's trait of a storage backend (data/releases.json ``hicache_storage``), or PlanError."""
    tiers = traits.get("hicache_storage") or {}
    found = tiers.get(backend)
    if not isinstance(found, Mapping):
        known = ", ".join(sorted(tiers)) or "none"
        raise PlanError(f"sglang_hicache_storage.backend={backend!r}: release {release} has no storage backend of "
                        f"that name that this collection renders (known: {known})")
    return found


def _file_traits(release: str, traits: Mapping[str, Any], backend: str) -> Mapping[str, Any]:
    found = backend_traits(release, traits, backend)
    if not found.get("max_size_env"):
        raise PlanError(f"sglang_hicache_storage on release {release}: its {backend} backend has no size cap (no "
                        "eviction: the folder grows until the disk is full); pin sglang_release 0.5.17 or later, "
                        "or leave the storage tier off")
    return found


def prime_request() -> dict[str, Any]:
    """wait_ready's ``prime`` for an instance with a storage tier: a greedy one-token /generate of
    PRIME_WORDS words, which the host side writes out (``_server/deploy.prime_body``: the same
    text every time, so its pages are the same pages on every deploy)."""
    return {"path": "/generate", "timeout": PRIME_TIMEOUT_S, "words": PRIME_WORDS}


def clear_path(release: str, traits: Mapping[str, Any]) -> str:
    """The release's endpoint that clears a running server's storage tier (its trait
    ``hicache_storage_clear``: path -> methods), by POST; the first one listed is the current one,
    later ones are deprecated aliases."""
    for path, methods in (traits.get("hicache_storage_clear") or {}).items():
        if "POST" in methods:
            return str(path)
    raise PlanError(f"sglang_hicache_storage on release {release}: the release has no endpoint that clears a "
                    "running server's storage tier (trait hicache_storage_clear): leave the storage tier off")


def _checked(request: StorageRequest, instances: Sequence[StorageInstance]) -> None:
    if not instances:
        raise PlanError("sglang_hicache_storage: no instance to give a storage tier to")
    if not 0 < request.fraction <= 1:
        raise PlanError(f"sglang_hicache_storage.fraction={request.fraction}: must be in (0, 1]")
    if request.reserve_gib < 0:
        raise PlanError(f"sglang_hicache_storage.reserve_gib={request.reserve_gib}: must not be negative")
    if request.size_gb < 0:
        raise PlanError(f"sglang_hicache_storage.size_gb={request.size_gb}: must not be negative (0: sized from "
                        "the file system)")
    if request.backend == "file" and not request.root.startswith("/"):
        raise PlanError(f"sglang_hicache_storage.path={request.root!r}: must be an absolute folder")


def _per_instance(request: StorageRequest, usable: int, count: int, where: str,
                  keep: int | None = None) -> tuple[int, str]:
    """Each instance's bytes and how they were chosen, or PlanError naming the numbers and the fix.
    ``keep``: the bytes the running instances were started with, kept while they still fit the
    usable space (the fraction is the target for new sizes, not a reason to restart servers: free
    space moves between runs as logs and pages are written)."""
    if request.size_gb:
        each = int(request.size_gb * GB)
        if each * count > usable:
            largest = usable // count // GB if usable > 0 else 0
            raise PlanError(
                f"sglang_hicache_storage.size_gb={request.size_gb:g} does not fit {where}: {count} instance(s) x "
                f"{gb(each)} = {gb(each * count)} > {gb(max(usable, 0))} usable; the largest that fits is "
                f"{largest} GB (or 0, to size it from the file system)")
        return each, f"explicit size {request.size_gb:g} GB per instance"
    if keep and keep * count <= usable:
        return keep, (f"kept {gb(keep)}, what the running instances were started with: {count} x it still fits "
                      f"the {gb(usable)} usable (stop them, or set size_gb, to resize)")
    each = int(max(usable, 0) * request.fraction) // count
    return each, f"({gb(max(usable, 0))} usable) x {request.fraction:g} / {count} instance(s)"


def _kept(running: Mapping[str, Any] | None, root: str, instances: Sequence[StorageInstance]) -> int | None:
    """The per-instance bytes to keep: one size every planned instance runs with, in the same folder."""
    if not running or running.get("root") != root:
        return None
    caps = {int(running["caps"].get(i.name) or 0) for i in instances}
    if len(caps) != 1:
        return None
    (cap,) = caps
    return cap or None


def storage_plan(request: StorageRequest, *, instances: Sequence[StorageInstance],
                 filesystems: Sequence[Mapping[str, Any]], release: str, traits: Mapping[str, Any],
                 mla: bool, pending_bytes: int = 0, running: Mapping[str, Any] | None = None,
                 host_address: str = "127.0.0.1") -> dict[str, Any]:
    """The storage tier of a host's instances: each one's folder, cap and variables, the flags,
    the arithmetic (``reasoning``, for deployment.json) and warnings. ``pending_bytes``: what
    model staging still has to write on the same file system (it comes first). ``running``: the
    running instances' tier as deployment.json records it ({root, caps: {instance: bytes}}, from
    module_utils/_server/manifest.py ``running_storage``): its size is kept while it fits."""
    _checked(request, instances)
    if request.backend == "mooncake":
        return mooncake_plan(request, instances=instances, release=release, traits=traits, host_address=host_address)
    file_traits = _file_traits(release, traits, request.backend)
    facts = _filesystem(request.root, filesystems)
    where = f"{request.root} ({facts.get('fstype')} at {facts.get('mount_point')})"
    if facts.get("memory"):
        raise PlanError(f"sglang_hicache_storage.path={request.root} is on {facts.get('fstype')}, which is host "
                        "memory, already what the host tier is sized from: give a folder on a disk")
    free, held = int(facts.get("free_bytes") or 0), int(facts.get("used_bytes") or 0)
    reserve = int(round(request.reserve_gib * GIB))
    usable = free + held - int(pending_bytes) - reserve
    count = len(instances)
    each, chosen = _per_instance(request, usable, count, where, _kept(running, request.root, instances))
    if each < MIN_INSTANCE_BYTES:
        raise PlanError(
            f"sglang_hicache_storage: {where} leaves {gb(each)} per instance ({chosen}), under the "
            f"{gb(MIN_INSTANCE_BYTES)} a tier needs: free space there, lower reserve_gib "
            f"({request.reserve_gib:g} GiB), or give a path on a larger file system")
    reasoning = [
        f"file system of {request.root}: {facts.get('fstype')} at {facts.get('mount_point')}, {gb(free)} free, "
        f"{gb(held)} held by the tier already (reusable)",
        f"usable: {gb(free)} free + {gb(held)} held - {gb(pending_bytes)} still to stage there - reserve "
        f"{request.reserve_gib:g} GiB = {gb(usable)}",
        f"each instance: {chosen} = {gb(each)}",
    ]
    planned: dict[str, dict[str, Any]] = {}
    for instance in instances:
        owners = 1 if mla else instance.tp_size
        rank_cap = each // owners
        folder = f"{request.root.rstrip('/')}/{instance.name}"
        env = {str(file_traits["dir_env"]): folder, str(file_traits["max_size_env"]): str(rank_cap)}
        if file_traits.get("min_free_env"):
            env[str(file_traits["min_free_env"])] = str(reserve)
        planned[instance.name] = {"dir": folder, "cap_bytes": rank_cap * owners, "rank_cap_bytes": rank_cap,
                                  "owners": owners, "env": env}
        reasoning.append(f"{instance.name}: {owners} rank(s) owning pages "
                         f"({'MLA: rank 0 alone' if mla else f'TP {instance.tp_size}: each rank its own files'})"
                         f", each capped at {gb(rank_cap)}")
    flags = _flags(request, dict(request.extra_config))
    warnings = []
    if facts.get("network"):
        warnings.append(f"the storage tier is on a network file system ({facts.get('fstype')}): every page written "
                        "and prefetched crosses the network; each instance keeps a folder of its own")
    if facts.get("rotational"):
        warnings.append(f"the storage tier is on a spinning disk ({facts.get('source')}): prefetching pages from it "
                        "may be slower than computing them again")
    total = sum(item["cap_bytes"] for item in planned.values())
    return {
        "backend": request.backend, "root": request.root, "instances": planned, "flags": flags, "master": None,
        "lent_bytes_total": 0,
        "clear_path": clear_path(release, traits),
        "prime": prime_request(),
        "filesystem": {key: facts.get(key) for key in FILESYSTEM_KEYS},
        "usable_bytes": usable, "reserve_bytes": reserve, "cap_bytes_total": total,
        "reasoning": reasoning + [f"the tier may hold {gb(total)} on this host; {gb(max(usable - total, 0))} of the "
                                  "usable space stays free"],
        "warnings": warnings,
    }


def _flags(request: StorageRequest, extra_config: Mapping[str, Any]) -> list[str]:
    flags = ["--hicache-storage-backend", request.backend]
    if request.prefetch_policy:
        flags += ["--hicache-storage-prefetch-policy", request.prefetch_policy]
    if extra_config:
        flags += ["--hicache-storage-backend-extra-config", json.dumps(dict(extra_config), sort_keys=True)]
    return flags


def lent_bytes(request: StorageRequest | None, traits: Mapping[str, Any], instances: int, tp_size: int) -> int:
    """Host RAM the storage tier takes on a host of ``instances`` instances of ``tp_size`` ranks:
    mooncake's global segments (each instance's, split over its ranks) and each rank's local
    transfer buffer (trait ``local_buffer_bytes``); 0 for the file tier and without a tier."""
    if request is None or request.backend != "mooncake":
        return 0
    tier = (traits.get("hicache_storage") or {}).get("mooncake") or {}
    buffers = int(tier.get("local_buffer_bytes") or 0) * max(int(tp_size), 1)
    return instances * (request.lent_bytes_per_instance + buffers)


def mooncake_plan(request: StorageRequest, *, instances: Sequence[StorageInstance], release: str,
                  traits: Mapping[str, Any], host_address: str) -> dict[str, Any]:
    """The mooncake tier of a host's instances: the master they share (this host's own, or the one
    ``master`` names), each one's extra config (its segment, this host's address for the store to
    reach it; the layout's tag is added per instance by the instance plan), the flags and the
    arithmetic. The RAM lent is taken out of the host tier's budget by _plan/settings.py."""
    tier = backend_traits(release, traits, "mooncake")
    local = not request.master
    master = request.master or f"{host_address}:{request.master_port}"
    master_host = master.rpartition(":")[0]
    if not local and is_loopback(host_address) and not is_loopback(master_host):
        raise PlanError(f"sglang_hicache_storage.master={master!r} is on another host, which reaches this host's "
                        f"segment at local_hostname {host_address!r}, a loopback address: set sglang_host_address to "
                        "an address the master's host reaches, or run the master here (empty master)")
    lent = request.lent_bytes_per_instance
    buffer = int(tier.get("local_buffer_bytes") or 0)
    base = {"master_server_address": master, "local_hostname": host_address, "protocol": request.protocol,
            "device_name": request.device_name, "global_segment_size": lent,
            "metadata_server": str(tier.get("metadata_server") or "P2PHANDSHAKE"),
            "master_metrics_port": request.metrics_port, **dict(request.extra_config)}
    planned: dict[str, dict[str, Any]] = {}
    reasoning = [f"store: mooncake, master {master} ({'run on this host' if local else 'run elsewhere'}), "
                 f"protocol {request.protocol}; pages of one layout are shared by every instance of the store"]
    for instance in instances:
        ranks = max(int(instance.tp_size), 1)
        planned[instance.name] = {"env": {}, "extra_config": dict(base), "segment_bytes": lent,
                                  "rank_segment_bytes": lent // ranks, "owners": ranks,
                                  "lent_bytes": lent + buffer * ranks}
        reasoning.append(f"{instance.name}: lends {request.segment_gib:g} GiB = {gb(lent)} of host RAM "
                         f"({gb(lent // ranks)} per TP rank, the release splits it) + {ranks} x "
                         f"{buffer // 2**20} MiB transfer buffer")
    total = sum(item["lent_bytes"] for item in planned.values())
    reasoning.append(f"the host lends the store {gb(total)}, taken out of the host tier's memory budget")
    warnings = []
    if request.protocol == "tcp" and request.device_name:
        warnings.append(f"sglang_hicache_storage.device_name={request.device_name!r} is read only with protocol "
                        "rdma; with tcp it is ignored")
    return {
        "backend": "mooncake", "root": "", "instances": planned, "flags": _flags(request, {}),
        "clear_path": clear_path(release, traits), "prime": prime_request(),
        "master": {"address": master, "local": local, "host": master_host, "port": int(master.rpartition(":")[2]),
                   "metrics_port": request.metrics_port, "bind": host_address},
        "package": str(tier.get("package") or ""), "import": str(tier.get("import") or ""),
        "lent_bytes_total": total, "cap_bytes_total": len(planned) * lent,
        "reasoning": reasoning, "warnings": warnings,
    }


SMALL_PAGE = 16  # tokens: below this, a page per file or key costs more in operations than it saves


def page_size_flags(request: StorageRequest, argv: Sequence[str], hybrid_no_buffer: bool) -> tuple[list[str], str]:
    """``--page-size`` to add to an instance's argv for the tier (``page_size``), and a warning: none
    where sglang_extra_args sets it (the user's; warned when it is small) or page_size is 0; none for
    a hybrid model whose Mamba strategy is no_buffer, which SGLang allows only at page size 1."""
    given = flag_values(argv).get("--page-size")
    if given is not None:
        small = str(given).isdigit() and int(str(given)) < SMALL_PAGE
        return [], (f"--page-size {given} (sglang_extra_args) with the storage tier: a page per file or key, so a "
                    "long prefix is that many writes and reads (sglang_hicache_storage.page_size, default "
                    f"{OPTIONS['page_size'].default}, is what the tier was measured with)") if small else ""
    if not request.page_size or request.page_size == 1:
        return [], ""
    if hybrid_no_buffer:
        return [], ("the storage tier's page size is left at 1: this model's Mamba strategy no_buffer allows no "
                    "other (SGLang 0.5.17); choose extra_buffer for pages of "
                    f"{request.page_size} tokens")
    return ["--page-size", str(request.page_size)], ""
