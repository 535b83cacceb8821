"""Read-only views of a radix tree: the integrity check, the text picture, and the dashboard's
pictures (its largest branches and its evictions).

``snapshot_tree`` walks at most ``visit_budget`` nodes (so a huge tree costs a bounded time in the
scheduler's thread), sizes every visited subtree, then keeps the ``max_nodes`` heaviest nodes as a
connected top of the tree: a node is shown only with its parent, largest subtrees first. Each shown
node says how much of its subtree is hidden. ``EvictionLog`` is a bounded ring of eviction events
numbered by a running sequence, so a reader asks for the events after the last one it saw.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the tree's module imports this one
    from radixlm.radix_cache.radix_cache import TreeNode

_SHOWN_TOKENS = 8
DEFAULT_VISIT_BUDGET = 20000


def child_key_of(edge: tuple[int, ...], page_size: int) -> object:
    """The dict key under which a node with edge ``edge`` hangs from its parent."""
    return edge[0] if page_size == 1 else edge[:page_size]


def iter_nodes(root: TreeNode) -> Iterator[TreeNode]:
    """All non-root nodes below ``root``, parents before children (iterative: trees can be deep)."""
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


def check_tree(
    roots: dict[str | None, TreeNode],
    page_size: int,
    evictable: int,
    protected: int,
    queued: set[TreeNode],
) -> None:
    """Raise AssertionError naming the first broken invariant of the tree under ``roots``.

    ``evictable``/``protected`` are the cache's running counters; ``queued`` the nodes holding a
    valid eviction-queue entry.
    """
    seen_slots: set[int] = set()
    sizes = [0, 0]  # [evictable, protected]
    for extra_key, root in roots.items():
        _check(root.is_root and root.parent is None and root.key == (), f"root of {extra_key!r} is no root")
        _check(root.extra_key == extra_key, f"root registered as {extra_key!r} says {root.extra_key!r}")
        _check_children(root, page_size)
        for node in iter_nodes(root):
            problem = _node_problem(node, page_size, queued, seen_slots)
            if problem is not None:
                raise AssertionError(
                    f"node at depth {node.depth_tokens()} in namespace {extra_key!r}: {problem}"
                )
            _check_children(node, page_size)
            sizes[node.lock_ref > 0] += len(node.key)
            seen_slots.update(node.value)
    _check(sizes[0] == evictable, f"evictable_size is {evictable} but unlocked nodes hold {sizes[0]} tokens")
    _check(sizes[1] == protected, f"protected_size is {protected} but locked nodes hold {sizes[1]} tokens")


def _node_problem(node: TreeNode, page_size: int, queued: set[TreeNode], seen_slots: set[int]) -> str | None:
    """The first invariant ``node`` itself breaks, or None."""
    if len(node.key) == 0:
        return "empty edge on a non-root node"
    if node.is_root:
        return "non-root node flagged as root"
    if len(node.key) != len(node.value):
        return f"{len(node.key)} tokens but {len(node.value)} slots"
    if len(node.key) % page_size:
        return f"edge of {len(node.key)} tokens is not page-aligned (page_size={page_size})"
    if node.lock_ref < 0:
        return f"negative lock_ref {node.lock_ref}"
    if node.is_evictable_leaf() and node not in queued:
        return "evictable leaf missing from the eviction queue"
    if len(set(node.value)) != len(node.value):
        return "a slot repeats within one edge"
    dup = seen_slots.intersection(node.value)
    if dup:
        return f"slots {sorted(dup)[:5]} are cached by another node too"
    return None


def _check_children(node: TreeNode, page_size: int) -> None:
    child_locks = 0
    for ck, child in node.children.items():
        _check(child.parent is node, "a child's parent pointer does not point at its parent")
        _check(
            len(child.key) > 0 and ck == child_key_of(child.key, page_size),
            f"child registered under {ck!r} but its edge starts with {child.key[:page_size]!r}",
        )
        child_locks += child.lock_ref
    _check(
        node.lock_ref >= child_locks,
        f"lock_ref {node.lock_ref} below its children's total {child_locks} (locks must cover the root path)",
    )


def _check(condition: bool, message: str) -> None:
    # An explicit raise, not `assert`, so the check also runs under `python -O`.
    if not condition:
        raise AssertionError(message)


def render_tree(roots: dict[str | None, TreeNode], header: str) -> str:
    """A text picture: one line per edge with its token count, first tokens and lock count."""
    lines = [header]
    for extra_key, root in roots.items():
        lines.append(f"namespace {extra_key!r} (lock_ref={root.lock_ref})")
        stack: list[tuple[TreeNode, str, bool]] = [
            (c, "", i == 0) for i, c in enumerate(reversed(list(root.children.values())))
        ]
        while stack:
            node, indent, last = stack.pop()
            shown = " ".join(map(str, node.key[:_SHOWN_TOKENS]))
            more = " ..." if len(node.key) > _SHOWN_TOKENS else ""
            lines.append(
                f"{indent}{'└── ' if last else '├── '}[{len(node.key)}] {shown}{more}"
                f"  lock_ref={node.lock_ref}"
            )
            child_indent = indent + ("    " if last else "│   ")
            kids = list(node.children.values())
            stack.extend((c, child_indent, i == 0) for i, c in enumerate(reversed(kids)))
    return "\n".join(lines)


def namespace_of(node: TreeNode) -> str | None:
    """The ``extra_key`` of the namespace ``node`` hangs in (walks up to its root)."""
    while node.parent is not None:
        node = node.parent
    return node.extra_key


class EvictionLog:
    """The last ``capacity`` evictions: ``{"seq", "time", "namespace", "tokens", "depth", "hits",
    "token_ids"}`` (``time`` is ``time.monotonic()``; ``token_ids`` the edge's first ids)."""

    def __init__(self, capacity: int = 256, shown_ids: int = 16) -> None:
        self.seq = 0
        self.shown_ids = shown_ids
        self._events: deque[dict[str, Any]] = deque(maxlen=capacity)

    def record(self, leaf: TreeNode, namespace: str | None, depth: int) -> None:
        """Note that ``leaf`` (``depth`` tokens below its root, its own edge included) was evicted."""
        self.seq += 1
        self._events.append({"seq": self.seq, "time": time.monotonic(), "namespace": namespace,
                             "tokens": len(leaf.key), "depth": depth, "hits": leaf.hit_count,
                             "token_ids": list(leaf.key[: self.shown_ids])})

    def since(self, seq: int = 0) -> list[dict[str, Any]]:
        """The events numbered after ``seq``, oldest first (copies)."""
        return [dict(e) for e in self._events if e["seq"] > seq]

    def clear(self) -> None:
        self._events.clear()


def _visit(root: TreeNode, budget: int) -> tuple[list[TreeNode], bool]:
    """Nodes below ``root``, parents first, at most ``budget``; and whether some were left out."""
    order: list[TreeNode] = []
    stack = list(root.children.values())
    while stack:
        if len(order) >= budget:
            return order, True
        node = stack.pop()
        order.append(node)
        stack.extend(node.children.values())
    return order, False


def _subtree_sizes(order: list[TreeNode]) -> dict[int, int]:
    """Tokens under each visited node, its own edge included (children after parents in ``order``)."""
    sizes = {id(n): len(n.key) for n in order}
    for node in reversed(order):
        parent = node.parent
        if parent is not None and id(parent) in sizes:
            sizes[id(parent)] += sizes[id(node)]
    return sizes


def _node_view(node: TreeNode, parent_id: str | None, depth: int, sizes: dict[int, int],
               shown_ids: int, now: float) -> dict[str, Any]:
    return {"id": format(id(node), "x"), "parent": parent_id, "depth": depth, "tokens": len(node.key),
            "subtree_tokens": sizes.get(id(node), len(node.key)), "hits": node.hit_count,
            "age_s": max(now - node.last_access_time, 0.0) if node.last_access_time else None,
            "locks": node.lock_ref, "children": len(node.children), "token_ids": list(node.key[:shown_ids])}


def snapshot_tree(roots: dict[str | None, TreeNode], max_nodes: int = 64, shown_ids: int = 32,
                  visit_budget: int = DEFAULT_VISIT_BUDGET) -> dict[str, Any]:
    """The largest branches of every namespace (see the module docstring).

    Returns ``{"namespaces": [{"namespace", "tokens", "nodes": [...]}], "nodes_total",
    "nodes_shown", "truncated"}``. Each namespace first gets its heaviest branch (while
    ``max_nodes`` allows), so a small tenant is never hidden behind a large one; the rest go to
    the heaviest branches overall. A node: ``id``, ``parent`` (None under the root), ``depth``
    (tokens above it), ``tokens``, ``subtree_tokens``, ``hits``, ``age_s`` (seconds since its last
    match or insert), ``locks``, ``children``, ``token_ids`` (its edge's first ``shown_ids``).
    ``tokens`` of a namespace counts only visited nodes when ``truncated``."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    picker = _Picker(shown_ids, time.monotonic())
    total, truncated = 0, False
    firsts: list[tuple[int, TreeNode, str | None]] = []
    for extra_key, root in roots.items():
        order, cut = _visit(root, max(visit_budget - total, 0))
        total += len(order)
        truncated |= cut
        picker.sizes.update(_subtree_sizes(order))
        kids = sorted((c for c in root.children.values() if id(c) in picker.sizes),
                      key=lambda c: -picker.sizes[id(c)])
        if not kids:
            continue
        picker.per_ns[extra_key] = {"namespace": extra_key, "nodes": [],
                                    "tokens": sum(picker.sizes[id(c)] for c in kids)}
        firsts.append((picker.sizes[id(kids[0])], kids[0], extra_key))
        for child in kids[1:]:
            picker.push(child, None, 0, extra_key)
    for _, child, extra_key in sorted(firsts, key=lambda f: -f[0])[:max_nodes]:
        picker.show(child, None, 0, extra_key)
    for _, child, extra_key in sorted(firsts, key=lambda f: -f[0])[max_nodes:]:
        picker.push(child, None, 0, extra_key)
    while picker.heap and picker.shown < max_nodes:
        _, _, node, parent_id, depth, ns = heapq.heappop(picker.heap)
        picker.show(node, parent_id, depth, ns)
    return {"namespaces": list(picker.per_ns.values()), "nodes_total": total, "nodes_shown": picker.shown,
            "truncated": truncated}


class _Picker:
    """The selection in progress: shown nodes per namespace and the frontier of their children."""

    def __init__(self, shown_ids: int, now: float) -> None:
        self.shown_ids, self.now = shown_ids, now
        self.sizes: dict[int, int] = {}
        self.per_ns: dict[str | None, dict[str, Any]] = {}
        self.heap: list[tuple[int, int, TreeNode, str | None, int, str | None]] = []
        self.shown = self._tie = 0

    def push(self, node: TreeNode, parent_id: str | None, depth: int, ns: str | None) -> None:
        self._tie += 1
        heapq.heappush(self.heap, (-self.sizes[id(node)], self._tie, node, parent_id, depth, ns))

    def show(self, node: TreeNode, parent_id: str | None, depth: int, ns: str | None) -> None:
        view = _node_view(node, parent_id, depth, self.sizes, self.shown_ids, self.now)
        self.per_ns[ns]["nodes"].append(view)
        self.shown += 1
        for child in node.children.values():
            if id(child) in self.sizes:
                self.push(child, view["id"], depth + len(node.key), ns)
