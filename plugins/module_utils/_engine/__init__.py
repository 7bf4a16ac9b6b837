# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The embedded engine: a drop-in for ``python -m sglang.launch_server`` on hosts without GPUs.

It accepts exactly the flags of the emulated release (the release's own argparse schema, through
``_flags``), serves SGLang's HTTP API with the response shapes of the real server (recordings in
``tests/fixtures/sglang-0.5.17-h200``), starts SGLang's child processes, and paces token
generation with its performance model, scaled by ``LLMOPS_SIM_TIME_SCALE``. Runs on hosts:
Python >= 3.10, the standard library and aiohttp (``server`` only). docs/engine-api.md,
docs/engine.md.

Run: ``python -m ansible_collections.llmops.sglang.plugins.module_utils._engine <argv>``.

One job per file:

- ``cli``: ``main()``: argv, then the start-up (model, GPU, host memory, plan, socket), the
  children and the server, in the real server's order; ``__main__`` runs it;
- ``host``: the simulated host from the environment (GPUs, MemAvailable, accept length) and the
  listening socket;
- ``startup``: the log before serving (ServerArgs line, deprecation warnings, timed start-up lines);
- ``procs``: SGLang's scheduler and detokenizer processes and its handling of their death;
- ``fleet``: several nodes (``--nnodes``) meeting at rank 0's dist-init address and watching
  each other; ``follower``: the life of a node of rank > 0;
- ``server``: the aiohttp applications (rank 0's API, a rank > 0's placeholder), middlewares,
  routes, and the server's life;
- ``config``: one engine's configuration; ``engine``: its state; ``scheduler``: request bookkeeping and
  the token-dispatch loop;
- ``api_openai`` (completions, chat) and ``api_native`` (/generate): the APIs, free of the HTTP
  framework; ``requests`` (bodies, validation) and ``replies`` (replies, streams, error bodies);
- ``tokens``: the modelled tokenizer; ``info``: server_info / model_info documents;
  ``loads``: /get_load and /v1/loads documents;
  ``metrics``: what /metrics counts; ``prometheus``: its text; ``log``: the log format;
- ``perfmodel``: the performance model (its own package).

What ships to a host with it: the server role copies this package (every ``.py`` file under
it, found by walking it) and the files declared below, with the ``llmops.sglang.engine_files``
lookup, under ``<engine root>/ansible_collections/llmops/sglang/``. Keep the declarations
complete: tests/unit/plugins/lookup/test_engine_files.py starts the engine from exactly these files.
"""
from __future__ import annotations

# The collection's own module_utils the engine imports from outside this package (relative to
# plugins/module_utils/).
MODULE_UTILS = ("_shared/paths.py", "_shared/flags.py", "_shared/releases.py", "_shared/models.py")

# The data files it reads (relative to data/); ``{release}``: the emulated release.
DATA_FILES = ("flag_schemas/sglang-{release}.json", "releases.json", "gpus.json", "perfmodel.json")


def data_files(release: str) -> list[str]:
    """The data files of ``release``, relative to the collection's data/ folder."""
    return [name.format(release=release) for name in DATA_FILES]
