"""radixlm.runtime.tokenizer: a checkpoint's tokenizer, its incremental detokenizer and chat-template rendering."""
