"""Tests for plugins/module_utils/_shared/flags.py against the generated schemas of real releases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils._shared import flags as _flags
from ansible_collections.llmops.sglang.plugins.module_utils._shared.flags import (
    FlagError,
    UnknownReleaseError,
    build_parser,
    closest_flag,
    load_schema,
    parse_argv,
    supported_releases,
    validate_argv,
)

RELEASES = ["0.5.10", "0.5.17", "0.5.23"]
MODEL = "/models/Qwen3-Next-80B-A3B-Instruct"


def recorded_argv(fixtures_dir: Path, name: str) -> list[str]:
    """The server argv recorded on the H200 (``python3 -m sglang.launch_server`` stripped)."""
    words = (fixtures_dir / "sglang-0.5.17-h200" / name / "argv.txt").read_text().split()
    assert words[:3] == ["python3", "-m", "sglang.launch_server"]
    return [MODEL if w == "MODEL" else w for w in words[3:]]


def base(*extra: str) -> list[str]:
    return ["--model-path", MODEL, *extra]


# ---------------------------------------------------------------- schemas


def test_supported_releases_sorted_by_version() -> None:
    assert supported_releases() == RELEASES


@pytest.mark.parametrize(
    ("release", "count"),
    [("0.5.10", 355), ("0.5.17", 475), ("0.5.23", 532)],
)
def test_flag_counts(release: str, count: int) -> None:
    schema = load_schema(release)
    assert len(schema) == count
    assert schema.release == release
    # every flag has an option string; each option string names one flag
    assert all(f.option_strings for f in schema.flags)
    assert len(set(schema.option_strings)) == len(schema.option_strings)


def test_flag_counts_grow_with_release() -> None:
    counts = [len(load_schema(r)) for r in RELEASES]
    assert counts == sorted(counts)
    assert 300 < counts[0] and counts[-1] < 1000


@pytest.mark.parametrize("release", RELEASES)
def test_schema_file_was_generated_from_real_parser(repo_root: Path, release: str) -> None:
    raw = json.loads((repo_root / "data" / "flag_schemas" / f"sglang-{release}.json").read_text())
    assert raw["release"] == release
    assert raw["generated_by"]["tool"] == "tools/gen_flag_schema.py"
    assert "add_cli_args" in raw["generated_by"]["method"]
    first = raw["flags"][0]
    assert first["option_strings"] == ["-h", "--help"]
    assert set(first) >= {
        "option_strings",
        "dest",
        "nargs",
        "choices",
        "type",
        "action",
        "default",
        "required",
        "help",
    }


def test_load_schema_is_cached() -> None:
    assert load_schema("0.5.23") is load_schema("0.5.23")


def test_unknown_release() -> None:
    with pytest.raises(UnknownReleaseError) as info:
        load_schema("0.4.0")
    assert isinstance(info.value, ValueError)
    for release in RELEASES:
        assert release in str(info.value)
    with pytest.raises(UnknownReleaseError):
        validate_argv(base(), "9.9.9")
    with pytest.raises(UnknownReleaseError):
        load_schema("../releases")


def test_schema_lookups() -> None:
    schema = load_schema("0.5.23")
    spec = schema.get("--enable-hicache")
    assert spec is not None and spec.dest == "enable_hierarchical_cache"
    assert spec.name == "--enable-hierarchical-cache"
    assert schema.choices("--mamba-radix-cache-strategy") == [
        "auto",
        "no_buffer",
        "extra_buffer",
        "extra_buffer_lazy",
    ]
    assert schema.defaults()["hicache_host_memory_fraction"] == 0.8
    assert not schema.has("--mamba-scheduler-strategy")


# ---------------------------------------------------------------- recorded argv lines


@pytest.mark.parametrize("name", ["dense", "hybrid"])
def test_recorded_argv_validates_under_0517(fixtures_dir: Path, name: str) -> None:
    argv = recorded_argv(fixtures_dir, name)
    assert validate_argv(argv, "0.5.17") == []
    values = parse_argv(argv, "0.5.17")
    assert values["model_path"] == MODEL
    assert values["port"] == 30000
    # --cuda-graph-max-bs is a deprecated alias of --cuda-graph-max-bs-decode in 0.5.17
    assert values["cuda_graph_max_bs_decode"] == 32
    assert values["mem_fraction_static"] == pytest.approx(0.80)


def test_recorded_hybrid_argv_values(fixtures_dir: Path) -> None:
    values = parse_argv(recorded_argv(fixtures_dir, "hybrid"), "0.5.17")
    assert values["speculative_algorithm"] == "NEXTN"
    assert (values["speculative_num_steps"], values["speculative_eagle_topk"]) == (3, 1)
    assert values["speculative_num_draft_tokens"] == 4
    assert values["mamba_radix_cache_strategy"] == "extra_buffer"
    assert values["enable_hierarchical_cache"] is True
    assert values["hicache_size"] == 8
    assert values["hicache_mem_layout"] == "page_first_direct"
    assert values["max_running_requests"] == 16


def test_recorded_argv_under_0523_cuda_graph_flag_is_ambiguous(fixtures_dir: Path) -> None:
    errors = validate_argv(recorded_argv(fixtures_dir, "dense"), "0.5.23")
    assert len(errors) == 1
    err = errors[0]
    assert err.kind == "ambiguous"
    assert str(err).startswith("ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode")
    assert err.suggestion == "--cuda-graph-max-bs-decode"


# ---------------------------------------------------------------- renamed mamba flag


def test_mamba_scheduler_strategy_across_releases() -> None:
    argv = base("--mamba-scheduler-strategy", "extra_buffer")
    assert validate_argv(argv, "0.5.10") == []
    assert validate_argv(argv, "0.5.17") == []  # deprecated alias there
    errors = validate_argv(argv, "0.5.23")
    assert len(errors) == 1
    err = errors[0]
    assert err.kind == "unrecognized"
    assert err.flag == "--mamba-scheduler-strategy"
    assert err.suggestion == "--mamba-radix-cache-strategy"
    assert str(err) == "unrecognized arguments: --mamba-scheduler-strategy extra_buffer"
    assert closest_flag("--mamba-scheduler-strategy", "0.5.23") == "--mamba-radix-cache-strategy"


def test_new_mamba_flag_suggests_old_name_on_old_release() -> None:
    errors = validate_argv(base("--mamba-radix-cache-strategy", "extra_buffer"), "0.5.10")
    assert [e.suggestion for e in errors] == ["--mamba-scheduler-strategy"]


def test_extra_buffer_lazy() -> None:
    assert validate_argv(base("--mamba-radix-cache-strategy", "extra_buffer_lazy"), "0.5.23") == []
    assert (
        parse_argv(base("--mamba-radix-cache-strategy=extra_buffer_lazy"), "0.5.23")[
            "mamba_radix_cache_strategy"
        ]
        == "extra_buffer_lazy"
    )
    errors = validate_argv(base("--mamba-scheduler-strategy", "extra_buffer_lazy"), "0.5.10")
    assert [e.kind for e in errors] == ["invalid_choice"]
    assert str(errors[0]) == (
        "argument --mamba-scheduler-strategy: invalid choice: 'extra_buffer_lazy' "
        "(choose from 'auto', 'no_buffer', 'extra_buffer')"
    )


# ---------------------------------------------------------------- error kinds


def test_bad_choice() -> None:
    errors = validate_argv(base("--mamba-radix-cache-strategy", "lazy"), "0.5.23")
    assert len(errors) == 1
    err = errors[0]
    assert isinstance(err, FlagError) and isinstance(err, ValueError)
    assert err.flag == "--mamba-radix-cache-strategy"
    assert err.message.startswith("invalid choice: 'lazy'")
    assert str(err) == (
        "argument --mamba-radix-cache-strategy: invalid choice: 'lazy' "
        "(choose from 'auto', 'no_buffer', 'extra_buffer', 'extra_buffer_lazy')"
    )


def test_missing_value() -> None:
    errors = validate_argv(base("--port", "--host", "0.0.0.0"), "0.5.23")
    assert [str(e) for e in errors] == ["argument --port: expected one argument"]
    assert errors[0].kind == "missing_value"
    errors = validate_argv(base("--port"), "0.5.23")
    assert [str(e) for e in errors] == ["argument --port: expected one argument"]


def test_bad_int_and_float() -> None:
    errors = validate_argv(base("--port", "abc", "--mem-fraction-static", "high"), "0.5.23")
    assert [str(e) for e in errors] == [
        "argument --port: invalid int value: 'abc'",
        "argument --mem-fraction-static: invalid float value: 'high'",
    ]
    assert all(e.kind == "invalid_value" for e in errors)


def test_negative_numbers_are_values() -> None:
    values = parse_argv(base("--mamba-max-states-per-path", "-1"), "0.5.23")
    assert values["mamba_max_states_per_path"] == -1
    assert validate_argv(base("--mamba-max-states-per-path", "-1"), "0.5.23") == []


def test_all_problems_reported() -> None:
    argv = base(
        "--bogus-flag",
        "1",
        "--port",
        "x",
        "--mamba-radix-cache-strategy",
        "nope",
        "--tp-size",
    )
    errors = validate_argv(argv, "0.5.23")
    assert [e.kind for e in errors] == ["unrecognized", "invalid_value", "invalid_choice", "missing_value"]
    assert errors[0].flag == "--bogus-flag"
    assert str(errors[0]) == "unrecognized arguments: --bogus-flag 1"


def test_unknown_flag_suggestion() -> None:
    errors = validate_argv(base("--mem-fraction-statik", "0.8"), "0.5.23")
    assert errors[0].suggestion == "--mem-fraction-static"
    assert closest_flag("mem-fraction-statik", "0.5.23") == "--mem-fraction-static"
    assert closest_flag("--zzzzzzzz", "0.5.23") is None


def test_store_true_with_value_and_stray_positional() -> None:
    errors = validate_argv(base("--enable-metrics=yes", "stray"), "0.5.23")
    assert [e.kind for e in errors] == ["explicit_argument", "unrecognized"]
    assert str(errors[0]) == "argument --enable-metrics: ignored explicit argument 'yes'"


def test_required_model_path() -> None:
    errors = validate_argv(["--port", "30000"], "0.5.23")
    assert [e.kind for e in errors] == ["required"]
    assert str(errors[0]) == "the following arguments are required: --model-path/--model"


def test_abbreviation_and_aliases() -> None:
    values = parse_argv(base("--enable-hicache", "--hicache-size", "30"), "0.5.23")
    assert values["enable_hierarchical_cache"] is True and values["hicache_size"] == 30
    errors = validate_argv(base("--enable-hicache"), "0.5.17")
    # no --enable-hicache alias before 0.5.23; argparse's prefix match finds none either
    assert [e.kind for e in errors] == ["unrecognized"]
    assert errors[0].suggestion == "--enable-hierarchical-cache"


# ---------------------------------------------------------------- parse_argv


def test_parse_argv_defaults_and_types() -> None:
    values = parse_argv(base(), "0.5.23")
    schema = load_schema("0.5.23")
    dests = {f.dest for f in schema.flags if f.action != "help"}
    assert dests <= set(values)
    assert values["hicache_size"] == 0
    assert values["enable_metrics"] is False
    values = parse_argv(base("--context-length", "128k", "--tp-size", "4"), "0.5.23")
    assert values["context_length"] == 128000
    assert values["tp_size"] == 4


@pytest.mark.parametrize(
    ("argv", "line", "kind"),
    [
        (base("--port", "abc"), "argument --port: invalid int value: 'abc'", "invalid_value"),
        (base("--port"), "argument --port: expected one argument", "missing_value"),
        (base("--bar"), "unrecognized arguments: --bar", "unrecognized"),
        (
            base("--mamba-radix-cache-strategy", "x"),
            "argument --mamba-radix-cache-strategy: invalid choice: 'x' "
            "(choose from 'auto', 'no_buffer', 'extra_buffer', 'extra_buffer_lazy')",
            "invalid_choice",
        ),
    ],
)
def test_parse_argv_raises_argparse_messages(argv: list[str], line: str, kind: str) -> None:
    with pytest.raises(FlagError) as info:
        parse_argv(argv, "0.5.23")
    assert str(info.value) == line
    assert info.value.kind == kind
    # validate_argv words the same problem the same way
    assert [str(e) for e in validate_argv(argv, "0.5.23")] == [line]


def test_parse_argv_unknown_flag_has_suggestion() -> None:
    with pytest.raises(FlagError) as info:
        parse_argv(base("--mamba-scheduler-strategy", "auto"), "0.5.23")
    assert info.value.flag == "--mamba-scheduler-strategy"
    assert info.value.suggestion == "--mamba-radix-cache-strategy"


def test_build_parser_is_argparse() -> None:
    parser = build_parser("0.5.10")
    ns = parser.parse_args(base("--mamba-scheduler-strategy", "no_buffer"))
    assert ns.mamba_scheduler_strategy == "no_buffer"
    assert parser.prog == "launch_server.py"


@pytest.mark.parametrize("release", RELEASES)
def test_build_parser_help_renders(release: str) -> None:
    text = build_parser(release).format_help()
    assert text.startswith("usage: launch_server.py")
    assert "--model-path" in text


def test_build_parser_exits_2_with_argparse_message(repo_root: Path) -> None:
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(repo_root / 'collections')!r})\n"
        "from ansible_collections.llmops.sglang.plugins.module_utils._shared.flags import build_parser\n"
        "build_parser('0.5.23').parse_args(sys.argv[1:])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "--model-path", MODEL, "--mamba-scheduler-strategy", "auto"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("usage: launch_server.py ")
    assert proc.stderr.rstrip().endswith(
        "launch_server.py: error: unrecognized arguments: --mamba-scheduler-strategy auto"
    )


def test_flag_error_fields() -> None:
    err = FlagError("expected one argument", flag="--port", kind="missing_value")
    assert str(err) == "argument --port: expected one argument"
    assert err.message == "expected one argument" and err.suggestion is None
    err = FlagError("unrecognized arguments: --bar", flag="--bar", suggestion="--baz", kind="unrecognized")
    assert str(err) == "unrecognized arguments: --bar"
    assert err.suggestion == "--baz"


def test_data_dir_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo_root: Path) -> None:
    folder = tmp_path / "flag_schemas"
    folder.mkdir()
    src = repo_root / "data" / "flag_schemas" / "sglang-0.5.23.json"
    (folder / "sglang-0.5.23.json").write_text(src.read_text())
    monkeypatch.setenv("LLMOPS_SGLANG_DATA_DIR", str(tmp_path))
    assert supported_releases() == ["0.5.23"]
    assert len(_flags.load_schema("0.5.23")) == 532
    with pytest.raises(UnknownReleaseError):
        load_schema("0.5.10")
