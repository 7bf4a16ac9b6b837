#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.host_facts: a thin shell over module_utils/_server/hostfacts.py."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_facts
short_description: Gather the facts an SGLang deployment is planned from
version_added: "0.1.0"
description:
  - Reads the GPUs of a host (C(nvidia-smi), optionally NVML through C(pynvml), or GPUs declared
    in the inventory for hosts without any), the host memory budget (C(/proc/meminfo) and the
    cgroup v2 or v1 memory limits of the cgroup the module runs in and its ancestors), the CPU
    count, the NUMA nodes and the service manager.
  - Returns them as the C(sglang_host) fact, which the deployment planner reads.
  - Runs every command under a C locale. Changes nothing on the host.
  - When the host has C(nvidia-smi), its GPUs win over O(declared_gpus) unless
    O(prefer_declared) is set. When it has neither, the module fails unless O(require_gpus=false).
author:
  - llmops.sglang developers (@llmops)
options:
  declared_gpus:
    description:
      - GPUs to plan for when the host has none that can be detected (no C(nvidia-smi)), for
        example a CPU host running the embedded engine.
      - Each item is a GPU name (V(NVIDIA H200)) or a mapping with C(name), optional
        C(memory_mib) (total memory in MiB) and optional C(count) (default 1).
      - Memory left out stays null in the facts; the planner takes it from its GPU table.
    type: list
    elements: raw
    default: []
  prefer_declared:
    description:
      - Use O(declared_gpus) even when the host's GPUs can be detected.
    type: bool
    default: false
  use_nvml:
    description:
      - Read GPUs through NVML (the C(pynvml) Python package on the host) instead of
        C(nvidia-smi). Falls back to C(nvidia-smi), with a warning, when C(pynvml) cannot be imported.
    type: bool
    default: false
  require_gpus:
    description:
      - Fail when no GPU is detected and none is declared. With V(false), the facts say
        C(gpu_source=none) and list no GPU.
    type: bool
    default: true
  nvidia_smi_path:
    description:
      - Path of the C(nvidia-smi) binary. By default it is looked up on the C(PATH) and in the
        usual system folders.
    type: path
  proc_root:
    description:
      - Where procfs is mounted (C(meminfo), C(self/cgroup), C(1/comm) are read from it). For tests.
    type: path
    default: /proc
  sys_root:
    description:
      - Where sysfs is mounted (C(devices/system/node) is read from it). For tests.
    type: path
    default: /sys
  deployment_dir:
    description:
      - The base folder of an SGLang deployment made by the C(llmops.sglang.server) role. GPU
        processes of its instances (their process groups or sessions, or their systemd units)
        are marked with their owner and do not make a GPU busy, so that a re-deploy does not
        refuse the GPUs its own servers hold.
      - Its manifest is read too (as M(llmops.sglang.server_status) reads it without probing) and
        returned as RV(manifest), so that the server role's plan reads the host in one run.
    type: path
  model_path:
    description:
      - A model folder on the host; its C(config.json) is read and returned as RV(model_config)
        (null where it cannot be read). The plan's model architecture and sizes come from it.
    type: path
  cgroup_root:
    description:
      - Where the cgroup filesystem is mounted (the cgroup v2 unified tree, or the folder holding
        the cgroup v1 C(memory) hierarchy).
    type: path
    default: /sys/fs/cgroup
  storage_paths:
    description:
      - Folders whose file systems are reported in RV(ansible_facts.sglang_host.filesystems) (a
        folder that does not exist yet is looked up at its nearest existing parent), for what is
        sized from disk (a disk-backed cache tier, staged models). Not reported when empty.
    type: list
    elements: path
    default: []
notes:
  - Supports check mode; the module only reads.
  - A GPU is C(busy) when C(nvidia-smi) lists a compute process on it, or when at least 1024 MiB
    of its memory is in use (processes of other PID namespaces, such as containers, are not listed).
  - The cgroup limits are those of the process running the module. A service started later in
    another cgroup (a systemd unit in C(system.slice)) may be under different limits.
requirements:
  - Linux. C(nvidia-smi) on GPU hosts; C(pynvml) only for O(use_nvml=true).
seealso:
  - name: host_facts documentation
    description: What the module reads and returns, with an example from a 2x H200 host.
    link: https://github.com/llmops/llmops.sglang/tree/main/docs/host_facts.md
"""

EXAMPLES = r"""
- name: Gather the host facts the deployment is planned from
  llmops.sglang.host_facts:

- name: Plan for two H200 on a host without GPUs (embedded engine)
  llmops.sglang.host_facts:
    declared_gpus:
      - name: NVIDIA H200
        memory_mib: 143771
        count: 2

