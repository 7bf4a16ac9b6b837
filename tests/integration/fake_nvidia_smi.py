"""A stand-in ``nvidia-smi`` for tests: the two H200 of the recording (tests/fixtures/h200x2),
with the compute processes a test lists in ``state.json`` beside the installed script.

Installed by ``install(folder)`` as ``folder/nvidia-smi`` (an executable that runs this file);
the test then writes ``folder/state.json``: ``{"processes": [{"gpu": 0, "pid": 123,
"used_memory_mib": 70000}]}``. A listed process's name is what the real tool shows: the first
word of its ``/proc/<pid>/cmdline`` (a title such as ``sglang::scheduler``). It answers the
queries ``llmops.sglang.host_facts`` runs (``--query-gpu``, ``--query-compute-apps``, plain)
with the recorded header and numbers; memory in use is the sum of the listed processes.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "h200x2" / "nvidia_smi.txt"
RECORDED_GPUS = [
    {"index": 0, "uuid": "GPU-996b713f-9ed2-dd19-db4b-e39f73bf5126", "name": "NVIDIA H200",
     "pci.bus_id": "00000000:00:06.0", "memory.total": 143771, "driver_version": "580.159.04",
     "compute_cap": "9.0", "mig.mode.current": "Disabled"},
    {"index": 1, "uuid": "GPU-34742c96-76ca-c2ab-63ec-fc65f6aa753a", "name": "NVIDIA H200",
     "pci.bus_id": "00000000:00:07.0", "memory.total": 143771, "driver_version": "580.159.04",
     "compute_cap": "9.0", "mig.mode.current": "Disabled"},
]
RESERVED_MIB = 615  # total - free - used in the recording (143771 - 143156)


def install(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\nimport runpy\n"
                      f"runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__main__',\n"
                      f"               init_globals={{'STATE_DIR': {str(folder)!r}}})\n")
    script.chmod(0o755)
    write_state(folder, [])
    return script


def write_state(folder: Path, processes: list[dict]) -> None:
    (folder / "state.json").write_text(json.dumps({"processes": processes}))


def _name(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "[No data]"
    words = [w for w in raw.split(b"\0") if w]
    return words[0].decode() if words else "[No data]"


def _recorded_plain() -> str:
    text = FIXTURES.read_text()
    start = text.index("### nvidia-smi (plain)\n") + len("### nvidia-smi (plain)\n")
    return text[start:text.index("### ", start)]


def main(argv: list[str], state_dir: str) -> int:
    state = json.loads((Path(state_dir) / "state.json").read_text())
    procs = state.get("processes", [])
    used = {gpu["index"]: sum(p.get("used_memory_mib", 0) for p in procs if p["gpu"] == gpu["index"])
            for gpu in RECORDED_GPUS}
    query = next((a for a in argv[1:] if a.startswith("--query-")), None)
    if query is None:
        sys.stdout.write(_recorded_plain())
        return 0
    kind, _, fields = query.partition("=")
    rows = []
    if kind == "--query-gpu":
        for gpu in RECORDED_GPUS:
            values = dict(gpu)
            values["memory.used"] = used[gpu["index"]]
            values["memory.free"] = gpu["memory.total"] - RESERVED_MIB - used[gpu["index"]]
            rows.append([str(values[f]) for f in fields.split(",")])
    elif kind == "--query-compute-apps":
        uuids = {gpu["index"]: gpu["uuid"] for gpu in RECORDED_GPUS}
        for proc in procs:
            values = {"gpu_uuid": uuids[proc["gpu"]], "pid": proc["pid"], "process_name": _name(proc["pid"]),
                      "used_memory": proc.get("used_memory_mib", 0)}
            rows.append([str(values[f]) for f in fields.split(",")])
    else:
        sys.stderr.write(f"fake nvidia-smi: {kind} is not a valid query\n")
        return 2
    sys.stdout.write("".join(", ".join(row) + "\n" for row in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv, globals()["STATE_DIR"]))
