"""The controller_pid lookup (plugins/lookup/controller_pid.py): the main ansible-playbook process,
seen from its worker processes (the interrupts it serves: tests/unit/plugins/module_utils/_bench/test_interrupt.py)."""
from __future__ import annotations

import os
from typing import Any


def _report_pid(queue: Any) -> None:
    from ansible_collections.llmops.sglang.plugins.lookup.controller_pid import controller_pid

    queue.put(controller_pid())


def test_controller_pid_is_the_main_process_seen_from_a_worker() -> None:
    """The lookup is templated in ansible's worker processes (forked by multiprocessing from the
    main ansible-playbook process): it gives the main process, which lives as long as the play."""
    import multiprocessing

    from ansible_collections.llmops.sglang.plugins.lookup.controller_pid import LookupModule, controller_pid

    assert controller_pid() == os.getpid()
    assert LookupModule().run([]) == [os.getpid()]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    worker = context.Process(target=_report_pid, args=(queue,))
    worker.start()
    try:
        assert queue.get(timeout=30) == os.getpid() != worker.pid
    finally:
        worker.join(timeout=30)
