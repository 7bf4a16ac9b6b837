"""The sweep's options (module_utils/_sweep/options.py): normalization and concurrency caps."""
from __future__ import annotations

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
