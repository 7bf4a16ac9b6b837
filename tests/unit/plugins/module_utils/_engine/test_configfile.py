"""The embedded engine's --config FILE, merged as SGLang's ConfigArgumentMerger does (0.5.10,
0.5.17, 0.5.23: sglang/srt/server_args_config_parser.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._engine import configfile
from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags


@pytest.fixture(scope="module")
def parser():
    return _flags.build_parser("0.5.23")


def test_the_files_arguments_come_first_and_the_command_line_wins(tmp_path: Path, parser) -> None:
    cfg = tmp_path / "secrets.yaml"
    cfg.write_text('{"api-key": "sk-x y", "enable-metrics": true, "port": 1, "trust-remote-code": false}\n')
    argv = configfile.merge(["--model-path", "/m", "--config", str(cfg), "--port", "2"], parser)
    assert argv == ["--api-key", "sk-x y", "--enable-metrics", "--port", "1", "--model-path", "/m", "--port", "2"]
    args = vars(parser.parse_args(argv))
    assert (args["api_key"], args["enable_metrics"], args["port"]) == ("sk-x y", True, 2)


def test_flat_yaml_and_the_real_errors(tmp_path: Path, parser) -> None:
    cfg = tmp_path / "c.yml"
    cfg.write_text("# comment\napi-key: 'k'\nmax-running-requests: 8\n")
    assert configfile.merge(["--config", str(cfg)], parser) == ["--api-key", "k", "--max-running-requests", "8"]
    bad = tmp_path / "c.json"
    bad.write_text("{}")
    with pytest.raises(configfile.ConfigFileError, match="must be YAML format, got: .json"):
        configfile.merge(["--config", str(bad)], parser)
    with pytest.raises(configfile.ConfigFileError, match="not found"):
        configfile.merge(["--config", str(tmp_path / "none.yaml")], parser)
    with pytest.raises(configfile.ConfigFileError, match="Multiple config files"):
        configfile.merge(["--config", str(cfg), "--config", str(cfg)], parser)
    with pytest.raises(configfile.ConfigFileError, match="No config file specified"):
        configfile.merge(["--config"], parser)
    listed = tmp_path / "l.yaml"
    listed.write_text("[1, 2]")
    with pytest.raises(configfile.ConfigFileError, match="dictionary at root level"):
        configfile.merge(["--config", str(listed)], parser)
    assert configfile.merge(["--port", "1"], parser) == ["--port", "1"]
