# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""What each request of a sweep asks (the ``workload`` option): ``random`` (the sweep's prompts,
or random text of a length distribution), ``shared_prefix`` (groups of prompts sharing a long
prefix, like SGLang's generated-shared-prefix dataset), ``multi_turn`` (conversations whose
context grows by the server's replies) and ``file`` (JSONL of prompts, chat messages or
ShareGPT conversations). Every choice is drawn from ``random.Random`` seeded by the sweep's
``seed`` and the request's own index, so request i is the same in every process and every run.

Lengths are in tokens of CHARS_PER_TOKEN characters of generated text: exact on the embedded
engine (it counts text in runs of four characters), about right on real tokenizers (three-letter
words and a space).
"""
from __future__ import annotations

import json
import math
import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.llmops.sglang.plugins.module_utils._sweep.common import SweepError

DISTS = ("fixed", "uniform", "normal", "lognormal")
ORDERS = ("shuffled", "round_robin", "grouped")
CHARS_PER_TOKEN = 4
DEFAULT_SEED = 42


@dataclass(frozen=True)
class Length:
    """A length (or time) distribution: fixed, uniform [min, max], normal or lognormal (mean, std)
    clipped to [min, max]."""

    dist: str = "fixed"
    value: float = 0.0
    mean: float = 0.0
    std: float = 0.0
    low: float = 1.0
    high: float = math.inf

    def draw(self, rng: random.Random, integer: bool = True) -> float:
        if self.dist == "fixed":
            x = self.value
        elif self.dist == "uniform":
            x = rng.uniform(self.low, self.high) if not integer else rng.randint(int(self.low), int(self.high))
        elif self.dist == "normal":
            x = rng.gauss(self.mean, self.std)
        else:  # lognormal with this mean and std
            sigma2 = math.log(1.0 + (self.std / self.mean) ** 2)
            x = rng.lognormvariate(math.log(self.mean) - sigma2 / 2.0, math.sqrt(sigma2))
        x = min(max(x, self.low), self.high)
        return float(int(round(x))) if integer else x

    def describe(self) -> Any:
        if self.dist == "fixed":
            return self.value if not self.value.is_integer() else int(self.value)
        out: dict[str, Any] = {"dist": self.dist}
        if self.dist in ("normal", "lognormal"):
            out.update(mean=self.mean, std=self.std)
        out["min"] = self.low
        if self.high != math.inf:
            out["max"] = self.high
        return out


def parse_length(name: str, spec: Any, floor: float = 1.0) -> Length:
    """``spec`` as a ``Length``: a number (fixed) or a mapping ``{dist, value | min, max | mean,
    std[, min, max]}``. Raises SweepError naming the option and the rule."""
    rule = (f"workload.{name} must be a number >= {floor:g}, or a mapping with dist (one of {', '.join(DISTS)}): "
            "fixed: value; uniform: min, max; normal or lognormal: mean, std (> 0) and optional min, max")
    if isinstance(spec, bool):
        raise SweepError(f"{rule}; got {spec!r}")
    if isinstance(spec, (int, float)):
        if spec < floor:
            raise SweepError(f"{rule}; got {spec!r}")
        return Length(value=float(spec), low=floor)
    if not isinstance(spec, dict) or spec.get("dist") not in DISTS:
        raise SweepError(f"{rule}; got {spec!r}")
    try:
        dist = spec["dist"]
        low = float(spec.get("min", floor))
        high = float(spec.get("max", math.inf))
        if dist == "fixed":
            return parse_length(name, spec["value"], floor)
        if dist == "uniform":
            low, high = float(spec["min"]), float(spec["max"])
            ok = floor <= low <= high
            return _checked(ok, rule, spec, Length(dist, low=low, high=high))
        mean, std = float(spec["mean"]), float(spec["std"])
        ok = mean > 0 and std > 0 and floor <= low <= high
        return _checked(ok, rule, spec, Length(dist, mean=mean, std=std, low=low, high=high))
    except (KeyError, TypeError, ValueError):
        raise SweepError(f"{rule}; got {spec!r}") from None


def _checked(ok: bool, rule: str, spec: Any, value: Length) -> Length:
    if not ok:
        raise SweepError(f"{rule}; got {spec!r}")
    return value


def _int(spec: dict[str, Any], name: str, default: int, low: int = 1) -> int:
    value = spec.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SweepError(f"workload.{name} must be an integer >= {low}, got {value!r}")
    return value


def rng_for(seed: int, *parts: Any) -> random.Random:
    """The generator of one choice: seeded by the sweep's seed and the choice's name, so it does
    not depend on the order (or the process) in which requests are made."""
    return random.Random("/".join(str(p) for p in (seed, *parts)))


def gen_text(rng: random.Random, tokens: int) -> str:
    """``tokens`` x CHARS_PER_TOKEN characters of random three-letter words."""
    letters = rng.choices(string.ascii_lowercase, k=3 * tokens)
    return "".join("".join(letters[3 * i:3 * i + 3]) + " " for i in range(tokens))


def render_chat(messages: list[dict[str, str]]) -> str:
    """Chat messages as one completion prompt (the sweep's APIs are completion-style): each
    message ``<|role|>\\ncontent\\n``, then the assistant header. A conversation's later turn
    starts with its earlier ones, so the server's prefix cache sees the shared history."""
    body = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
    return body + "<|assistant|>\n"


@dataclass
class Request:
    """One request: its prompt and max_tokens (None: the sweep's ``max_tokens``)."""

    prompt: str
    max_tokens: int | None = None


@dataclass
class Workload:
    """A parsed ``workload``: ``request(i)`` for single requests; for ``multi_turn``,
    ``conversation(i)`` gives the user turns and ``think(i, turn)`` the pause before a turn."""

    kind: str
    seed: int
    spec: dict[str, Any]
    prompts: list[str]
    lengths: dict[str, Length] = field(default_factory=dict)
    order: list[Any] = field(default_factory=list)
    rows: list[Request] = field(default_factory=list)
    _prefixes: dict[int, str] = field(default_factory=dict)

    @property
    def conversational(self) -> bool:
        return KINDS[self.kind].request is None

    def out_tokens(self, *key: Any) -> int | None:
        spec = self.lengths.get("output_len")
        return None if spec is None else int(spec.draw(rng_for(self.seed, "output", *key)))

    def prefix(self, group: int) -> str:
        if group not in self._prefixes:
            n = int(self.lengths["prefix_len"].draw(rng_for(self.seed, "prefix_len", group)))
            self._prefixes[group] = gen_text(rng_for(self.seed, "prefix", group), n)
        return self._prefixes[group]

    def request(self, index: int) -> Request:
        make = KINDS[self.kind].request
        if make is None:
            raise AssertionError(f"{self.kind} requests are made by conversation()")
        return make(self, index)

    def conversation(self, index: int) -> list[Request]:
        """The user turns of conversation ``index`` (the server's replies go between them)."""
        conv = index % _int(self.spec, "conversations", 16)
        turns = _int(self.spec, "turns", 4)
        return [Request(gen_text(rng_for(self.seed, "turn", conv, t),
                                 int(self.lengths["input_len"].draw(rng_for(self.seed, "turn_len", conv, t)))),
                        self.out_tokens(conv, t)) for t in range(turns)]

    def think(self, index: int, turn: int) -> float:
        spec = self.lengths.get("think_time_s")
        return 0.0 if spec is None or turn == 0 else spec.draw(rng_for(self.seed, "think", index, turn), False)

    def warm_prompts(self) -> list[str]:
        """What ``warm`` sends before a level: each group's prefix (shared_prefix), else nothing."""
        warm = KINDS[self.kind].warm
        return [] if warm is None else warm(self)

    def describe(self) -> dict[str, Any]:
        """The workload as run, for the facts: enough to repeat it exactly."""
        out: dict[str, Any] = {"kind": self.kind, "seed": self.seed, "chars_per_token": CHARS_PER_TOKEN}
        for key, value in self.spec.items():
            if key != "kind":
                out[key] = self.lengths[key].describe() if key in self.lengths else value
        if self.rows:
            out["rows"] = len(self.rows)
        return out


def parse_workload(spec: Any, seed: Any, prompts: list[str]) -> Workload:
    """The ``workload`` option (None: random) checked and made ready. Raises SweepError."""
    spec = dict(spec or {"kind": "random"})
    kind = spec.get("kind", "random")
    if kind not in KINDS:
        raise SweepError(f"workload.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    spec["kind"] = kind
    row = KINDS[kind]
    unknown = sorted(set(spec) - row.keys)
    if unknown:
        raise SweepError(f"workload of kind {kind} does not take {', '.join(unknown)}; "
                         f"it takes {', '.join(sorted(row.keys))}")
    seed = DEFAULT_SEED if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SweepError(f"seed must be an integer, got {seed!r}")
    lengths: dict[str, Length] = {}
    for name in ("input_len", "output_len", "prefix_len", "suffix_len"):
        if name in row.keys and (name in spec or name in row.lengths):
            lengths[name] = parse_length(name, spec.get(name, row.lengths.get(name)))
    if "think_time_s" in spec:
        lengths["think_time_s"] = parse_length("think_time_s", spec["think_time_s"], 0.0)
    work = Workload(kind, seed, spec, list(prompts), lengths)
    if row.prepare is not None:
        row.prepare(work)
    return work


# --------------------------------------------------------------------------------------------
# The kinds: what each takes and how it makes its requests


def _random_request(work: Workload, index: int) -> Request:
    if "input_len" not in work.lengths:
        return Request(work.prompts[index % len(work.prompts)], work.out_tokens(index))
    n = int(work.lengths["input_len"].draw(rng_for(work.seed, "input_len", index)))
    return Request(gen_text(rng_for(work.seed, "input", index), n), work.out_tokens(index))


def _shared_prefix_request(work: Workload, index: int) -> Request:
    group, k = work.order[index % len(work.order)]
    n = int(work.lengths["suffix_len"].draw(rng_for(work.seed, "suffix_len", group, k)))
    return Request(work.prefix(group) + gen_text(rng_for(work.seed, "suffix", group, k), n), work.out_tokens(group, k))


def _shared_prefix_warm(work: Workload) -> list[str]:
    return [work.prefix(g) for g in range(_int(work.spec, "groups", 64))]


def _shared_prefix_prepare(work: Workload) -> None:
    work.order = _group_order(work.spec, work.seed)


def _multi_turn_prepare(work: Workload) -> None:
    _int(work.spec, "conversations", 16)
    _int(work.spec, "turns", 4)


def _file_request(work: Workload, index: int) -> Request:
    row = work.rows[work.order[index % len(work.order)]]
    return Request(row.prompt, work.out_tokens(index) if row.max_tokens is None else row.max_tokens)


def _file_prepare(work: Workload) -> None:
    work.rows = read_jsonl(work.spec.get("path"))
    order = work.spec.get("order", "sequential")
    if order not in ("sequential", "shuffled"):
        raise SweepError(f"workload.order of a file must be sequential or shuffled, got {order!r}")
    work.order = list(range(len(work.rows)))
    if order == "shuffled":
        rng_for(work.seed, "file_order").shuffle(work.order)


@dataclass(frozen=True)
class Kind:
    """One workload kind: the keys its ``workload`` mapping takes, the lengths it draws when none is
    given, and its functions - ready the workload (checks, order, rows), make request ``i`` (None:
    a conversation's turns, ``Workload.conversation``), the prompts ``warm`` sends."""

    keys: frozenset[str]
    lengths: dict[str, float]
    prepare: Callable[[Workload], None] | None
    request: Callable[[Workload, int], Request] | None
    warm: Callable[[Workload], list[str]] | None = None


# The workload kinds (docs/sweep.md "Workloads"): adding one is a row here and its functions.
KINDS: dict[str, Kind] = {
    "random": Kind(frozenset({"kind", "input_len", "output_len"}), {}, None, _random_request),
    "shared_prefix": Kind(frozenset({"kind", "groups", "prompts_per_group", "prefix_len", "suffix_len", "output_len",
                                     "order"}), {"prefix_len": 2048, "suffix_len": 128},
                          _shared_prefix_prepare, _shared_prefix_request, _shared_prefix_warm),
    "multi_turn": Kind(frozenset({"kind", "conversations", "turns", "input_len", "output_len", "think_time_s"}),
                       {"input_len": 128}, _multi_turn_prepare, None),
    "file": Kind(frozenset({"kind", "path", "order", "output_len"}), {}, _file_prepare, _file_request),
}


def _group_order(spec: dict[str, Any], seed: int) -> list[tuple[int, int]]:
    groups = _int(spec, "groups", 64)
    per = _int(spec, "prompts_per_group", 16)
    order = spec.get("order", "shuffled")
    if order not in ORDERS:
        raise SweepError(f"workload.order must be one of {', '.join(ORDERS)}, got {order!r}")
    if order == "grouped":
        return [(g, k) for g in range(groups) for k in range(per)]
    pairs = [(g, k) for k in range(per) for g in range(groups)]
    if order == "shuffled":
        rng_for(seed, "order").shuffle(pairs)
    return pairs


def read_jsonl(path: Any) -> list[Request]:
    """The rows of a JSONL workload file. Each line one object: ``{"prompt": str}``,
    ``{"messages": [{"role", "content"}, ...]}`` (OpenAI chat) or ``{"conversations": [{"from",
    "value"}, ...]}`` (ShareGPT: the first human turn, and the length of the first reply as its
    max_tokens); optional ``max_tokens`` (or ``output_len``). Blank lines are skipped. Raises
    SweepError naming the file, the line and what is wrong."""
    if not isinstance(path, str) or not path:
        raise SweepError("workload of kind file needs path: a JSONL file on the host running the sweep")
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SweepError(f"cannot read workload file {path}: {exc}") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(_row(json.loads(line)))
            except (ValueError, TypeError, KeyError) as exc:
                raise SweepError(
                    f"workload file {path} line {number}: {exc} (each line one JSON object with prompt (str), "
                    "messages (OpenAI chat: role, content) or conversations (ShareGPT: from, value), "
                    "optional max_tokens)") from None
    if not rows:
        raise SweepError(f"workload file {path} has no prompts (one JSON object a line)")
    return rows


_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def _row(obj: Any) -> Request:
    if not isinstance(obj, dict):
        raise TypeError(f"a JSON object expected, got {type(obj).__name__}")
    out = obj.get("max_tokens", obj.get("output_len"))
    if out is not None and (isinstance(out, bool) or not isinstance(out, int) or out < 1):
        raise ValueError(f"max_tokens must be an integer >= 1, got {out!r}")
    if isinstance(obj.get("prompt"), str) and obj["prompt"]:
        return Request(obj["prompt"], out)
    if isinstance(obj.get("messages"), list) and obj["messages"]:
        msgs = [{"role": str(m["role"]), "content": str(m["content"])} for m in obj["messages"]]
        while msgs and msgs[-1]["role"] == "assistant":
            msgs.pop()  # the request asks for the last assistant turn
        if not msgs:
            raise ValueError("messages has no user turn")
        return Request(render_chat(msgs), out)
    if isinstance(obj.get("conversations"), list):
        turns = [{"role": _SHAREGPT_ROLES.get(str(t["from"]), str(t["from"])), "content": str(t["value"])}
                 for t in obj["conversations"]]
        first = next((i for i, t in enumerate(turns) if t["role"] == "user"), None)
        if first is None:
            raise ValueError("conversations has no human turn")
        reply = next((t["content"] for t in turns[first + 1:] if t["role"] == "assistant"), None)
        if out is None and reply:
            out = max(1, len(reply) // CHARS_PER_TOKEN)
        return Request(turns[first]["content"], out)
    raise KeyError("no prompt (non-empty string), messages or conversations")
