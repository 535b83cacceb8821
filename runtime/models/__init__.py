"""radixlm.runtime.models: the Llama-family decoder that serves Llama, Mistral, Qwen2 and Qwen3."""

from radixlm.runtime.models.llama import LlamaForCausalLM

__all__ = ["LlamaForCausalLM"]
