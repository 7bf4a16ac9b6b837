# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The rollout time model (controller side): how long a rolling update takes and how much
capacity stays in the routers, from the fleet's shape and a few measured costs.

Symbols (docs/fleet.md "Rollout time model" has the formulas and worked examples):
  H hosts, g instances per host, a instances of a host replaced at once (``out_per_host``:
  ``sglang_rollout_instances_at_once`` capped below g), b hosts per batch
  (``sglang_rollout_batch``), L one instance's load time (start -> ready), S per-instance step
  cost (out of the routers, drain, stop, back in), F per-host fixed cost (Ansible's plan,
  render and checks for one host), P per-run fixed cost (plan gate, routers' plays), W canary
  window, c canary instances, G guard window after each batch, k Ansible forks.

  steps per host      n = ceil(g / a)
  host time           T_h = F + n (L + S)
  batch time          T_b = ceil(b / k) T_h + G       (k >= b: the hosts of a batch in parallel)
  batches             B = ceil(H / b)
  canary              T_c = F + ceil(min(c, g) / a) (L + S) + W   (0 without a canary)
  total               T = P + T_c + B T_b
  capacity kept       min in routers = H g - max(b a, min(c, a ceil(c / g)))

Worst case: every instance changed. Assumes the a instances of a host load in parallel (one
GPU set each, no shared disk or network bottleneck) and that the hosts of a batch do not
slow each other (separate machines; not so on the fleet harness, whose hosts share 2 cores).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ansible_collections.llmops.sglang.plugins.plugin_utils._rollout import out_per_host


@dataclass(frozen=True)
class RolloutShape:
    """What the model needs; every time in seconds."""
    hosts: int
    per_host: int
    load_s: float
    host_fixed_s: float
    batch_hosts: int = 1
    at_once: int = 1
    step_s: float = 0.0
    run_fixed_s: float = 0.0
    canary: int = 0
    canary_window_s: float = 0.0
    guard_s: float = 0.0
    forks: int | None = None

    def __post_init__(self) -> None:
        for name in ("hosts", "per_host", "batch_hosts", "at_once"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"rollout time model: {name}={getattr(self, name)!r} must be at least 1")
        for name in ("load_s", "host_fixed_s", "step_s", "run_fixed_s", "canary_window_s", "guard_s", "canary"):
            if getattr(self, name) < 0:
                raise ValueError(f"rollout time model: {name}={getattr(self, name)!r} must be >= 0")
        if self.forks is not None and self.forks < 1:
            raise ValueError(f"rollout time model: forks={self.forks!r} must be at least 1")


def estimate(shape: RolloutShape) -> dict[str, Any]:
    """Total time, time per host and per batch, batches and the capacity kept (formulas above)."""
    a = out_per_host(shape.per_host, shape.at_once)
    b = min(shape.batch_hosts, shape.hosts)
    steps = math.ceil(shape.per_host / a)
    host = shape.host_fixed_s + steps * (shape.load_s + shape.step_s)
    waves = math.ceil(b / shape.forks) if shape.forks else 1
    batch = waves * host + shape.guard_s
    batches = math.ceil(shape.hosts / b)
    canary_out = min(shape.canary, a * math.ceil(shape.canary / shape.per_host)) if shape.canary else 0
    canary = (shape.host_fixed_s + math.ceil(min(shape.canary, shape.per_host) / a) * (shape.load_s + shape.step_s)
              + shape.canary_window_s) if shape.canary else 0.0
    total_instances = shape.hosts * shape.per_host
    out = max(b * a, canary_out)
    return {
        "shape": asdict(shape),
        "out_per_host": a,
        "steps_per_host": steps,
        "host_s": host,
        "batch_s": batch,
        "batches": batches,
        "canary_s": canary,
        "total_s": shape.run_fixed_s + canary + batches * batch,
        "instances": total_instances,
        "min_in_routers": total_instances - out,
        "min_in_routers_share": (total_instances - out) / total_instances,
    }


def duration(seconds: float) -> str:
    """``1 h 05 min``, ``12 min 30 s``, ``45 s``."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s" if secs else f"{minutes} min"
    return f"{secs} s"


def format_estimate(result: dict[str, Any]) -> list[str]:
    """The lines ``deploy.yml --check`` prints for the planned rollout."""
    s = result["shape"]
    lines = [
        f"rollout estimate: {s['hosts']} hosts x {s['per_host']} instances, {s['batch_hosts']} host(s) per batch "
        f"({result['batches']} batches), {result['out_per_host']} instance(s) of a host replaced at once",
        f"  per host: {duration(result['host_s'])} = fixed {duration(s['host_fixed_s'])} + "
        f"{result['steps_per_host']} x (load {duration(s['load_s'])} + step {duration(s['step_s'])})",
        f"  per batch: {duration(result['batch_s'])}"
        + (f" (incl. guard {duration(s['guard_s'])})" if s["guard_s"] else ""),
    ]
    if s["canary"]:
        lines.append(f"  canary: {s['canary']} instance(s), {duration(result['canary_s'])} "
                     f"(incl. window {duration(s['canary_window_s'])})")
    if s["forks"] and s["forks"] < s["batch_hosts"]:
        lines.append(f"  forks={s['forks']} < {s['batch_hosts']} hosts per batch: hosts of a batch run in "
                     f"{math.ceil(s['batch_hosts'] / s['forks'])} waves (raise forks)")
    lines.append(f"  total: {duration(result['total_s'])}; at least {result['min_in_routers']} of "
                 f"{result['instances']} instances ({100 * result['min_in_routers_share']:.0f} %) stay in the routers")
    return lines


def fit_fixed(measured: dict[int, float], hosts: int) -> dict[str, Any]:
    """Least-squares fit of ``T = P + B x T_h`` to rollout times measured by batch size
    (``{hosts per batch: seconds}``): the per-run cost P and the per-batch host time T_h
    (= F + n (L + S); F and L cannot be told apart with one instance count per host), with
    each measurement's relative error under the fit."""
    xs = {b: math.ceil(hosts / b) for b in measured}
    n = len(measured)
    mx = sum(xs.values()) / n
    my = sum(measured.values()) / n
    sxx = sum((x - mx) ** 2 for x in xs.values())
    slope = sum((xs[b] - mx) * (t - my) for b, t in measured.items()) / sxx if sxx else 0.0
    intercept = my - slope * mx
    errors = {b: (intercept + slope * xs[b] - t) / t for b, t in measured.items()}
    return {"run_fixed_s": intercept, "host_s": slope, "relative_errors": errors}
