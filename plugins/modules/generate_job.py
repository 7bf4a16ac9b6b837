#!/usr/bin/python
# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""Ansible module llmops.sglang.generate_job: a thin shell over module_utils/_generate (module.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: generate_job
short_description: Run a batch generation job through SGLang servers or a router, each request exactly once
version_added: "0.3.0"
description:
  - Sends every request of a JSONL input (OpenAI's batch input format, or plain C(prompt) /
    C(messages) lines with an id) to the O(targets) (an C(sglang-router), or SGLang instances),
    and writes each result once, in OpenAI's batch output format, to the shards of the job's
    O(folder) (C(results-00000.jsonl), ...; O(shard_lines) each), a request that failed for good
    to C(errors.jsonl) with its reason. See C(docs/generate.md).
  - O(step=check) refuses, before anything is sent, an input with a line that cannot be sent
    (each listed with its number and reason), a O(folder) that cannot be written, and an input
    that changed since the job in O(folder) began (unless O(allow_input_change)); it says what
    a run would do (C(new), C(resumable), C(finished), or C(running) when a job holds the folder).
  - O(step=run) runs the job to its end in this process; start it with C(async) and C(poll=0)
    so that it is detached from the play (it survives the controller) and wait with
    M(llmops.sglang.generate_wait). One job per folder at a time - a run that finds the folder's
    lock held returns at once (C(attached)). Every interruption (the job killed, even with
    SIGKILL; its host rebooted; O(step=stop)) leaves a folder that the next run recovers and
    continues - a done id is never sent or written again, a request that was in flight is sent again.
  - Retries 408, 429, 5xx, timeouts and dropped connections (O(max_attempts) in all, with
    backoff); a refused connection marks the target down for a while and gives its request to
    the others without counting an attempt; when every target is down for O(down_timeout_s)
    the run stops (resume it).
  - O(step=status) reads the job's state and its C(progress.json); O(step=stop) sends it SIGTERM
    and waits until it has written what finished.
author:
  - llmops.sglang developers (@llmops)
requirements:
  - aiohttp (3.8 or later) for the Python that runs O(step=run)
