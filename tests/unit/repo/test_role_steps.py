"""No sequence of steps is written twice in roles/ (issue 29): a run of three or more tasks that
call the same modules with the same arguments, in the same order, in two places drifts (the
guard's rollback repeated a batch's start and lost its multi-node guard). Such a sequence is one
task file, included with a switch (start_batch.yml with __sglang_batch_rollback)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
RUN = 3
# task keywords: everything else in a task is its module (or an include) and its arguments
KEYWORDS = {"name", "vars", "when", "loop", "loop_control", "register", "delegate_to", "async", "poll", "changed_when",
            "failed_when", "run_once", "tags", "become", "become_user", "no_log", "environment", "until", "retries",
            "delay", "check_mode", "ignore_errors", "listen", "notify", "any_errors_fatal", "throttle",
            "delegate_facts", "module_defaults", "diff", "timeout"}


def _step(task: dict[str, Any]) -> str:
    """A task as what it does: its module (or include) and its arguments, without its name."""
    parts = []
    for key, value in task.items():
        if key in KEYWORDS:
            continue
        parts.append(f"{key}={yaml.safe_dump(value, sort_keys=True, default_flow_style=True).strip()}")
    return " ".join(parts)


def _sequences(tasks: Any, where: str) -> Iterator[tuple[str, list[str]]]:
    """Each task list (the file's, a block's) as its steps."""
    if not isinstance(tasks, list):
        return
    steps = []
    for task in tasks:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            if key in task:
                yield from _sequences(task[key], f"{where} ({task.get('name', key)})")
        steps.append(_step({k: v for k, v in task.items() if k not in ("block", "rescue", "always")}) or "block")
    yield where, steps


def repeated_runs(files: dict[str, Any]) -> list[str]:
    seen: dict[tuple[str, ...], str] = {}
    found = []
    for where, tasks in files.items():
        for place, steps in _sequences(tasks, where):
            for i in range(len(steps) - RUN + 1):
                run = tuple(steps[i:i + RUN])
                if any(step == "block" for step in run):
                    continue
                other = seen.setdefault(run, f"{place} from task {i + 1}")
                if other != f"{place} from task {i + 1}":
                    found.append(f"{place} from task {i + 1} repeats {other}: {' | '.join(s[:60] for s in run)}")
    return found


def test_no_run_of_steps_is_written_twice_in_the_roles() -> None:
    files = {str(p.relative_to(ROOT)): yaml.safe_load(p.read_text()) for p in sorted(ROOT.glob("roles/*/tasks/*.yml"))}
    found = repeated_runs(files)
    assert not found, "\n".join(found)


def test_the_search_finds_a_repeated_run() -> None:
    steps = [{"name": f"n{i}", "m.x": {"a": i}} for i in range(4)]
    renamed = [{**task, "name": "other"} for task in steps[1:]]
    assert repeated_runs({"a.yml": steps, "b.yml": [{"debug": {"msg": 1}}, *renamed]})
    assert not repeated_runs({"a.yml": steps, "b.yml": steps[:2]})


def _module_calls(tasks: Any) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        for key in ("block", "rescue", "always"):
            yield from _module_calls(task.get(key))
        for key, value in task.items():
            if key not in KEYWORDS and key not in ("block", "rescue", "always") and isinstance(value, dict):
                yield str(task.get("name")), key, value


def test_the_bench_roles_tasks_pass_options_not_keywords() -> None:
    """No bench task passes more than 9 arguments (the sweep's options come from the role's
    variables through the throughput_sweep action: options_from_role; what a task passes is the
    plan's per sweep: URL, files, waits, and through a router its time scale and workers)."""
    wide = [f"{path.name}: {name} ({module}, {len(args)} arguments)"
            for path in sorted(ROOT.glob("roles/bench/tasks/*.yml"))
            for name, module, args in _module_calls(yaml.safe_load(path.read_text())) if len(args) > 9]
    assert not wide, "\n".join(wide)
