"""radixlm.radix_cache"""
