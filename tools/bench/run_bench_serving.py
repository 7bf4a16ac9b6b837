#!/usr/bin/env python
"""Run SGLang 0.5.17's own client (python -m sglang.bench_serving) without torch.

    /tmp/sgbench/bin/python tools/bench/run_bench_serving.py [bench_serving args...]

/tmp/sgbench holds `pip install --no-deps sglang==0.5.17` plus the client's light imports
(aiohttp numpy requests tqdm orjson pybase64 psutil pyzmq pillow transformers==5.12.1; see
tools/bench/client_ceiling.sh). sglang/benchmark/serving.py also imports two server modules only
for constants/helpers: sglang.srt.disaggregation.utils (FAKE_BOOTSTRAP_HOST; the module imports
torch) and sglang.srt.utils.network (the package __init__ imports torch through
sglang.srt.utils.common), and sglang/__init__.py itself imports torch (frontend API, HF patches
for the server). This wrapper registers the packages sglang, sglang.srt, sglang.srt.utils with
their real search paths but without running their __init__, provides
sglang.srt.disaggregation.utils as a stub with the same constant, loads
sglang.srt.utils.network from its own file; it stubs `datasets`, which only the
HuggingFace-hub datasets use (pillow is installed: transformers' AutoProcessor needs it). The random dataset, the request functions and
the metrics are SGLang's code, unchanged. Afterwards prints the process CPU time.
"""
from __future__ import annotations

import importlib.util
import resource
import sys
import time
import types


def _stub(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _prepare() -> None:
    spec0 = importlib.util.find_spec("sglang")  # the --no-deps install, not executed
    assert spec0 and spec0.submodule_search_locations
    root = list(spec0.submodule_search_locations)[0]
    # sglang/__init__.py (frontend API + HF patches for the server) and sglang/srt/utils/
    # __init__.py import torch: stand-in packages with the real search paths instead
    for name, sub in (("sglang", ""), ("sglang.srt", "/srt"), ("sglang.srt.utils", "/srt/utils")):
        _stub(name).__path__ = [root + sub]
    _stub("sglang.srt.disaggregation.utils", FAKE_BOOTSTRAP_HOST="2.2.2.2")
    spec = importlib.util.spec_from_file_location("sglang.srt.utils.network",
                                                  f"{root}/srt/utils/network.py")
    assert spec and spec.loader
    net = importlib.util.module_from_spec(spec)
    sys.modules["sglang.srt.utils.network"] = net
    spec.loader.exec_module(net)

    def _no(*_a: object, **_k: object) -> None:
        raise RuntimeError("stubbed out by tools/bench/run_bench_serving.py")

    if importlib.util.find_spec("datasets") is None:
        _stub("datasets", load_dataset=_no)


def main() -> int:
    _prepare()
    from sglang.benchmark.serving import cli_main

    sys.argv = ["sglang.bench_serving", *sys.argv[1:]]
    t0 = time.perf_counter()
    try:
        cli_main()
    finally:
        r = resource.getrusage(resource.RUSAGE_SELF)
        print(f"BENCH_SERVING_PROCESS wall={time.perf_counter() - t0:.1f}s "
              f"cpu={r.ru_utime + r.ru_stime:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
