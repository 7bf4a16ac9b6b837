"""One value per default: the roles' defaults/main.yml and meta/argument_specs.yml, the modules'
DOCUMENTATION and argument_spec, and the Python that does the work (SweepOptions, PlanRequest,
hicache_plan, the filters' docs) against their owner, plugins/module_utils/_defaults.py.

Each check names every place that disagrees, with both values, so that a failure says what to fix.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import _defaults
from ansible_collections.llmops.sglang.plugins.module_utils._releases import DEFAULT_RELEASE
from ansible_collections.llmops.sglang.plugins.plugin_utils import _docspec

ROOT = Path(__file__).resolve().parents[3]
ROLES = ("server", "bench", "router", "tune")
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if "AnsibleModule(" in p.read_text())
# Plan fields the role computes from a variable rather than passing it (api_key_env: whether
# sglang_api_key is set).
DERIVED = {"api_key_env"}
# A role variable that means "unset, the documented rule applies" (the module's or the plan's None).
UNSET = (None, "", 0, [], {})


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def role_defaults(role: str) -> dict[str, Any]:
    return _yaml(ROOT / "roles" / role / "defaults" / "main.yml") or {}


def role_specs(role: str) -> dict[str, dict[str, Any]]:
    """Entry point -> its options (YAML anchors resolved)."""
    specs = _yaml(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]
    return {entry: spec.get("options") or {} for entry, spec in specs.items()}


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def same(a: Any, b: Any) -> bool:
    """Equal as Ansible sees them: 10 == 10.0, but True is not 1 and "1" is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def same_or_unset(role_value: Any, owner: Any) -> bool:
    """A role variable against its owner: equal, or the role's sentinel for the owner's None."""
    if owner is None:
        return role_value is None or (not isinstance(role_value, bool) and role_value in UNSET)
    return same(role_value, owner)


_SPEC_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "path": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
    "list": (list,), "dict": (dict,),
}


# ---------------------------------------------------------------------------------------------
# Roles: defaults/main.yml <-> meta/argument_specs.yml, and across roles
# ---------------------------------------------------------------------------------------------


def role_disagreements(role: str) -> list[str]:
    defaults = role_defaults(role)
    entries = role_specs(role)
    problems = []
    documented = {name for options in entries.values() for name in options}
    for name in sorted(set(defaults) - documented):
        problems.append(f"roles/{role}: {name} is in defaults/main.yml but in no entry point of argument_specs.yml")
    for entry, options in entries.items():
        for name, opt in options.items():
            where = f"roles/{role}: {name} (entry point {entry})"
            if name not in defaults:
                if "default" in opt:
                    problems.append(f"{where}: argument_specs.yml says default {opt['default']!r}, "
                                    "defaults/main.yml has no such variable")
                continue
            value = defaults[name]
            if _templated(value):
                if "default" in opt and opt["default"] != value:
                    problems.append(f"{where}: defaults/main.yml computes it ({value!r}); argument_specs.yml "
                                    f"must leave its default out (say it in the description), not {opt['default']!r}")
                continue
            if "default" not in opt:
                if opt.get("required") and value == "":
                    continue  # a required variable's empty placeholder; validation fails on it, not a default
                problems.append(f"{where}: defaults/main.yml says {value!r}, argument_specs.yml has no default")
                continue
            if not same(value, opt["default"]):
                problems.append(f"{where}: defaults/main.yml says {value!r}, argument_specs.yml says {opt['default']!r}")
            kinds = _SPEC_TYPES.get(opt.get("type", "str"))
            if kinds and value is not None and (not isinstance(value, kinds) or
                                                (isinstance(value, bool) and bool not in kinds)):
                problems.append(f"{where}: default {value!r} is not of the declared type {opt.get('type', 'str')}")
    return problems


@pytest.mark.parametrize("role", ROLES)
def test_role_defaults_and_argument_specs_agree(role: str) -> None:
    problems = role_disagreements(role)
    assert not problems, "\n".join(problems)


def test_a_variable_of_several_roles_has_one_default() -> None:
    seen: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        for name, value in role_defaults(role).items():
            seen.setdefault(name, {})[role] = value
    problems = [f"{name}: " + ", ".join(f"roles/{r} says {v!r}" for r, v in by_role.items())
                for name, by_role in sorted(seen.items())
                if len(by_role) > 1 and any(not same(v, next(iter(by_role.values()))) for v in by_role.values())]
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Modules: DOCUMENTATION (with its doc fragments) <-> argument_spec
# ---------------------------------------------------------------------------------------------


class _Captured(Exception):
    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__("captured")
        self.kwargs = kwargs


