"""radixlm.runtime.models"""
