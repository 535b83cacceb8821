"""Read-only views of a radix tree: the integrity check and the text picture."""

from __future__ import annotations

from collections.abc import Iterator

from radixlm.radix_cache.tree_node import TreeNode

_SHOWN_TOKENS = 8


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