def module_argument_spec(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """The argument_spec the module hands AnsibleModule, caught before it reads any input."""
    module = importlib.import_module(f"ansible_collections.llmops.sglang.plugins.modules.{name}")

    def capture(**kwargs: Any) -> None:
        raise _Captured(kwargs)

    monkeypatch.setattr(module, "AnsibleModule", capture)
    with pytest.raises(_Captured) as caught:
        module.main()
    return caught.value.kwargs["argument_spec"]


def module_doc_options(name: str) -> dict[str, dict[str, Any]]:
    """The module's documented options, its doc fragments' merged under its own (as ansible-doc
    does): the reader the step actions validate with (plugin_utils/_docspec.py)."""
    return _docspec.documented_options(name)


@pytest.mark.parametrize("name", MODULES)
def test_module_documentation_and_argument_spec_agree(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = module_argument_spec(name, monkeypatch)
    doc = module_doc_options(name)
    problems = [f"{name}: {opt} is in the argument_spec, not documented" for opt in sorted(set(spec) - set(doc))]
    problems += [f"{name}: {opt} is documented, not in the argument_spec" for opt in sorted(set(doc) - set(spec))]
    for opt in sorted(set(spec) & set(doc)):
        if "default" in spec[opt] or "default" in doc[opt]:
            code, documented = spec[opt].get("default"), doc[opt].get("default")
            if not same(code, documented):
                problems.append(f"{name}: {opt} defaults to {code!r} in the argument_spec, {documented!r} in DOCUMENTATION")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# The owner (_defaults) <-> each place that repeats it
# ---------------------------------------------------------------------------------------------


def _dataclass_defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _owner_vs(owner: dict[str, Any], where: str, values: dict[str, Any], *, empty_is_unset: bool = False) -> list[str]:
    problems = []
    for key, expected in owner.items():
        if key not in values:
            continue
        value = values[key]
        ok = same_or_unset(value, expected) if empty_is_unset else same(value, expected)
        if not ok:
            problems.append(f"{where}: {key} is {value!r}, _defaults says {expected!r}")
    return problems


def test_the_sweep_options_have_one_default_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """_defaults.SWEEP against the throughput_sweep module (code and docs), SweepOptions, the bench
    role (sglang_bench_<option>, defaults and argument specs), the tune role's levels and gain."""
    from ansible_collections.llmops.sglang.plugins.module_utils._sweep import SweepOptions

    owner = _defaults.SWEEP
    spec = module_argument_spec("throughput_sweep", monkeypatch)
    missing = sorted(set(owner) - set(spec))
    assert not missing, f"_defaults.SWEEP names options the module does not have: {missing}"
    problems = _owner_vs(owner, "throughput_sweep argument_spec", {k: v.get("default") for k, v in spec.items()})
    problems += _owner_vs(owner, "throughput_sweep DOCUMENTATION",
                          {k: v.get("default") for k, v in module_doc_options("throughput_sweep").items()})
    problems += _owner_vs(owner, "SweepOptions", _dataclass_defaults(SweepOptions))
    bench = role_defaults("bench")
    bench_spec = role_specs("bench")["main"]
    mapped = {opt: f"sglang_bench_{opt}" for opt in spec if f"sglang_bench_{opt}" in bench}
    assert {"timeout", "concurrency", "plateau_gain", "max_tokens"} <= set(mapped)
    tune = {"concurrency": "sglang_tune_concurrency_levels", "plateau_gain": "sglang_tune_plateau_gain"}
    for role, names, defaults, entry in (("bench", mapped, bench, bench_spec),
                                         ("tune", tune, role_defaults("tune"), role_specs("tune")["main"])):
        for opt, var in names.items():
            if opt not in owner or _templated(defaults[var]):
                continue
            if not same_or_unset(defaults[var], owner[opt]):
                problems.append(f"roles/{role}/defaults/main.yml: {var} is {defaults[var]!r}, "
                                f"_defaults.SWEEP[{opt!r}] (throughput_sweep's {opt}) is {owner[opt]!r}")
            if "default" in entry.get(var, {}) and not same_or_unset(entry[var]["default"], owner[opt]):
                problems.append(f"roles/{role}/meta/argument_specs.yml: {var} defaults to {entry[var]['default']!r}, "
                                f"_defaults.SWEEP[{opt!r}] (throughput_sweep's {opt}) is {owner[opt]!r}")
    assert not problems, "\n".join(problems)


def test_the_plan_request_has_one_default_everywhere() -> None:
    """_defaults.PLAN against PlanRequest, the server role's variables (taskvars.REQUEST_VARIABLES,
    the one mapping from role variables to the request),
    hicache_plan's keywords and the instance_plan / hicache_plan filter docs (where they exist)."""
    from ansible_collections.llmops.sglang.plugins.plugin_utils._plan import hicache, request, taskvars

    owner = _defaults.PLAN
    fields = _dataclass_defaults(request.PlanRequest)
    missing = sorted(set(owner) - {f.name for f in dataclasses.fields(request.PlanRequest)} - {"dist_init_port"})
    assert not missing, f"_defaults.PLAN names fields PlanRequest does not have: {missing}"
    problems = _owner_vs(owner, "PlanRequest", fields, empty_is_unset=True)
    # what from_kwargs fills in when a keyword is left out
    built = request.PlanRequest.from_kwargs(profile="baseline", model_path="/models/x")
    problems += _owner_vs(owner, "PlanRequest.from_kwargs()", dataclasses.asdict(built), empty_is_unset=True)
    server = role_defaults("server")
    server_spec = role_specs("server")["main"]
    for key, expected in owner.items():
        var = taskvars.REQUEST_VARIABLES.get(key)
        if var is None or var not in server or key in DERIVED:
            continue
        if not same_or_unset(server[var], expected):
            problems.append(f"roles/server/defaults/main.yml: {var} is {server[var]!r}, _defaults.PLAN[{key!r}] is {expected!r}")
        if "default" in server_spec.get(var, {}) and not same_or_unset(server_spec[var]["default"], expected):
            problems.append(f"roles/server/meta/argument_specs.yml: {var} defaults to {server_spec[var]['default']!r}, "
                            f"_defaults.PLAN[{key!r}] is {expected!r}")
    keywords = inspect.signature(hicache.hicache_plan).parameters
    for keyword, key in (("fraction", "hicache_fraction"), ("reserve_gib", "hicache_reserve_gib")):
        if not same(keywords[keyword].default, owner[key]):
            problems.append(f"hicache_plan({keyword}=) defaults to {keywords[keyword].default!r}, "
                            f"_defaults.PLAN[{key!r}] is {owner[key]!r}")
    for filter_name, names in (("instance_plan", {k: k for k in owner}),
                               ("hicache_plan", {"fraction": "hicache_fraction", "reserve_gib": "hicache_reserve_gib"})):
        path = ROOT / "plugins" / "filter" / f"{filter_name}.yml"
        if not path.is_file():  # a filter made private carries no docs of its own
            continue
        options = _yaml(path)["DOCUMENTATION"].get("options") or {}
        for opt, key in names.items():
            if "default" in options.get(opt, {}) and not same_or_unset(options[opt]["default"], owner[key]):
                problems.append(f"plugins/filter/{filter_name}.yml: {opt} defaults to {options[opt]['default']!r}, "
                                f"_defaults.PLAN[{key!r}] is {owner[key]!r}")
    assert not problems, "\n".join(problems)


def test_paths_release_and_shared_module_defaults_have_one_value(monkeypatch: pytest.MonkeyPatch) -> None:
    server, bench, router = role_defaults("server"), role_defaults("bench"), role_defaults("router")
    specs = {role: role_specs(role) for role in ROLES}
    expected = [
        ("server", "sglang_base_dir", _defaults.BASE_DIR), ("bench", "sglang_base_dir", _defaults.BASE_DIR),
        ("server", "sglang_venv", _defaults.VENV), ("server", "sglang_version", DEFAULT_RELEASE),
        ("router", "sglang_router_base_dir", _defaults.ROUTER_BASE_DIR),
        ("router", "sglang_router_venv", _defaults.ROUTER_VENV),
        ("server", "sglang_log_tail_lines", _defaults.LOG_TAIL_LINES),
        ("server", "sglang_ready_interval", _defaults.READY_INTERVAL),
    ]
    values = {"server": server, "bench": bench, "router": router}
    problems = []
    for role, var, want in expected:
        if not same(values[role][var], want):
            problems.append(f"roles/{role}/defaults/main.yml: {var} is {values[role][var]!r}, _defaults says {want!r}")
        for entry, options in specs[role].items():
            if var in options and "default" in options[var] and not same(options[var]["default"], want):
                problems.append(f"roles/{role}/meta/argument_specs.yml ({entry}): {var} defaults to "
                                f"{options[var]['default']!r}, _defaults says {want!r}")
    release = specs["server"]["main"]["sglang_version"]
    if DEFAULT_RELEASE not in release.get("choices", [DEFAULT_RELEASE]):
        problems.append(f"roles/server: sglang_version's choices {release['choices']} lack the default {DEFAULT_RELEASE}")
    for module, opt, want in (("wait_ready", "log_tail_lines", _defaults.LOG_TAIL_LINES),
                              ("detached_service", "log_tail_lines", _defaults.LOG_TAIL_LINES),
                              ("wait_ready", "interval", _defaults.READY_INTERVAL)):
        got = module_argument_spec(module, monkeypatch)[opt].get("default")
        if not same(got, want):
            problems.append(f"{module}: {opt} defaults to {got!r}, _defaults says {want!r}")
    assert not problems, "\n".join(problems)


def test_the_rollout_variables_have_one_default_everywhere() -> None:
    """_rollout.DEFAULTS (what deploy.yml's rollout check applies: hostvars hold no role default)
    against the server role's defaults and argument specs, deploy.yml's serial: default, and the
    costs of the estimate against sglang_rollout_estimate's description."""
    from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import DEFAULTS, ESTIMATE_DEFAULTS

    server, spec = role_defaults("server"), role_specs("server")["main"]
    problems = []
    for var, want in DEFAULTS.items():
        if var == "sglang_rollout_batch":  # play level only (serial:), below
            continue
        if var not in server:
            problems.append(f"roles/server/defaults/main.yml: {var} missing (_rollout.DEFAULTS says {want!r})")
            continue
        if not same_or_unset(server[var], want):
            problems.append(f"roles/server/defaults/main.yml: {var} is {server[var]!r}, _rollout.DEFAULTS says {want!r}")
        if not same_or_unset(spec.get(var, {}).get("default"), want):
            problems.append(f"roles/server/meta/argument_specs.yml: {var} defaults to "
                            f"{spec.get(var, {}).get('default')!r}, _rollout.DEFAULTS says {want!r}")
    serial = [play.get("serial") for play in _yaml(ROOT / "playbooks" / "deploy.yml") if "serial" in play]
    # serial: [1, batch] with a canary (-e sglang_rollout_canary), else the batch
    wanted = [f"sglang_rollout_batch | default('{DEFAULTS['sglang_rollout_batch']}')",
              f"sglang_rollout_canary | default({DEFAULTS['sglang_rollout_canary']}) | int"]
    if len(serial) != 1 or any(w not in " ".join(str(serial[0]).split()) for w in wanted):
        problems.append(f"playbooks/deploy.yml: serial is {serial}, _rollout.DEFAULTS wants it to use {wanted!r}")
    said = spec["sglang_rollout_estimate"]["description"]
    for key, seconds in ESTIMATE_DEFAULTS.items():
        if not re.search(rf"{key} \([^)]*default {seconds:g}\)", " ".join(said.split())):
            problems.append(f"roles/server/meta/argument_specs.yml: sglang_rollout_estimate's description does not "
                            f"say '{key} (... default {seconds:g})'")
    assert not problems, "\n".join(problems)


# A role variable passed straight to a module option of the same meaning: one default. Not here,
# on purpose: the router role waits for added workers (sglang_router_workers_wait true, 300 s) where
# router_workers by itself does not (wait_healthy false, 60 s); the server role gives a GPU server
# sglang_stop_timeout 120 s to exit where detached_service's generic stop_timeout is 60 s.
ROLE_TO_MODULE = [
    ("router", "sglang_router_workers", "router_workers", "workers"),
    ("router", "sglang_router_workers_state", "router_workers", "state"),
    ("server", "sglang_declared_gpus", "host_facts", "declared_gpus"),
    ("server", "sglang_log_tail_lines", "wait_ready", "log_tail_lines"),
    ("server", "sglang_log_tail_lines", "detached_service", "log_tail_lines"),
    ("server", "sglang_ready_interval", "wait_ready", "interval"),
    ("bench", "sglang_bench_progress_poll", "sweep_wait", "poll"),
]


def test_role_variables_passed_to_a_module_share_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    problems = []
    for role, var, module, opt in ROLE_TO_MODULE:
        value = role_defaults(role)[var]
        found = {"DOCUMENTATION": module_doc_options(module)[opt].get("default")}
        if module in MODULES:
            found["argument_spec"] = module_argument_spec(module, monkeypatch)[opt].get("default")
        for where, got in found.items():
            if not same(value, got):
                problems.append(f"roles/{role}: {var} is {value!r}, {module}'s {opt} defaults to {got!r} ({where})")
    assert not problems, "\n".join(problems)


def test_docs_state_the_request_timeout_the_code_uses() -> None:
    text = (ROOT / "docs" / "sweep.md").read_text()
    said = re.findall(r"`timeout` \(per request, default (\d+(?:\.\d+)?) s\)", text)
    assert said, "docs/sweep.md no longer states the per-request timeout's default"
    assert all(float(value) == _defaults.REQUEST_TIMEOUT for value in said), (said, _defaults.REQUEST_TIMEOUT)


def test_the_checks_catch_a_disagreement(tmp_path: Path) -> None:
    """The comparisons fail on what they exist to catch (the 600/900 s timeout of issue 15)."""
    assert not same_or_unset(600, 900.0)
    assert same_or_unset(900, 900.0) and same_or_unset(0, None) and same_or_unset([], None)
    assert not same(True, 1) and not same("1", 1) and not same([1, 4], [1, 4, 8])
    assert not same_or_unset(False, None)  # false is a value, not "unset"
    assert _owner_vs({"timeout": 900.0}, "x", {"timeout": 600}) == ["x: timeout is 600, _defaults says 900.0"]
