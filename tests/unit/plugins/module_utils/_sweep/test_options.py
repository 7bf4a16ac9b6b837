"""The sweep's options (module_utils/_sweep/options.py): normalization and concurrency caps."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _sweep as sw


def test_concurrency_caps() -> None:
    with pytest.raises(sw.SweepError) as info:
        sw.SweepOptions(url="http://h", concurrency=[1, 100000]).normalized()
    message = str(info.value)
    # the value, the option, the limit, the fix
    assert "100000" in message and "max_concurrency=4096" in message
    assert "sglang_bench_max_concurrency" in message and "Lower the level" in message
    assert sw.SweepOptions(url="http://h", concurrency=[5000], max_concurrency=8192).normalized().concurrency == [5000]
    # far above the server's max_running_requests: warned about (they only queue)
    assert sw.oversubscription_warning([1, 8, 64], 8) is None
    text = sw.oversubscription_warning([1, 64, 65, 128], 8)
    assert text is not None and "C=65, 128" in text and "max_running_requests (8)" in text
    assert sw.oversubscription_warning([10000], None) is None
    # open files: a soft limit too low is raised as far as the hard one allows
    inf = -1
    assert sw.open_files_limit(100, 1024, 4096, inf) is None
    assert sw.open_files_limit(4000, 1024, 1 << 20, inf) == 4000 + sw.SPARE_FILES
    assert sw.open_files_limit(4000, 1024, inf, inf) == 4000 + sw.SPARE_FILES
    with pytest.raises(sw.SweepError, match="ulimit -n"):
        sw.open_files_limit(4000, 1024, 2048, inf)


def test_options_normalized() -> None:
    opts = sw.SweepOptions(url="http://h:30000/v1/", concurrency=[8, 1, 8]).normalized()
    assert opts.url == "http://h:30000" and opts.concurrency == [1, 8]
    assert opts.requests_for(1) == 8 and opts.requests_for(8) == 16
    assert opts.prompts == list(sw.DEFAULT_PROMPTS) and len(opts.prompts) == 8
    assert "api_key" not in opts.effective("m")
    for bad in (
        {"url": "h:1"},
        {"url": "http://h", "api": "grpc"},
        {"url": "http://h", "concurrency": []},
        {"url": "http://h", "requests": 4, "duration": 1.0},
        {"url": "http://h", "max_tokens": 0},
        {"url": "http://h", "time_scale": 0},
    ):
        with pytest.raises(sw.SweepError):
            sw.SweepOptions(**bad).normalized()


def test_every_documented_option_is_carried_and_recorded() -> None:
    """An option documented in plugins/modules/throughput_sweep.py is a field of SweepOptions
    (the generated DeclaredOptions) with its documented default, survives normalized() as the
    module validated it, and is in the facts' options: nothing to write in options.py to add one
    (docs/ARCHITECTURE.md "Adding an option, once")."""
    from dataclasses import fields

    from ansible_collections.llmops.sglang.plugins.module_utils._sweep import openloop, options, spec
    from ansible_collections.llmops.sglang.plugins.plugin_utils import _docspec

    documented = _docspec.documented_options("throughput_sweep")
    action_only = set(_docspec.fragment_options("llmops.sglang.sweep_action"))
    names = {f.name for f in fields(sw.SweepOptions)}
    assert names == set(documented) - action_only
    defaults = sw.SweepOptions(url="http://h")
    for name in names - {"url"}:
        assert getattr(defaults, name) == spec.ARGUMENT_SPEC[name].get("default"), name
    # an option without a rule of its own (options.py and openloop.py, where the rules are, do not
    # name it) is carried and recorded as given
    source = Path(options.__file__).read_text() + Path(openloop.__file__).read_text()
    unruled = sorted(name for name in names if not re.search(rf"\b{name}\b", source))
    assert "extra_body" in unruled
    given = {"extra_body": {"top_k": 3}}
    opts = sw.SweepOptions(url="http://h", **given).normalized()
    effective = opts.effective("m")
    for name in unruled:
        assert getattr(opts, name) == given.get(name, spec.ARGUMENT_SPEC[name].get("default")), name
        assert effective[name] == getattr(opts, name), name
    assert set(effective) >= names - set(options._NOT_RECORDED)
