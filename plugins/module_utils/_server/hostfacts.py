# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Host facts for SGLang deployments: GPUs, host memory budget, CPUs, NUMA, service manager.

Everything here is plain Python. The parsers take the text a host produced (nvidia-smi CSV,
/proc/meminfo, cgroup files) and return plain data; ``build_facts`` assembles the
``sglang_host`` facts from a ``HostInputs``; the ``read_*`` helpers do the file I/O against
configurable roots so tests can point them at a fake /proc, /sys and cgroup tree.

This module is shipped to hosts through AnsiballZ by ``llmops.sglang.host_facts``: it must not
read the collection's data files and must import nothing outside the standard library
(pynvml is imported lazily, only when asked for).
"""
from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

# The query the module runs, in this order; `parse_gpu_csv` maps columns by these names.
GPU_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.free",
    "driver_version",
    "compute_cap",
    "mig.mode.current",
)
# Drivers too old to know a field fail the whole query; the module retries without these.
GPU_OPTIONAL_FIELDS: tuple[str, ...] = ("mig.mode.current",)
APPS_QUERY_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")

# nvidia-smi header names that differ from the query names (seen in the h200x2 recording).
_HEADER_ALIASES = {"used_gpu_memory": "used_memory"}
_REQUIRED_GPU_FIELDS = ("index", "uuid", "name")
_NULL_VALUES = frozenset(
    {
        "",
        "n/a",
        "[n/a]",
        "not supported",
        "[not supported]",
        "[unknown error]",
        "[insufficient permissions]",
        "[gpu is lost]",
        "[gpu requires reset]",
        "[no data]",  # the name of a process that is exiting
    }
)
_NO_DEVICES = re.compile(r"no devices were found", re.IGNORECASE)
_MIB_FACTOR = {"b": 1 / 1048576, "kib": 1 / 1024, "kb": 1 / 1024, "mib": 1, "mb": 1,
               "gib": 1024, "gb": 1024}
_HEADER_CELL = re.compile(r"^[a-z][a-z0-9_.]*$")
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)$")
_CUDA_VERSION = re.compile(r"CUDA(?: Driver)? Version\s*:\s*([0-9]+(?:\.[0-9]+)*)")

# A GPU with this much memory in use counts as busy even when no process is visible
# (processes of other PID namespaces, e.g. containers, are not listed by nvidia-smi).
BUSY_USED_MIB = 1024
# cgroup v1 writes "unlimited" as a huge page-aligned number (0x7FFFFFFFFFFFF000 on 4 KiB pages).
CGROUP_V1_UNLIMITED = 1 << 60

GPU_SOURCES = ("nvidia-smi", "nvml", "declared", "none")
LIMITED_BY = ("meminfo", "cgroup_v2_max", "cgroup_v2_high", "cgroup_v1_limit")


class HostFactsError(ValueError):
    """Input the host produced could not be understood, or the facts cannot be built."""


# ---------------------------------------------------------------------------------------------
# nvidia-smi


def _null(value: str) -> bool:
    return value.strip().lower() in _NULL_VALUES


def _text(value: str) -> str | None:
    value = value.strip()
    return None if _null(value) else value


def _mib(value: str, what: str) -> int | None:
    """A memory size in MiB: "143771", "143771 MiB", "140.4 GiB", "[N/A]" (None)."""
    if _null(value):
        return None
    match = _SIZE.match(value.strip())
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _MIB_FACTOR and unit != "":
        raise HostFactsError(f"{what}: {value.strip()!r} is not a memory size")
    return int(round(float(match.group(1)) * _MIB_FACTOR.get(unit, 1)))


def _int(value: str, what: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise HostFactsError(f"{what}: {value.strip()!r} is not an integer") from None


def _header_name(cell: str) -> str:
    name = re.sub(r"\s*\[[^\]]*\]\s*$", "", cell.strip()).lower()
    return _HEADER_ALIASES.get(name, name)


def _csv_rows(
    text: str, fields: Sequence[str], what: str, merge_field: str | None = None
) -> list[dict[str, str]]:
    """Rows of nvidia-smi CSV as dicts keyed by field name.

    A header line (``--format=csv``) is recognised and then decides the columns, so output
    with units, a header, or more fields than asked for is read correctly. Without a header
    the columns are ``fields`` in order. ``merge_field`` names the one column whose value may
    itself contain commas (a process path): extra cells are joined back into it.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    if len(lines) == 1 and _NO_DEVICES.search(lines[0]):
        return []
    reader = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    columns = list(fields)
    first = [_header_name(cell) for cell in reader[0]]
    if all(_HEADER_CELL.match(name) for name in first) and set(first) & set(fields):
        columns = first
        reader = reader[1:]
        missing = [name for name in fields if name not in columns]
        if missing:
            raise HostFactsError(f"{what}: header lacks {', '.join(missing)}: {lines[0].strip()!r}")
    rows: list[dict[str, str]] = []
    for number, cells in enumerate(reader, start=1):
        if len(cells) > len(columns) and merge_field in columns:
            at = columns.index(merge_field)
            extra = len(cells) - len(columns)
            cells = cells[:at] + [",".join(cells[at : at + extra + 1])] + cells[at + extra + 1 :]
        if len(cells) != len(columns):
            raise HostFactsError(
                f"{what}: line {number} has {len(cells)} fields, expected {len(columns)} "
                f"({', '.join(columns)}): {','.join(cells)!r}"
            )
        rows.append({name: cells[at].strip() for at, name in enumerate(columns)})
    return rows


