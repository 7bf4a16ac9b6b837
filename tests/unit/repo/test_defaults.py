"""What the declarations do not derive yet: the roles' defaults against their declared types, a
variable of several roles, each module's DOCUMENTATION against its hand-written argument_spec, role
variables passed to a module option of the same meaning, the release, deploy.yml's serial. (The
roles' defaults/main.yml, the sweep's argument spec and the Python objects' defaults are derived
from the declarations: tests/unit/repo/test_declared.py.)

Each check names every place that disagrees, with both values, so that a failure says what to fix.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils._shared.releases import DEFAULT_RELEASE
from ansible_collections.llmops.sglang.plugins.plugin_utils import _docspec

ROOT = Path(__file__).resolve().parents[3]
ROLES = ("server", "bench", "router", "tune", "model")
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


def _without_no_log(spec: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, entry in spec.items():
        entry = {k: v for k, v in entry.items() if k != "no_log"}
        if isinstance(entry.get("options"), dict):
            entry["options"] = _without_no_log(entry["options"])
        out[name] = entry
    return out


@pytest.mark.parametrize("name", MODULES)
def test_module_documentation_and_argument_spec_agree(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each module hands AnsibleModule the spec read from its DOCUMENTATION (the generated
    ``_shared/argspecs.py``, through ``modulespec.argument_spec``): every option, type, default,
    choice, requirement and suboption as documented; only no_log is the module's to say."""
    spec = module_argument_spec(name, monkeypatch)
    assert _without_no_log(spec) == _without_no_log(_docspec.argument_spec(name))
    source = (ROOT / "plugins" / "modules" / f"{name}.py").read_text()
    # throughput_sweep's is generated apart (_sweep/spec.py, beside the dataclass of its options)
    mark = "argument_spec=ARGUMENT_SPEC" if name == "throughput_sweep" else f'argument_spec=argument_spec("{name}"'
    assert mark in source, f"{name} writes its argument_spec by hand"


# ---------------------------------------------------------------------------------------------
# The owner (_defaults) <-> each place that repeats it
# ---------------------------------------------------------------------------------------------


def test_the_release_default_is_one_the_server_role_accepts() -> None:
    release = role_specs("server")["main"]["sglang_version"]
    assert same(release["default"], DEFAULT_RELEASE), (release["default"], DEFAULT_RELEASE)
    assert DEFAULT_RELEASE in release.get("choices", [DEFAULT_RELEASE])


def test_deploy_yml_serial_and_the_estimate_description_say_the_rollout_defaults() -> None:
    """deploy.yml's play-level serial: default (no role default reaches it) and the costs of the
    estimate against sglang_rollout_estimate's description. The other rollout defaults are the
    server role's declared ones (_rollout.DEFAULTS reads them)."""
    from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import DEFAULTS, ESTIMATE_DEFAULTS

    spec = role_specs("server")["main"]
    problems = []
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
    declared = _docspec.documented_options("throughput_sweep")["timeout"]["default"]
    assert all(float(value) == declared for value in said), (said, declared)


def test_the_checks_catch_a_disagreement(tmp_path: Path) -> None:
    """The comparisons fail on what they exist to catch (the 600/900 s timeout of issue 15)."""
    assert not same_or_unset(600, 900.0)
    assert same_or_unset(900, 900.0) and same_or_unset(0, None) and same_or_unset([], None)
    assert not same(True, 1) and not same("1", 1) and not same([1, 4], [1, 4, 8])
    assert not same_or_unset(False, None)  # false is a value, not "unset"
