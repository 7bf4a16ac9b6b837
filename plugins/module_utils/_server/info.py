# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What the collection reads from an SGLang server's ``/server_info``: the one reader, for
status (``_deploy.instance_status``) and the sweep's snapshots (``_sweep``).

Stdlib only, Python >= 3.10.
"""
from __future__ import annotations

from typing import Any

# /server_info on 0.5.17 and later; /get_server_info on older releases (still answered, deprecated)
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


def first_state(info: dict[str, Any]) -> dict[str, Any]:
    """The scheduler state of DP rank 0 (``internal_states[0]``), {} when not reported."""
    states = info.get("internal_states")
    return states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}


def effective_max_running_requests(info: dict[str, Any]) -> Any:
    """The limit SGLang really applies: the scheduler's ``effective_max_running_requests_per_dp``
    when reported, else its ``max_running_requests``, else the launch argument (which SGLang may
    have reset: speculative decoding, the hybrid models' Mamba clamp)."""
    state = first_state(info)
    for value in (state.get("effective_max_running_requests_per_dp"), state.get("max_running_requests"),
                  info.get("max_running_requests")):
        if value is not None:
            return value
    return None


def summarize(info: dict[str, Any]) -> dict[str, Any]:
    """Version, effective max_running_requests, speculative accept length and generation
    throughput of rank 0, DP size, speculative algorithm, and the embedded engine's time scale."""
    state = first_state(info)
    sim = info.get("llmops_sim")
    return {
        "version": info.get("version"),
        "max_running_requests": effective_max_running_requests(info),
        "avg_spec_accept_length": state.get("avg_spec_accept_length"),
        "last_gen_throughput": state.get("last_gen_throughput"),
        "dp_size": info.get("dp_size"),
        "speculative_algorithm": info.get("speculative_algorithm"),
        # the embedded engine reports how fast it runs against the GPU it models
        "time_scale": sim.get("time_scale") if isinstance(sim, dict) else None,
    }
