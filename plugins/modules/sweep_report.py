#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module: write a throughput-sweep report folder on the controller."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sweep_report
short_description: Write a report (JSON, CSV, Markdown, PNG) of throughput sweeps
version_added: "0.1.0"
description:
  - Takes the C(sglang_sweep) facts that M(llmops.sglang.throughput_sweep) returned for each
    server instance, with the instance's metadata from the deployment manifest, and writes one
    report folder C(<dest>/<run_id>/).
  - The folder holds one JSON file per instance (C(<host>_<instance>_<profile>.json), the full
    sweep with its raw per-request records, plus meta), C(summary.csv) (one row per instance and
    concurrency level), C(summary.md) (the seed-style table per instance, peak and knee, a
    profile comparison when several profiles are present) and PNG plots C(throughput.png),
    C(latency.png) and, with more than one profile, C(profiles.png).
  - Then C(<dest>/latest) is pointed at the new folder (a relative symlink, replaced
    atomically).
  - 'Run it on the controller: C(delegate_to: localhost) and C(run_once: true).'
  - Plots need matplotlib on the controller; without it everything else is written and a
    warning is returned.
  - When O(dest) cannot be written (the bench role checks it before the first request; this is
    for a folder that fails after all), the finished measurement is written to
    C(~/.ansible/llmops.sglang/reports/<run_id>/) (or a new folder under the system's temporary
    directory) and the module fails naming that folder, with RV(fallback) true, so that nothing
    measured is lost.
  - See C(docs/reports.md) for the column definitions.
author:
  - llmops.sglang developers (@llmops)
options:
  results:
    description:
      - 'One item per server instance, each C({meta: {...}, sweep: {...}}).'
      - C(meta) keys (all optional) C(host), C(instance) (for example C(gpu0)), C(profile)
        (for example C(mtp_hicache)), C(release), C(engine) (C(sim) or C(sglang)), C(gpus),
        C(url).
      - C(sweep) is the C(sglang_sweep) fact of M(llmops.sglang.throughput_sweep)
        (schema_version 1). A bare sweep without meta is accepted too.
      - 'The bench role passes each host''s sweeps in one item instead:
        C({host: node1, manifest: <its deployment manifest>, sweeps: {gpu0: <sglang_sweep>, ...}}),
        one report item per instance, its meta from the manifest; and a router''s sweeps as
        C({host: r1, router: {url: ..., workers_down: [...]}, sweeps: [<sglang_sweep>]}), their meta
        a router''s (profile and release where the workers in O(results) agree).'
      - The first profile met is the baseline of the profile comparison.
    type: list
    elements: dict
    required: true
  dest:
    description:
      - The reports root, for example C({{ playbook_dir }}/../reports). Created if missing.
      - The report goes to C(<dest>/<run_id>/); C(<dest>/latest) links to it.
    type: path
    required: true
  run_id:
    description:
      - Name of the report folder under O(dest).
      - Defaults to the current UTC time as C(%Y%m%dT%H%M%SZ), for example C(20261130T051500Z).
      - Writing again with the same O(run_id) replaces the files of that folder.
    type: str
  title:
    description:
      - Title of C(summary.md) and of the plots.
      - Defaults to C(SGLang throughput sweep).
    type: str
  latest_link:
    description:
      - Point C(<dest>/latest) at the new folder.
    type: bool
    default: true
  capacity_target_rps:
    description:
      - A target load in requests/s. Above 0 the module answers how many instances and hosts of
        each host class carry it under the SLO the sweeps measured (RV(capacity)) and writes
        C(capacity.md) into the report folder. C(0) answers nothing.
      - See C(docs/sweep.md), "Capacity".
    type: float
    default: 0
  host_facts:
    description:
      - The hosts' C(sglang_host) facts (M(llmops.sglang.host_facts)), by inventory name, for
        O(capacity_target_rps) - hosts with equal GPU model, count and memory form one class; a
        host of the inventory that was not measured counts towards its class's hosts.
      - An empty dict for a host whose facts are unknown.
    type: dict
    default: {}
attributes:
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
    details: In check mode nothing is written; RV(files) lists the data files that would be.
  diff_mode:
    description: Returns details on what changed, or would change, in diff mode.
    support: none
notes:
  - The module reads no files on managed hosts; it only writes under O(dest) on the host it
    runs on.
