"""Tests for the plugins/module_utils/_report package and the sweep_report module.

The sweep numbers are the seed's MTP + HiCache table, read from tests/fixtures/seed-benchmarks.md
(a copy of the seed's reference/seed-benchmarks.md; n = max(2C, 8), 1024 output tokens per request, the walls
and tok/s as measured). The baseline profile ("mtp", before HiCache) carries the two numbers
the seed recorded for it: C=4 at 234 tok/s, C=1 within the 62-77 tok/s the seed gives.
Latencies are synthetic (the seed did not record them) and only have to be plausible.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _report
from ansible_collections.llmops.sglang.plugins.module_utils._report import (
    CSV_HEADER,
    render_table,
    write_report,
)
from ansible_collections.llmops.sglang.plugins.module_utils._report import plots as _report_plots

ROOT = Path(__file__).resolve().parents[5]
VENV_BIN = Path(sys.executable).parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN_ID = "20261130T051500Z"


# --------------------------------------------------------------------------- fixtures
def seed_rows(fixtures_dir: Path) -> list[str]:
    """The data rows of the seed's MTP + HiCache table, exactly as written."""
    text = (fixtures_dir / "seed-benchmarks.md").read_text(encoding="utf-8")
    section = text.split("## The MTP + HiCache sweep", 1)[1]
    return [line.strip() for line in section.splitlines() if re.match(r"^\|\s*\d", line)]


