# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Every instance's argv checked against the release's real flag schema, all problems at once."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._plan.common import PlanError


def validate_plan(plan: Mapping[str, Any]) -> None:
    """One PlanError naming each instance, flag, problem and closest valid flag."""
    # imported here: loading the flag schemas is only needed when validating
    from ansible_collections.llmops.sglang.plugins.module_utils._shared.flags import validate_argv

    release = str(plan["release"])
    problems: list[str] = []
    for instance in plan.get("instances") or []:
        for error in validate_argv(list(instance["argv"]), release):
            flag = getattr(error, "flag", None) or "?"
            message = getattr(error, "message", None) or str(error)
            suggestion = getattr(error, "suggestion", None)
            line = f"instance {instance['name']}: {flag}: {message}"
            if suggestion and suggestion != flag and str(suggestion) not in message:
                line += f" (closest valid flag: {suggestion})"
            problems.append(line)
    if problems:
        raise PlanError(f"the plan does not fit SGLang {release}'s flags ({len(problems)} problem(s)); fix "
                        "sglang_extra_args or the profile:\n  - " + "\n  - ".join(problems))