options:
  step:
    description: What to do with the job in O(folder).
    type: str
    choices: [check, run, status, stop]
    required: true
  folder:
    description:
      - The job's folder on the host (its results, journal, log and progress); created when missing.
    type: path
    required: true
  job:
    description: The job's name, for its log and progress.
    type: str
    default: ""
  input:
    description:
      - The input JSONL on the host. Required by O(step=check) and O(step=run).
    type: path
  targets:
    description:
      - Where requests go (O(step=run)) - the router, or each instance.
    type: list
    elements: dict
    suboptions:
      name:
        description: The target's name in the progress and the results' C(instance).
        type: str
        required: true
      url:
        description: Its base URL (C(http://host:port)); the request's C(url) is appended.
        type: str
        required: true
      concurrency:
        description: Requests in flight at once to it.
        type: int
        required: true
      source:
        description: Where O(targets[].concurrency) came from (M(llmops.sglang.generate_plan)'s), kept in the progress.
        type: str
        default: ""
  instances:
    description:
      - Through a router - the instances behind it, each as the job's host reaches it; their
        C(/metrics) token counters (C(sglang:prompt_tokens_total),
        C(sglang:generation_tokens_total)), read at the start and at each progress write, give
        each one's tokens and share during the run (C(instances) in the progress). Requests of
        other clients to them count too.
    type: list
    elements: dict
    suboptions:
      name:
        description: The instance's name in the progress (C(host/instance)).
        type: str
        required: true
      url:
        description: Its base URL.
        type: str
        required: true
  defaults:
    description:
      - Body parameters for every request that does not give them (C(max_tokens),
        C(temperature), C(model), ...); what a line gives is sent as given.
    type: dict
    default: {}
  allow_input_change:
    description:
      - Run (and check) an O(input) whose content differs from the one the job in O(folder) began
        with - what is done stays done, the new input's other ids are sent, ids it no longer has
        are not sent again. Without it such a run is refused.
    type: bool
    default: false
  retry_errors:
    description:
      - Send the requests of the errors file again (after fixing what made them fail) - the file
        is kept as C(errors-retried-<n>.jsonl), no longer an output, and its requests are not done.
      - Without it a request that failed for good is done, and a resume does not send it again.
    type: bool
    default: false
  max_failures_in_a_row:
    description:
      - Stop the run when this many requests in a row failed for good (a cause every request
        meets - a server refusing the bodies, a wrong API key - would otherwise fill the errors
        file with the whole input); 0 never stops. Resume with O(retry_errors) once it is fixed.
    type: int
    default: 50
  max_attempts:
    description: Attempts of one request before it fails for good (408, 429, 5xx, timeouts, dropped connections).
    type: int
    default: 8
  backoff_s:
    description: Seconds before the second attempt; doubled for each next one (times 0.5 to 1, random), up to O(backoff_max_s).
    type: float
    default: 1.0
  backoff_max_s:
    description: The longest wait between two attempts of one request.
    type: float
    default: 60.0
  request_timeout_s:
    description: Seconds one attempt may take, its whole response included; then it counts as a timeout.
    type: float
    default: 3600.0
  down_timeout_s:
    description: Seconds every target may be down (connections refused) before the run stops; resume it when they are up.
    type: float
    default: 900.0
  shard_lines:
    description: Results per output shard file.
    type: int
    default: 100000
  progress_interval_s:
    description: Seconds between two writes of C(progress.json).
    type: float
    default: 2.0
  stop_timeout_s:
    description: With O(step=stop), seconds to wait for the job to end after SIGTERM before SIGKILL.
    type: float
    default: 60.0
  labels:
    description: Labels kept in the progress document (host, job).
    type: dict
    default: {}
  api_key:
    description: Sent as C(Authorization Bearer) (SGLang's C(--api-key), the router's).
    type: str
  options_from_role:
    description:
      - Take every documented option the task does not give from that role's variables,
        C(sglang_<role>_<option>) (C(generate) - C(sglang_generate_max_attempts) is
        O(max_attempts)), read by the action plugin on the controller.
      - Not set, only the task's arguments count (the module used by itself).
    type: str
    choices: [generate]
attributes:
  action:
    description: An action plugin runs on the controller first (O(options_from_role)), then the module where the task runs.
    support: full
  async:
    description: Supports being used with the C(async) keyword (O(step=run) is meant to run so).
    support: full
  check_mode:
    description: Can run in check mode and predict its changed status without changing the target.
    support: partial
    details: O(step=check) and O(step=status) run as usual (they change nothing but create O(folder)); O(step=run) and O(step=stop) do nothing.
  diff_mode:
    description: Returns details on what changed, or would change, in diff mode.
    support: none
seealso:
  - module: llmops.sglang.generate_wait
"""

EXAMPLES = r"""
- name: Check the input and the folder before anything is sent
  llmops.sglang.generate_job:
    step: check
    folder: /srv/generate/prompts
    input: /srv/generate/prompts.jsonl

- name: Run the job detached from the play
  llmops.sglang.generate_job:
    step: run
    folder: /srv/generate/prompts
    input: /srv/generate/prompts.jsonl
    targets:
      - {name: router, url: "http://127.0.0.1:8000", concurrency: 192}
    defaults: {max_tokens: 2048, temperature: 0.6}
  async: 2592000
  poll: 0
  register: started

- name: Stop it (what finished is kept; resume by running it again)
  llmops.sglang.generate_job:
    step: stop
    folder: /srv/generate/prompts
"""

RETURN = r"""
state:
  description:
    - O(step=check) - C(new), C(resumable), C(finished) or C(running). O(step=run) - the run's end
      (C(finished), C(stopped), C(failed)) or C(running) (C(attached)). O(step=status) and
      O(step=stop) - C(none), C(running), C(finished), C(stopped), C(failed), or C(interrupted)
      (the last run died without writing its end).
  returned: always
  type: str
  sample: resumable
pending:
  description: O(step=check) - requests of the input not done yet.
  returned: with step=check, unless running
  type: int
progress:
  description: The job's progress document (C(progress.json), docs/generate.md "Progress").
  returned: with step=status, step=stop and step=run
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils._generate.module import run
from ansible_collections.llmops.sglang.plugins.module_utils._shared.modulespec import argument_spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec("generate_job"),
        required_if=[("step", "check", ("input",)), ("step", "run", ("input", "targets"))],
        supports_check_mode=True,
    )
    run(module)


if __name__ == "__main__":
    main()
