"""radixlm.runtime.chat_formats: how models write tool calls and reasoning in their output, HTTP-free
(the server and ``lang`` both use it)."""
