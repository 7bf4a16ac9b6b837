# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The instances of one host: one SGLang server per GPU (or per group of tp_size GPUs), each
built by small functions (ports, argv, env, paths and URLs) from the checked request and the
host's settings."""
from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout
from ansible_collections.llmops.sglang.plugins.module_utils._shared.models import ModelKindError, model_kind
from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import (
    UnknownReleaseError,
    release_traits,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import (
    PlanError,
    by_arch,
    flag_values,
    host_of,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.gpus import gpu_groups
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.pd import pd_plan, pd_roles
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.profileflags import profile_argv
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.profiles import resolve_profile
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.request import PlanRequest
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.settings import HostSettings, host_settings
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import (
    LAYOUT_STAMP,
    StorageInstance,
    page_layout,
    page_size_flags,
    storage_plan,
)

SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"

Argv = list[tuple[str, list[str]]]


@dataclass
class Instance:
    """One SGLang server of the plan (``to_dict`` is what the filter returns)."""

    name: str
    index: int
    gpu_ids: list[int]
    gpu_names: list[str]
    gpu_uuids: list[str]
    cuda_visible_devices: str
    port: int
    nccl_port: int
    connect_url: str
    advertise_url: str | None
    paths: dict[str, str]
    unit: str
    service: str
    tp_size: int
    node_rank: int  # its place in a multi-node TP group (0 when the group is this host alone)
    nnodes: int
    rank0: bool  # serves the API: readiness is gated on it, only it registers with a router
    argv: list[str]
    env: dict[str, str]
    secrets: dict[str, str]  # keys of the instance's --config file -> the variable that holds each
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# argv helpers


def set_flag(argv: Argv, flag: str, values: list[str] | None) -> None:
    """Replace a flag's values in place (or append it); None removes it."""
    for position, (name, _) in enumerate(argv):
        if name == flag:
            if values is None:
                del argv[position]
            else:
                argv[position] = (flag, values)
            return
    if values is not None:
        argv.append((flag, values))


def get_flag(argv: Argv, flag: str) -> list[str] | None:
    return next((values for name, values in argv if name == flag), None)


def flatten(argv: Argv) -> list[str]:
    flat: list[str] = []
    for flag, values in argv:
        flat.append(flag)
        flat.extend(values)
    return flat


# --------------------------------------------------------------------------------------------
# builders


def ports(req: PlanRequest, count: int) -> list[tuple[int, int]]:
    """(HTTP, NCCL) port of each instance: base + i and nccl base + i, valid and disjoint."""
    http = [req.base_port + i for i in range(count)]
    nccl = [req.nccl_base + i for i in range(count)]
    if min(http + nccl) < 1 or max(http + nccl) > 65535:
        raise PlanError(f"ports out of range: HTTP {http[0]}..{http[-1]}, NCCL {nccl[0]}..{nccl[-1]} "
                        "(sglang_base_port, sglang_nccl_port_base)")
    if set(http) & set(nccl):
        raise PlanError(f"NCCL ports {nccl[0]}..{nccl[-1]} overlap HTTP ports {http[0]}..{http[-1]}: choose "
                        "another sglang_nccl_port_base")
    return list(zip(http, nccl, strict=True))


def base_argv(req: PlanRequest, prof: Mapping[str, Any], st: HostSettings, port: int, nccl_port: int) -> Argv:
    """The flags the plan renders before the user's extra_args: where the server runs, then the
    profile's (``profileflags.PROFILE_FLAGS``)."""
    argv: Argv = [("--model-path", [req.model_path])]
    if req.served_model_name:
        argv.append(("--served-model-name", [req.served_model_name]))
    argv += [("--host", [req.host_address]), ("--port", [str(port)]), ("--nccl-port", [str(nccl_port)])]
    if req.tp_size > 1:
        argv.append(("--tp-size", [str(req.tp_size)]))
    if req.nnodes > 1:  # one TP group over several hosts: they meet at rank 0's address
        argv += [("--nnodes", [str(req.nnodes)]), ("--node-rank", [str(req.node_rank)]),
                 ("--dist-init-addr", [str(req.dist_init_addr)])]
    return argv + profile_argv(prof, st, req)


def apply_extra_args(argv: Argv, st: HostSettings, warnings: list[str], first: bool) -> None:
    """The user's extra_args over the plan's flags, then the CUDA-graph maximum kept at or above
    the final max running requests (unless the user set it: then a warning)."""
    for flag, values in st.extra_args:
        set_flag(argv, flag, values)
    user_cuda_graph = any(f == st.cuda_graph_flag and v is not None for f, v in st.extra_args)
    final_mrr = get_flag(argv, "--max-running-requests")
    final_cg = get_flag(argv, st.cuda_graph_flag)
    if not (final_mrr and final_mrr[0].isdigit()):
        return
    too_small = not final_cg or not final_cg[0].isdigit() or int(final_cg[0]) < int(final_mrr[0])
    if not user_cuda_graph and too_small:
        set_flag(argv, st.cuda_graph_flag, [final_mrr[0]])
    elif user_cuda_graph and final_cg and final_cg[0].isdigit() and int(final_cg[0]) < int(final_mrr[0]) and first:
        warnings.append(f"extra_args set {st.cuda_graph_flag} {final_cg[0]} below --max-running-requests "
                        f"{final_mrr[0]}: larger batches run without CUDA graphs (much slower)")


def environment(gpu_ids: list[int], argv: Argv, st: HostSettings, traits: Mapping[str, Any]) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES in nvidia-smi's order, and SGLANG_ENABLE_SPEC_V2 where the release needs it."""
    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpu_ids)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if (traits.get("spec_v2_env") == "required_for_hybrid_extra_buffer" and st.hybrid and st.spec
            and get_flag(argv, st.mamba_flag) == ["extra_buffer"]):
        env[SPEC_V2_ENV] = "1"
    return env


def effective_settings(argv: Argv, st: HostSettings) -> dict[str, Any]:
    mrr = get_flag(argv, "--max-running-requests")
    cg = get_flag(argv, st.cuda_graph_flag)
    strategy = get_flag(argv, st.mamba_flag)
    return {
        "max_running_requests": int(mrr[0]) if mrr and mrr[0].isdigit() else None,
        "cuda_graph_flag": st.cuda_graph_flag,
        "cuda_graph_max_bs": int(cg[0]) if cg and cg[0].isdigit() else None,
        "mamba_strategy_flag": st.mamba_flag if st.hybrid else None,
        "mamba_strategy": strategy[0] if strategy else None,
        "speculative": copy.deepcopy(st.spec),
        "hicache_size_gb": st.hicache["size_gb"] if st.hicache else None,
        "pinned_host_bytes": st.hicache["pinned_per_instance_bytes"] if st.hicache else 0,
    }


def instance_name(gpu_ids: Sequence[int]) -> str:
    """An instance is named after its GPUs: gpu0, gpu2-3."""
    return "gpu" + "-".join(map(str, gpu_ids))


def build_instance(req: PlanRequest, prof: Mapping[str, Any], st: HostSettings, traits: Mapping[str, Any],
                   index: int, group: list[dict[str, Any]], port: int, nccl_port: int,
                   warnings: list[str]) -> Instance:
    gpu_ids = [int(gpu["index"]) for gpu in group]
    name = instance_name(gpu_ids)
    paths = _layout.instance_paths(req.base_dir, name)
    argv = base_argv(req, prof, st, port, nccl_port)
    apply_extra_args(argv, st, warnings, first=index == 0)
    if req.api_key_env:  # the key reaches SGLang through its --config file (0600), never argv
        argv.append(("--config", [paths["secrets_file"]]))
    env = environment(gpu_ids, argv, st, traits)
    return Instance(
        name=name,
        index=index,
        gpu_ids=gpu_ids,
        gpu_names=[str(gpu.get("name") or "") for gpu in group],
        gpu_uuids=[str(gpu.get("uuid") or "") for gpu in group],
        cuda_visible_devices=env["CUDA_VISIBLE_DEVICES"],
        port=port,
        nccl_port=nccl_port,
        connect_url=_layout.connect_url(req.host_address, port),
        advertise_url=_layout.advertise_url(req.host_address, port, req.advertise_address),
        paths=paths,
        unit=_layout.unit_name(name),
        service=_layout.service_name(name),
        tp_size=req.tp_size,
        node_rank=req.node_rank,
        nnodes=req.nnodes,
        rank0=req.node_rank == 0,
        argv=flatten(argv),
        env=env,
        secrets={"api-key": "sglang_api_key"} if req.api_key_env else {},
        settings=effective_settings(argv, st),
    )


# --------------------------------------------------------------------------------------------
# the plan


def plan_host(facts: Mapping[str, Any], req: PlanRequest) -> dict[str, Any]:
    """The instances to run on one host for a checked request (see ``instance_plan``)."""
    host = host_of(facts)
    try:
        traits = release_traits(req.release)
    except UnknownReleaseError as exc:
        raise PlanError(f"sglang_version={req.release!r}: {exc}") from None
    try:
        model = model_kind(req.model_config, req.model_arch)
    except ModelKindError as exc:
        if req.model_config is None and req.model_arch is None:
            raise PlanError(f"sglang_model_path={req.model_path!r}: no config.json could be read there on the host "
                            "(is the path right?): give the model's folder, or declare sglang_model_arch: hybrid "
                            "or dense") from None
        raise PlanError(str(exc)) from None
    prof = resolve_profile(req.profile, req.user_profiles)
    warnings: list[str] = []
    if req.model_config and req.model_arch and req.model_arch != model["arch"]:
        warnings.append(f"model_arch {req.model_arch!r} disagrees with config.json ({model['arch']}): using the config")
    groups = gpu_groups(host, req.gpus, req.gpus_per_node, req.force_busy, warnings)
    if req.nnodes > 1 and len(groups) != 1:
        raise PlanError(f"a host of a {req.nnodes}-node TP group runs one instance on its share of "
                        f"sglang_tp_size={req.tp_size} ({req.gpus_per_node} GPU(s)), but this host plans "
                        f"{len(groups)}: set sglang_gpus to {req.gpus_per_node} GPU(s)")
    port_pairs = ports(req, len(groups))
    roles = pd_roles(req.pd, [instance_name([int(g["index"]) for g in group]) for group in groups])
    cached = [role != "decode" for role in roles]  # HiCache's instances: a decode has none (pd_decode_settings)
    st = host_settings(req, host, prof, traits, model, sum(cached), warnings)
    asked = bool(by_arch((prof.get("hicache") or {}).get("enabled"), str(model["arch"])))  # the profile's HiCache
    decode_st = pd_decode_settings(st, roles, asked, warnings)
    instances = [build_instance(req, prof, st if cached[index] else decode_st, traits, index, group,
                                *port_pairs[index], warnings).to_dict()
                 for index, group in enumerate(groups)]
    storage = storage_tier(req, host, st, traits, [i for i, c in zip(instances, cached, strict=True) if c],
                           bool(model.get("mla")))
    if storage:
        warnings.extend(storage["warnings"])
    pd = pd_tier(req, traits, instances)
    return {
        "release": req.release,
        "profile": req.profile,
        "profile_settings": {key: value for key, value in prof.items() if key != "name"},
        "model": {"path": req.model_path, **model, "draft_model_path": req.draft_model_path},
        "host_address": req.host_address,
        "base_dir": req.base_dir,
        "manifest_path": _layout.manifest_path(req.base_dir),
        "engine_root": _layout.engine_root(req.base_dir),
        "traits": traits,
        "instances": instances,
        "hicache": st.hicache,
        "hicache_storage": storage,
        "hicache_storage_clear": storage_clear(storage, instances),
        "pd": pd,
        "warnings": warnings,
    }


def pd_decode_settings(st: HostSettings, roles: Sequence[str], asked: bool, warnings: list[str]) -> HostSettings:
    """A decode instance's settings: without HiCache. SGLang 0.5.17 runs a decode's KV as a chunk
    cache (``--disable-radix-cache``, forced by its PD hook), and HiCache with it is refused at start
    ("enable-hierarchical-cache and disable-radix-cache are mutually exclusive"); what is computed
    once and kept is the prompts' KV, on the prefill side. So the host tier (and the storage tier
    behind it) is rendered and sized for the host's prefill instances only: they share the memory
    the plan finds (``host_settings`` counts only them). ``asked``: the profile enables HiCache."""
    if "decode" not in roles or not asked:
        return st
    prefills = sum(role != "decode" for role in roles)
    warnings.append(f"HiCache on the prefill instances only ({prefills} of {len(roles)} on this host): a decode "
                    "instance runs a chunk cache, which SGLang does not pair with HiCache")
    return replace(st, hicache_flags={}, hicache=None)


def storage_tier(req: PlanRequest, host: Mapping[str, Any], st: HostSettings, traits: dict[str, Any],
                 instances: list[dict[str, Any]], mla: bool) -> dict[str, Any] | None:
    """HiCache's storage tier (sglang_hicache_storage, _plan/storage.py) of the host's instances, its
    flags and variables added to each one's argv and environment; None without one."""
    if req.hicache_storage is None or (not instances and req.pd is not None):  # a decode host: none (pd_decode_settings)
        return None
    if not st.hicache_flags.get("enabled"):
        raise PlanError(f"sglang_hicache_storage needs HiCache's host tier, which profile {req.profile!r} does not "
                        "enable: choose a profile with hicache (hicache, mtp_hicache), or set "
                        "sglang_hicache_storage: {}")
    storage = storage_plan(
        req.hicache_storage, filesystems=host.get("filesystems") or [], release=req.release, traits=traits,
        instances=[StorageInstance(str(i["name"]), int(i["tp_size"]) // max(int(i.get("nnodes") or 1), 1))
                   for i in instances],
        mla=mla, running=host.get("hicache_storage_running"), host_address=req.host_address)
    for inst in instances:
        tier = storage["instances"][inst["name"]]
        given = flag_values(inst["argv"])
        extra, warning = page_size_flags(req.hicache_storage, inst["argv"],
                                         given.get("--mamba-radix-cache-strategy") == "no_buffer"
                                         or given.get("--mamba-scheduler-strategy") == "no_buffer")
        inst["argv"] = [*inst["argv"], *extra]
        if warning and warning not in storage["warnings"]:
            storage["warnings"].append(warning)
        layout = page_layout(inst["argv"], req.release)
        inst["argv"] = [*inst["argv"], *storage["flags"]]
        inst["env"] = {**inst["env"], **tier["env"]}
        if "extra_config" in tier:  # mooncake: keys tagged by the layout, so pages of another never match
            tier["extra_config"]["extra_backend_tag"] = f"llmops-{layout['digest']}"
            inst["argv"] += ["--hicache-storage-backend-extra-config", json.dumps(tier["extra_config"], sort_keys=True)]
            inst["storage_layout"] = tier["layout"] = layout
            continue
        inst["storage_dir"] = tier["dir"]
        # pages of another layout are removed by the launch script (LAYOUT_FLAGS); deployment.json keeps it
        layout = {**layout, "stamp": f"{inst['storage_dir']}/{LAYOUT_STAMP}"}
        inst["storage_layout"] = tier["layout"] = layout
    return storage


def pd_tier(req: PlanRequest, traits: dict[str, Any], instances: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Prefill/decode disaggregation (sglang_pd, _plan/pd.py): each instance's role, bootstrap port
    and flags, added to its argv; None for a unified deployment."""
    if req.pd is None:
        for inst in instances:
            inst["pd_role"], inst["bootstrap_port"] = None, None
        return None
    pd = pd_plan(req.pd, instances=instances, release=req.release, traits=traits)
    for inst in instances:
        mine = pd["instances"][inst["name"]]
        inst["argv"] = [*inst["argv"], *mine["flags"]]
        inst["pd_role"], inst["bootstrap_port"] = mine["role"], mine["bootstrap_port"]
    return pd


def storage_clear(storage: Mapping[str, Any] | None, instances: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Where sglang_hicache_storage_clear clears each running tier: every rank 0's (it serves the
    API) URL of the release's endpoint; none without a tier."""
    if not storage:
        return []
    return [{"name": str(inst["name"]), "url": f"{inst['connect_url']}{storage['clear_path']}"}
            for inst in instances if inst.get("rank0", True) and inst["name"] in storage["instances"]]


def instance_plan(facts: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The instances to run on one host: one per GPU (or per group of tp_size GPUs).

    ``kwargs`` are the filter's parameters (``PlanRequest.from_kwargs`` checks them all at once).
    Returns {release, profile, profile_settings, model, host_address, base_dir, manifest_path,
    engine_root, traits, instances, hicache, warnings}; each instance is an ``Instance``
    (name, index, gpu_ids, gpu_names, gpu_uuids, cuda_visible_devices, port, nccl_port,
    connect_url, advertise_url, paths, unit, service, tp_size, argv starting with --model-path,
    env, secrets, settings). The argv is not validated here: see ``validate_plan``.
    """
    return plan_host(facts, PlanRequest.from_kwargs(**kwargs))
