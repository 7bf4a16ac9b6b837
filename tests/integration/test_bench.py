"""bench.yml end to end: compare two profiles, then sweep what is deployed; facts and reports."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from .conftest import Deployment

pytestmark = pytest.mark.integration

SMALL = {"sglang_bench_concurrency": [1, 4], "sglang_bench_max_tokens": 64, "sglang_gpus": [0]}


def test_compare_then_bench_writes_reports_and_cached_facts(deployment: Deployment, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    deployment.fact_cache = tmp_path / "facts"
    extra = dict(SMALL, sglang_bench_reports_dir=str(reports))
    run = deployment.play("bench.yml", compare="baseline,mtp", **extra)
    assert run.rc == 0, run.out[-4000:]
    latest = reports / "latest"
    assert latest.is_symlink()
    folder = latest.resolve()
    names = {p.name for p in folder.iterdir()}
    assert {"summary.md", "summary.csv", "throughput.png", "latency.png", "profiles.png"} <= names
    assert {"localhost_gpu0_baseline.json", "localhost_gpu0_mtp.json"} <= names
    rows = list(csv.DictReader((folder / "summary.csv").open()))
    assert {(r["profile"], r["concurrency"]) for r in rows} == {
        ("baseline", "1"), ("baseline", "4"), ("mtp", "1"), ("mtp", "4")}
    assert all(r["err"] == "0" for r in rows)
    one = json.loads((folder / "localhost_gpu0_mtp.json").read_text())
    sweep = one["sweep"]
    assert sweep["time_base"] == "model" and sweep["server"]["time_scale"] == 0.005
    assert [p["concurrency"] for p in sweep["points"]] == [1, 4]
    assert all(p["output_tokens"] == p["requests"] * 64 for p in sweep["points"])
    assert len(sweep["records"]) == sum(p["requests"] for p in sweep["points"])
    # the table is printed at the end of the play
    assert "| C | n | ok | err | output tok/s |" in run.out and "profiles.png" in run.out
    assert deployment.manifest()["profile"] == "mtp"

    # plain bench of what is deployed: facts come back and are cached for later plays
    again = deployment.play("bench.yml", "-e", json.dumps({"sglang_bench_run_id": "rerun"}),
                            **dict(extra, sglang_bench_concurrency=[2]))
    assert again.rc == 0, again.out[-4000:]
    assert (reports / "latest").resolve().name == "rerun"
    assert folder.exists()  # earlier reports are kept
    data = json.loads((reports / "rerun" / "localhost_gpu0_mtp.json").read_text())
    assert data["sweep"]["points"][0]["concurrency"] == 2

    # a later, separate command sees the cached facts
    shown = deployment.adhoc("localhost", "-m", "ansible.builtin.debug", "-a", "var=sglang_sweeps")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert '"gpu0"' in shown.stdout or "gpu0:" in shown.stdout, shown.stdout[-2000:]
    assert "output_tok_s" in shown.stdout

    # the async path (instances of a host swept at the same time) and a controller-side client
    par = deployment.play("bench.yml", **dict(extra, sglang_bench_concurrency=[1], sglang_bench_run_id="par",
                                              sglang_bench_parallel_instances=True, sglang_bench_run_on="controller"))
    assert par.rc == 0, par.out[-4000:]
    assert par.recap["localhost"]["changed"] == 1  # the report only; sweeps change nothing
    assert (reports / "par" / "localhost_gpu0_mtp.json").exists()


def test_wildcard_bind_is_reached_on_loopback_by_status_and_bench(tmp_path: Path) -> None:
    """Servers bound to 0.0.0.0: the manifest hands local clients a loopback URL (never
    http://0.0.0.0:PORT), other hosts the inventory address; status and bench reach them."""
    from .conftest import cleanup, make_inventory

    dep = make_inventory(tmp_path, sglang_host_address="0.0.0.0", ansible_host="127.0.0.1", sglang_gpus=[0])
    try:
        run = dep.play("deploy.yml", profile="baseline")
        assert run.rc == 0, run.out[-4000:]
        inst = dep.manifest()["instances"][0]
        port = dep.extra["sglang_base_port"]
        assert inst["connect_url"] == f"http://127.0.0.1:{port}"
        assert inst["advertise_url"] == f"http://127.0.0.1:{port}"
        assert "0.0.0.0" in inst["argv"]  # it does listen on every address
        status = dep.play("status.yml")
        assert status.rc == 0 and f"gpu0: up http://127.0.0.1:{port}" in status.out, status.out[-2000:]
        bench = dep.play("bench.yml", sglang_bench_concurrency=[1], sglang_bench_requests=2,
                         sglang_bench_max_tokens=8, sglang_bench_reports_dir=str(tmp_path / "reports"))
        assert bench.rc == 0, bench.out[-3000:]
        data = json.loads(next((tmp_path / "reports" / "latest").glob("localhost_gpu0_*.json")).read_text())
        assert data["sweep"]["points"][0]["ok"] == 2 and data["meta"]["url"] == f"http://127.0.0.1:{port}"
    finally:
        cleanup(dep)
