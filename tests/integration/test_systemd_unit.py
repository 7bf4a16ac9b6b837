"""The sglang@.service template renders to a unit that systemd-analyze verify accepts."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils._server import layout as _layout

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_verifies(tmp_path: Path) -> None:
    base = tmp_path / "opt-sglang"
    (base / "gpu0").mkdir(parents=True)
    launch = base / "gpu0" / "launch.sh"
    launch.write_text("#!/bin/sh\nexec sleep 1\n")
    launch.chmod(0o755)
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Render the unit",
        "hosts": "localhost",
        "gather_facts": False,
        # the unit renders the plan's paths (action llmops.sglang.server_plan: unit_paths)
        "vars": {"__sglang_plan": {"unit_paths": _layout.instance_paths(str(base), "%i")},
                 "sglang_user": "root", "sglang_group": "root", "sglang_stop_timeout": 120},
        "tasks": [{"name": "Template", "ansible.builtin.template": {
            "src": str(ROOT / "roles" / "server" / "templates" / "sglang@.service.j2"),
            "dest": str(unit_dir / "sglang@.service"), "mode": "0644"}}],
    }]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    res = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    unit = (unit_dir / "sglang@.service").read_text()
    assert unit.startswith("#") and "Ansible managed" in unit
    for line in ("KillMode=control-group", "LimitMEMLOCK=infinity", "Restart=on-failure",
                 "TimeoutStopSec=120"):
        assert line in unit
    instance = unit_dir / "sglang@gpu0.service"
    shutil.copy(unit_dir / "sglang@.service", instance)
    verify = subprocess.run(["systemd-analyze", "verify", "--man=no", str(instance)],
                            capture_output=True, text=True, check=False)
    problems = [ln for ln in (verify.stdout + verify.stderr).splitlines()
                if "sglang@" in ln and "network-online.target" not in ln]
    assert verify.returncode == 0 and not problems, verify.stdout + verify.stderr
