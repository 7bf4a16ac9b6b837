# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Detached, process-group-managed services for hosts where systemd is not PID 1.

A service is an argv (typically one launch script that ``exec``s the server), a pid file and
a log file. The server is started in its own session and process group, so that a stop can
reach every process it spawned, including the scheduler and detokenizer processes that SGLang
re-parents away from the server.

Identity of a running service (the "status rule"): the pid file records the pid, its process
group, the kernel's start time of that pid (``/proc/<pid>/stat`` field 22) and the boot id.
The service is running only if that pid exists, is not a zombie, was started at that very
time during this boot, and (when ``match`` is given) its command line contains ``match``. A
recycled pid or a pid file from an earlier boot is therefore never mistaken for the server.

Pid file format: line 1 is the bare pid (so ``kill $(head -1 FILE)`` works); line 2 is a JSON
record with the rest. A pid file holding only a pid (written by something else) is accepted;
it has no start time, so the process must then show the service marker in its environment or
``match`` in its command line.

Plain Python, Linux only (``/proc``); no Ansible import.

A package, one job per file; each imports only files before it in this list, never this
``__init__``: ``common``, ``procfs`` (/proc), ``pidfile``, ``spec`` (the service, its status,
its inputs), ``identity`` (the status rule), ``stopping``, ``logs`` (the log tail, redacted),
``starting``, ``actions``. The names below are re-exported: ``_detached.status(spec)``.
"""
from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils._detached.actions import (  # noqa: F401
    apply,
    restart,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.common import (  # noqa: F401
    MARKER_ENV,
    POLL_S,
    PROC,
    DetachedServiceError,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.identity import (  # noqa: F401
    belongs_to,
    find_by_workdir,
    orphans,
    status,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.logs import (  # noqa: F401
    REDACTED,
    log_tail,
    redact,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.pidfile import (  # noqa: F401
    PID_FILE_MODE,
    PidRecord,
    parse_pid_file,
    read_pid_file,
    remove_pid_file,
    write_pid_file,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.procfs import (  # noqa: F401
    ProcStat,
    all_stats,
    boot_id,
    boot_time,
    clock_ticks,
    group_members,
    has_live_threads,
    iso_utc,
    parse_stat,
    read_cmdline,
    read_cwd,
    read_environ,
    read_stat,
    start_epoch,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.spec import (  # noqa: F401
    ActionResult,
    ServiceSpec,
    ServiceStatus,
    child_environment,
    normalize_command,
    parse_env_file,
    parse_umask,
    read_env_file,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.starting import (  # noqa: F401
    LOG_FILE_MODE,
    resolve_credentials,
    start,
)
from ansible_collections.llmops.sglang.plugins.module_utils._detached.stopping import (  # noqa: F401
    stop,
    terminate_group,
)