def parse_gpu_csv(text: str, fields: Sequence[str] = GPU_QUERY_FIELDS) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` output.

    Tolerates a header line, units ("143771 MiB"), extra spaces and null markers
    ("[N/A]", "[Not Supported]"). "No devices were found" gives an empty list. Returns GPU dicts
    in the facts shape, without ``processes``/``busy`` (see ``attach_processes``).
    """
    gpus: list[dict[str, Any]] = []
    for row in _csv_rows(text, fields, "nvidia-smi --query-gpu output"):
        for name in _REQUIRED_GPU_FIELDS:
            if name in row and _null(row[name]):
                raise HostFactsError(f"nvidia-smi --query-gpu output: GPU {name} is empty in {row!r}")
        where = f"nvidia-smi --query-gpu output, GPU {row.get('index', '?')}"
        mig = _text(row.get("mig.mode.current", ""))
        gpus.append(
            {
                "index": _int(row["index"], f"{where} index"),
                "uuid": _text(row["uuid"]),
                "name": _text(row["name"]),
                "pci_bus_id": _text(row.get("pci.bus_id", "")),
                "memory_total_mib": _mib(row.get("memory.total", ""), f"{where} memory.total"),
                "memory_used_mib": _mib(row.get("memory.used", ""), f"{where} memory.used"),
                "memory_free_mib": _mib(row.get("memory.free", ""), f"{where} memory.free"),
                "driver_version": _text(row.get("driver_version", "")),
                "compute_capability": _text(row.get("compute_cap", "")),
                "mig_enabled": (mig or "").lower() == "enabled",
            }
        )
    indexes = [gpu["index"] for gpu in gpus]
    if len(set(indexes)) != len(indexes):
        raise HostFactsError(f"nvidia-smi --query-gpu output: repeated GPU index in {indexes}")
    return sorted(gpus, key=lambda gpu: gpu["index"])


def parse_apps_csv(text: str, fields: Sequence[str] = APPS_QUERY_FIELDS) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-compute-apps=<fields> --format=csv,noheader,nounits`` output.

    Returns ``[{gpu_uuid, pid, process_name, used_memory_mib}]``; ``used_memory_mib`` is None
    where the driver does not report it (MIG, some containers).
    """
    procs: list[dict[str, Any]] = []
    rows = _csv_rows(text, fields, "nvidia-smi --query-compute-apps output", merge_field="process_name")
    for row in rows:
        if _null(row["gpu_uuid"]):
            raise HostFactsError(f"nvidia-smi --query-compute-apps output: no gpu_uuid in {row!r}")
        procs.append(
            {
                "gpu_uuid": row["gpu_uuid"].strip(),
                "pid": _int(row["pid"], "nvidia-smi --query-compute-apps output pid"),
                "process_name": _text(row["process_name"]),
                "used_memory_mib": _mib(row["used_memory"], "nvidia-smi --query-compute-apps used_memory"),
            }
        )
    return procs


def parse_cuda_version(text: str) -> str | None:
    """The "CUDA Version: 13.0" of plain ``nvidia-smi`` (or ``nvidia-smi -q``) output."""
    match = _CUDA_VERSION.search(text or "")
    return match.group(1) if match else None


def attach_processes(
    gpus: list[dict[str, Any]],
    procs: Iterable[Mapping[str, Any]],
    busy_used_mib: int = BUSY_USED_MIB,
    owners: Mapping[int, str] | None = None,
    instances_on_gpu: Mapping[int, list[str]] | None = None,
) -> list[dict[str, Any]]:
    """Give each GPU its ``processes`` (matched by UUID, each with the ``owner`` instance of this
    deployment or None), ``owned_by`` and ``busy``; return the unmatched processes.

    ``busy`` means in use by something that is not this deployment: a listed process without
    an owner, or memory in use with no process listed (another PID namespace) on a GPU that
    no running instance of this deployment was given.
    """
    owners = owners or {}
    instances_on_gpu = instances_on_gpu or {}
    by_uuid = {gpu["uuid"]: gpu for gpu in gpus if gpu.get("uuid")}
    for gpu in gpus:
        gpu["processes"] = []
    unmatched: list[dict[str, Any]] = []
    for proc in procs:
        gpu = by_uuid.get(proc["gpu_uuid"])
        entry = {key: proc[key] for key in ("pid", "process_name", "used_memory_mib")}
        entry["owner"] = owners.get(int(proc["pid"])) if proc.get("pid") is not None else None
        if gpu is None:
            unmatched.append(dict(proc))
        else:
            gpu["processes"].append(entry)
    for gpu in gpus:
        used = gpu.get("memory_used_mib")
        index = gpu.get("index")
        mine = sorted({p["owner"] for p in gpu["processes"] if p["owner"]}
                      | set(instances_on_gpu.get(index, []) if isinstance(index, int) else []))
        foreign = [p for p in gpu["processes"] if not p["owner"]]
        unexplained = not gpu["processes"] and used is not None and used >= busy_used_mib and not mine
        gpu["owned_by"] = mine
        gpu["busy"] = bool(foreign) or unexplained
    return unmatched


# ---------------------------------------------------------------------------------------------
# NVML and declared GPUs


def cuda_version_from_int(value: int | None) -> str | None:
    """NVML's ``nvmlSystemGetCudaDriverVersion`` (13000) as "13.0"."""
    if not value:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def gpus_from_nvml(readings: Mapping[str, Any]) -> list[dict[str, Any]]:
    """GPU dicts from pynvml readings (the shape of ``read_nvml`` and the recorded nvml.json).

    NVML's v1 ``used`` includes the driver's reserved memory, which nvidia-smi leaves out;
    a ``reserved`` reading (v2 memory info), when present, is taken off.
    """
    gpus: list[dict[str, Any]] = []
    for dev in readings.get("gpus", []):
        try:
            total, free = int(dev["total"]), int(dev["free"])
            used = int(dev["used"]) - int(dev.get("reserved") or 0)
            cc = dev.get("cc")
            gpus.append(
                {
                    "index": int(dev["index"]),
                    "uuid": dev.get("uuid"),
                    "name": dev["name"],
                    "pci_bus_id": dev.get("pci"),
                    "memory_total_mib": round(total / 1048576),
                    "memory_used_mib": round(max(used, 0) / 1048576),
                    "memory_free_mib": round(free / 1048576),
                    "driver_version": readings.get("driver"),
                    "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                    "mig_enabled": bool(dev.get("mig_enabled", False)),
                }
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise HostFactsError(f"NVML readings: unusable GPU entry {dev!r}: {exc}") from None
    return sorted(gpus, key=lambda gpu: gpu["index"])


def read_nvml() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read GPUs through pynvml: (readings in the nvml.json shape, compute processes).

    Raises ImportError when pynvml is missing and HostFactsError when NVML fails.
    """
    import pynvml  # type: ignore[import-not-found]  # noqa: PLC0415  (optional, lazily)

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise HostFactsError(f"NVML could not start: {exc}") from None
    try:
        readings: dict[str, Any] = {
            "driver": text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": int(pynvml.nvmlSystemGetCudaDriverVersion()),
            "gpus": [],
        }
        procs: list[dict[str, Any]] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:  # v2 carries the driver's reserved memory (what nvidia-smi leaves out of "used")
                mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            except (AttributeError, TypeError, pynvml.NVMLError):
                mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            uuid = text(pynvml.nvmlDeviceGetUUID(handle))
            try:
                mig = pynvml.nvmlDeviceGetMigMode(handle)[0] == 1
            except pynvml.NVMLError:
                mig = False
            readings["gpus"].append(
                {
                    "index": index,
                    "name": text(pynvml.nvmlDeviceGetName(handle)),
                    "uuid": uuid,
                    "total": int(mem.total),
                    "free": int(mem.free),
                    "used": int(mem.used),
                    "reserved": int(getattr(mem, "reserved", 0) or 0),
                    "pci": text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                    "cc": list(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                    "mig_enabled": mig,
                }
            )
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                try:
                    name: str | None = text(pynvml.nvmlSystemGetProcessName(proc.pid))
                except pynvml.NVMLError:
                    name = None
                used_bytes = getattr(proc, "usedGpuMemory", None)
                procs.append(
                    {
                        "gpu_uuid": uuid,
                        "pid": int(proc.pid),
                        "process_name": name,
                        "used_memory_mib": round(int(used_bytes) / 1048576) if used_bytes else None,
                    }
                )
        return readings, procs
    except pynvml.NVMLError as exc:
        raise HostFactsError(f"NVML query failed: {exc}") from None
    finally:
        pynvml.nvmlShutdown()


def declared_gpu_list(declared: Iterable[Any]) -> list[dict[str, Any]]:
    """GPU dicts from ``declared_gpus``: names, or ``{name, memory_mib?, count?}``.

    Memory stays None when not declared: the planner fills it from its GPU table.
    """
    gpus: list[dict[str, Any]] = []
    for item in declared:
        entry = {"name": item} if isinstance(item, str) else item
        if not isinstance(entry, Mapping):
            raise HostFactsError(f"declared_gpus: {item!r} is neither a GPU name nor a mapping")
        unknown = sorted(set(entry) - {"name", "memory_mib", "count"})
        if unknown:
            raise HostFactsError(f"declared_gpus: unknown key(s) {', '.join(unknown)} in {item!r}"
                                 " (allowed: name, memory_mib, count)")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise HostFactsError(f"declared_gpus: {item!r} has no name")
        count, memory = entry.get("count", 1), entry.get("memory_mib")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise HostFactsError(f"declared_gpus: count of {name!r} must be a positive integer, got {count!r}")
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 1):
            raise HostFactsError(f"declared_gpus: memory_mib of {name!r} must be a positive integer, "
                                 f"got {memory!r}")
        for _ in range(count):
            gpus.append(
                {
                    "index": len(gpus),
                    "uuid": None,
                    "name": name.strip(),
                    "pci_bus_id": None,
                    "memory_total_mib": memory,
                    "memory_used_mib": 0 if memory is not None else None,
                    "memory_free_mib": memory,
                    "driver_version": None,
                    "compute_capability": None,
                    "mig_enabled": False,
                }
            )
    return gpus


# ---------------------------------------------------------------------------------------------
# Host memory and cgroups


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as ``{total_bytes, available_bytes}``.

    Kernels older than 3.14 lack MemAvailable: MemFree + Buffers + Cached stands in.
    """
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        try:
            number = int(parts[0])
        except ValueError:
            continue
        unit = parts[1].lower() if len(parts) > 1 else ""
        values[key.strip()] = number * 1024 if unit == "kb" else number
    if "MemTotal" not in values:
        raise HostFactsError("/proc/meminfo has no MemTotal line")
    available = values.get("MemAvailable")
    if available is None:
        available = sum(values.get(key, 0) for key in ("MemFree", "Buffers", "Cached"))
    return {"total_bytes": values["MemTotal"], "available_bytes": available}


def parse_cgroup_v2_limit(text: str, what: str = "memory.max") -> int | None:
    """A cgroup v2 memory.max / memory.high value in bytes; "max" is None (unlimited)."""
    value = text.strip()
    if value == "max":
        return None
    if not value.isdigit():
        raise HostFactsError(f"cgroup {what}: {value!r} is neither a byte count nor 'max'")
    return int(value)


def parse_cgroup_v1_limit(text: str) -> int | None:
    """cgroup v1 memory.limit_in_bytes; the huge "no limit" numbers are None."""
    value = text.strip()
    try:
        number = int(value)
    except ValueError:
        raise HostFactsError(f"cgroup memory.limit_in_bytes: {value!r} is not a byte count") from None
    return None if number < 0 or number >= CGROUP_V1_UNLIMITED else number


def parse_memory_stat(text: str) -> dict[str, int]:
    """A cgroup memory.stat file as a dict of integers."""
    stats: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            stats[parts[0]] = int(parts[1])
    return stats


def parse_proc_self_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup as ``{"v2": path, "memory": v1 memory path}`` (keys present if found)."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            paths["v2"] = path
        elif "memory" in controllers.split(","):
            paths["memory"] = path
    return paths


@dataclass
class CgroupLevel:
    """One cgroup on the path from the process's cgroup to the root, with its memory limits."""

    path: str
    max_bytes: int | None = None
    high_bytes: int | None = None
    usage_bytes: int | None = None  # charged memory less reclaimable inactive file cache


@dataclass
class CgroupMemory:
    version: int | None = None
    path: str | None = None
    levels: list[CgroupLevel] = field(default_factory=list)


def cgroup_summary(cgroup: CgroupMemory) -> dict[str, Any]:
    """Limits over the whole path (the smallest wins) and the headroom under the tightest one.

    ``available_bytes`` = min over limited levels of (limit - usage), or None when no level
    sets a limit; ``limited_by`` names the kind of limit that gives it.
    """
    max_bytes = _min_or_none(level.max_bytes for level in cgroup.levels)
    high_bytes = _min_or_none(level.high_bytes for level in cgroup.levels)
    best: tuple[int, str] | None = None
    kind_max = "cgroup_v2_max" if cgroup.version == 2 else "cgroup_v1_limit"
    for level in cgroup.levels:
        for limit, kind in ((level.max_bytes, kind_max), (level.high_bytes, "cgroup_v2_high")):
            if limit is None:
                continue
            room = max(limit - (level.usage_bytes or 0), 0)
            if best is None or room < best[0]:
                best = (room, kind)
    usage = cgroup.levels[0].usage_bytes if cgroup.levels else None
    return {
        "version": cgroup.version,
        "path": cgroup.path,
        "max_bytes": max_bytes,
        "high_bytes": high_bytes,
        "usage_bytes": usage,
        "available_bytes": best[0] if best else None,
        "limited_by": best[1] if best else None,
    }


def _min_or_none(values: Iterable[int | None]) -> int | None:
    present = [value for value in values if value is not None]
    return min(present) if present else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _walk_up(root: Path, rel: str) -> list[Path]:
    """Directories from ``root/rel`` up to ``root`` (just ``root`` if ``rel`` is not there,
    as inside a container whose /proc/self/cgroup names a host path)."""
    start = (root / rel.lstrip("/")).resolve() if rel else root.resolve()
    root = root.resolve()
    if not start.is_dir() or (start != root and root not in start.parents):
        start = root
    dirs = [start]
    while dirs[-1] != root:
        dirs.append(dirs[-1].parent)
    return dirs


def read_cgroup_memory(cgroup_root: str | Path, proc_root: str | Path) -> CgroupMemory:
    """Memory limits of this process's cgroup and its ancestors (v2 unified, or v1 memory)."""
    cgroup_root, proc_root = Path(cgroup_root), Path(proc_root)
    paths = parse_proc_self_cgroup(_read(proc_root / "self" / "cgroup") or "")
    controllers = _read(cgroup_root / "cgroup.controllers")
    if controllers is not None and "memory" in controllers.split():
        rel = paths.get("v2", "/")
        levels = []
        for directory in _walk_up(cgroup_root, rel):
            max_text, high_text = _read(directory / "memory.max"), _read(directory / "memory.high")
            current = _read(directory / "memory.current")
            stat = parse_memory_stat(_read(directory / "memory.stat") or "")
            levels.append(
                CgroupLevel(
                    path="/" + str(directory.relative_to(cgroup_root.resolve())).lstrip("."),
                    max_bytes=parse_cgroup_v2_limit(max_text, "memory.max") if max_text else None,
                    high_bytes=parse_cgroup_v2_limit(high_text, "memory.high") if high_text else None,
                    usage_bytes=_usage(current, stat.get("inactive_file", 0)),
                )
            )
        return CgroupMemory(version=2, path=rel, levels=levels)
    memory_root = cgroup_root / "memory"
    if (memory_root / "memory.limit_in_bytes").is_file():
        rel = paths.get("memory", "/")
        levels = []
        for directory in _walk_up(memory_root, rel):
            limit_text = _read(directory / "memory.limit_in_bytes")
            stat = parse_memory_stat(_read(directory / "memory.stat") or "")
            levels.append(
                CgroupLevel(
                    path="/" + str(directory.relative_to(memory_root.resolve())).lstrip("."),
                    max_bytes=parse_cgroup_v1_limit(limit_text) if limit_text else None,
                    usage_bytes=_usage(_read(directory / "memory.usage_in_bytes"),
                                       stat.get("total_inactive_file", 0)),
                )
            )
        return CgroupMemory(version=1, path=rel, levels=levels)
    return CgroupMemory()


def _usage(current: str | None, inactive_file: int) -> int | None:
    if current is None or not current.strip().isdigit():
        return None
    return max(int(current.strip()) - inactive_file, 0)


def memory_facts(meminfo: Mapping[str, int], cgroup: CgroupMemory) -> dict[str, Any]:
    """The ``memory`` facts: the effective budget is the smaller of MemAvailable and the
    headroom under the tightest cgroup limit."""
    summary = cgroup_summary(cgroup)
    effective, limited_by = meminfo["available_bytes"], "meminfo"
    if summary["available_bytes"] is not None and summary["available_bytes"] < effective:
        effective, limited_by = summary["available_bytes"], summary["limited_by"]
    return {
        "total_bytes": meminfo["total_bytes"],
        "available_bytes": meminfo["available_bytes"],
        "cgroup": {key: summary[key] for key in
                   ("version", "path", "max_bytes", "high_bytes", "usage_bytes", "available_bytes")},
        "effective_available_bytes": effective,
        "limited_by": limited_by,
    }


# ---------------------------------------------------------------------------------------------
# CPUs, NUMA, service manager


def numa_node_count(names: Iterable[str]) -> int:
    """NUMA nodes from the entries of /sys/devices/system/node (``node0``, ``node1``...)."""
    count = sum(1 for name in names if re.fullmatch(r"node[0-9]+", name))
    return max(count, 1)


def read_numa_nodes(sys_root: str | Path) -> int:
    try:
        return numa_node_count(os.listdir(Path(sys_root) / "devices" / "system" / "node"))
    except OSError:
        return 1


def detect_service_manager(pid1_comm: str | None, run_systemd_exists: bool) -> str:
    """"systemd" when PID 1 is systemd and /run/systemd/system exists, else "process"."""
    return "systemd" if (pid1_comm or "").strip() == "systemd" and run_systemd_exists else "process"


def read_cpu_count() -> int:
    """CPUs this process may run on (its affinity mask), else the online count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------
# Assembling the facts


@dataclass
class HostInputs:
    """Everything ``build_facts`` needs, as read from a host (or from a recording)."""

    meminfo_text: str
    gpu_csv: str | None = None  # None: no nvidia-smi on the host
    gpu_fields: Sequence[str] = GPU_QUERY_FIELDS
    apps_csv: str | None = None
    apps_fields: Sequence[str] = APPS_QUERY_FIELDS
    smi_text: str | None = None  # plain `nvidia-smi` (for the CUDA version)
    nvml: Mapping[str, Any] | None = None  # readings (nvml.json shape), when NVML was used
    nvml_processes: Sequence[Mapping[str, Any]] = ()
    declared_gpus: Sequence[Any] = ()
    prefer_declared: bool = False
    require_gpus: bool = True
    cgroup: CgroupMemory = field(default_factory=CgroupMemory)
    cpu_count: int = 1
    numa_nodes: int = 1
    service_manager: str = "process"
    python_executable: str | None = None
    python_version: str | None = None
    hostname: str | None = None
    owners: Mapping[int, str] = field(default_factory=dict)  # pid -> instance of this deployment
    instances_on_gpu: Mapping[int, list[str]] = field(default_factory=dict)
    deployment: Mapping[str, Any] | None = None  # _ownership.Ownership.to_fact()
    warnings: list[str] = field(default_factory=list)  # filled by build_facts


def build_facts(inputs: HostInputs) -> dict[str, Any]:
    """The ``sglang_host`` facts. GPU source: declared if ``prefer_declared``; else NVML
    readings if given; else nvidia-smi if it ran; else declared GPUs. Raises HostFactsError
    when no GPU is found or declared and ``require_gpus`` is set."""
    declared = declared_gpu_list(inputs.declared_gpus)  # validated even when not used
    cuda_version: str | None = None
    procs: list[Mapping[str, Any]] = []
    if inputs.prefer_declared and declared:
        source, gpus = "declared", declared
    elif inputs.nvml is not None:
        source, gpus = "nvml", gpus_from_nvml(inputs.nvml)
        cuda_version = cuda_version_from_int(inputs.nvml.get("cuda_driver"))
        procs = list(inputs.nvml_processes)
    elif inputs.gpu_csv is not None:
        source, gpus = "nvidia-smi", parse_gpu_csv(inputs.gpu_csv, inputs.gpu_fields)
        cuda_version = parse_cuda_version(inputs.smi_text or "")
        if inputs.apps_csv:
            procs = parse_apps_csv(inputs.apps_csv, inputs.apps_fields)
    else:
        source, gpus = "declared", declared
    if not gpus and declared and source != "declared":
        inputs.warnings.append(f"{source} found no GPU: using the declared GPUs")
        source, gpus, cuda_version, procs = "declared", declared, None, []
    if not gpus:
        if inputs.require_gpus:
            looked = {"nvml": "NVML", "nvidia-smi": "nvidia-smi"}.get(source, "nvidia-smi (not installed)")
            raise HostFactsError(
                f"no GPU found on this host ({looked} reported none) and none declared: install "
                "the NVIDIA driver, or set declared_gpus (e.g. ['NVIDIA H200']) to plan for GPUs "
                "this host does not have, or set require_gpus=false"
            )
        source = "none"
    unmatched = attach_processes(gpus, procs, owners=inputs.owners, instances_on_gpu=inputs.instances_on_gpu)
    for proc in unmatched:
        inputs.warnings.append(f"GPU process {proc.get('pid')} is on {proc.get('gpu_uuid')}, "
                               "which is not among the GPUs listed")
    driver = inputs.nvml.get("driver") if source == "nvml" and inputs.nvml else None
    driver = driver or next((gpu["driver_version"] for gpu in gpus if gpu.get("driver_version")), None)
    return {
        "schema_version": SCHEMA_VERSION,
        "gpu_source": source,
        "gpus": gpus,
        "gpu_count": len(gpus),
        "driver_version": driver,
        "cuda_version": cuda_version,
        "memory": memory_facts(parse_meminfo(inputs.meminfo_text), inputs.cgroup),
        "cpu_count": inputs.cpu_count,
        "numa_nodes": inputs.numa_nodes,
        "service_manager": inputs.service_manager,
        "python": {"executable": inputs.python_executable, "version": inputs.python_version},
        "hostname": inputs.hostname,
        "deployment": dict(inputs.deployment) if inputs.deployment is not None else None,
    }


def read_meminfo_text(proc_root: str | Path) -> str:
    text = _read(Path(proc_root) / "meminfo")
    if text is None:
        raise HostFactsError(f"cannot read {Path(proc_root) / 'meminfo'}")
    return text


def read_service_manager(proc_root: str | Path, run_systemd: str | Path = "/run/systemd/system") -> str:
    return detect_service_manager(_read(Path(proc_root) / "1" / "comm"), Path(run_systemd).is_dir())
