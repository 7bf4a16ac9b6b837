# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Batch generation through the fleet (``playbooks/generate.yml``, module
``llmops.sglang.generate_job``; docs/generate.md): a dataset of requests in OpenAI's batch input
format sent through the router or straight to the instances, each result written exactly once.

Runs on hosts (Python >= 3.10, the standard library; aiohttp for the sending). One job per file:

- ``inputs``: the input lines (OpenAI batch input, or plain ``prompt``/``messages`` lines with an
  id), checked line by line (line number and reason) and read as requests;
- ``store``: the job's folder on disk: the output shards, the errors file and the journal of
  done ids, written so that a result is either whole and counted or not there at all, and
  recovered after any interruption (a torn last line, a kill between two writes);
- ``sender``: the requests' fate: one attempt's outcome, whether it is tried again, its backoff;
- ``runner``: the asyncio job: targets (the router, or each instance with its concurrency), the
  queue, retries, instances that go down, the progress file and the final summary;
- ``job``: the job's life on its host: check before sending, start (one at a time: a lock held
  while it runs), status, stop;
- ``module``: ``llmops.sglang.generate_job``'s work, from its parameters to ``exit_json``.
"""
from __future__ import annotations
