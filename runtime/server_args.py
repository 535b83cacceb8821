"""``ServerArgs``: the one configuration dataclass, built at start-up and passed down.

It holds what the user asked for, never facts found at run time: the number of KV slots the pool
really got, the EOS ids and the context length live on the objects that compute them
(``ModelRunner``, ``Tokenizer``, ``ModelConfig``). ``add_cli_args`` / ``from_cli_args`` expose
every field as a command-line flag, with help text taken from the field's metadata.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from radixlm.runtime.sampling_params import check_bools, check_int, check_num

SCHEDULE_POLICIES = ("lpm", "dfs-weight", "fcfs")
ATTENTION_BACKENDS = ("auto", "torch", "triton")
DTYPES = ("auto", "float32", "float16", "bfloat16")
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "float32")
# SGLang's and vLLM's spellings of the KV cache's dtypes
KV_CACHE_DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32",
                          "float": "float32"}
FP8_KV_REFUSAL = ("an FP8 KV cache has no meaning here: radixlm's attention kernels read 16- or 32-bit K/V and "
                  "compute in float32 (no scaled FP8 kernels); use float16 (what auto picks where the kernels "
                  "support it)")
EVICTION_POLICIES = ("lru", "lfu")
CACHE_ISOLATIONS = ("shared", "per-request")  # runtime/server/transport/access.py: cache_namespace
# runtime.chat_formats.tool_formats.registry.names() (tests keep the two equal; runtime/ may not import it)
TOOL_CALL_PARSERS = ("cohere", "cohere2", "command-a", "command-r", "command-r-plus", "command-r7b",
                     "command_a", "command_r", "command_r7b", "command_r_plus", "deepseek-r1", "deepseek_v3",
                     "deepseek_v31", "deepseek_v32", "deepseekr1", "deepseekv3", "deepseekv31", "deepseekv32",
                     "functionary", "functionary-v3.1", "functionary-v3.2", "functionary_llama3",
                     "functionary_llama31", "functionary_v31", "functionary_v32", "functionary_v3_2", "gemma-4",
                     "gemma4", "gemma_4", "glm", "glm4", "glm45", "glm46", "glm47", "glm4_moe", "gpt-oss",
                     "gpt_oss", "granite", "hermes", "kimi", "kimi_k2", "llama", "llama3", "llama31",
                     "llama32", "llama33", "llama3_json", "llama4", "llama4_json", "llama4_pythonic",
                     "minimax-m2", "minimax_m2", "mistral", "openai", "pythonic", "qwen", "qwen25", "qwen3",
                     "qwen3_coder", "qwen3_xml", "seed-oss", "seed_oss")
# runtime.chat_formats.reasoning.registry.names() (tests keep the two equal, as for TOOL_CALL_PARSERS)
REASONING_PARSERS = ("deepseek-r1", "deepseek_r1", "gemma-4", "gemma4", "glm45", "gpt-oss", "gpt_oss",
                     "kimi_k2", "magistral", "minimax", "minimax-append-think", "mistral", "openai_gptoss",
                     "qwen3", "qwen3-thinking", "qwen3_thinking", "qwq", "step3")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
GRAMMAR_BACKENDS = ("radixlm", "xgrammar", "llguidance")  # == constrained.adapters.CORES (tested)
QUANTIZATIONS = ("int8",)  # runtime/model/quantization.py implements them
SAMPLING_DEFAULTS = ("model", "openai")  # SGLang's --sampling-defaults
BUILTIN_GENERATION_CONFIG = "vllm"  # vLLM's --generation-config value for the engine's own defaults
# SGLang's and vLLM's spellings of our flags (``python -m sglang.launch_server`` and ``vllm serve``
# commands run unchanged), each with our flag's meaning
FLAG_ALIASES: dict[str, tuple[str, ...]] = {
    "model_path": ("--model",),
    "tp_size": ("--tensor-parallel-size",),
    "mem_fraction": ("--mem-fraction-static", "--gpu-memory-utilization"),
    "context_length": ("--max-model-len",),
    "max_running_requests": ("--max-num-seqs",),
    "max_prefill_tokens": ("--max-num-batched-tokens",),
    "random_seed": ("--seed",),
    "disable_cuda_graph": ("--enforce-eager",),
}
# SGLang's and vLLM's names for values we spell differently (None: the field's default, e.g. ``auto``
# parsers: chosen from the chat template)
VALUE_ALIASES: dict[str, dict[str, str | None]] = {
    "dtype": {"half": "float16", "float": "float32"},
    "attention_backend": {"torch_native": "torch"},
    "tool_call_parser": {"auto": None},
    "reasoning_parser": {"auto": None},
}
# Levels a request body adds above a schema it carries (body > tools > [i] > function > parameters),
# plus slack: a schema the engine accepts must fit in a body the server accepts.
JSON_BODY_WRAPPING = 8
MAX_JSON_DEPTH_CEILING = 512  # the decoder recurses once per level; Python's recursion limit is 1000
QUEUE_PER_RUNNING = 4  # the default queue bound, in multiples of max_running_requests
REQUEST_LIMITS = ("max_prompts_per_request", "max_n", "max_sequences_per_request", "max_logit_bias",
                  "max_stop_strings", "max_stop_regex", "max_schema_bytes", "max_schema_depth")


SPECULATIVE_NEEDS_DRAFT_MODEL = ("eagle", "eagle3", "mtp", "medusa", "standalone", "draft_model", "nextn")


def _parse_speculative_config(text: str, default_k: int) -> tuple[str | None, int]:
    """vLLM's ``--speculative-config`` JSON: ``method`` and ``num_speculative_tokens``."""
    import json

    try:
        config = json.loads(text) if isinstance(text, str) else text
    except ValueError as e:
        raise ValueError(f"speculative_config must be a JSON object: {e}") from None
    if not isinstance(config, dict):
        raise ValueError("speculative_config must be a JSON object like {\"method\": \"ngram\", "
                         "\"num_speculative_tokens\": 8}")
    k = config.get("num_speculative_tokens", default_k)
    return config.get("method"), k


