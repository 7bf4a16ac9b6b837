# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The one owner of each default that several layers of the collection repeat.

A default appears in up to five places: a role's ``defaults/main.yml`` and its
``meta/argument_specs.yml`` (Ansible reads both literally), a module's ``DOCUMENTATION`` and its
``argument_spec``, and the Python that does the work (``SweepOptions``, ``PlanRequest``, a
function's keyword default). The values live here; ``tests/unit/repo/test_defaults.py`` fails when any
of those places says something else. Change a default here first, then where the test points.

``None`` means "unset: the documented rule applies" (``requests``: max(2*C, 8); ``gpus``: every
GPU); a role variable says the same with its documented sentinel (``0``, ``""``, ``[]``).

Stdlib only, Python >= 3.10 (module_utils ship to hosts).
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._releases import DEFAULT_RELEASE

# Where a deployment lives on a host (server role, bench role, the plan, modules' examples).
BASE_DIR = "/opt/sglang"
VENV = BASE_DIR + "/venv"
ROUTER_BASE_DIR = "/opt/sglang-router"
ROUTER_VENV = ROUTER_BASE_DIR + "/venv"

# Seconds one streamed request may take, from send to the end of its stream, queueing at the
# server included. 900 s: what docs/sweep.md and the module have promised since 0.1.0; room for
# 1024 tokens at about 1 tok/s after a long wait in the queue. SGLang's bench_serving gives each
# request 6 h (aiohttp's total timeout), which in practice is none: a hung server hangs its run.
REQUEST_TIMEOUT = 900.0

# llmops.sglang.throughput_sweep's options (the bench role passes each as sglang_bench_<option>).
SWEEP: dict[str, Any] = {
    "api": "openai",
    "concurrency": [1, 4, 8, 16, 32, 48],
    "requests": None,  # max(2*C, 8) per level
    "duration": None,  # a request count, not a time, per level
    "max_tokens": 1024,
    "temperature": 0.6,
    "top_p": 0.95,
    "ignore_eos": True,
    "prompts": None,  # the 8 built-in prompts
    "warmup": 1,
    "level_warmup": True,
    "level_warmup_tokens": 16,
    "timeout": REQUEST_TIMEOUT,
    "level_timeout": 1800.0,
    "sweep_timeout": 7200.0,
    "stop_on_plateau": False,
    "plateau_gain": 0.05,
    "api_key": None,
    "max_concurrency": 4096,
    "client_processes": 1,
    "fail_on_errors": False,
    "return_records": True,
    "validate_certs": True,
    "heartbeat_timeout": 60.0,
}

# What a plan is asked for (PlanRequest; the server role passes each as the sglang_ variable in
# PlanRequest's ROLE_VARIABLE).
PLAN: dict[str, Any] = {
    "release": DEFAULT_RELEASE,
    "model_arch": None,  # read from the model's config.json
    "tp_size": 1,
    "gpus": None,  # every GPU of the host
    "base_port": 30000,
    "nccl_port_base": None,  # base_port + 1000
    "host_address": "127.0.0.1",
    "base_dir": BASE_DIR,
    "hicache_size_gb": None,  # sized from the host's facts
    "hicache_fraction": 0.75,  # share of (available host memory - reserve) for HiCache pools
    "hicache_reserve_gib": 10.0,  # host memory kept free, as SGLang's own check keeps 10 GiB
    "extra_args": None,  # none
    "user_profiles": None,  # none
    "force_busy": False,
    "max_running_requests": None,  # the profile's value
    "served_model_name": None,  # SGLang's default, the model path
    "api_key_env": False,
    "draft_model_path": None,
    "dist_init_port": None,  # base_port + 2000
}

# Shared by several modules and roles: a failing service's log tail, readiness polling.
LOG_TAIL_LINES = 50
READY_INTERVAL = 2.0
