#!/usr/bin/env python3
"""Run SGLang 0.5.17's own client (python -m sglang.bench_serving) without torch.

    /tmp/sgbench/bin/python tools/bench/run_bench_serving.py [bench_serving args...]

/tmp/sgbench holds `pip install --no-deps sglang==0.5.17` plus the client's light imports
(aiohttp numpy requests tqdm orjson pybase64 psutil pyzmq transformers tokenizers; see
tools/bench/client_ceiling.sh). sglang/benchmark/serving.py also imports two server modules only
for constants/helpers: sglang.srt.disaggregation.utils (FAKE_BOOTSTRAP_HOST; the module imports
torch) and sglang.srt.utils.network (the package __init__ imports torch through
sglang.srt.utils.common). This wrapper provides the first as a stub with the same constant and
loads the second from its own file without the package __init__; it stubs `datasets` and `PIL`,
which only the HF-dataset and image datasets use. The random dataset, the request functions and
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
    import sglang  # the --no-deps install

    root = sglang.__path__[0]
    _stub("sglang.srt.disaggregation.utils", FAKE_BOOTSTRAP_HOST="2.2.2.2")
    pkg = _stub("sglang.srt.utils")
    pkg.__path__ = [f"{root}/srt/utils"]  # a package without running its __init__
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
    if importlib.util.find_spec("PIL") is None:
        pil = _stub("PIL")
        pil.Image = _stub("PIL.Image", Image=object, open=_no)


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
