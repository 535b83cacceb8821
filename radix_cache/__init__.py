"""radixlm.radix_cache: the RadixAttention prefix tree (no torch)."""

from .radix_cache import RadixCache
from .tree_node import MatchResult, TreeNode

__all__ = ["MatchResult", "RadixCache", "TreeNode"]
