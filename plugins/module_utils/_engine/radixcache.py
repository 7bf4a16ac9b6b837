# Copyright: llmops.sglang contributors
# Apache-2.0 (see LICENSE)
"""The prefix cache (docs/engine.md "Prefix cache"): a radix tree keyed by a prompt's modelled
token ids (``tokens.prompt_ids``), as SGLang's RadixCache / HiRadixCache / MambaRadixCache keep it.

Each node holds a run of tokens and where their KV lives: on the device (the GPU KV pool of
``max_total_num_tokens``), in the HiCache host pool (with ``--enable-hierarchical-cache``), or
both. A request matches the longest cached prefix of its prompt (at most all but its last token,
page-aligned); the device part is free, the host part is loaded back to the device. After its
prefill its prompt is inserted and locked until it finishes, when prompt + output are inserted
and the lock is released. Device tokens are evicted least recently used first, leaves first;
without HiCache an evicted prefix is gone, with HiCache it stays on the host (write-through
copies it there when inserted; write-back when evicted; write-through-selective once a node has
been hit twice). The host pool evicts its host-only leaves least recently used first.

With a storage tier (``storagetier.PageStore``, ``--hicache-storage-backend``) every page
backed up to the host pool is backed up to storage too, and a prompt's pages after its device
and host hit are looked up there: found (at least the prefetch threshold), they are read into
the host pool and loaded back to the device with the prompt (``Match.storage``). Storage
survives a restart and ``/flush_cache``; its I/O time (pages read, pages written) is handed to
the step that does it (``io_seconds``).

Hybrid (Mamba) models: a hit must end where a Mamba state was kept: at the end of an inserted
prompt, or at a branching point (where a later prompt left a cached one), both aligned down to
the Mamba cache chunk (64 tokens, or the page size if larger), as the extra_buffer strategy does.
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.storagetier import PageStore
    from ansible_collections.llmops.sglang.plugins.module_utils._engine.storeclient import StoreClient

Ids = Sequence[Hashable]
WRITE_POLICIES = ("write_through", "write_back", "write_through_selective")
SELECTIVE_HITS = 2  # write_through_selective backs a node up once it was hit this often


@dataclass(eq=False)
class Node:
    key: tuple[Hashable, ...]
    parent: Node | None
    children: dict[Hashable, Node] = field(default_factory=dict)
    device: bool = True
    host: bool = False
    lock: int = 0
    stamp: int = 0
    hits: int = 0
    state: bool = False  # hybrid: a Mamba state is kept at this node's end


@dataclass
class Match:
    """A prompt's cached prefix: ``device`` tokens on the GPU, then ``host`` tokens in the
    HiCache host pool, then ``storage`` tokens in the storage tier; ``path`` the nodes that hold
    the device and host part, ``branch`` (hybrid) where a Mamba state would have made a longer hit."""

    device: int = 0
    host: int = 0
    path: list[Node] = field(default_factory=list)
    branch: int = 0
    storage: int = 0

    @property
    def total(self) -> int:
        return self.device + self.host + self.storage


@dataclass
class Handle:
    """What an admitted request holds: the last node of its prompt, locked with every node
    above it (a node split later keeps the count, so the chain up from here unlocks it)."""

    node: Node | None


def _common(key: tuple[Hashable, ...], ids: Ids, pos: int) -> int:
    end = pos + len(key)
    if tuple(ids[pos:end]) == key:
        return len(key)
    n = 0
    for a, b in zip(key, ids[pos:end], strict=False):
        if a != b:
            break
        n += 1
    return n


class PrefixCache:
    """Radix tree over token ids with a device tier and an optional host tier (tokens)."""

    def __init__(self, device_tokens: int, host_tokens: int = 0,
                 write_policy: str = "write_through", page_size: int = 1,
                 mamba_chunk: int = 0, storage: PageStore | StoreClient | None = None,
                 storage_gb_s: float = 2.0, storage_op_s: float = 0.0) -> None:
        self.device_capacity = max(0, int(device_tokens))
        self.host_capacity = max(0, int(host_tokens))
        self.write_policy = write_policy if write_policy in WRITE_POLICIES else "write_through"
        self.page_size = max(1, int(page_size))
        self.mamba_chunk = max(0, int(mamba_chunk))
        self._tick = itertools.count(1)
        self.root = Node(key=(), parent=None, lock=1)
        self.nodes: set[Node] = set()
        self.device_used = 0
        self.host_used = 0
        self.load_back_tokens = 0  # host -> device, cumulative
        self.evicted_tokens = 0  # device tokens evicted, cumulative
        self.storage = storage if host_tokens else None  # the storage tier sits behind the host pool
        self.storage_gb_s = max(float(storage_gb_s), 1e-6)  # its disk, read and write
        self.storage_op_s = max(float(storage_op_s), 0.0)  # per page read or written (a file each)
        self._io_bytes = self._io_ops = 0  # storage bytes and pages moved since the last io_seconds()

    # -- structure -------------------------------------------------------------------------
    def _split(self, child: Node, n: int) -> Node:
        """Cut ``child`` after ``n`` tokens; the upper part (returned) takes its place."""
        parent = child.parent
        if parent is None:
            raise AssertionError("the root is never split")
        top = Node(key=child.key[:n], parent=parent, device=child.device, host=child.host,
                   lock=child.lock, stamp=child.stamp, hits=child.hits)
        parent.children[top.key[0]] = top
        child.key = child.key[n:]
        child.parent = top
        top.children[child.key[0]] = child
        self.nodes.add(top)
        return top

    def _walk(self, ids: Ids) -> list[Node]:
        """The nodes whose tokens prefix ``ids`` (the last one split at the end of the match)."""
        node, pos, path = self.root, 0, []
        while pos < len(ids):
            child = node.children.get(ids[pos])
            if child is None:
                break
            n = _common(child.key, ids, pos)
            if n < len(child.key):
                child = self._split(child, n)
            path.append(child)
            pos += n
            node = child
        return path

    def _delete(self, node: Node) -> None:
        """Remove ``node`` and everything below it."""
        stack = [node]
        while stack:
            cur = stack.pop()
            stack.extend(cur.children.values())
            if cur.device:
                self.device_used -= len(cur.key)
            if cur.host:
                self.host_used -= len(cur.key)
            self.nodes.discard(cur)
        if node.parent is not None:
            node.parent.children.pop(node.key[0], None)

    def _align(self, n: int, grid: int) -> int:
        return n - n % grid if grid > 1 else n

    # -- match -----------------------------------------------------------------------------
    def match(self, ids: Ids) -> Match:
        """The cached prefix of ``ids``: at most all but the last token, page-aligned; on a
        hybrid model it ends at a kept Mamba state."""
        limit = self._align(max(0, len(ids) - 1), self.page_size)
        if limit <= 0:
            return Match()
        if not self.root.children:
            return Match(storage=self._stored(ids, 0, limit))
        path = self._walk(ids[:limit])
        stamp = next(self._tick)
        ends: list[int] = []
        pos = 0
        for node in path:
            pos += len(node.key)
            ends.append(pos)
            node.stamp = stamp
        hit = ends[-1] if ends else 0
        branch = 0
        if self.mamba_chunk:
            with_state = [e for node, e in zip(path, ends, strict=True) if node.state]
            hit = with_state[-1] if with_state else 0
            aligned = self._align(ends[-1] if ends else 0, self.mamba_chunk)
            branch = aligned if aligned > hit else 0
        used = [node for node, e in zip(path, ends, strict=True) if e <= hit]
        device = 0
        for node in used:
            if not node.device:
                break
            device += len(node.key)
        stored = self._stored(ids, hit, limit)
        return Match(device=device, host=hit - device, path=used, branch=0 if stored else branch, storage=stored)

    def _stored(self, ids: Ids, hit: int, limit: int) -> int:
        """Tokens after ``hit`` that the storage tier holds (a hybrid model's end at a Mamba chunk)."""
        if self.storage is None or hit >= limit:
            return 0
        found = self.storage.lookup(ids, hit, limit)
        if found and self.mamba_chunk:
            found = max(0, self._align(hit + found, self.mamba_chunk) - hit)
            if found < self.storage.prefetch_threshold:
                return 0
        return found

    # -- insert, lock, release ---------------------------------------------------------------
    def hold(self, match: Match) -> Handle:
        """Lock a match's nodes until ``release`` (requests admitted together hold theirs while
        each is inserted, so no insert evicts another's hit)."""
        handle = Handle(node=match.path[-1] if match.path else None)
        self._lock(handle.node, 1)
        return handle

    def admit(self, ids: Ids, match: Match, outside: int = 0) -> Handle:
        """After the prefill of a request that matched ``match`` (held): the host part is
        loaded back, the prompt inserted (its nodes locked until ``release``); then the device
        pool is brought back within its capacity (``outside``: device tokens in use outside the
        tree, the running requests' generated tokens)."""
        hit = self._walk(ids[:match.device + match.host]) if match.device + match.host else []
        if match.storage and self.storage is not None:  # read into the host pool, then to the device
            self.storage.prefetched(match.storage)
            self._io_bytes += match.storage * self.storage.page_bytes // self.storage.page_tokens
            self._io_ops += match.storage // self.page_size
            self.load_back_tokens += match.storage
        for node in hit:
            node.hits += 1
            if not node.device:
                node.device = True
                self.device_used += len(node.key)
                self.load_back_tokens += len(node.key)
            if self.write_policy == "write_through_selective" and node.hits >= SELECTIVE_HITS:
                self._backup(node)
        path = self._insert(ids)
        if self.mamba_chunk:
            self._keep_state(ids, self._align(len(ids), self.mamba_chunk))
            if match.branch:
                self._keep_state(ids, match.branch)
            path = self._walk(ids)
        handle = Handle(node=path[-1] if path else None)
        self._lock(handle.node, 1)
        self.fit(outside)
        return handle

    def _lock(self, node: Node | None, delta: int) -> None:
        while node is not None and node is not self.root:
            node.lock = max(0, node.lock + delta)
            node = node.parent

    def release(self, handle: Handle, ids: Ids | None = None, outside: int = 0) -> None:
        """A request finished (``ids``: its prompt + output, inserted) or was cancelled."""
        if ids is not None:
            self._insert(ids)
        self._lock(handle.node, -1)
        handle.node = None
        self.fit(outside)

    def _insert(self, ids: Ids) -> list[Node]:
        if not ids:
            return []
        path = self._walk(ids)
        stamp = next(self._tick)
        pos = 0
        for node in path:
            pos += len(node.key)
            node.stamp = stamp
            if not node.device:  # recomputed: its KV is on the device again
                node.device = True
                self.device_used += len(node.key)
        if pos < len(ids):
            parent = path[-1] if path else self.root
            node = Node(key=tuple(ids[pos:]), parent=parent, stamp=stamp)
            parent.children[node.key[0]] = node
            self.nodes.add(node)
            self.device_used += len(node.key)
            path.append(node)
            if self.write_policy == "write_through":
                self._backup(node)
        return path

    def _keep_state(self, ids: Ids, at: int) -> None:
        """A Mamba state kept at position ``at`` of ``ids`` (a node ends there)."""
        if at <= 0 or at > len(ids):
            return
        path = self._walk(ids[:at])
        if path and sum(len(n.key) for n in path) == at:
            path[-1].state = True

    # -- capacity ----------------------------------------------------------------------------
    def _backup(self, node: Node) -> bool:
        """Copy a node to the host pool (making room there); False when it does not fit."""
        if node.host:
            return True
        if not self.host_capacity:
            return False
        need = len(node.key)
        if self.host_used + need > self.host_capacity:
            self._evict_host(self.host_used + need - self.host_capacity)
        if self.host_used + need > self.host_capacity:
            return False
        node.host = True
        self.host_used += need
        if self.storage is not None:  # host -> storage: the node's pages, from the root on
            tokens = self._tokens_to(node)
            written = self.storage.backup(tokens, len(tokens))
            self._io_bytes += written * self.storage.page_bytes // self.storage.page_tokens
            self._io_ops += written // self.page_size
        return True

    def _tokens_to(self, node: Node) -> tuple[Hashable, ...]:
        keys: list[tuple[Hashable, ...]] = []
        cur: Node | None = node
        while cur is not None and cur is not self.root:
            keys.append(cur.key)
            cur = cur.parent
        return tuple(t for key in reversed(keys) for t in key)

    def io_seconds(self) -> float:
        """The storage tier's reads and writes since the last call: bytes at its bandwidth, plus pages."""
        moved, self._io_bytes = self._io_bytes, 0
        ops, self._io_ops = self._io_ops, 0
        return moved / (self.storage_gb_s * 1e9) + ops * self.storage_op_s

    def fit(self, outside: int = 0) -> None:
        """Evict device tokens until the tree and ``outside`` fit the device pool."""
        over = self.device_used + max(0, outside) - self.device_capacity
        if over > 0:
            self._evict_device(over)

    def _device_leaf(self, node: Node) -> bool:
        return (node.device and node.lock == 0
                and not any(c.device for c in node.children.values()))

    def _evict_device(self, need: int) -> None:
        heap = [(n.stamp, id(n), n) for n in self.nodes if self._device_leaf(n)]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < need:
            _, _, node = heapq.heappop(heap)
            if node not in self.nodes or not self._device_leaf(node):
                continue
            size = len(node.key)
            parent = node.parent
            if self.write_policy == "write_back":
                self._backup(node)
            if node.host:
                node.device = False
                self.device_used -= size
            else:
                self._delete(node)
            freed += size
            self.evicted_tokens += size
            if parent is not None and parent is not self.root and self._device_leaf(parent):
                heapq.heappush(heap, (parent.stamp, id(parent), parent))

    def _host_leaf(self, node: Node) -> bool:
        return node.host and not node.device and node.lock == 0 and not node.children

    def _evict_host(self, need: int) -> None:
        heap = [(n.stamp, id(n), n) for n in self.nodes if self._host_leaf(n)]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < need:
            _, _, node = heapq.heappop(heap)
            if node not in self.nodes or not self._host_leaf(node):
                continue
            parent = node.parent
            freed += len(node.key)
            self._delete(node)
            if parent is not None and parent is not self.root and self._host_leaf(parent):
                heapq.heappush(heap, (parent.stamp, id(parent), parent))

    # -- state -----------------------------------------------------------------------------
    def evictable_device_tokens(self) -> int:
        return sum(len(n.key) for n in self.nodes if n.device and n.lock == 0)

    def reset(self, clear_host: bool) -> None:
        """``/flush_cache`` (idle, so nothing is locked): every device copy goes; the host
        pool too when ``clear_host``, else its prefixes stay (host-only) in the tree."""
        if clear_host or not self.host_capacity:
            self.root.children.clear()
            self.nodes.clear()
            self.device_used = self.host_used = 0
            return
        for node in list(self.nodes):
            if node in self.nodes and not node.host:
                self._delete(node)
        for node in self.nodes:
            node.device = False
            node.lock = 0
        self.device_used = 0