def parse_row(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def make_point(c: int, n: int, ok: int, err: int, tok_s: float, avg_out: int, wall: float) -> dict[str, Any]:
    out_tokens = ok * avg_out
    itl = 1000.0 * c / tok_s  # each stream gets tok_s / c tokens per second
    ttft = 80.0 + 12.0 * c
    return {
        "concurrency": c,
        "requests": n,
        "ok": ok,
        "errors": {"http": err, "stream": 0, "timeout": 0, "connection": 0, "short": 0, "total": err},
        "output_tokens": out_tokens,
        "avg_output_tokens": avg_out,
        "duration_s": wall,
        "output_tok_s": tok_s,
        "steady_output_tok_s": tok_s * 1.04,
        "req_s": ok / wall,
        "ttft_ms": {"mean": ttft * 1.1, "p50": ttft, "p90": ttft * 1.6, "p99": ttft * 2.2},
        "itl_ms": {"mean": itl, "p50": itl * 0.97, "p90": itl * 1.3, "p99": itl * 1.9},
        "tpot_ms": {"mean": itl, "p50": itl, "p90": itl * 1.2, "p99": itl * 1.4},
        "e2e_s": {"mean": wall / max(n // c, 1), "p50": wall / max(n // c, 1), "p90": 0.0, "p99": 0.0},
        "achieved_concurrency": c * 0.97,
        "client_limited": False,
        "client": {"loop_lag_ms_p99": 1.5, "cpu_util": 0.04},
        "server_after": {"num_running_reqs": 0},
    }


def make_records(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    records = []
    for level, point in enumerate(points):
        for index in range(point["requests"]):
            records.append({
                "level": level, "concurrency": point["concurrency"], "index": index, "ok": True,
                "error_kind": None, "http_status": 200, "output_tokens": 1024,
                "finish_reason": "length", "ttft_ms": point["ttft_ms"]["p50"],
                "e2e_s": point["e2e_s"]["p50"], "itl_ms_mean": point["itl_ms"]["mean"],
                "start_s": 0.0, "end_s": point["e2e_s"]["p50"],
            })
    return records


def make_sweep(points: list[dict[str, Any]], knee: dict[str, Any] | None, url: str, mrr: int) -> dict[str, Any]:
    peak = max(points, key=lambda p: p["output_tok_s"])
    return {
        "schema_version": 1,
        "url": url,
        "api": "generate",
        "model": "Qwen3.6-27B",
        "server": {"version": "0.5.23", "max_running_requests": mrr, "avg_spec_accept_length_before": 3.2,
                   "avg_spec_accept_length_after": 3.21, "server_info_path": "/server_info"},
        "started": "2026-11-30T05:00:00Z",
        "finished": "2026-11-30T05:15:00Z",
        "options": {"max_tokens": 1024, "temperature": 0.6, "top_p": 0.95},
        "points": points,
        "peak": {"concurrency": peak["concurrency"], "output_tok_s": peak["output_tok_s"]},
        "knee": knee,
        "stopped_on_plateau": False,
        "records": make_records(points),
    }


@pytest.fixture()
def seed(fixtures_dir: Path) -> list[str]:
    rows = seed_rows(fixtures_dir)
    assert len(rows) == 6, rows
    return rows


@pytest.fixture()
def results(seed: list[str]) -> list[dict[str, Any]]:
    hicache_points = []
    for row in seed:
        c, n, ok, err, tok_s, avg_out, wall = parse_row(row)
        hicache_points.append(make_point(int(c), int(n), int(ok), int(err), float(tok_s), int(avg_out), float(wall)))
    knee = {"concurrency": 8, "output_tok_s": 369.7, "share_of_peak": 369.7 / 409.0}
    baseline_points = [
        make_point(1, 8, 8, 0, 70.0, 1024, 8 * 1024 / 70.0),
        make_point(4, 8, 8, 0, 234.0, 1024, 8 * 1024 / 234.0),
    ]
    return [
        {"meta": {"host": "node1", "instance": "gpu0", "profile": "mtp", "release": "0.5.23",
                  "engine": "sglang", "gpus": [0], "url": "http://127.0.0.1:30000"},
         "sweep": make_sweep(baseline_points, None, "http://127.0.0.1:30000", 4)},
        {"meta": {"host": "node1", "instance": "gpu1", "profile": "mtp_hicache", "release": "0.5.23",
                  "engine": "sglang", "gpus": [1], "url": "http://127.0.0.1:30001"},
         "sweep": make_sweep(hicache_points, knee, "http://127.0.0.1:30001", 9)},
    ]


def instance_section(md: str, label: str) -> str:
    return md.split(f"### {label}", 1)[1].split("###", 1)[0]


# --------------------------------------------------------------------------- markdown
def test_render_table_reproduces_seed(results: list[dict[str, Any]], seed: list[str]) -> None:
    table = render_table(results[1]["sweep"])
    lines = table.splitlines()
    assert lines[0].startswith("| C | n | ok | err | output tok/s | avg_out | wall s |")
    assert "TTFT p50 ms" in lines[0] and "TTFT p99 ms" in lines[0]
    assert "ITL p50 ms" in lines[0] and "ITL p99 ms" in lines[0]
    body = lines[2:]
    assert len(body) == len(seed)
    for ours, theirs in zip(body, seed, strict=True):
        assert parse_row(ours)[:7] == parse_row(theirs)
        assert len(parse_row(ours)) == 11


def test_summary_md(results: list[dict[str, Any]], seed: list[str], tmp_path: Path) -> None:
    report = write_report(results, str(tmp_path / "reports" / RUN_ID), title="seed")
    md = (tmp_path / "reports" / RUN_ID / "summary.md").read_text(encoding="utf-8")
    assert md.startswith("# seed\n")
    section = instance_section(md, "node1/gpu1 (mtp_hicache)")
    for row in seed:
        assert any(parse_row(line)[:7] == parse_row(row) for line in section.splitlines() if line.startswith("| "))
    assert "Peak: 409.0 tok/s at C=48" in section
    assert "knee: C=8 (369.7 tok/s, 90% of peak)" in section
    assert "client-limited levels: none" in section
    baseline = instance_section(md, "node1/gpu0 (mtp)")
    assert "Peak: 234.0 tok/s at C=4" in baseline and "knee: not found" in baseline
    # Profile comparison: baseline first, +75% as in the seed's read of the numbers.
    profiles = md.split("### Profiles", 1)[1]
    rows = [parse_row(line) for line in profiles.splitlines() if line.startswith("| mtp")]
    assert rows[0][0] == "mtp" and rows[0][2] == "234.0" and "baseline" in rows[0][-1]
    assert rows[1][0] == "mtp_hicache" and rows[1][2] == "409.0" and rows[1][-1] == "1.75x (+75%)"
    # The printed table is the body of summary.md.
    assert report["table"] in md
    assert "### Profiles" in report["table"]


def test_single_profile_has_no_profile_table(results: list[dict[str, Any]], tmp_path: Path) -> None:
    report = write_report(results[1:], str(tmp_path / "r" / RUN_ID))
    assert "### Profiles" not in report["table"]
    assert not (tmp_path / "r" / RUN_ID / "profiles.png").exists()
    assert {Path(p).name for p in report["plots"]} == {"throughput.png", "latency.png"}


# --------------------------------------------------------------------------- files
def test_csv(results: list[dict[str, Any]], tmp_path: Path) -> None:
    write_report(results, str(tmp_path / RUN_ID), latest_link=False)
    with open(tmp_path / RUN_ID / "summary.csv", encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        header = reader.fieldnames
    assert tuple(header or ()) == CSV_HEADER
    for column in ("host", "instance", "profile", "release", "engine", "concurrency", "requests", "ok",
                   "err", "output_tok_s", "steady_output_tok_s", "avg_out", "wall_s", "req_s",
                   "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms",
                   "tpot_p50_ms", "e2e_p50_s", "e2e_p99_s", "achieved_concurrency", "client_limited"):
        assert column in CSV_HEADER
    assert len(rows) == 2 + 6
    hicache = [r for r in rows if r["profile"] == "mtp_hicache"]
    assert [r["concurrency"] for r in hicache] == ["1", "4", "8", "16", "32", "48"]
    assert hicache[0]["output_tok_s"] == "61.2" and hicache[0]["wall_s"] == "133.8"
    assert hicache[0]["err"] == "0" and hicache[0]["client_limited"] == "false"
    assert [r["is_knee"] for r in hicache].count("true") == 1 and hicache[2]["is_knee"] == "true"
    assert hicache[-1]["is_peak"] == "true"
    assert hicache[0]["gpus"] == "1"


def test_json_round_trip(results: list[dict[str, Any]], tmp_path: Path) -> None:
    report = write_report(results, str(tmp_path / RUN_ID), latest_link=False)
    names = {Path(f).name for f in report["files"] if f.endswith(".json")}
    assert names == {"node1_gpu0_mtp.json", "node1_gpu1_mtp_hicache.json"}
    for item in results:
        meta = item["meta"]
        path = tmp_path / RUN_ID / f"{meta['host']}_{meta['instance']}_{meta['profile']}.json"
        loaded = json.loads(path.read_text(encoding="utf-8"))
        assert loaded == {"meta": meta, "sweep": item["sweep"]}
        assert len(loaded["sweep"]["records"]) == sum(p["requests"] for p in item["sweep"]["points"])


def test_json_names_unique_and_safe(results: list[dict[str, Any]], tmp_path: Path) -> None:
    twin = json.loads(json.dumps(results[1]))
    odd = json.loads(json.dumps(results[1]))
    odd["meta"].update(host="gpu host/1", instance=None)
    report = write_report([results[1], twin, odd], str(tmp_path / RUN_ID), latest_link=False)
    names = [Path(f).name for f in report["files"] if f.endswith(".json")]
    assert names == ["node1_gpu1_mtp_hicache.json", "node1_gpu1_mtp_hicache-2.json",
                     "gpu-host-1_unknown_mtp_hicache.json"]


def test_pngs(results: list[dict[str, Any]], tmp_path: Path) -> None:
    report = write_report(results, str(tmp_path / RUN_ID), latest_link=False)
    assert {Path(p).name for p in report["plots"]} == {"throughput.png", "latency.png", "profiles.png"}
    for plot in report["plots"]:
        data = Path(plot).read_bytes()
        assert data[:8] == PNG_MAGIC
        assert len(data) > 20_000, plot
        assert plot in report["files"]
    assert report["warnings"] == []
    keep = os.environ.get("LLMOPS_REPORT_KEEP")  # set it to look at the plots
    if keep:
        for plot in report["plots"]:
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / Path(plot).name).write_bytes(Path(plot).read_bytes())


def test_no_matplotlib(results: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_report_plots, "_figure_class", lambda: None)
    report = write_report(results, str(tmp_path / RUN_ID))
    assert report["plots"] == []
    assert any("matplotlib" in w for w in report["warnings"])
    assert {Path(f).name for f in report["files"]} >= {"summary.csv", "summary.md"}
    assert not list((tmp_path / RUN_ID).glob("*.png"))


# --------------------------------------------------------------------------- latest link
def test_latest_link_replaced(results: list[dict[str, Any]], tmp_path: Path) -> None:
    root = tmp_path / "reports"
    first = write_report(results, str(root / "20261130T051500Z"))
    link = root / "latest"
    assert first["latest"] == str(link)
    assert link.is_symlink() and os.readlink(link) == "20261130T051500Z"
    second = write_report(results, str(root / "20261130T061500Z"))
    assert second["latest"] == str(link)
    assert os.readlink(link) == "20261130T061500Z"
    assert (link / "summary.md").is_file()
    assert sorted(p.name for p in root.iterdir()) == ["20261130T051500Z", "20261130T061500Z", "latest"]


def test_latest_not_a_link_is_left_alone(results: list[dict[str, Any]], tmp_path: Path) -> None:
    root = tmp_path / "reports"
    (root / "latest").mkdir(parents=True)
    report = write_report(results[1:], str(root / RUN_ID))
    assert report["latest"] is None
    assert any("latest" in w for w in report["warnings"])
    assert (root / "latest").is_dir() and not (root / "latest").is_symlink()


def test_no_latest_link(results: list[dict[str, Any]], tmp_path: Path) -> None:
    report = write_report(results, str(tmp_path / RUN_ID), latest_link=False)
    assert report["latest"] is None
    assert not (tmp_path / "latest").exists()


# --------------------------------------------------------------------------- tolerance
def test_missing_fields_tolerated(tmp_path: Path) -> None:
    sweep = {
        "schema_version": 1,
        "points": [
            {"concurrency": 1, "requests": 8, "ok": 6, "output_tok_s": 50.0, "duration_s": 10.0},
            {"concurrency": 2, "requests": 8, "ok": 8, "errors": {"http": 0, "timeout": 0},
             "output_tok_s": 90.5, "ttft_ms": {"p50": 100.0}, "client_limited": True},
            {"concurrency": 4, "requests": 8, "ok": 0,
             "errors": {"http": 8, "stream": 0, "timeout": 0, "connection": 0, "short": 0, "total": 8},
             "output_tok_s": None, "ttft_ms": None, "itl_ms": {}},
            {"requests": 1},  # no concurrency: skipped
        ],
        "knee": None,
    }
    results = [{"meta": {"host": "h", "instance": "gpu0"}, "sweep": sweep}, {"points": [], "url": "http://x"}]
    report = write_report(results, str(tmp_path / RUN_ID))
    table = render_table(sweep).splitlines()
    assert parse_row(table[2]) == ["1", "8", "6", "2", "50.0", "-", "10.0", "-", "-", "-", "-"]
    assert parse_row(table[3])[:5] == ["2*", "8", "8", "0", "90.5"]
    assert parse_row(table[4])[:5] == ["4", "8", "0", "8", "-"]
    assert len(table) == 5
    md = (tmp_path / RUN_ID / "summary.md").read_text(encoding="utf-8")
    assert "Peak: 90.5 tok/s at C=2" in md and "knee: not found" in md
    assert "client-limited (marked *" in md and "C=2" in md
    assert "Peak: none" in md  # the empty sweep
    with open(tmp_path / RUN_ID / "summary.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3
    assert rows[0]["err"] == "2" and rows[0]["ttft_p50_ms"] == "" and rows[0]["profile"] == ""
    assert len(report["plots"]) == 2


def test_bad_results_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no 'sweep'"):
        write_report([{"meta": {}}], str(tmp_path / RUN_ID))
    with pytest.raises(ValueError, match="expected a dict"):
        write_report(["x"], str(tmp_path / RUN_ID))  # type: ignore[list-item]


# --------------------------------------------------------------------------- the module
def run_playbook(tmp_path: Path, results: list[dict[str, Any]], *extra: str,
                 options: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "vars.json").write_text(json.dumps({"sweep_results": results, "options": options or {}}),
                                        encoding="utf-8")
    playbook = tmp_path / "report.yml"
    playbook.write_text(
        "- name: Report\n"
        "  hosts: localhost\n"
        "  gather_facts: false\n"
        "  vars_files: [vars.json]\n"
        "  tasks:\n"
        "    - name: Write the report\n"
        "      llmops.sglang.sweep_report:\n"
        "        results: \"{{ sweep_results }}\"\n"
        f"        dest: \"{tmp_path / 'reports'}\"\n"
        f"        run_id: {RUN_ID}\n"
        "        title: e2e\n"
        "        capacity_target_rps: \"{{ options.capacity_target_rps | default(0) }}\"\n"
        "        host_facts: \"{{ options.host_facts | default({}) }}\"\n"
        "      delegate_to: localhost\n"
        "      run_once: true\n"
        "      register: report\n"
        "    - name: Show\n"
        "      ansible.builtin.debug:\n"
        "        msg: \"REPORT={{ report | to_json }}\"\n",
        encoding="utf-8",
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="default",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_HOME=str(tmp_path / "ansible-home"))
    return subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(playbook), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False,
    )


def module_result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = re.search(r'"msg": "REPORT=(.*)"\s*$', proc.stdout, re.MULTILINE)
    assert match, proc.stdout
    return json.loads(json.loads(f'"{match.group(1)}"'))


def test_module_end_to_end(results: list[dict[str, Any]], seed: list[str], tmp_path: Path) -> None:
    proc = run_playbook(tmp_path, results)
    result = module_result(proc)
    out = tmp_path / "reports" / RUN_ID
    assert result["changed"] is True
    assert result["dir"] == str(out)
    assert {Path(f).name for f in result["files"]} == {
        "node1_gpu0_mtp.json", "node1_gpu1_mtp_hicache.json", "summary.csv", "summary.md",
        "throughput.png", "latency.png", "profiles.png", "report.html",
    }
    assert all(Path(f).is_file() for f in result["files"])
    assert result["latest"] == str(tmp_path / "reports" / "latest")
    assert os.readlink(tmp_path / "reports" / "latest") == RUN_ID
    assert result["report_warnings"] == []
    for row in seed:
        assert parse_row(row) in [parse_row(line)[:7] for line in result["table"].splitlines()
                                  if line.startswith("| ") and parse_row(line)[0].isdigit()]
    loaded = json.loads((out / "node1_gpu1_mtp_hicache.json").read_text(encoding="utf-8"))
    assert loaded["sweep"]["points"] == results[1]["sweep"]["points"]


def test_module_check_mode(results: list[dict[str, Any]], tmp_path: Path) -> None:
    proc = run_playbook(tmp_path, results, "--check")
    result = module_result(proc)
    assert result["changed"] is True
    assert result["plots"] == []
    assert "summary.csv" in {Path(f).name for f in result["files"]}
    assert "| 48 | 96 | 96 | 0 | 409.0 | 1024 | 240.3 |" in result["table"]
    assert not (tmp_path / "reports").exists()


def test_module_takes_the_roles_host_entries_and_answers_capacity_and_failures(
        results: list[dict[str, Any]], tmp_path: Path) -> None:
    # the bench role's form: a host's sweeps by instance with its manifest; one level failed
    mtp, hicache = (dict(r["sweep"]) for r in results)
    hicache["slo"] = mtp["slo"] = {"ttft_p99_ms": 1000.0}
    mtp["points"] = [dict(p, slo_met=p["concurrency"] <= 1) for p in mtp["points"]]  # C=1 of C=1, 4
    hicache["points"] = [dict(p, slo_met=True) for p in hicache["points"]]
    first = hicache["points"][0]
    first.update(ok=first["requests"] - 1, status="errors", errors={"total": 1, "timeout": 1})
    manifest = {"profile": "mtp", "release": "0.5.17", "engine": "sim",
                "instances": [{"name": "gpu0", "gpus": [0]}, {"name": "gpu1", "gpus": [1]}]}
    h200 = {"gpus": [{"name": "NVIDIA H200", "memory_total_mib": 143771}] * 2}
    entries = [{"host": "node1", "manifest": manifest, "sweeps": {"gpu0": mtp}},
               {"host": "node2", "manifest": manifest, "sweeps": {"gpu1": hicache}}]
    options = {"capacity_target_rps": 10, "host_facts": {"node1": h200, "node2": h200, "node3": h200}}
    result = module_result(run_playbook(tmp_path, entries, options=options))
    out = tmp_path / "reports" / RUN_ID
    assert {"node1_gpu0_mtp.json", "node2_gpu1_mtp.json", "capacity.md"} <= {Path(f).name for f in result["files"]}
    assert list(result["failures"]) == ["node2"] and result["failures"]["node2"][0].startswith("node2/gpu1 (mtp): C=1")
    cls = result["capacity"]["classes"][0]
    limit = mtp["points"][0]["req_s"]  # below every level of the other instance: the class's limit
    assert cls["class"] == "nvidia_h200_x2_143771mib" and cls["hosts_in_inventory"] == 3
    assert cls["limit_rps_min"] == limit and cls["instances_needed"] == math.ceil(10 / limit)
    assert (out / "capacity.md").read_text(encoding="utf-8") == result["capacity_markdown"]
    assert json.loads((out / "node1_gpu0_mtp.json").read_text())["meta"]["gpus"] == [0]
    # check mode: the same answers, nothing written
    (tmp_path / "check").mkdir()
    checked = module_result(run_playbook(tmp_path / "check", entries, "--check", options=options))
    assert checked["capacity"] == result["capacity"] and checked["failures"] == result["failures"]
    assert not (tmp_path / "check" / "reports").exists()


def test_a_report_folder_that_fails_keeps_the_capacity_answer_beside_the_measurement(
        results: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = dict(results[1]["sweep"], slo={"ttft_p99_ms": 1000.0})
    sweep["points"] = [dict(p, slo_met=True) for p in sweep["points"]]
    entries = [{"host": "node1", "manifest": {"profile": "mtp", "instances": [{"name": "gpu1"}]}, "sweeps": {"gpu1": sweep}}]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "reports").write_text("a file where the reports folder should be\n")
    proc = run_playbook(tmp_path, entries, options={"capacity_target_rps": 10})
    assert proc.returncode != 0 and "The finished measurement was written to" in proc.stdout, proc.stdout
    kept = tmp_path / "home" / ".ansible" / "llmops.sglang" / "reports" / RUN_ID
    assert (kept / "capacity.md").read_text(encoding="utf-8").startswith("# Capacity")
    assert (kept / "node1_gpu1_mtp.json").is_file()


def test_module_doc() -> None:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(VENV_BIN / "ansible-doc"), "llmops.sglang.sweep_report"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "latest_link" in proc.stdout and "RETURN VALUES" in proc.stdout


# --------------------------------------------------------------------------- measurability, drift, warm-up
def scaled_sweep(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The seed sweep as if measured on the time-scaled engine: C=8 with bursty ITL percentiles,
    C=16 with an inflated TTFT, C=48 drifting; server-side latency and warm-up on every level."""
    sweep = json.loads(json.dumps(results[1]["sweep"]))
    sweep["time_base"] = "model"
    sweep["server"]["time_scale"] = 0.02
    for point in sweep["points"]:
        c = point["concurrency"]
        point["server"] = {"requests": point["requests"], "first_tokens": point["requests"],
                           "itl_tokens": point["requests"] * 1023, "ttft_ms_mean": 70.0 + c,
                           "itl_ms_mean": 15.5, "e2e_s_mean": 16.0,
                           "ttft_ms_range": {"p50": [0.0, 100.0]}, "itl_ms_range": {"p50": [15.0, 20.0]}}
        point["level_warmup"] = {"requests": c, "ok": c, "errors": {"total": 0}, "max_tokens": 16,
                                 "output_tokens": 16 * c, "seconds": 1.5}
        point["drift"] = {"window": "steady", "first_half_tok_s": 400.0, "second_half_tok_s": 400.0,
                          "ratio": 1.0, "flagged": False, "checked": True, "threshold": 0.15}
        point["latency_unmeasurable"] = {}
        point["latency_measurable"] = True
        point["latency_check"] = {"tolerance": 0.25, "reasons": {}}
    by_c = {p["concurrency"]: p for p in sweep["points"]}
    by_c[8]["latency_unmeasurable"] = {"itl_ms": ["p50", "p90", "p99"]}
    by_c[16]["latency_unmeasurable"] = {"ttft_ms": ["mean", "p50", "p90", "p99"]}
    for c in (8, 16):
        by_c[c]["latency_measurable"] = False
    by_c[48]["drift"].update(second_half_tok_s=300.0, ratio=0.75, flagged=True)
    by_c[1]["drift"].update(ratio=None, checked=False, reason="too short to split")
    by_c[4]["level_warmup"]["errors"]["total"] = 2
    return sweep


def test_not_measurable_latencies_read_n_m(results: list[dict[str, Any]], tmp_path: Path) -> None:
    sweep = scaled_sweep(results)
    rows = {parse_row(line)[0]: parse_row(line) for line in render_table(sweep).splitlines()[2:]}
    assert rows["8"][7:9] != ["n/m", "n/m"] and rows["8"][9:] == ["n/m", "n/m"]
    assert rows["16"][7:9] == ["n/m", "n/m"] and rows["16"][9:] != ["n/m", "n/m"]
    assert all("n/m" not in cell for c in ("1", "4", "32") for cell in rows[c])
    assert rows["48~"][:7] == ["48~", "96", "96", "0", "409.0", "1024", "240.3"]  # drift marked
    report = write_report([{"meta": results[1]["meta"], "sweep": sweep}], str(tmp_path / RUN_ID))
    md = report["table"]
    assert "Server-side latency (the server's /metrics histograms over each level, in the GPU time" in md
    assert "| C | requests | TTFT mean ms | TTFT p50 ms | ITL mean ms | ITL p50 ms | e2e mean s |" in md
    assert "| 8 | 16 | 78.0 | 0-100 | 15.50 | 15-20 | 16.00 |" in md
    assert "n/m = not measurable at time scale 0.02" in md
    assert "C=8 ITL p50/p90/p99; C=16 TTFT mean/p50/p90/p99" in md
    assert "drifted within the level" in md and "C=48 (x0.75)" in md
    assert "too short to check for drift: C=1" in md
    assert "warm-up errors: C=4 (2 of 4)" in md
    with open(tmp_path / RUN_ID / "summary.csv", encoding="utf-8", newline="") as handle:
        csv_rows = {r["concurrency"]: r for r in csv.DictReader(handle)}
    # a value that is not measurable is never written as a number
    assert csv_rows["8"]["itl_p50_ms"] == "" and csv_rows["8"]["itl_p99_ms"] == ""
    assert csv_rows["8"]["itl_mean_ms"] != "" and csv_rows["8"]["ttft_p50_ms"] != ""
    assert csv_rows["16"]["ttft_mean_ms"] == "" and csv_rows["16"]["latency_measurable"] == "false"
    assert csv_rows["8"]["server_itl_mean_ms"] == "15.5" and csv_rows["8"]["server_requests"] == "16"
    assert csv_rows["48"]["drift_flagged"] == "true" and csv_rows["48"]["drift_ratio"] == "0.75"
    assert csv_rows["4"]["warmup_errors"] == "2" and csv_rows["4"]["warmup_requests"] == "4"
    assert {Path(p).name for p in report["plots"]} == {"throughput.png", "latency.png"}


def test_wall_clock_sweep_without_new_fields_is_unchanged(results: list[dict[str, Any]]) -> None:
    md, _ = _report.render_markdown(results[1:])
    assert "n/m" not in md.split("Columns:", 1)[1].split("\n", 1)[1]
    assert "Server-side latency" not in md and "drift" not in md.split("\n\n", 2)[2]


def test_levels_with_failed_requests_are_marked_everywhere(results: list[dict[str, Any]], tmp_path: Path) -> None:
    """An engine killed during C=16: C=16 half failed, C=32 and 48 found nothing listening."""
    item = json.loads(json.dumps(results[1]))
    sweep = item["sweep"]
    for point in sweep["points"]:
        point["status"] = "ok"
        point["error_rate"] = 0.0
    c16, c32, c48 = sweep["points"][3:]
    c16.update(status="errors", ok=16, error_rate=0.5,
               errors={"http": 0, "stream": 2, "timeout": 0, "connection": 14, "short": 0, "total": 16},
               error_messages=["stream broken: ServerDisconnectedError: Server disconnected"])
    for point in (c32, c48):
        point.update(status="no_requests_ok", ok=0, output_tok_s=0.0, error_rate=1.0,
                     errors={"http": 0, "stream": 0, "timeout": 0, "connection": point["requests"],
                             "short": 0, "total": point["requests"]})
    sweep["peak"] = {"concurrency": 8, "output_tok_s": 369.7, "client_limited": False}
    report = write_report([item], str(tmp_path / RUN_ID), latest_link=False)
    rows = {parse_row(line)[0]: parse_row(line) for line in render_table(sweep).splitlines()[2:]}
    assert list(rows) == ["1", "4", "8", "16!", "32!", "48!"]
    assert rows["16!"][3] == "16" and rows["32!"][2] == "0"
    md = (tmp_path / RUN_ID / "summary.md").read_text(encoding="utf-8")
    assert "Peak: 369.7 tok/s at C=8" in md
    assert "levels with failed requests (marked !, left out of peak and knee): C=16, 32, 48" in md
    assert ("Requests failed (marked !): C=16 (16 of 32 failed: 50%, stream 2, connection 14); "
            "C=32 (64 of 64 failed: 100%, connection 64); C=48 (96 of 96 failed: 100%, connection 96)") in md
    assert "First error: stream broken: ServerDisconnectedError" in md
    assert "`!` after C: requests failed at that level" in md
    with open(tmp_path / RUN_ID / "summary.csv", encoding="utf-8", newline="") as handle:
        csv_rows = {r["concurrency"]: r for r in csv.DictReader(handle)}
    assert csv_rows["8"]["status"] == "ok" and csv_rows["8"]["is_peak"] == "true"
    assert csv_rows["16"]["status"] == "errors" and csv_rows["16"]["error_rate"] == "0.5"
    assert csv_rows["16"]["err_connection"] == "14" and csv_rows["48"]["status"] == "no_requests_ok"
    assert report["warnings"] == [
        "requests failed at node1/gpu1 (mtp_hicache): C=16 (16 of 32 failed: 50%, stream 2, connection 14), "
        "C=32 (64 of 64 failed: 100%, connection 64), C=48 (96 of 96 failed: 100%, connection 96) "
        "(marked ! in summary.md)"]
    assert {Path(p).name for p in report["plots"]} == {"throughput.png", "latency.png"}  # ringed in red
    # a sweep where no level ran without errors has no peak, and the report does not invent one
    for point in sweep["points"]:
        point["status"] = "errors"
    sweep["peak"] = sweep["knee"] = None
    assert _report.peak_of(sweep) is None
    assert "Peak: none (no level ran without failed requests)" in _report.render_findings(sweep)


def test_a_failed_level_that_drifted_is_marked_failed_not_drifting(results: list[dict[str, Any]]) -> None:
    """An engine killed mid-level drifts as a matter of course: the level reads ``C!``, and the
    drift note leaves it out (found in CI: ``| 1!~ |`` where ``| 1! |`` was due)."""
    sweep = scaled_sweep(results)
    point = next(p for p in sweep["points"] if p["concurrency"] == 48)
    point.update(status="errors", errors={"total": 3, "connection": 3})
    md, _ = _report.render_markdown([{"meta": results[1]["meta"], "sweep": sweep}])
    assert "| 48! |" in md and "| 48!~ |" not in md
    assert "C=48 (x0.75)" not in md


def test_rate_levels_are_named_by_their_rate_not_their_in_flight_cap() -> None:
    """A rate-mode level's `concurrency` is only its in-flight cap (4096 by default): tables,
    findings and the progress line name it by its offered rate."""
    from ansible_collections.llmops.sglang.plugins.module_utils._bench import progress as _progress
    from ansible_collections.llmops.sglang.plugins.module_utils._report.tables import render_findings

    def point(rate: float, tok_s: float, status: str = "ok") -> dict[str, Any]:
        return {"concurrency": 4096, "offered_rate": rate, "requests": 20, "ok": 20 if status == "ok" else 10,
                "status": status, "errors": {"total": 0 if status == "ok" else 10}, "output_tok_s": tok_s,
                "duration_s": 10.0, "avg_output_tokens": 256}

    sweep = {"mode": "rate", "points": [point(2.0, 436.3), point(8.0, 1658.3), point(16.0, 900.0, "errors")],
             "peak": {"concurrency": 4096, "offered_rate": 8.0, "output_tok_s": 1658.3}}
    table = render_table(sweep).splitlines()
    assert table[0].startswith("| level | n | ok |")
    assert [line.split("|")[1].strip() for line in table[2:]] == ["2 req/s", "8 req/s", "16 req/s!"]
    findings = render_findings(sweep)
    assert "Peak: 1658.3 tok/s at 8 req/s" in findings
    assert "left out of peak and knee): 16 req/s" in findings and "4096" not in findings
    line = _progress.describe(_progress.record(point(8.0, 1658.3), {"host": "h", "instance": "gpu0"}))
    assert line.startswith("h gpu0 [wall time] 8 req/s: 1658.3 tok/s") and "4096" not in line
    closed = _progress.describe(_progress.record({"concurrency": 8, "output_tok_s": 10.0}, {"host": "h"}))
    assert " C=8: 10 tok/s" in closed


def test_a_real_rate_sweep_is_reported_by_its_offered_rate(tmp_path: Path, fixtures_dir: Path) -> None:
    """Issue 28 item 3, as the H200 showed it after the first fix (run 8, SGLang 0.5.17,
    tests/fixtures/sglang-0.5.17-h200-rate): the recorded sweep's peak kept only C=4096 (the
    in-flight cap every rate level shares) and summary.md said "Peak: 3062.1 tok/s at C=4096"
    under "Columns: C = concurrency". Rendered again from that recording, the report names the
    peak's level by its rate and says what a level is; a new sweep records the rate itself
    (_sweep/test_curve)."""
    recorded = fixtures_dir / "sglang-0.5.17-h200-rate"
    assert "Peak: 3062.1 tok/s at C=4096" in (recorded / "summary.md").read_text(encoding="utf-8")  # as recorded
    result = json.loads((recorded / "h200-hybrid_gpu0_mtp_hicache.json").read_text(encoding="utf-8"))
    assert "offered_rate" not in result["sweep"]["peak"]
    write_report([result], str(tmp_path / "again"), latest_link=False)
    md = (tmp_path / "again" / "summary.md").read_text(encoding="utf-8")
    assert "Peak: 3062.1 tok/s at 16 req/s; knee: not found" in md, md
    assert "C=4096" not in md and "Columns: C = concurrency" not in md
    assert "Columns: level = the offered rate" in md


def test_a_pd_routers_sweep_shows_each_side_of_each_level(tmp_path: Path) -> None:
    """Swept through the router of a PD deployment (its points' ``sides``): one row per level with
    the prefill side's running, queued, KV waiting, hand-overs and their latency, the decode side's
    running and waiting for KV, and both sides' failures; a PD instance swept on its own keeps its
    'Prefill and decode during each level' table."""
    from ansible_collections.llmops.sglang.plugins.module_utils._report.tables import (
        render_pd_table,
        render_sides_table,
    )

    sides = {"prefill": {"running_mean": 1.25, "queued_mean": 0.5, "pd_prefill_inflight_max": 3, "pd_kv_transfers": 40,
                         "pd_kv_transfer_ms_mean": 2.125, "pd_bootstrap_failed": 0, "pd_transfer_failed": 1},
             "decode": {"running_mean": 7.5, "pd_decode_transfer_max": 2, "pd_bootstrap_failed": 2,
                        "pd_transfer_failed": 0}}
    sweep = {"schema_version": 1, "knee": None, "points": [
        {"concurrency": 8, "requests": 40, "ok": 40, "output_tok_s": 900.0, "sides": sides},
        {"concurrency": 16, "requests": 40, "ok": 40, "output_tok_s": 1000.0}]}
    table = render_sides_table(sweep).splitlines()
    assert parse_row(table[2]) == ["8", "900.0", "1.25", "0.50", "3", "40", "2.12", "7.50", "2", "2 / 1"]
    assert len(table) == 3 and render_pd_table(sweep) is None
    write_report([{"meta": {"host": "r", "instance": "router", "role": "router"}, "sweep": sweep}], str(tmp_path / RUN_ID))
    md = (tmp_path / RUN_ID / "summary.md").read_text(encoding="utf-8")
    assert "Each side during each level (the router's PD workers' /metrics" in md
    alone = {**sweep, "points": [{"concurrency": 1, "requests": 4, "ok": 4, "output_tok_s": 10.0, "server_metrics": {
        "pd_prefill_inflight_max": 1, "pd_decode_transfer_max": None, "pd_bootstrap_failed": 0, "pd_transfer_failed": 0}}]}
    assert parse_row(render_pd_table(alone).splitlines()[2]) == ["1", "10.0", "1", "-", "0", "0"]
    assert render_sides_table(alone) is None