- name: Show the effective memory budget
  ansible.builtin.debug:
    msg: >-
      {{ ansible_facts['sglang_host']['gpu_count'] }} GPU(s),
      {{ (ansible_facts['sglang_host']['memory']['effective_available_bytes'] / 2**30) | round(1) }} GiB
      available (limited by {{ ansible_facts['sglang_host']['memory']['limited_by'] }})
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    sglang_host:
      description: What the host offers an SGLang deployment.
      returned: always
      type: dict
      contains:
        schema_version:
          description: Version of this fact's layout.
          type: int
          returned: always
          sample: 1
        gpu_source:
          description:
            - Where the GPU list came from. V(none) only with O(require_gpus=false) and no GPU.
          type: str
          returned: always
          choices: [nvidia-smi, nvml, declared, none]
          sample: nvidia-smi
        gpus:
          description: The GPUs, ordered by index.
          type: list
          elements: dict
          returned: always
          contains:
            index:
              description: GPU index as CUDA and nvidia-smi number it (declared GPUs count from 0).
              type: int
              sample: 0
            uuid:
              description: GPU UUID; null for declared GPUs.
              type: str
              sample: GPU-996b713f-9ed2-dd19-db4b-e39f73bf5126
            name:
              description: Product name.
              type: str
              sample: NVIDIA H200
            pci_bus_id:
              description: PCI bus id; null for declared GPUs.
              type: str
              sample: "00000000:00:06.0"
            memory_total_mib:
              description: Total memory in MiB; null when unknown (declared without C(memory_mib)).
              type: int
              sample: 143771
            memory_used_mib:
              description: Memory in use in MiB (nvidia-smi leaves out the driver's reservation).
              type: int
              sample: 0
            memory_free_mib:
              description: Free memory in MiB.
              type: int
              sample: 143156
            driver_version:
              description: NVIDIA driver version; null for declared GPUs.
              type: str
              sample: 580.159.04
            compute_capability:
              description: CUDA compute capability as C(major.minor); null when unknown.
              type: str
              sample: "9.0"
            mig_enabled:
              description: Whether MIG mode is currently enabled on the GPU.
              type: bool
              sample: false
            processes:
              description: Compute processes running on the GPU.
              type: list
              elements: dict
              contains:
                pid:
                  description: Process id (in the host's PID namespace).
                  type: int
                  sample: 4242
                process_name:
                  description: Process name or path as the driver reports it.
                  type: str
                  sample: /usr/bin/python3
                used_memory_mib:
                  description: GPU memory the process uses in MiB; null where not reported (MIG).
                  type: int
                  sample: 71234
                owner:
                  description:
                    - The instance of the deployment under O(deployment_dir) that the process
                      belongs to (its process group or session, or its systemd unit's control
                      group); null for a foreign process.
                  type: str
                  sample: gpu0
            owned_by:
              description: Instances of the deployment under O(deployment_dir) that run on this GPU.
              type: list
              elements: str
              sample: [gpu0]
            busy:
              description:
                - True when the GPU is in use by something that is not the deployment under
                  O(deployment_dir) - a listed compute process with no owner, or at least 1024 MiB
                  of memory in use with no process listed and no running instance of the
                  deployment given this GPU.
              type: bool
              sample: false
        gpu_count:
          description: Number of GPUs in RV(ansible_facts.sglang_host.gpus).
          type: int
          returned: always
          sample: 2
        driver_version:
          description: NVIDIA driver version; null for declared GPUs.
          type: str
          returned: always
          sample: 580.159.04
        cuda_version:
          description: CUDA version the driver supports (nvidia-smi header or NVML); null if unknown.
          type: str
          returned: always
          sample: "13.0"
        memory:
          description: Host memory and the budget a deployment may use.
          type: dict
          returned: always
          contains:
            total_bytes:
              description: MemTotal from /proc/meminfo, in bytes.
              type: int
              sample: 270334464000
            available_bytes:
              description: MemAvailable from /proc/meminfo, in bytes.
              type: int
              sample: 269715169280
            cgroup:
              description: Memory limits of the module's cgroup and its ancestors.
              type: dict
              contains:
                version:
                  description: cgroup version (2 unified, 1 legacy); null when no memory cgroup is found.
                  type: int
                  sample: 2
                path:
                  description: The cgroup path from /proc/self/cgroup.
                  type: str
                  sample: /
                max_bytes:
                  description:
                    - Smallest hard limit on the path (v2 C(memory.max), v1 C(memory.limit_in_bytes));
                      null when unlimited.
                  type: int
                  sample: null
                high_bytes:
                  description: Smallest v2 C(memory.high) throttle limit on the path; null when unlimited.
                  type: int
                  sample: null
                usage_bytes:
                  description:
                    - Memory charged to the module's cgroup less its inactive file cache; null when
                      not readable.
                  type: int
                  sample: 104857600
                available_bytes:
                  description:
                    - Headroom under the tightest limit on the path (limit less that cgroup's
                      usage); null when no limit is set.
                  type: int
                  sample: null
            effective_available_bytes:
              description: The smaller of C(available_bytes) and C(cgroup.available_bytes).
              type: int
              sample: 269715169280
            limited_by:
              description: Which of the two gives C(effective_available_bytes).
              type: str
              choices: [meminfo, cgroup_v2_max, cgroup_v2_high, cgroup_v1_limit]
              sample: meminfo
        cpu_count:
          description: CPUs the module's process may run on (its affinity mask).
          type: int
          returned: always
          sample: 32
        numa_nodes:
          description: Number of NUMA nodes (C(/sys/devices/system/node/node*); 1 if not exposed).
          type: int
          returned: always
          sample: 1
        filesystems:
          description:
            - With O(storage_paths), the file system of each path, in the order given - C(path),
              C(checked_at) (the path or its nearest existing parent), C(mount_point), C(fstype),
              C(source), C(total_bytes), C(free_bytes) (what an unprivileged writer may still use),
              C(network) (NFS, CIFS, Lustre, CephFS, ... - shared by hosts), C(memory) (tmpfs - taken
              from host RAM), C(rotational) (a spinning disk; null where it is no block device) and
              C(used_bytes) (the files under the path itself added up, 0 where it does not exist - what a
              disk-backed cache tier there already holds).
          type: list
          elements: dict
          returned: when O(storage_paths) is not empty
          sample:
            - path: /data/sglang/hicache
              checked_at: /data
              mount_point: /data
              fstype: xfs
              source: /dev/nvme1n1
              total_bytes: 3840000000000
              free_bytes: 3500000000000
              network: false
              memory: false
              rotational: false
              used_bytes: 0
        service_manager:
          description: V(systemd) when PID 1 is systemd and C(/run/systemd/system) exists, else V(process).
          type: str
          returned: always
          choices: [systemd, process]
          sample: process
        python:
          description: The Python that ran the module on the host.
          type: dict
          returned: always
          contains:
            executable:
              description: Path of the interpreter.
              type: str
              sample: /usr/bin/python3
            version:
              description: Its version.
              type: str
              sample: 3.12.3
        hostname:
          description: The host's name as the host sees it.
          type: str
          returned: always
          sample: gpu-node-01
        deployment:
          description:
            - The instances found under O(deployment_dir) (their folders, whatever the manifest
              says) and their live processes; null without O(deployment_dir).
          type: dict
          returned: always
          contains:
            base_dir:
              description: The deployment's base folder.
              type: str
            instances:
              description: One entry per instance folder.
              type: list
              elements: dict
              contains:
                name:
                  description: Instance name.
                  type: str
                  sample: gpu0
                pids:
                  description: Its live processes (the leader, the scheduler and detokenizer children).
                  type: list
                  elements: int
                gpus:
                  description: GPU indices from its env file (C(CUDA_VISIBLE_DEVICES)).
                  type: list
                  elements: int
                running:
                  description: Whether any of its processes is alive.
                  type: bool
                backend:
                  description: How its processes were found (V(process) or V(systemd)); null when none runs.
                  type: str
manifest:
  description:
    - The deployment's manifest under O(deployment_dir) (C(deployment.json)), as
      M(llmops.sglang.server_status) reads it; null without O(deployment_dir) or when there is none.
  returned: always
  type: dict
manifest_problem:
  description: Why the manifest under O(deployment_dir) could not be used ('' when it could or there is none).
  returned: always
  type: str
model_config:
  description:
    - The content of O(model_path)/C(config.json), base64-encoded as M(ansible.builtin.slurp)
      returns it (at most 4 MiB); null without O(model_path) or where it cannot be read.
  returned: always
  type: str
"""

import base64
import os
import platform
import socket
import sys
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._server import manifest as _manifest
from ansible_collections.llmops.sglang.plugins.module_utils._server.filesystems import (
    filesystem_facts,
    read_mountinfo_text,
)
from ansible_collections.llmops.sglang.plugins.module_utils._server.hostfacts import (
    APPS_QUERY_FIELDS,
    GPU_OPTIONAL_FIELDS,
    GPU_QUERY_FIELDS,
    HostFactsError,
    HostInputs,
    build_facts,
    read_cgroup_memory,
    read_cpu_count,
    read_meminfo_text,
    read_numa_nodes,
    read_nvml,
    read_service_manager,
)
from ansible_collections.llmops.sglang.plugins.module_utils._server.ownership import find_ownership
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec

ENV = {"LC_ALL": "C", "LANG": "C"}


def _query_gpus(module: AnsibleModule, smi: str) -> tuple[str, tuple[str, ...]]:
    """Run the GPU query; drivers that do not know an optional field get it again without."""
    fields = GPU_QUERY_FIELDS
    while True:
        rc, out, err = module.run_command(
            [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], environ_update=ENV
        )
        text = f"{out}\n{err}"
        if rc == 0 or "no devices were found" in text.lower():
            return out, fields
        optional = [name for name in GPU_OPTIONAL_FIELDS if name in fields and name in text]
        if "not a valid field" in text.lower() and optional:
            fields = tuple(name for name in fields if name not in optional)
            continue
        module.fail_json(
            msg=f"{smi} failed (rc={rc}): {(err or out).strip()[:800]}. Check the NVIDIA driver "
            "(nvidia-smi must work), or set prefer_declared=true with declared_gpus to plan without it.",
            rc=rc,
            stdout=out,
            stderr=err,
        )


MODEL_CONFIG_MAX = 4 << 20


def read_model_config(model_path: str | None) -> str | None:
    """``<model_path>/config.json``, base64 (as slurp returns it: the controller checks and decodes
    it); None without a path or where it cannot be read."""
    if not model_path:
        return None
    try:
        with open(os.path.join(model_path, "config.json"), "rb") as handle:
            data = handle.read(MODEL_CONFIG_MAX + 1)
    except OSError:
        return None
    if len(data) > MODEL_CONFIG_MAX:
        return None
    return base64.b64encode(data).decode("ascii")


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("host_facts"),
        supports_check_mode=True,
    )
    params: dict[str, Any] = module.params
    try:
        inputs = HostInputs(
            meminfo_text=read_meminfo_text(params["proc_root"]),
            declared_gpus=params["declared_gpus"],
            prefer_declared=params["prefer_declared"],
            require_gpus=params["require_gpus"],
            cgroup=read_cgroup_memory(params["cgroup_root"], params["proc_root"]),
            cpu_count=read_cpu_count(),
            numa_nodes=read_numa_nodes(params["sys_root"]),
            service_manager=read_service_manager(params["proc_root"]),
            python_executable=sys.executable,
            python_version=platform.python_version(),
            hostname=socket.gethostname(),
        )
        found: dict[str, Any] = {"manifest": None, "problem": ""}
        if params["deployment_dir"]:
            ownership = find_ownership(params["deployment_dir"], params["proc_root"])
            inputs.owners = ownership.owner_by_pid
            inputs.instances_on_gpu = ownership.instances_on_gpu()
            inputs.deployment = ownership.to_fact()
            # every instance folder with a live process is part of the deployment, listed or not
            found = _manifest.load(params["deployment_dir"], inputs.service_manager, running=ownership.running())
            if found["problem"]:
                module.warn(found["problem"])
        skip_detection = params["prefer_declared"] and bool(params["declared_gpus"])
        if params["use_nvml"] and not skip_detection:
            try:
                inputs.nvml, inputs.nvml_processes = read_nvml()
            except ImportError:
                module.warn("use_nvml: pynvml cannot be imported on this host; using nvidia-smi")
        smi = params["nvidia_smi_path"]
        if smi is None:
            smi = module.get_bin_path("nvidia-smi")
        elif not (os.path.isfile(smi) and os.access(smi, os.X_OK)):
            module.fail_json(msg=f"nvidia_smi_path {smi} is not an executable file")
        if smi and inputs.nvml is None and not skip_detection:
            inputs.gpu_csv, inputs.gpu_fields = _query_gpus(module, smi)
            rc, out, err = module.run_command(
                [smi, f"--query-compute-apps={','.join(APPS_QUERY_FIELDS)}", "--format=csv,noheader,nounits"],
                environ_update=ENV,
            )
            if rc == 0:
                inputs.apps_csv = out
            else:
                module.warn(f"{smi} --query-compute-apps failed (rc={rc}): {(err or out).strip()[:300]}; "
                            "GPU processes are not listed")
            rc, out, _err = module.run_command([smi], environ_update=ENV)
            inputs.smi_text = out if rc == 0 else None
        facts = build_facts(inputs)
        if params["storage_paths"]:
            facts["filesystems"] = filesystem_facts(params["storage_paths"],
                                                    read_mountinfo_text(params["proc_root"]), params["sys_root"])
    except HostFactsError as exc:
        module.fail_json(msg=str(exc))
    for warning in inputs.warnings:
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"sglang_host": facts}, manifest=found["manifest"],
                     manifest_problem=found["problem"] or "", model_config=read_model_config(params["model_path"]))


if __name__ == "__main__":
    main()
