"""How the roles' task files include each other (issue 15): a role is used by other roles and by
the playbooks only through the entry points its meta/argument_specs.yml declares, and from any
entry point includes nest at most three deep (an include_role of another role's entry point is
one hop and ends the chain there: that entry point is checked as its own start; an import_tasks
is inlined when the play is parsed and adds no level)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "roles"
MAX_DEPTH = 3
# how many levels each kind of task-file inclusion adds
INCLUDE_TASKS = {"ansible.builtin.include_tasks": 1, "ansible.builtin.import_tasks": 0}
# the task files a templated include name renders to
TEMPLATED = {"start_{{ __sglang_plan.backend }}.yml": ["start_process.yml", "start_systemd.yml"]}
INCLUDE_ROLE = {"ansible.builtin.include_role", "ansible.builtin.import_role"}


def _entry_points(role: str) -> set[str]:
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    return set(specs["argument_specs"])


def _tasks(items: Any) -> Iterator[dict[str, Any]]:
    for task in items or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _includes(path: Path) -> Iterator[tuple[str, Any]]:
    """(kind, target) of each include in a task file: ("tasks", (levels, [paths])) or ("role", (role, entry))."""
    for task in _tasks(yaml.safe_load(path.read_text())):
        for action in INCLUDE_TASKS & task.keys():
            spec = task[action]
            name = spec["file"] if isinstance(spec, dict) else spec
            names = TEMPLATED.get(str(name), [str(name)])
            assert "{{" not in names[0], f"{path.relative_to(ROOT)}: add what {name} renders to, to TEMPLATED"
            found = [path.parent / n for n in names]
            assert all(f.is_file() for f in found), f"{path.relative_to(ROOT)}: {name} -> {names}: no such task file"
            yield "tasks", (INCLUDE_TASKS[action], found)
        for action in INCLUDE_ROLE & task.keys():
            spec = task[action]
            yield "role", (str(spec["name"]).split(".")[-1], str(spec.get("tasks_from", "main")).removesuffix(".yml"))


def _depth(path: Path, seen: tuple[Path, ...] = ()) -> tuple[int, list[str]]:
    """The deepest chain of includes from ``path``, and that chain."""
    assert path not in seen, f"include cycle: {' -> '.join(p.name for p in (*seen, path))}"
    deepest: tuple[int, list[str]] = (0, [])
    for kind, target in _includes(path):
        if kind == "role":
            chain = (1, [f"role {target[0]}:{target[1]}"])
        else:
            levels, files = target
            chain = max(((d + levels, [f.name, *c]) for f in files for d, c in [_depth(f, (*seen, path))]),
                        key=lambda dc: dc[0])
        deepest = max(deepest, chain, key=lambda dc: dc[0])
    return deepest


def _role_includes() -> Iterator[tuple[Path, str, str]]:
    files = [*ROLES.glob("*/tasks/*.yml"), *(ROOT / "playbooks").glob("*.yml")]
    for path in files:
        data = yaml.safe_load(path.read_text())
        plays = data if path.parent.name == "playbooks" else [{"tasks": data}]
        for play in plays:
            for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                for task in _tasks(play.get(section)):
                    for action in INCLUDE_ROLE & task.keys():
                        spec = task[action]
                        yield path, str(spec["name"]).split(".")[-1], str(spec.get("tasks_from", "main")).removesuffix(".yml")
            for role in play.get("roles") or []:
                name = role["role"] if isinstance(role, dict) else role
                yield path, str(name).split(".")[-1], "main"


ENTRIES = sorted((role.name, entry) for role in ROLES.iterdir() if (role / "meta" / "argument_specs.yml").is_file()
                 for entry in _entry_points(role.name))


@pytest.mark.parametrize(("role", "entry"), ENTRIES, ids=[f"{r}:{e}" for r, e in ENTRIES])
def test_includes_nest_at_most_three_deep_from_each_entry_point(role: str, entry: str) -> None:
    depth, chain = _depth(ROLES / role / "tasks" / f"{entry}.yml")
    assert depth <= MAX_DEPTH, f"{role}:{entry} nests {depth} deep: {entry}.yml -> {' -> '.join(chain)}"


def test_other_roles_and_the_playbooks_use_a_role_only_through_its_entry_points() -> None:
    uses = list(_role_includes())
    assert len(uses) > 20  # the playbooks and the roles do include roles: the walk found them
    wrong = [f"{path.relative_to(ROOT)}: {role}:{entry} (entry points: {sorted(_entry_points(role))})"
             for path, role, entry in uses if entry not in _entry_points(role)]
    assert not wrong, "\n".join(wrong)


def test_the_depth_walk_sees_a_deep_chain(tmp_path: Path) -> None:
    for name, child in (("a", "b"), ("b", "c"), ("c", "d"), ("d", None)):
        body = [{"name": "x", "ansible.builtin.include_tasks": f"{child}.yml"}] if child else [{"name": "x", "ansible.builtin.debug": {}}]
        (tmp_path / f"{name}.yml").write_text(yaml.safe_dump(body))
    assert _depth(tmp_path / "a.yml") == (3, ["b.yml", "c.yml", "d.yml"])
    block = [{"name": "b", "block": [{"name": "x", "ansible.builtin.include_tasks": "a.yml"}]}]
    (tmp_path / "top.yml").write_text(yaml.safe_dump(block))
    assert _depth(tmp_path / "top.yml")[0] == 4
    (tmp_path / "imp.yml").write_text(yaml.safe_dump([{"name": "x", "ansible.builtin.import_tasks": "a.yml"}]))
    assert _depth(tmp_path / "imp.yml")[0] == 3  # inlined
