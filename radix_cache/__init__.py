"""radixlm.radix_cache: the RadixAttention prefix tree (no torch)."""

from radixlm.radix_cache.radix_cache import MatchResult, RadixCache, TreeNode

__all__ = ["MatchResult", "RadixCache", "TreeNode"]
