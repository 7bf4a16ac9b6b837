# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What a user asks the plan for, checked in one place.

``PlanRequest.from_kwargs`` turns its keyword arguments (role variables read through
``taskvars.REQUEST_VARIABLES``, which may arrive from YAML, JSON or ``-e`` as strings) into typed values and collects every problem
into one PlanError. Documented sentinels mean "automatic" in every form they can arrive in
(``0``, ``"0"``, ``""``, null): max_running_requests (from the profile), hicache_size_gb (from
the facts), nccl_port_base (base_port + 1000), gpus (all of them), and the empty strings of
the optional names and paths. Each problem names the role variable, its value, the rule and
the fix.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._shared.models import ARCH_KINDS
from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import DEFAULT_RELEASE
from ansible_collections.llmops.sglang.plugins.plugin_utils._declared import role_default
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError, render
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.pd import PdRequest, pd_request
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import (
    OWNED_FLAGS as STORAGE_FLAGS,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.storage import (
    StorageRequest,
    storage_request,
)
from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.taskvars import (
    DERIVED,
    REQUEST_VARIABLES,
    variable_of,
)

TRUE_WORDS = ("true", "yes", "on", "1", "y", "t")
FALSE_WORDS = ("false", "no", "off", "0", "n", "f", "")
AUTO = (None, "", 0, "0")
AUTO_WORDS = ("", "0", "null", "none", "~")  # the same from -e key=value, which gives strings
# what a missing required value's message says, where more than "set it" helps
REQUIRED_FIX = {
    "model_path": "required: set it to the model's folder on the host, or set sglang_model "
                  "({repo, revision} from the Hub, staged for you) and leave sglang_model_path empty",
}

# Flags the plan owns: set through a parameter, never through extra_args.
OWNED_FLAGS: dict[str, str] = {
    "--model-path": "sglang_model_path",
    "--model": "sglang_model_path",
    "--host": "sglang_host_address",
    "--port": "sglang_base_port (the port is sglang_base_port + instance index)",
    "--nccl-port": "sglang_nccl_port_base",
    "--tp-size": "sglang_tp_size",
    "--tensor-parallel-size": "sglang_tp_size",
    "--nnodes": "sglang_tp_group (the hosts of a multi-node TP group)",
    "--node-rank": "sglang_tp_group (the host's place in the group)",
    "--dist-init-addr": "sglang_tp_group and sglang_dist_init_port",
    "--nccl-init-addr": "sglang_tp_group and sglang_dist_init_port",
    "--api-key": "sglang_api_key (the key goes through the instance's 0600 --config file, never argv)",
    "--admin-api-key": "a 0600 --config file (secrets never go into argv)",
    "--config": "sglang_api_key (the plan owns SGLang's --config file: it carries the API key)",
}


def declared(keyword: str) -> Any:
    """The server role's declared default of the variable ``keyword`` comes from
    (``taskvars.REQUEST_VARIABLES``; roles/server/meta/argument_specs.yml)."""
    return role_default("server", REQUEST_VARIABLES[keyword])


def _declared(keyword: str) -> Any:
    return field(default_factory=lambda: declared(keyword))


@dataclass(frozen=True)
class PlanRequest:
    """The checked inputs of one host's plan; a default is the role variable's declared one."""

    profile: str
    model_path: str
    release: str = DEFAULT_RELEASE
    model_config: dict[str, Any] | None = None
    model_arch: str | None = None
    tp_size: int = _declared("tp_size")
    gpus: list[int] | None = None  # None: every GPU of the host
    base_port: int = _declared("base_port")
    nccl_port_base: int | None = None  # None: base_port + 1000
    host_address: str = _declared("host_address")
    advertise_address: str | None = None
    base_dir: str = _declared("base_dir")
    hicache_size_gb: int | None = None  # None: the profile's size (sized from the facts)
    hicache_fraction: float = _declared("hicache_fraction")
    hicache_reserve_gib: float = _declared("hicache_reserve_gib")
    hicache_storage: StorageRequest | None = None  # None: no storage tier (sglang_hicache_storage {})
    pd: PdRequest | None = None  # None: unified (sglang_pd {})
    extra_args: list[tuple[str, list[str] | None]] = field(default_factory=list)
    user_profiles: dict[str, Any] = field(default_factory=dict)
    force_busy: bool = False
    max_running_requests: int | None = None  # None: the profile's value
    served_model_name: str | None = None
    api_key_env: bool = False
    draft_model_path: str | None = None
    # one tensor-parallel group over several hosts (tp_size = its GPUs on every node together)
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None  # HOST:PORT of rank 0, where the nodes meet

    @property
    def gpus_per_node(self) -> int:
        return self.tp_size // self.nnodes

    @property
    def nccl_base(self) -> int:
        return self.nccl_port_base if self.nccl_port_base is not None else self.base_port + 1000

    def extra(self, flag: str) -> list[str] | None:
        """The values extra_args gives a flag (None when it does not set it)."""
        return next((values for name, values in self.extra_args if name == flag), None)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> PlanRequest:
        """Check every input at once; one PlanError lists every problem found."""
        checker = _Checker(kwargs)
        base_dir = checker.text("base_dir") or declared("base_dir")
        storage = checker.storage("hicache_storage", base_dir)
        req = cls(
            profile=checker.text("profile", required=True) or "",
            model_path=checker.text("model_path", required=True) or "",
            release=checker.text("release") or DEFAULT_RELEASE,
            model_config=checker.mapping("model_config"),
            model_arch=checker.choice("model_arch", ARCH_KINDS),
            tp_size=checker.integer("tp_size", default=declared("tp_size"), low=1),
            gpus=checker.gpu_list("gpus"),
            base_port=checker.integer("base_port", default=declared("base_port"), low=1, high=65535),
            nccl_port_base=checker.auto_integer("nccl_port_base", low=1, high=65535,
                                                auto="0 = sglang_base_port + 1000"),
            host_address=checker.text("host_address") or declared("host_address"),
            advertise_address=checker.text("advertise_address"),
            base_dir=base_dir,
            hicache_size_gb=checker.auto_integer("hicache_size_gb", low=1, auto="0 = sized from the host's facts"),
            hicache_fraction=checker.number("hicache_fraction", default=declared("hicache_fraction"), low=0.0, high=1.0,
                                            low_open=True),
            hicache_reserve_gib=checker.number("hicache_reserve_gib", default=declared("hicache_reserve_gib"), low=0.0),
            hicache_storage=storage,
            pd=checker.pd("pd"),
            # with a storage tier, its flags are the plan's too
            extra_args=checker.extra_args("extra_args", {**OWNED_FLAGS, **(STORAGE_FLAGS if storage else {})}),
            user_profiles=checker.mapping("user_profiles") or {},
            force_busy=checker.boolean("force_busy"),
            max_running_requests=checker.auto_integer("max_running_requests", low=1,
                                                      auto="0 = the profile's value"),
            served_model_name=checker.text("served_model_name"),
            api_key_env=checker.boolean("api_key_env"),
            draft_model_path=checker.text("draft_model_path"),
        )
        group = checker.tp_group(req.tp_size, req.base_port)
        if group:
            req = dataclasses.replace(req, **group)
        checker.unknown(set(REQUEST_VARIABLES) | set(DERIVED))
        checker.raise_problems()
        return req


class _Checker:
    """Reads the keyword arguments, converting what it can and noting what it cannot."""

    def __init__(self, kwargs: Mapping[str, Any]) -> None:
        self.kwargs = kwargs
        self.problems: list[str] = []

    def _bad(self, key: str, value: Any, rule: str) -> None:
        self.problems.append(f"{variable_of(key)}={value!r}: {rule}")

    def unknown(self, known: set[str]) -> None:
        for key in sorted(set(self.kwargs) - known):
            self.problems.append(f"{key}: not a parameter of the plan (known: {', '.join(sorted(known))})")

    def raise_problems(self) -> None:
        if len(self.problems) == 1:
            raise PlanError(self.problems[0])
        if self.problems:
            raise PlanError(f"{len(self.problems)} problems with the deployment's variables:\n  - "
                            + "\n  - ".join(self.problems))

    def text(self, key: str, required: bool = False) -> str | None:
        value = self.kwargs.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            if required:
                self._bad(key, value, REQUIRED_FIX.get(key, "required: set it (e.g. in group_vars or with -e)"))
            return None
        if isinstance(value, (dict, list, bool)):
            self._bad(key, value, "must be a string")
            return None
        return str(value)

    def pd(self, key: str) -> PdRequest | None:
        """sglang_pd, checked by prefill/decode disaggregation's own rules (_plan/pd.py)."""
        try:
            return pd_request(self.kwargs.get(key))
        except PlanError as exc:
            self.problems.append(str(exc))
            return None

    def storage(self, key: str, base_dir: str) -> StorageRequest | None:
        """sglang_hicache_storage, checked by the storage tier's own rules (_plan/storage.py)."""
        try:
            return storage_request(self.kwargs.get(key), base_dir)
        except PlanError as exc:
            self.problems.append(str(exc))
            return None

    def choice(self, key: str, choices: tuple[str, ...]) -> str | None:
        value = self.text(key)
        if value is not None and value not in choices:
            self._bad(key, value, f"must be one of {', '.join(choices)} (or empty: read the model's config.json)")
            return None
        return value

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self.kwargs.get(key)
        if value in (None, "", {}):
            return None
        if not isinstance(value, Mapping):
            self._bad(key, value, "must be a dict")
            return None
        return dict(value)

    def boolean(self, key: str) -> bool:
        value = self.kwargs.get(key, False)
        if isinstance(value, bool) or value is None:
            return bool(value)
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        word = str(value).strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        self._bad(key, value, "must be true or false")
        return False

    def _int(self, key: str, value: Any) -> int | None:
        if isinstance(value, bool):
            self._bad(key, value, "must be an integer, not a boolean")
            return None
        try:
            number = float(str(value).strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            self._bad(key, value, "must be an integer")
            return None
        if number != int(number):
            self._bad(key, value, "must be a whole number")
            return None
        return int(number)

    def integer(self, key: str, default: int, low: int | None = None, high: int | None = None) -> int:
        value = self.kwargs.get(key, default)
        if value is None or value == "":
            return default
        number = self._int(key, value)
        if number is None:
            return default
        if (low is not None and number < low) or (high is not None and number > high):
            self._bad(key, value, f"must be between {low} and {high}" if high is not None
                      else f"must be at least {low}")
            return default
        return number

    def auto_integer(self, key: str, low: int, auto: str, high: int | None = None) -> int | None:
        """An integer where 0 (in any form: 0, "0", "", null, and -e's "null") means automatic."""
        value = self.kwargs.get(key)
        if value in AUTO or (isinstance(value, str) and value.strip().lower() in AUTO_WORDS):
            return None
        number = self._int(key, value)
        if number is None:
            return None
        if number == 0:
            return None
        if number < low or (high is not None and number > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            self._bad(key, value, f"must be {bound}, or 0 for automatic ({auto})")
            return None
        return number

    def number(self, key: str, default: float, low: float | None = None, high: float | None = None,
               low_open: bool = False) -> float:
        value = self.kwargs.get(key, default)
        if value is None or value == "":
            return default
        try:
            number = float(value)
        except (TypeError, ValueError):
            self._bad(key, value, "must be a number")
            return default
        too_low = low is not None and (number <= low if low_open else number < low)
        if too_low or (high is not None and number > high):
            lo = f"({low:g}" if low_open else f"[{low:g}"
            self._bad(key, value, f"must be in {lo}, {high:g}]" if high is not None else f"must be at least {low:g}")
            return default
        return number

    def gpu_list(self, key: str) -> list[int] | None:
        value = self.kwargs.get(key)
        if value in (None, "", [], "[]") or (isinstance(value, str) and not value.strip()):
            return None
        items: list[Any]
        if isinstance(value, str):
            items = [part for part in value.replace(" ", "").split(",") if part]
        elif isinstance(value, int) and not isinstance(value, bool):
            items = [value]
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            self._bad(key, value, "must be a list of GPU indexes, e.g. [0, 1] or \"0,1\" ([] = every GPU)")
            return None
        gpus = []
        for item in items:
            number = self._int(key, item)
            if number is None:
                return None
            if number < 0:
                self._bad(key, value, "GPU indexes are 0 or more")
                return None
            gpus.append(number)
        if len(set(gpus)) != len(gpus):
            self._bad(key, value, "lists a GPU twice")
            return None
        return gpus

    def tp_group(self, tp: int, base: int) -> dict[str, Any]:
        """nnodes, node_rank and dist_init_addr of a multi-node TP group: the group's hosts in
        inventory order (rank 0 first), their addresses, this host, and the rendezvous port."""
        hosts = self.kwargs.get("tp_group_hosts") or []
        if not hosts:
            return {}
        if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) for h in hosts):
            self._bad("tp_group_hosts", hosts, "must be the list of the group's inventory hosts")
            return {}
        me = self.kwargs.get("inventory_host")
        if me not in hosts:
            self._bad("inventory_host", me, f"is not in the TP group's hosts {list(hosts)}")
            return {}
        addresses = list(self.kwargs.get("tp_group_addresses") or hosts)
        if len(addresses) != len(hosts):
            self._bad("tp_group_addresses", addresses, "must give one address per host of the group")
            return {}
        port = self.integer("dist_init_port", default=0, low=0, high=65535)
        nnodes = len(hosts)
        if tp % nnodes:
            self._bad("tp_size", tp, f"must be the GPUs of all {nnodes} hosts of the TP group together: a "
                                     f"multiple of {nnodes}")
        host = str(addresses[0])
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return {"nnodes": nnodes, "node_rank": list(hosts).index(me),
                "dist_init_addr": f"{host}:{port or base + 2000}"}

    def extra_args(self, key: str, owned: Mapping[str, str]) -> list[tuple[str, list[str] | None]]:
        """extra_args as (flag, values) pairs; values None removes the flag, [] is a bare flag.
        Flags the plan owns (``owned``: flag -> the variable that sets it) are refused."""
        value = self.kwargs.get(key)
        pairs: list[tuple[str, list[str] | None]] = []
        if not value:
            return pairs
        if isinstance(value, Mapping):
            for name, item in value.items():
                flag = str(name) if str(name).startswith("-") else f"--{name}"
                if item is None or item is False:
                    pairs.append((flag, None))
                elif item is True:
                    pairs.append((flag, []))
                elif isinstance(item, (list, tuple)):
                    pairs.append((flag, [render(v) for v in item]))
                else:
                    pairs.append((flag, [render(item)]))
        elif isinstance(value, (list, tuple)):
            for token in (str(item) for item in value):
                if token.startswith("--"):
                    flag, eq, rest = token.partition("=")
                    pairs.append((flag, [rest] if eq else []))
                elif not pairs:
                    self._bad(key, value, f"must start with a flag (--name), not {token!r}")
                    return []
                else:
                    values = pairs[-1][1]
                    if values is not None:
                        values.append(token)
        else:
            self._bad(key, value, "must be a list of argv words or a dict of flag: value")
            return []
        for flag, _ in pairs:
            if flag in owned:
                self.problems.append(f"sglang_extra_args may not set {flag}: the plan sets it from "
                                     f"{owned[flag]}")
        return pairs
