"""An action plugin as the unit tests run it: made from a task of mock objects with the given
arguments, its module runs answered by a function of the test (``execute``), each recorded."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

Execute = Callable[[str, dict[str, Any]], dict[str, Any]]


def make_action(cls: type, args: dict[str, Any], execute: Execute | None = None, *, check_mode: bool = False,
                templar: Any = None) -> tuple[Any, list[dict[str, Any]]]:
    """``(action, calls)``: ``calls`` gets ``{"module": name, **module_args}`` for each module run
    the action makes, answered by ``execute(name, module_args)`` (a module run fails the test
    without one)."""
    task = mock.MagicMock(args=args, async_val=0, check_mode=check_mode)
    action = cls(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=templar, shared_loader_obj=None)
    calls: list[dict[str, Any]] = []

    def run_module(module_name: str, module_args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        calls.append({"module": module_name, **module_args})
        assert execute is not None, f"unexpected module run: {module_name}"
        return execute(module_name, module_args)

    action._execute_module = run_module
    return action, calls