def kv_cache_dtype_name(value: Any) -> str:
    """``--kv-cache-dtype``'s value in our spelling (``fp16`` -> ``float16``); ``ValueError`` naming the
    field for an FP8 dtype (``fp8``, ``fp8_e5m2``, ``fp8_e4m3``: refused, saying why) or any other value."""
    name = KV_CACHE_DTYPE_ALIASES.get(value, value) if isinstance(value, str) else value
    if isinstance(name, str) and name.lower().startswith("fp8"):
        raise ValueError(f"kv_cache_dtype {value}: {FP8_KV_REFUSAL}")
    if name not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)} (or fp16, half, bf16, fp32); "
                         f"got {value!r}")
    return name


def _kv_cache_dtype_flag(text: str) -> str:
    """``kv_cache_dtype_name`` for argparse: the refusal as the usage error's own words."""
    try:
        return kv_cache_dtype_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("kv_cache_dtype ")) from None


def _arg(default: Any, help: str, type: Any = None, choices: tuple[str, ...] | None = None) -> Any:
    """A dataclass field whose metadata drives the CLI flag (``type`` for optional values)."""
    return field(default=default, metadata={"help": help, "type": type, "choices": choices})


@dataclass
class ServerArgs:
    """Engine configuration, validated at construction (``ValueError`` naming the field)."""

    model_path: str | None = _arg(None, "a checkpoint folder, a .gguf file, or a Hugging Face hub id ORG/NAME[@REVISION] "
                                  "(default: the embedded tiny model)", str)
    tokenizer_path: str | None = _arg(None, "tokenizer directory (default: model_path)", str)
    dtype: str = _arg("auto", "weights and compute dtype; auto = float32 on CPU, bfloat16 on CUDA", str, DTYPES)
    kv_cache_dtype: str = _arg("auto", "dtype the KV cache is stored in (computed in float32 or --dtype): auto = "
                               "float16 where the kernels read it (the native CPU kernels; Triton on CUDA), else "
                               "the compute dtype; a 16-bit cache holds twice the tokens of a float32 one in the "
                               "same memory", _kv_cache_dtype_flag, KV_CACHE_DTYPES)
    device: str = _arg("auto", "cpu, cuda or cuda:N; auto = cuda if available else cpu", str)
    tp_size: int = _arg(1, "tensor-parallel ranks: one process per device (gloo on CPU, nccl on CUDA)", int)
    attention_backend: str = _arg("auto", "attention kernels; auto = triton on CUDA, torch on CPU", str,
                                  ATTENTION_BACKENDS)
    quantization: str | None = _arg(None, "weight-only quantization: int8 = symmetric int8 weights with one scale "
                                    "per output channel (decoder linears and LM head), dequantized inside the "
                                    "matmul; default: the checkpoint's float weights", str)
    max_total_tokens: int | None = _arg(None, "KV slots in the pool (default: mem_fraction of free memory)", int)
    mem_fraction: float = _arg(0.85, "share of free device memory the KV pool may take", float)
    context_length: int | None = _arg(None, "override the model's context length", int)
    max_running_requests: int = _arg(256, "most requests decoding at once", int)
    max_prefill_tokens: int = _arg(16384, "most new tokens in one prefill batch", int)
    chunked_prefill_size: int | None = _arg(8192, "split longer prefills into chunks; None or -1 = no chunking", int)
    enable_mixed_chunk: bool = _arg(False, "a prefill step also decodes every running request (one token each, "
                                    "same forward), so long prompts do not stall them; the step keeps "
                                    "within chunked_prefill_size tokens", bool)
    schedule_policy: str = _arg("lpm", "waiting-queue order", str, SCHEDULE_POLICIES)
    disable_radix_cache: bool = _arg(False, "compute every prompt in full; share nothing", bool)
    page_size: int = _arg(1, "radix-cache granularity in tokens", int)
    radix_eviction_policy: str = _arg("lru", "which cached prefixes go first", str, EVICTION_POLICIES)
    random_seed: int = _arg(0, "seed of the sampler for requests without their own seed", int)
    max_queued_requests: int | None = _arg(None, "reject submissions beyond this many waiting requests (503); "
                                           f"default: {QUEUE_PER_RUNNING} x max_running_requests, at least "
                                           "max_sequences_per_request", int)
    max_req_input_len: int | None = _arg(None, "reject prompts longer than this (default: context length)", int)
    grammar_compile_timeout_s: float = _arg(10.0, "time budget for compiling one constraint", float)
    enable_jump_forward: bool = _arg(True, "propose the text a grammar forces as draft tokens the model verifies "
                                     "in one forward (needs speculative decoding; off: decoded token by token)",
                                     bool)
    speculative_algorithm: str | None = _arg("auto", "speculative decoding: NGRAM = drafts from the grammar's "
                                             "forced text, the radix tree and the request's own tokens, verified "
                                             "by the model (the output is unchanged); none = off; auto = NGRAM on "
                                             "the CPU, off on CUDA (overlap scheduling)", str)
    speculative_num_draft_tokens: int = _arg(8, "most draft tokens a request verifies per step (each request "
                                             "adapts its own length to what it accepts)", int)
    speculative_max_batch_size: int = _arg(4, "speculate only while at most this many requests decode (larger "
                                           "batches are compute-bound: extra rows cost what they save)", int)
    speculative_row_cost: float | None = _arg(None, "a draft row's cost as a share of a plain decode step, for "
                                              "choosing draft lengths (default: measured while serving)", float)
    speculative_config: str | None = _arg(None, "vLLM's spelling, a JSON object: {\"method\": \"ngram\" | null, "
                                          "\"num_speculative_tokens\": K}; overrides the two flags above", str)
    # per-request limits, enforced by the engine for every caller and route (a ValueError naming the field)
    max_prompts_per_request: int = _arg(1024, "most prompts in one batched request", int)
    max_n: int = _arg(64, "most samples (n) per prompt", int)
    max_sequences_per_request: int = _arg(1024, "most sequences (prompts x n) one request may queue", int)
    max_logit_bias: int = _arg(1024, "most logit_bias entries per request", int)
    max_stop_strings: int = _arg(64, "most stop strings (and stop_token_ids) per request", int)
    max_stop_regex: int = _arg(16, "most stop_regex patterns per request (each is matched on every new "
                               "character, at most 512 matcher states each)", int)
    max_schema_bytes: int = _arg(1 << 20, "largest constraint (JSON schema, regex, choices) in bytes of JSON", int)
    max_schema_depth: int = _arg(128, "deepest nesting of a JSON schema document", int)
    log_level: str = _arg("info", "logging level (info: the start-up line and request logs)", str, LOG_LEVELS)
    grammar_compile_max_memory_mb: int = _arg(
        4096, "memory budget of one constraint's compile in its worker process (MiB of address space "
        "above the worker's start-up size); a compile past it fails its request; 0 = no budget", int)
    grammar_matcher_max_mb: int = _arg(64, "largest matcher automaton one constraint may build in the server "
                                       "(MiB, measured in the compile worker first); larger ones fail with "
                                       "400; 0 = no bound", int)
    grammar_cache_mb: int = _arg(1024, "compiled grammars kept for reuse, in MiB of estimated size (LRU; "
                                 "/flush_cache empties it)", int)
    # HTTP server limits (runtime/server reads them; the engine ignores them)
    max_json_depth: int = _arg(256, "HTTP: deepest nesting of arrays and objects in a request body (400 "
                               f"beyond); at least max_schema_depth + {JSON_BODY_WRAPPING}, at most "
                               f"{MAX_JSON_DEPTH_CEILING}", int)
    max_json_values: int = _arg(1 << 21, "HTTP: most JSON values in a request body (one more than its commas "
                                "and opening brackets outside strings; 400 beyond): bounds the decoder's time "
                                "and memory", int)
    sampling_defaults: str = _arg("model", "what a request's unset temperature, top_p, top_k, min_p and "
                                  "repetition_penalty become: model = the checkpoint's generation_config.json "
                                  "(a GGUF: its general.sampling.* keys), openai = temperature 1, top_p 1, no "
                                  "top-k (SGLang's flag)", str, SAMPLING_DEFAULTS)
    generation_config: str = _arg("auto", "vLLM's spelling of --sampling-defaults: auto = the model's, vllm = "
                                  "the built-in ones, or a folder holding a generation_config.json to read "
                                  "instead of the model's", str)
    max_new_tokens_default: int = _arg(1024, "HTTP: max_tokens of an OpenAI chat request that sets none "
                                       "(capped by the context left)", int)
    tool_call_parser: str | None = _arg(None, "HTTP: the tool-call format (hermes, qwen3_coder, llama3, pythonic, "
                                        "mistral, ...); default: detected from the chat template", str)
    reasoning_parser: str | None = _arg(None, "HTTP: the reasoning format split into reasoning_content "
                                        "(deepseek-r1, qwen3, gpt-oss); default: detected from the chat "
                                        "template (none when it has no reasoning markers)", str)

    chat_template: str | None = _arg(None, "HTTP: a Jinja chat template file (or the template text itself) used "
                                     "instead of the checkpoint's", str)
    grammar_backend: str = _arg("radixlm", "constraint compiler: radixlm (built in), xgrammar or llguidance "
                                "(optional packages)", str, GRAMMAR_BACKENDS)
    grammar_warmup: bool = _arg(True, "build the grammar backend and its per-vocabulary tables at start-up, in "
                                "the background (off: on the first constrained request)", bool)
    strict_api: bool = _arg(False, "HTTP: reject unknown request fields with 400 instead of ignoring them", bool)
    incremental_streaming_output: bool = _arg(False, "HTTP: /generate stream chunks carry only the new text "
                                              "(default: the whole text so far, as SGLang)", bool)
    allowed_hosts: str | None = _arg(None, "HTTP: comma-separated host names a request's Host header may "
                                     "carry besides the bound address (421 otherwise), * = any; default: the loopback names when "
                                     "bound to loopback, the bound address, any name when bound to 0.0.0.0", str)
    allowed_origins: str | None = _arg(None, "HTTP: comma-separated browser origins (scheme://host[:port]) that may "
                                       "call the API: CORS headers and preflights for them, * = any; default: none "
                                       "(cross-origin requests refused)", str)
    metrics_prefix: str = _arg("radixlm", "HTTP: the prefix of /metrics names (radixlm:...); sglang for "
                               "SGLang's dashboards", str)
    cache_isolation: str = _arg("shared", "HTTP: which requests share cached prefixes (cached_tokens and "
                                "latency reveal them): shared = all requests of one API key (or all, with no "
                                "key) unless a cache_salt splits them; per-request = only requests sending "
                                "the same cache_salt (and key)", str, CACHE_ISOLATIONS)
    http_keepalive_timeout_s: float = _arg(75.0, "HTTP: close a keep-alive connection idle this long", float)
    http_header_timeout_s: float = _arg(30.0, "HTTP: a connection must send a request's headers within this "
                                        "many seconds of opening (a later request: of its first byte); 408 and "
                                        "closed otherwise", float)
    http_body_timeout_s: float = _arg(60.0, "HTTP: most seconds reading one request body (408 after)", float)
    max_connections_per_client: int = _arg(64, "HTTP: most open connections from one client IP (not a trusted "
                                           "one): a new one evicts the client's oldest still sending headers, "
                                           "else 2 more may only ask /health and /metrics, then 503; at most 4x "
                                           "this many connections still sending headers in all (the oldest is "
                                           "evicted)", int)
    forwarded_allow_ips: str = _arg("127.0.0.1,::1", "HTTP: addresses (or networks; * = all) of reverse proxies "
                                    "and local clients, which carry many clients on one address: no per-client "
                                    "connection cap for them (uvicorn's flag)", str)
    enable_dashboard: bool = _arg(False, "HTTP: serve the live dashboard and playground at /dashboard (with API "
                                  "keys its data needs the admin key: it shows every client's prompts)", bool)

    # GPU decode speed-ups: used on CUDA only, and only once verified on a device
    # (runtime/model/cuda_graph_runner.py); on CPU they have no effect
    disable_cuda_graph: bool = _arg(False, "CUDA: run decode steps eagerly instead of replaying captured "
                                    "CUDA graphs (one per batch-size bucket)", bool)
    cuda_graph_max_bs: int = _arg(128, "CUDA: largest decode batch captured as a CUDA graph (buckets 1, 2, 4, "
                                  "8, then every 8); larger batches run eagerly", int)
    disable_overlap_schedule: bool = _arg(False, "CUDA: run the step loop without overlapping CPU "
                                          "scheduling with the device's work", bool)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        if self.tool_call_parser is not None and self.tool_call_parser not in TOOL_CALL_PARSERS:
            raise ValueError(f"tool_call_parser must be one of {', '.join(TOOL_CALL_PARSERS)}; "
                             f"got {self.tool_call_parser!r}")
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"reasoning_parser must be one of {', '.join(REASONING_PARSERS)}; "
                             f"got {self.reasoning_parser!r}")
        self.kv_cache_dtype = kv_cache_dtype_name(self.kv_cache_dtype)
        for f in dataclasses.fields(self):
            choices = f.metadata.get("choices")
            value = getattr(self, f.name)
            if choices and value not in choices:
                raise ValueError(f"{f.name} must be one of {', '.join(choices)}; got {value!r}")
        if not (self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device must be auto, cpu, cuda or cuda:N; got {self.device!r}")
        for name in ("max_total_tokens", "context_length", "max_queued_requests", "max_req_input_len"):
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, lo=1)
        if self.max_total_tokens is not None and self.max_total_tokens < 2:
            raise ValueError(f"max_total_tokens must be >= 2, got {self.max_total_tokens}")
        for name in ("max_running_requests", "max_prefill_tokens", "page_size", "tp_size", *REQUEST_LIMITS):
            check_int(name, getattr(self, name), lo=1)
        if self.chunked_prefill_size is not None:
            check_int("chunked_prefill_size", self.chunked_prefill_size, lo=-1)
            if self.chunked_prefill_size == 0:
                raise ValueError("chunked_prefill_size must be >= 1, or None / -1 for no chunking")
        check_int("random_seed", self.random_seed)
        check_num("mem_fraction", self.mem_fraction)
        if not 0.0 < self.mem_fraction <= 1.0:
            raise ValueError(f"mem_fraction must be in (0, 1], got {self.mem_fraction}")
        check_num("grammar_compile_timeout_s", self.grammar_compile_timeout_s)
        if self.grammar_compile_timeout_s <= 0:
            raise ValueError(f"grammar_compile_timeout_s must be > 0, got {self.grammar_compile_timeout_s}")
        check_bools(self, ("enable_mixed_chunk", "enable_dashboard"))
        check_bools(self, ("disable_radix_cache", "enable_jump_forward", "strict_api",
                           "incremental_streaming_output"))
        self.speculative_method(None)  # ValueError naming the field
        if self.speculative_row_cost is not None:
            check_num("speculative_row_cost", self.speculative_row_cost, lo=0.0)
        if self.allowed_hosts is not None and (not isinstance(self.allowed_hosts, str)
                                               or not self.allowed_hosts.strip(" ,")):
            raise ValueError("allowed_hosts must be a non-empty comma-separated list of host names, or *")
        if self.allowed_origins is not None:
            check_origins(self.allowed_origins)
        if not isinstance(self.metrics_prefix, str) or not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", self.metrics_prefix):
            raise ValueError(f"metrics_prefix must be a Prometheus name ([a-zA-Z_][a-zA-Z0-9_]*), got "
                             f"{self.metrics_prefix!r}")
        if not isinstance(self.generation_config, str) or not self.generation_config:
            raise ValueError("generation_config must be auto, vllm or a folder holding a generation_config.json")
        if self.chat_template is not None and (not isinstance(self.chat_template, str) or not self.chat_template):
            raise ValueError("chat_template must be a non-empty string: a Jinja file or the template text")
        check_bools(self, ("disable_cuda_graph", "disable_overlap_schedule"))
        check_int("cuda_graph_max_bs", self.cuda_graph_max_bs, lo=1, hi=4096)
        self._validate_http_limits()
        for name in ("model_path", "tokenizer_path"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty string")
        check_int("grammar_compile_max_memory_mb", self.grammar_compile_max_memory_mb, lo=0)
        check_int("grammar_matcher_max_mb", self.grammar_matcher_max_mb, lo=0)
        check_int("grammar_cache_mb", self.grammar_cache_mb, lo=1)
        if self.quantization is not None and self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be {' or '.join(QUANTIZATIONS)} (weight-only) or unset for the "
                             f"float weights; got {self.quantization!r}")

    def sampling_defaults_from(self) -> str | None:
        """Where a request's unset sampler fields come from: None = the built-in defaults
        (``--sampling-defaults openai`` or ``--generation-config vllm``), ``auto`` = the model,
        else the folder ``--generation-config`` names."""
        if self.sampling_defaults == "openai" or self.generation_config == BUILTIN_GENERATION_CONFIG:
            return None
        return self.generation_config

    def speculative_method(self, device_type: str | None) -> tuple[str | None, int]:
        """``(method, num_draft_tokens)``: ``"ngram"`` or None (off), from ``speculative_config``
        when set, else ``speculative_algorithm`` (``auto`` resolved for ``device_type``)."""
        algorithm, k = self.speculative_algorithm, self.speculative_num_draft_tokens
        if self.speculative_config is not None:
            algorithm, k = _parse_speculative_config(self.speculative_config, k)
        check_int("speculative_num_draft_tokens", k, lo=1, hi=64)
        check_int("speculative_max_batch_size", self.speculative_max_batch_size, lo=1)
        name = "none" if algorithm is None else str(algorithm).lower()
        if name == "auto":
            name = "none" if device_type == "cuda" else "ngram"
        if name in ("none", "off", "null"):
            return None, k
        if name in ("ngram", "ngram_prompt_lookup", "prompt_lookup"):
            return "ngram", k
        if name in SPECULATIVE_NEEDS_DRAFT_MODEL:
            raise ValueError(f"speculative_algorithm {algorithm!r} needs a draft model, which radixlm does not "
                             f"run; use NGRAM (drafts from the grammar, the radix tree and the prompt) or none")
        raise ValueError(f"speculative_algorithm must be NGRAM, none or auto; got {algorithm!r}")

    def _validate_http_limits(self) -> None:
        check_int("max_new_tokens_default", self.max_new_tokens_default, lo=1)
        check_int("max_connections_per_client", self.max_connections_per_client, lo=1)
        for entry in (e.strip() for e in self.forwarded_allow_ips.split(",")):
            if entry and entry != "*":
                try:
                    ipaddress.ip_network(entry, strict=False)
                except ValueError:
                    raise ValueError(f"forwarded_allow_ips: {entry!r} is not an IP address or network") from None
        for name in ("http_keepalive_timeout_s", "http_header_timeout_s", "http_body_timeout_s"):
            check_num(name, getattr(self, name))
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        check_int("max_json_depth", self.max_json_depth, lo=1, hi=MAX_JSON_DEPTH_CEILING)
        check_int("max_json_values", self.max_json_values, lo=1024)
        if self.max_json_depth < self.max_schema_depth + JSON_BODY_WRAPPING:
            raise ValueError(f"max_json_depth must be >= max_schema_depth + {JSON_BODY_WRAPPING} "
                             f"({self.max_schema_depth + JSON_BODY_WRAPPING}), so that a request body can "
                             f"carry the deepest schema the engine accepts; got {self.max_json_depth}")

    @property
    def queue_limit(self) -> int:
        """The waiting-queue bound: ``max_queued_requests``, or the default derived from the engine's
        capacity (never below ``max_sequences_per_request``, so that every request the fan-out limits
        allow can fit an empty queue)."""
        if self.max_queued_requests is not None:
            return self.max_queued_requests
        return max(QUEUE_PER_RUNNING * self.max_running_requests, self.max_sequences_per_request)

    @property
    def chunk_size(self) -> int | None:
        """The prefill chunk budget in tokens, or None for no chunking."""
        size = self.chunked_prefill_size
        return None if size is None or size == -1 else size

    # ------------------------------------------------------------------ CLI

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Add one ``--kebab-case`` flag per field (booleans as ``--x/--no-x``), plus SGLang's spellings."""
        for f in dataclasses.fields(ServerArgs):
            # an alias the command already uses for its own flag (generate's --seed) stays the command's
            flags = ["--" + f.name.replace("_", "-"),
                     *(a for a in FLAG_ALIASES.get(f.name, ()) if a not in parser._option_string_actions)]
            if f.metadata["type"] is bool:
                action = parser.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction,
                                             default=f.default, help=f.metadata["help"])
            else:
                value_type = _with_value_aliases(f.metadata["type"], VALUE_ALIASES.get(f.name))
                action = parser.add_argument(*flags, dest=f.name, type=value_type, default=f.default,
                                             choices=f.metadata["choices"], help=f.metadata["help"])
            # one "(default: ...)" per flag: none when the help names it or it is None, none added
            # twice where argparse's BooleanOptionalAction adds its own (Python < 3.12)
            if f.default is not None and "default" not in action.help:
                action.help += " (default: %(default)s)"

    @classmethod
    def from_cli_args(cls, ns: argparse.Namespace) -> ServerArgs:
        """Build from a namespace parsed with ``add_cli_args`` (other attributes are ignored)."""
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{n: getattr(ns, n) for n in names if hasattr(ns, n)})

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> ServerArgs:
        """Like the constructor, but an unknown name raises ``ValueError`` naming it."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(f"unknown server argument(s): {', '.join(unknown)}")
        return cls(**kwargs)


def _with_value_aliases(value_type: Any, aliases: dict[str, str | None] | None) -> Any:
    """``value_type`` that first maps SGLang's spelling of a value (``half``) to ours (``float16``)."""
    if not aliases:
        return value_type

    def convert(text: str) -> Any:
        value = aliases.get(text, text)
        return None if value is None else value_type(value)

    convert.__name__ = getattr(value_type, "__name__", "value")  # argparse names it in errors
    return convert


def check_origins(text: Any) -> None:
    """``allowed_origins``: ``*`` or comma-separated ``scheme://host[:port]`` origins (ValueError naming the bad one)."""
    if not isinstance(text, str) or not text.strip(" ,"):
        raise ValueError("allowed_origins must be a non-empty comma-separated list of origins, or *")
    for name in (n.strip() for n in text.split(",") if n.strip()):
        parts = urlsplit(name)
        if name != "*" and (parts.scheme.lower() not in ("http", "https") or not parts.netloc
                            or parts.path not in ("", "/") or parts.query or parts.fragment):
            raise ValueError(f"allowed_origins: {name!r} is not an origin (scheme://host[:port]) or *")
