#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.throughput_sweep: a thin shell over module_utils/_sweep (module.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: throughput_sweep
short_description: Measure an SGLang server's output throughput and latency over concurrency levels
version_added: "0.1.0"
description:
  - Sends streamed generation requests to an SGLang server (or router) at each concurrency level
    C of O(concurrency) - C closed-loop clients, each sending its next request as soon as its
    previous response ends - and returns per level the output tokens per second, TTFT, ITL, TPOT
    and end-to-end latency percentiles, errors by kind and client health, plus the peak and the
    knee of the curve, as the C(sglang_sweep) fact (schema_version 1).
  - Output tokens are the server's own counts (C(usage.completion_tokens), requested with
    C(stream_options.include_usage), for O(api=openai); the cumulative C(meta_info.completion_tokens)
    for O(api=native)), never the number of streamed chunks, so speculative decoding and
    C(--stream-interval) (several tokens per chunk) are counted right and ITL is per token.
  - TTFT is stamped at the first chunk that carries a token, even one whose text is empty.
  - HTTP errors, in-stream errors, timeouts, connection errors and short outputs are counted by
    kind and stay in the denominators; a hung server ends its level at O(level_timeout) (the
    level is marked, the play goes on).
  - A level with a failed request (a server that died or restarted mid-sweep, overload, a
    timeout) is marked (C(status) C(errors), or C(no_requests_ok) when nothing succeeded), left
    out of peak, knee and plateau and named in a warning; with O(fail_on_errors) the module
    then fails, the sweep still returned.
  - A server that answers HTTP 401 or 403 (SGLang's C(--api-key)) to the first probes or
    requests stops the sweep at once with a message naming O(api_key) that says whether a key is
    required (none was sent) or the one sent was refused.
  - Stops at once, cancelling its requests, on SIGINT, SIGTERM or SIGHUP, when the reader of its
    result (the controller's connection) goes away, when the process O(watch_pid) is gone, and
    when nobody refreshed O(heartbeat_file) for O(heartbeat_timeout) seconds; see O(watch_pid)
    and O(heartbeat_file) for jobs started with C(async). The levels that finished stay in
    O(progress_file) and the message says why it stopped.
  - One shared connection pool without a connection cap; connections are opened before each
    level; the O(warmup) requests are not measured.
  - Before each level a short warm-up round at the level's own concurrency (O(level_warmup)) lets
    the server compile kernels for the new batch shapes; it is reported per level and never
    counted in the level's numbers.
  - Each level is checked for drift (throughput of the two halves of its window differing by
    more than 15%).
  - When the server serves C(/metrics) (SGLang's C(--enable-metrics)), its own TTFT, ITL and
    end-to-end histograms are read before and after each level and their means returned per
    level (C(server)). On the time-scaled embedded engine these are the model's latencies, and
    client latencies that disagree with them by more than 25% are marked not measurable.
  - Each level reports the full-run throughput (first send to last finish) and the steady-window
    throughput (while all C clients have a request in flight), and is marked C(client_limited)
    when the client's event loop, not the server, set the pace.
  - Runs next to its server with the engine venv's Python (aiohttp is there) or on the
    controller with C(delegate_to=localhost). The Python running it needs aiohttp.
  - Sends requests but changes nothing; always C(changed=false). In check mode nothing is sent.
  - See C(docs/sweep.md) for every definition.
author:
  - llmops.sglang developers (@llmops)
requirements:
  - aiohttp (3.8 or later) for the Python that runs the module
options:
  url:
    description:
      - Base URL of the server or router, for example C(http://127.0.0.1:30000).
      - A trailing C(/v1) is removed.
    type: str
    required: true
  api:
    description:
      - C(openai) streams C(/v1/completions); C(native) streams SGLang's C(/generate).
    type: str
    choices: [openai, native]
    default: openai
  concurrency:
    description:
      - Concurrency levels (closed-loop clients), run in ascending order (duplicates dropped).
      - A level above O(max_concurrency) is refused before anything is sent. A level above 8 times
        the server's effective C(max_running_requests) (from C(/server_info)) is warned about;
        its requests beyond that number only wait in the server's queue.
      - The process's soft open-files limit is raised to the highest level plus 64 when it is
        lower (the hard limit allowing; otherwise the module fails before sending anything).
    type: list
    elements: int
    default: [1, 4, 8, 16, 32, 48]
  max_concurrency:
    description:
      - The highest concurrency level accepted. Each level opens that many connections and
        client tasks at once; a mistyped C(100000) would exhaust the client (and the server's
        file descriptors) instead of measuring anything.
    type: int
    default: 4096
  requests:
    description:
      - Requests per level, failed ones included.
      - Defaults to C(max(2*C, 8)) for level C. Mutually exclusive with O(duration).
    type: int
  duration:
    description:
      - Seconds per level instead of a request count. Clients keep sending until the time has
        passed; requests still in flight then are waited for (within O(level_timeout)).
    type: float
  prompts:
    description:
      - Prompts, used round-robin by request index.
      - Defaults to 8 built-in diverse prompts (Python code, networking, React, algorithm
        analysis, bash, data structures, garbage collection, Docker).
    type: list
    elements: str
  warmup:
    description:
      - Requests sent one after the other before the first level, not measured.
    type: int
    default: 1
  level_warmup:
    description:
      - Before each level, send one discarded round at the level's concurrency - max(C, number of
        prompts) requests of O(level_warmup_tokens), O(level_warmup_tokens) + step, ... tokens
        (step a quarter of it) so that the requests in flight finish one by one - so that a
        server compiling kernels at the first batch of each new shape (Triton on a cold SGLang)
        is not measured doing it - every prompt and every batch size from C down to 1 goes
        through the server first.
      - Its requests, errors (counted apart from the level's), tokens and seconds are returned in
        each point's C(level_warmup); failures are warned about.
    type: bool
    default: true
  level_warmup_tokens:
    description: Output tokens of each level warm-up request.
    type: int
    default: 16
  timeout:
    description:
      - Seconds one request may take, from send to the end of its stream, queueing at the
        server included. Past it the request counts as a C(timeout) error.
    type: float
    default: 900
  level_timeout:
    description:
      - Seconds one level may take. Requests in flight then are cancelled and counted as
        C(timeout) errors; the point is marked C(level_timed_out).
    type: float
    default: 1800
  sweep_timeout:
    description:
      - Seconds the whole sweep (warm-up and probes included) may take. Ends the running level
        like O(level_timeout) and starts no further one; the fact has C(stopped_on_timeout=true).
    type: float
    default: 7200
  stop_on_plateau:
    description:
      - Stop after the first level whose throughput gain over the previous level, per doubling
        of concurrency, is below O(plateau_gain). Client-limited levels never stop the sweep.
    type: bool
    default: false
  plateau_gain:
    description:
      - Relative throughput gain per doubling of concurrency below which the curve is flat
        (0.05 = 5%). Used by O(stop_on_plateau) and by the knee's plateau rule.
    type: float
    default: 0.05
  fail_on_errors:
    description:
      - Fail when a measured request of any level failed (any kind, C(short) only with
        O(ignore_eos)), after the whole sweep ran. The result still carries the sweep in
        C(ansible_facts.sglang_sweep); the message names the levels and the error kinds.
      - Without it such levels are marked and warned about, and the module succeeds.
    type: bool
    default: false
  watch_pid:
    description:
      - A process id on the machine running the module; the sweep stops at once (and the module
        fails) when that process is gone.
      - Unset on a task run over the local connection (the controller's machine,
        C(delegate_to=localhost)), the action plugin sets it to the controller's ansible process
        (the lookup P(llmops.sglang.controller_pid#lookup)), since a sweep started there with C(async)
        and C(poll=0) is a daemon in its own session (async_wrapper), which neither Ctrl-C nor the
        end of C(ansible-playbook) would otherwise reach.
      - A sweep that is not async needs none of this; it stops on SIGINT, SIGTERM and SIGHUP and
        when the reader of its result (the local connection's worker, sshd) goes away.
    type: int
  heartbeat_file:
    description:
      - A file on the machine running the module that the sweep creates when it starts (mode 0600,
        never through a symbolic link) and removes when it ends; whoever waits for the job must
        refresh its modification time (C(touch -c)) more often than O(heartbeat_timeout). When
        nobody did for longer, the sweep stops at once, as on an interrupt (the module fails, its
        message says so; the levels already finished stay in O(progress_file)).
      - For an async job on a host that is not the controller's machine, where O(watch_pid)
        cannot be watched; C(llmops.sglang.sweep_wait) refreshes it at each poll (the bench role
        sets both).
      - Unset (the default), no heartbeat is expected.
    type: path
  heartbeat_timeout:
    description:
      - Seconds without a refresh of O(heartbeat_file) after which the sweep stops; counted on the
        sweep's machine from the later of its start and the file's last modification.
      - Used only with O(heartbeat_file). Must be > 0.
    type: float
    default: 60
  progress_file:
    description:
      - A file on the machine running the module to which one JSON line is appended per finished
        level (host, instance and profile from O(progress_labels), concurrency, output tok/s, TTFT
        p50, errors, status, the server's running and queued maxima), as the level finishes; created
        with mode 0600, never through a symbolic link. Lines already written stay when the sweep is
        interrupted.
      - The bench role points it at a temporary file that its C(llmops.sglang.sweep_wait) action
        reads while the job runs (C(async)), copies to C(reports/<run id>/progress.jsonl) and prints.
    type: path
  progress_labels:
    description:
      - Labels copied into each progress line; keys C(host), C(instance) and C(profile) are used.
    type: dict
  model:
    description:
      - Model name sent in requests. Defaults to the first model that C(/v1/models) lists.
    type: str
  return_records:
    description:
      - Return the raw per-request records in C(sglang_sweep.records) (one small dict per
        request), from which a fleet's results can be merged without averaging percentiles.
    type: bool
    default: true
  validate_certs:
    description: Verify TLS certificates for C(https://) URLs.
    type: bool
    default: true
  time_scale:
    description:
      - The embedded engine's time scale (wall seconds per modelled second) to assume when the
        server does not report one, as a router in front of embedded engines does not. The
        sweep is then converted to the GPU time the engines model, like a sweep of the engines
        themselves. A scale the server reports wins. Unset for real servers.
    type: float
  client_processes:
    description:
      - How many client processes run each level. One Python process reads at most about 55-95k
        streamed chunks per second (one core); a router in front of many workers can serve more.
      - With N > 1 the level's C clients (and its requests) are split over N processes (at most C),
        each with its own connections; their raw per-request records are merged into the level's
        point exactly as one process would summarize them. The point's C(client_processes) says
        how many ran it.
      - C(0) or C(auto) starts with one process and, when a level is client-limited, measures that
        level again with twice the processes, up to the CPUs of the machine running the module
        (and C); later levels keep that number. The discarded tries are in the point's
        C(client_escalation).
      - An integer from 0 to 256, or C(auto).
    type: raw
    default: 1
extends_documentation_fragment:
  - llmops.sglang.server_api
  - llmops.sglang.sweep_action
  - llmops.sglang.sweep_pd
  - llmops.sglang.sweep_open_loop
  - llmops.sglang.sweep_request
  - llmops.sglang.sweep_workload
attributes:
  action:
    description: An action plugin runs on the controller first (O(options_from_role)), then the module where the task runs.
    support: full
  async:
    description: Supports being used with the C(async) keyword.
    support: full
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: full
    details: In check mode no request is sent; the result is C(skipped=true) without facts.
  diff_mode:
    description: Returns details on what changed, or would change, in diff mode.
    support: none
  facts:
    description: Returns an C(ansible_facts) dictionary that updates the host's facts.
    support: full
notes:
  - The module runs as long as the sweep does (bounded by O(sweep_timeout)); use C(async) with a
    long O(sweep_timeout) if a connection between controller and host must not stay open.
  - An async job on a remote host cannot see its controller's process; give it a
    O(heartbeat_file) refreshed by whoever polls it (C(llmops.sglang.sweep_wait) with
    C(heartbeat_file)), or it runs, once the controller is interrupted, until its C(async) limit
    or O(sweep_timeout) (or fails fast once its server is stopped).
  - Run one module per server instance, close to it; a client far from the server adds network
    latency to TTFT and ITL.
seealso:
  - module: llmops.sglang.sweep_report
"""

EXAMPLES = r"""
# Next to the server, with the engine venv's Python (aiohttp is installed there).
- name: Sweep the local SGLang instance
  llmops.sglang.throughput_sweep:
    url: http://127.0.0.1:30000
    concurrency: [1, 4, 8, 16, 32, 48]
    max_tokens: 1024
  vars:
    ansible_python_interpreter: /opt/sglang/venv/bin/python

# From the controller (its Python has aiohttp), against a remote server or router.
- name: Sweep a router from the controller, native API, stop once the curve is flat
  llmops.sglang.throughput_sweep:
    url: "http://{{ inventory_hostname }}:30000"
    api: native
    concurrency: [1, 2, 4, 8, 16, 32, 64, 128]
    stop_on_plateau: true
    plateau_gain: 0.05
    sweep_timeout: 3600
  delegate_to: localhost

# Through a router of many workers: more client processes when one is not enough.
- name: Sweep a router, adding client processes while a level is client-limited
  llmops.sglang.throughput_sweep:
    url: http://router.example:30000
    concurrency: [64, 256, 1024]
    client_processes: auto
  delegate_to: localhost

- name: Shared system prompts (HiCache's case), cache flushed and warmed before each level
  llmops.sglang.throughput_sweep:
    url: http://127.0.0.1:30000
    concurrency: [32]
    requests: 512
    workload:
      kind: shared_prefix
      groups: 256
      prompts_per_group: 2
      prefix_len: 2048
      suffix_len: 32
      output_len: {dist: uniform, min: 64, max: 256}
      order: round_robin
    seed: 1
    flush_cache: true
    warm: true

- name: A quick time-boxed check, 60 s per level, no raw records
  llmops.sglang.throughput_sweep:
    url: http://127.0.0.1:30000
    concurrency: [8]
    duration: 60
    max_tokens: 256
    return_records: false
    api_key: "{{ sglang_api_key }}"

- name: Fail when any request of any level failed (the sweep is still in the result)
  llmops.sglang.throughput_sweep:
    url: http://127.0.0.1:30000
    concurrency: [1, 8, 64]
    fail_on_errors: true
  register: swept

- name: In the background from the controller, stopping with the play when it is interrupted
  llmops.sglang.throughput_sweep:
    url: "http://{{ inventory_hostname }}:30000"
    watch_pid: "{{ lookup('llmops.sglang.controller_pid') }}"
  delegate_to: localhost
  async: 7320
  poll: 0

- name: On the server's host in the background, stopping when nobody polls it for 30 s
  llmops.sglang.throughput_sweep:
    url: http://127.0.0.1:30000
    progress_file: /tmp/sweep-gpu0.jsonl
    heartbeat_file: /tmp/sweep-gpu0.heartbeat
    heartbeat_timeout: 30
  async: 7320
  poll: 0
  register: started

- name: Wait for it, refreshing its heartbeat at each poll
  llmops.sglang.sweep_wait:
    jobs: ["{{ started }}"]
    heartbeat_file: /tmp/sweep-gpu0.heartbeat

- name: Show peak and knee
  ansible.builtin.debug:
    msg: >-
      peak {{ ansible_facts['sglang_sweep']['peak'] }},
      knee {{ ansible_facts['sglang_sweep']['knee'] }}
"""

RETURN = r"""
ansible_facts:
  description: Facts set by the module.
  returned: success, not in check mode; also when O(fail_on_errors) fails the module
  type: dict
  contains:
    sglang_sweep:
      description: The sweep (see docs/sweep.md for every definition).
      returned: success
      type: dict
      contains:
        schema_version:
          description: Version of this structure; 1.
          type: int
          sample: 1
        url:
          description: Base URL swept (trailing C(/) and C(/v1) removed).
          type: str
          sample: http://127.0.0.1:30000
        api:
          description: C(openai) or C(native).
          type: str
          sample: openai
        model:
          description: Model name sent (given or from C(/v1/models)); null if unknown (native).
          type: str
          sample: /models/Qwen3.6-27B
        server:
          description: What the server reported about itself.
          type: dict
          contains:
            version:
              description: SGLang version from server info (last successful snapshot).
              type: str
              sample: 0.5.17
            max_running_requests:
              description:
                - The scheduler's effective limit (C(internal_states[0].effective_max_running_requests_per_dp),
                  else C(internal_states[0].max_running_requests), else the launch argument).
              type: int
              sample: 4
            avg_spec_accept_length_before:
              description: C(internal_states[0].avg_spec_accept_length) before the sweep (null
                without speculative decoding or before its first verify step).
              type: float
              sample: null
            avg_spec_accept_length_after:
              description: The same after the last level.
              type: float
              sample: 3.21
            server_info_path:
              description: The endpoint that answered, C(/server_info) or C(/get_server_info); null
                if none did.
              type: str
              sample: /server_info
            time_scale:
              description:
                - Wall seconds per modelled second reported by the embedded engine (C(llmops_sim.time_scale)
                  in its server info), else O(time_scale); null for real servers.
              type: float
              sample: 0.02
            metrics:
              description: Whether the server's C(/metrics) was read (server-side latency per level).
              type: bool
        time_base:
          description:
            - C(wall) for real servers. C(model) when the server is the time-scaled embedded engine, in
              which case rates, durations and latencies (points and records) are converted to the GPU time
              it models and each point keeps its wall-clock rates and durations under C(wall).
          type: str
          sample: wall
        started:
          description: Start of the sweep, ISO-8601 UTC.
          type: str
          sample: "2026-11-30T05:15:00.123Z"
        finished:
          description: End of the sweep, ISO-8601 UTC.
          type: str
          sample: "2026-11-30T05:27:31.456Z"
        duration_s:
          description: Seconds the whole sweep took.
          type: float
        options:
          description:
            - The effective options (defaults filled in, API key left out; C(api_key_set) says
              whether one was sent). C(requests=null) with C(requests_rule) means C(max(2*C, 8)).
            - Also the fixed rules used, C(knee_share), C(client_cpu_limit), C(client_lag_limit_ms).
          type: dict
        warmup:
          description: Warm-up requests sent and how many succeeded (C(requests), C(ok)).
          type: dict
        level_warmup:
          description:
            - The per-level warm-up, C(enabled), C(max_tokens), and over all levels C(requests) and
              C(errors) (failed warm-up requests). Details per level in each point's C(level_warmup).
          type: dict
        points:
          description: One item per level run, in ascending concurrency.
          type: list
          elements: dict
          contains:
            concurrency:
              description: Closed-loop clients C.
              type: int
            requests:
              description: Requests sent at this level (failed ones included).
              type: int
            ok:
              description: Requests that completed with C(finish_reason=length) or all O(max_tokens) tokens.
              type: int
            errors:
              description:
                - Failed requests by kind C(http) (status not 200), C(stream) (error in the stream,
                  broken or truncated stream, no token count), C(timeout) (O(timeout), or cut by
                  O(level_timeout) / O(sweep_timeout)), C(connection) (no response), C(short)
                  (completed with fewer than O(max_tokens) tokens and another finish reason), and
                  C(total). C(requests = ok + total).
              type: dict
              sample: {http: 0, stream: 0, timeout: 0, connection: 0, short: 0, total: 0}
            error_rate:
              description: errors.total / requests.
              type: float
            error_messages:
              description: Up to 5 distinct error messages of the level.
              type: list
              elements: str
            status:
              description:
                - C(ok) when every measured request of the level succeeded, C(no_requests_ok) when
                  none did, C(errors) in between. Every error kind counts (C(short) only with
                  O(ignore_eos)). Only C(ok) levels count for peak, knee and plateau.
              type: str
              sample: ok
            errors_present:
              description: The level had a failed request (C(status) is not C(ok)); the share is C(error_rate).
              type: bool
            output_tokens:
              description: Server-counted output tokens of completed responses (ok and short);
                failed requests add 0.
              type: int
            avg_output_tokens:
              description: output_tokens / completed responses.
              type: float
            duration_s:
              description: Wall time from the first send to the last finish of the level.
              type: float
            output_tok_s:
              description: output_tokens / duration_s (the seed table's figure; ramp-up and tail included).
              type: float
            steady_output_tok_s:
              description:
                - Tokens that arrived inside the steady window / its length. The window runs
                  from the moment the last client sent its first request to the moment the first
                  client finished its last one, so all C clients have a request in flight.
                - Null when fewer than C clients ran.
              type: float
            steady_window_s:
              description: Length of the steady window in seconds.
              type: float
            req_s:
              description: ok / duration_s.
              type: float
            ttft_ms:
              description: Time to first token of the ok requests, C(mean), C(p50), C(p90), C(p99)
                in ms (percentiles by linear interpolation of the raw samples).
              type: dict
            itl_ms:
              description: Inter-token latency per token over all tokens of the ok requests (a chunk's gap spread over the tokens it added), same keys.
              type: dict
            tpot_ms:
              description: Per ok request (e2e - TTFT) / (output tokens - 1), same keys.
              type: dict
            e2e_s:
              description: End-to-end latency of the ok requests in seconds, same keys.
              type: dict
            achieved_concurrency:
              description: Average requests in flight, sum of request durations / duration_s.
              type: float
            level_timed_out:
              description: The level was cut by O(level_timeout) or O(sweep_timeout).
              type: bool
            client_limited:
              description:
                - True when the client was the bottleneck, C(client.cpu_util >= 0.85) or
                  C(client.loop_lag_own_ms_p99 >= 20) (C(client.loop_lag_ms_p99) where the kernel
                  has no run-queue figures). Such levels are left out of peak and knee.
                - A busy machine is not a saturated client, so the lag that judges leaves out the
                  time the client waited for a CPU other processes held.
                - Judged on levels without failed requests only (false otherwise); failed requests
                  end at once and leave a short, busy level, which says nothing about the client.
              type: bool
            client:
              description:
                - C(loop_lag_ms_p99), p99 of how late a 10 ms ticker task ran on the event loop;
                  C(loop_lag_own_ms_p99), the same less each tick's wait on the run queue
                  (Linux C(/proc/thread-self/schedstat); null where there is none), which is the
                  lateness the client's own work caused; C(cpu_util), process CPU time / wall time over the
                  level (1.0 = one core busy).
                - With several client processes, the worst process's figures (each is one event
                  loop on at most one core).
              type: dict
            client_processes:
              description: How many client processes ran the level (O(client_processes), at most C).
              type: int
            client_escalation:
              description:
                - O(client_processes=auto) only; null otherwise and when the level was measured once.
                - The discarded client-limited tries of the level, each C(processes),
                  C(output_tok_s) and C(client), before it was measured again with more processes.
              type: list
              elements: dict
            offered_rate:
              description: Mode C(rate), the rate asked for (req/s); C(scheduled_rate), the seeded schedule's own.
              type: float
            achieved_rate:
              description: Mode C(rate), (n - 1) / (last send - first send), the rate the server was offered in fact.
              type: float
            queue_delay_ms:
              description: Mode C(rate), send minus due time (mean, p50, p90, p99); also C(queued_requests),
                C(max_inflight) (the cap, also the point's C(concurrency)) and C(unsent) (see docs/sweep.md).
              type: dict
            goodput_req_s:
              description: With O(slo), requests that succeeded and met every term, per second.
              type: float
            goodput_tok_s:
              description: With O(slo), output tokens of those requests per second.
              type: float
            slo_met:
              description: With O(slo), each term's statistic over the level (failures as infinitely late) within
                its threshold (with O(repeats), in every run); also C(good_requests), C(slo_attainment) (good / all
                requests) and C(slo_terms) (per term C(threshold_ms), C(value_ms), C(met), C(attainment)).
              type: bool
            repeats:
              description: With O(repeats) > 1, C(n), C(measures) (per measure C(mean), C(ci95_low), C(ci95_high),
                C(half_width), C(rel_half_width), C(runs)), C(disagree) and C(disagree_on). Each point has C(repeat) 0.
              type: dict
            gain_per_doubling:
              description:
                - (this tok/s / previous level's - 1) / log2(this C / previous C), between levels
                  without failed requests; null for the first such level and for levels with errors.
              type: float
            server_after:
              description: Server snapshot after the level (C(ok), C(version),
                C(max_running_requests), C(avg_spec_accept_length), C(last_gen_throughput), C(at)).
              type: dict
            level_warmup:
              description:
                - The level's warm-up round (null with O(level_warmup=false)), C(requests), C(ok),
                  C(errors) by kind with C(total) (not part of the level's C(errors)),
                  C(error_messages), C(max_tokens), C(output_tokens), C(seconds) (modelled on the
                  time-scaled engine), C(timed_out).
              type: dict
            drift:
              description:
                - Throughput in the two halves of the level's window (the steady window, else first
                  send to last finish), C(window), C(first_half_tok_s), C(second_half_tok_s),
                  C(ratio) (second / first), C(flagged) (the ratio is off 1 by more than
                  C(threshold), 0.15), C(checked) (false when a half held fewer than 100 tokens or
                  50 token chunks), C(reason).
              type: dict
            server:
              description:
                - The server's own latency over the level, from the differences of its
                  C(/metrics) histograms before and after it (null without C(/metrics)).
                  C(requests), C(first_tokens), C(itl_tokens) (observations), C(ttft_ms_mean),
                  C(itl_ms_mean), C(e2e_s_mean), and C(ttft_ms_range), C(itl_ms_range),
                  C(e2e_s_range), the bucket bounds each of p50, p90, p99 lies in.
                - Wall-clock server time on a real server; modelled GPU time on the time-scaled
                  embedded engine.
              type: dict
            server_metrics:
              description:
                - What the server's C(/metrics) said about the level (null without C(/metrics)),
                  from counters read before and after it and gauges sampled every 0.5 s while it ran (in
                  the modelled time on the time-scaled engine, at least 50 ms apart). C(samples),
                  C(running_mean), C(running_max), C(queued_mean), C(queued_max),
                  C(token_usage_mean), C(token_usage_max) (KV pool), C(spec_accept_length)
                  (generated tokens per verify call), C(spec_accept_rate), C(cache_hit_rate)
                  (cached / prompt tokens), C(cache_hit_rate_device), C(cache_hit_rate_host)
                  (HiCache host pool), C(hicache_host_usage_max), C(retracted_max), and on a
                  prefill/decode instance C(pd_prefill_inflight_max), C(pd_decode_transfer_max),
                  C(pd_bootstrap_failed), C(pd_transfer_failed), C(pd_kv_transfers),
                  C(pd_kv_transfer_ms_mean).
                - A field the release does not serve (or that does not apply, such as the accept
                  length without speculative decoding) is null and C(notes) says why
                  (C(not reported by this release), C(speculative decoding off), ...).
                  See docs/sweep.md.
              type: dict
            sides:
              description:
                - With O(worker_metrics) (a sweep through the router of a prefill/decode deployment), one
                  entry per side (C(prefill), C(decode), C(unified)) with the side's C(server_metrics)
                  fields summed (running and queued means, failures, KV transfers) or its busiest
                  instance's (maxima), C(pd_kv_transfer_ms_mean) weighted by transfers, C(instances),
                  C(read) and C(by_instance); absent without O(worker_metrics) (docs/sweep.md).
              type: dict
            cache_state:
              description:
                - What the sweep did to the server's prefix cache before the level (null when
                  neither O(flush_cache) nor O(warm) is set). C(flush) (C(ok), C(status), C(message),
                  C(seconds)) and C(warm) (C(requests), C(ok), C(seconds)), each null when not done.
              type: dict
            client_cache:
              description:
                - The prefix-cache hits the responses reported, over the requests that reported
                  both counts (native API, or OpenAI responses with C(cached_tokens)). C(requests),
                  C(prompt_tokens), C(cached_tokens), C(cache_hit_rate) (null when none reported).
              type: dict
            latency_measurable:
              description:
                - Time-scaled engine only (null otherwise). False when some client latency
                  statistic disagrees with the engine's model (C(server)) by more than 25% (the
                  mean off by more, or a percentile outside the model's bucket range widened by
                  25%). Without C(server), when the wall-clock value is under 10x the client's
                  timing jitter.
              type: bool
            latency_unmeasurable:
              description: "The statistics found not measurable, by quantity, for example C({itl_ms: [p50, p90, p99]})."
              type: dict
            latency_check:
              description: How each quantity was checked (C(method)), C(tolerance), and the C(reasons) per quantity.
              type: dict
        peak:
          description: The level with the highest output_tok_s among usable levels - every request
            ok, not client-limited - (C(concurrency), C(output_tok_s), C(client_limited) true only if
            every level without errors was client-limited; in rate mode also C(offered_rate), the level's rate, since
            every rate level has the same C(concurrency), its in-flight cap); null when no level ran without errors.
          type: dict
          sample: {concurrency: 48, output_tok_s: 409.0, client_limited: false}
        knee:
          description:
            - The lowest level that reaches 90% of the peak (C(rule=share_of_peak)), or that is
              followed by a level adding less than O(plateau_gain) per doubling of concurrency
              (C(rule=plateau)), whichever comes first. C(share_of_peak) is its output_tok_s / the peak's.
            - Levels with failed requests are left out. Null when no level ran without errors.
          type: dict
          sample: {concurrency: 8, output_tok_s: 369.7, share_of_peak: 0.9039, rule: share_of_peak}
        mode:
          description: C(concurrency) or C(rate), as run; C(slo), the SLO the levels were judged by ({} without).
          type: str
        slo_limit:
          description: With O(search), C(unit) (C(req_s) or C(concurrency)), C(highest_pass), C(lowest_fail),
            C(relative_gap), C(converged), C(tolerance) and the C(probes) (C(load), C(slo_met))); else null.
          type: dict
        levels_with_errors:
          description: The concurrency of each level with a failed request (C(status) not C(ok)).
          type: list
          elements: int
          sample: [32, 48]
        stopped_on_plateau:
          description: O(stop_on_plateau) ended the sweep early.
          type: bool
        stopped_on_timeout:
          description: O(sweep_timeout) ended the sweep early.
          type: bool
        warnings:
          description: Non-fatal problems (server info unavailable, failed warm-up, time limits,
            levels with failed requests, levels far above the server's max_running_requests).
          type: list
          elements: str
        records:
          description:
            - One item per measured request (empty with O(return_records=false)), C(level) (index
              of the level), C(concurrency), C(index) (within the level; with a multi_turn workload
              the conversation), C(ok), C(error_kind),
              C(http_status), C(output_tokens), C(finish_reason), C(cached_tokens) (prompt tokens
              the server served from its prefix cache, when the response said), C(ttft_ms), C(e2e_s),
              C(itl_ms_mean), C(start_s) and C(end_s) (seconds since the sweep started).
          type: list
          elements: dict
        records_t0_unix:
          description:
            - When the sweep started, in Unix seconds (wall clock) - the origin of the records'
              C(start_s) and C(end_s), so that sweeps run at the same time (other hosts, other
              instances) can be merged on one clock.
          type: float
          sample: 1796100900.123456
skipped:
  description: True in check mode (no request sent).
  returned: check mode
  type: bool
msg:
  description: One-line summary (peak, knee, levels with errors), or why nothing was sent in
    check mode, or why it failed (O(fail_on_errors), an interrupt, a refused API key).
  returned: always
  type: str
  sample: "6 levels, peak 409.0 tok/s at C=48, knee C=8"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.module import (
    ARGUMENT_SPEC,
    MUTUALLY_EXCLUSIVE,
    run,
)


def main() -> None:
    # the logic is in module_utils/_sweep/module.py; a spawned client process re-runs this file
    # as __mp_main__, hence the guard below
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                      supports_check_mode=True))


if __name__ == "__main__":
    main()
