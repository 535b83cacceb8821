"""radixlm.runtime.server: the aiohttp app, SGLang-native and OpenAI-compatible routes."""