seealso:
  - module: llmops.sglang.throughput_sweep
"""

EXAMPLES = r"""
- name: Write the sweep report on the controller
  llmops.sglang.sweep_report:
    results: "{{ __bench_results }}"
    dest: "{{ playbook_dir }}/../reports"
    title: "Qwen3.6-27B, MTP vs MTP + HiCache"
  delegate_to: localhost
  run_once: true
  register: __bench_report

- name: Show the table
  ansible.builtin.debug:
    msg: "{{ __bench_report.table.split('\n') }}"
  run_once: true

- name: Report one hand-built result under a fixed name, without moving reports/latest
  llmops.sglang.sweep_report:
    results:
      - meta: {host: node1, instance: gpu0, profile: mtp_hicache, release: 0.5.23, engine: sglang}
        sweep: "{{ hostvars['node1'].ansible_facts.sglang_sweep }}"
    dest: /srv/reports
    run_id: node1-retest
    latest_link: false
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
dir:
  description: The report folder.
  returned: always
  type: str
  sample: /home/me/llmops.sglang/reports/20261130T051500Z
files:
  description:
    - Every file written (JSON per instance, summary.csv, summary.md, then the plots).
    - In check mode, the data files that would be written (plots excluded).
  returned: always
  type: list
  elements: str
  sample:
    - /home/me/reports/20261130T051500Z/node1_gpu0_mtp_hicache.json
    - /home/me/reports/20261130T051500Z/summary.csv
    - /home/me/reports/20261130T051500Z/summary.md
    - /home/me/reports/20261130T051500Z/throughput.png
    - /home/me/reports/20261130T051500Z/latency.png
plots:
  description: The PNG plots written; empty when matplotlib is missing or in check mode.
  returned: always
  type: list
  elements: str
  sample:
    - /home/me/reports/20261130T051500Z/throughput.png
    - /home/me/reports/20261130T051500Z/latency.png
table:
  description:
    - The Markdown of summary.md without its title and column notes, for printing; per instance
      a heading, a server line, the table (C, n, ok, err, output tok/s, avg_out, wall s, TTFT
      p50/p99 ms, ITL p50/p99 ms; C marked C(!) for a level with failed requests, C(*) for a
      client-limited one) and a line naming peak, knee, client-limited levels and levels with
      failed requests; then the profile comparison when several profiles are present.
  returned: always
  type: str
  sample: |-
    ### node1/gpu0 (mtp_hicache)

    | C | n | ok | err | output tok/s | avg_out | wall s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |
    | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
    | 1 | 8 | 8 | 0 | 61.2 | 1024 | 133.8 | 95.0 | 120.0 | 16.20 | 21.00 |

    Peak: 409.0 tok/s at C=48; knee: C=8 (369.7 tok/s, 90% of peak); client-limited levels: none.
latest:
  description: The C(latest) link that now points at RV(dir); null when not updated.
  returned: always
  type: str
  sample: /home/me/reports/latest
fallback:
  description: True when O(dest) could not be written and RV(dir) is the fallback folder the
    report went to instead (the module then fails, its message naming that folder).
  returned: when the report went to the fallback folder
  type: bool
  sample: true
