"""radixlm.radix_cache: the RadixAttention prefix tree (no torch)."""

from radixlm.radix_cache.radix_cache import RadixCache
from radixlm.radix_cache.tree_node import MatchResult, TreeNode

__all__ = ["MatchResult", "RadixCache", "TreeNode"]
