"""radixlm.lang"""