failures:
  description:
    - Per host (the meta's C(host)), one line per instance whose sweep had levels with failed
      requests, naming them (the bench role fails on them with C(sglang_bench_fail_on_errors)).
  returned: always
  type: dict
  sample: {node1: ["node1/gpu0 (baseline): C=4 (8 of 8 failed: 100%, connection 8)"]}
capacity:
  description:
    - The capacity answer for O(capacity_target_rps) (the bench role's C(sglang_capacity) fact) -
      C(target_rps), C(slo) and per host class C(limit_rps_min), C(limit_rps_mean),
      C(instances_per_host), C(instances_needed), C(hosts_needed), C(hosts_in_inventory),
      C(enough), C(note).
  returned: when O(capacity_target_rps) is above 0
  type: dict
capacity_markdown:
  description: RV(capacity) as the Markdown table written to C(capacity.md).
  returned: when O(capacity_target_rps) is above 0
  type: str
report_warnings:
  description: Problems that did not stop the report - one per instance whose sweep had
    levels with failed requests (naming them, with the failures by kind), no matplotlib, a plot
    that failed, a C(latest) that is not a symlink. Also issued as Ansible warnings.
  returned: always
  type: list
  elements: str
  sample: []
"""

import os
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._bench import capacity as _capacity
from ansible_collections.llmops.sglang.plugins.module_utils._bench.reportsdir import fallback_root
from ansible_collections.llmops.sglang.plugins.module_utils._report import (
    failed_levels,
    normalize,
    plan_files,
    render_markdown,
    write_report,
)
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def _fallback(module: AnsibleModule, results: list[dict[str, Any]], out_dir: str, run_id: str, exc: OSError,
              answer: dict[str, Any]) -> None:
    """The report's folder failed after the sweeps: write the finished measurement (and the
    capacity answer) elsewhere (``_reportsdir.fallback_root()``) and fail saying where, so
    nothing measured is lost."""
    where = os.path.join(fallback_root(), run_id)
    try:
        report = write_report(results, where, title=module.params["title"], latest_link=False)
        if answer:
            _write_capacity(report, answer)
    except OSError as again:
        module.fail_json(msg=f"could not write the report under {out_dir}: {exc}; nor under {where}: {again}")
    module.fail_json(msg=f"could not write the report under {out_dir}: {exc}. The finished measurement was written "
                         f"to {report['dir']} instead: copy it from there, and set sglang_bench_reports_dir to a "
                         "folder this user can write", report_warnings=report.pop("warnings"), fallback=True,
                     **answer, **report)


def _failures(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The failed levels' lines, per host."""
    out: dict[str, list[str]] = {}
    for item in items:
        lines = failed_levels([item])
        if lines:
            out.setdefault(str(item["meta"].get("host")), []).extend(lines)
    return out


def _capacity_answer(module: AnsibleModule, items: list[dict[str, Any]]) -> dict[str, Any]:
    """capacity + capacity_markdown for capacity_target_rps > 0, else nothing."""
    params = module.params
    if not params["capacity_target_rps"] > 0:
        return {}
    facts = {str(h): dict(f) if isinstance(f, dict) else {} for h, f in (params["host_facts"] or {}).items()}
    try:
        fact = _capacity.capacity(items, facts, params["capacity_target_rps"])
    except _capacity.CapacityError as exc:
        module.fail_json(msg=f"capacity_target_rps: {exc}")
    return {"capacity": fact, "capacity_markdown": _capacity.render_markdown(fact)}


def _write_capacity(report: dict[str, Any], answer: dict[str, Any]) -> None:
    """capacity.md beside the report's files."""
    path = os.path.join(report["dir"], "capacity.md")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(answer["capacity_markdown"])
    report["files"].append(path)


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("sweep_report"),
        supports_check_mode=True,
    )
    params: dict[str, Any] = module.params
    results: list[dict[str, Any]] = params["results"]
    if not results:
        module.fail_json(msg="results is empty: there is no sweep to report (did the bench role run?)")
    run_id = params["run_id"] or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    if not run_id or "/" in run_id or run_id in (".", "..", "latest"):
        module.fail_json(msg=f"run_id {run_id!r} is not a plain folder name (and not 'latest')")
    out_dir = os.path.join(params["dest"], run_id)

    try:
        items = normalize(results)
    except ValueError as exc:
        module.fail_json(msg=f"bad results: {exc}")
    answer = _capacity_answer(module, items)
    failures = _failures(items)

    if module.check_mode:
        table = render_markdown(items, params["title"])[1]
        latest = os.path.join(params["dest"], "latest") if params["latest_link"] else None
        files = plan_files(items, out_dir) + ([os.path.join(out_dir, "capacity.md")] if answer else [])
        module.exit_json(changed=True, dir=out_dir, files=files, plots=[],
                         table=table, latest=latest, report_warnings=[], failures=failures, **answer)

    try:
        report = write_report(items, out_dir, title=params["title"], latest_link=params["latest_link"])
        if answer:
            _write_capacity(report, answer)
    except OSError as exc:
        _fallback(module, items, out_dir, run_id, exc, answer)
    report_warnings = report.pop("warnings")
    for warning in report_warnings:
        module.warn(warning)
    module.exit_json(changed=True, report_warnings=report_warnings, failures=failures, **answer, **report)


if __name__ == "__main__":
    main()
