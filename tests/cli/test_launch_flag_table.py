"""A table of real SGLang and vLLM launch commands (from their documentation and model cards, with the
model as radixlm would get it): each one either parses into the settings it means here, or is refused
with one usage-error line saying why. Parsing only: no model is loaded."""

from __future__ import annotations

import shlex

import pytest
from radixlm.runtime.tokenizer.tokenizer import NAMED_CHAT_TEMPLATES, _read_template_override

from radixlm.__main__ import build_parser, serve_settings
from radixlm.flags import notices, unknown_arguments

pytestmark = pytest.mark.unit

M = "Qwen/Qwen2.5-7B-Instruct"
# (command after `radixlm serve`, expected): a dict of ServerArgs fields (``served``: the served names,
# ``notice``: a flag that must print its notice), or ("refused", words the one error line holds)
TABLE: list[tuple[str, dict | tuple[str, str]]] = [
    # vLLM: `vllm serve MODEL ...`
    (f"{M}", {"model_path": M}),
    (f"{M} --max-model-len 32768", {"model_path": M, "context_length": 32768}),
    (f"{M} --gpu-memory-utilization 0.9", {"mem_fraction": 0.9}),
    (f"{M} --max-num-seqs 128", {"max_running_requests": 128}),
    (f"{M} --max-num-batched-tokens 8192", {"max_prefill_tokens": 8192}),
    (f"{M} --seed 1234", {"random_seed": 1234}),
    (f"{M} --served-model-name qwen", {"served": ("qwen",)}),
    (f"{M} --served-model-name qwen qwen-7b gpt-4o", {"served": ("qwen", "qwen-7b", "gpt-4o")}),
    (f"{M} --enable-auto-tool-choice --tool-call-parser hermes", {"tool_call_parser": "hermes",
                                                                  "notice": "--enable-auto-tool-choice"}),
    (f"{M} --enable-auto-tool-choice --tool-call-parser auto", {"tool_call_parser": None}),
    (f"{M} --tool-call-parser llama3_json", {"tool_call_parser": "llama3_json"}),
    (f"{M} --tool-call-parser mistral", {"tool_call_parser": "mistral"}),
    (f"{M} --tool-call-parser pythonic", {"tool_call_parser": "pythonic"}),
    (f"{M} --tool-call-parser qwen3_coder", {"tool_call_parser": "qwen3_coder"}),
    (f"{M} --tool-call-parser deepseek_v3", {"tool_call_parser": "deepseek_v3"}),
    (f"{M} --tool-call-parser granite", {"tool_call_parser": "granite"}),
    (f"{M} --tool-call-parser kimi_k2", {"tool_call_parser": "kimi_k2"}),
    (f"{M} --tool-call-parser glm45", {"tool_call_parser": "glm45"}),
    (f"{M} --tool-call-parser openai", {"tool_call_parser": "openai"}),
    (f"{M} --tool-call-parser llama4_pythonic", {"tool_call_parser": "llama4_pythonic"}),
    (f"{M} --tool-call-parser xlam", ("refused", "tool_call_parser must be one of")),
    (f"{M} --reasoning-parser deepseek_r1", {"reasoning_parser": "deepseek_r1"}),
    (f"{M} --reasoning-parser qwen3", {"reasoning_parser": "qwen3"}),
    (f"{M} --reasoning-parser auto", {"reasoning_parser": None}),
    (f"{M} --reasoning-parser granite", ("refused", "reasoning_parser must be one of")),
    (f"{M} --chat-template chatml", {"chat_template": "chatml"}),
    (f"{M} --chat-template ./examples/tool_chat_template_hermes.jinja",
     {"chat_template": "./examples/tool_chat_template_hermes.jinja"}),
    (f"{M} --dtype auto", {"dtype": "auto"}),
    (f"{M} --dtype bfloat16", {"dtype": "bfloat16"}),
    (f"{M} --dtype half", {"dtype": "float16"}),
    (f"{M} --dtype float", {"dtype": "float32"}),
    (f"{M} --tensor-parallel-size 2", {"tp_size": 2}),
    (f"{M} --tensor-parallel-size 1 --pipeline-parallel-size 1", {"tp_size": 1}),
    (f"{M} --pipeline-parallel-size 2", ("refused", "pipeline parallelism is not implemented")),
    (f"{M} --trust-remote-code", {"notice": "--trust-remote-code"}),
    (f"{M} --enforce-eager", {"disable_cuda_graph": True}),
    (f"{M} --enable-prefix-caching", {"notice": "--enable-prefix-caching"}),
    (f"{M} --enable-chunked-prefill", {"notice": "--enable-chunked-prefill"}),
    (f"{M} --disable-log-requests", {"notice": "--disable-log-requests"}),
    (f"{M} --disable-log-stats", {"notice": "--disable-log-stats"}),
    (f"{M} --swap-space 16", {"notice": "--swap-space"}),
    (f"{M} --block-size 16", {"notice": "--block-size"}),
    (f"{M} --generation-config auto", {"generation_config": "auto"}),
    (f"{M} --generation-config vllm", {"generation_config": "vllm"}),
    (f"{M} --sampling-defaults openai", {"sampling_defaults": "openai"}),
    (f"{M} --kv-cache-dtype fp8", ("refused", "an FP8 KV cache has no meaning here")),
    (f"{M} --kv-cache-dtype auto", {"kv_cache_dtype": "auto"}),
    (f"{M} --kv-cache-dtype half", {"kv_cache_dtype": "float16"}),
    (f"{M} --kv-cache-dtype bfloat16", {"kv_cache_dtype": "bfloat16"}),
    (f"{M} --kv-cache-dtype float32", {"kv_cache_dtype": "float32"}),
    (f"{M} --distributed-executor-backend mp", {"notice": "--distributed-executor-backend"}),
    (f"{M} --uvicorn-log-level warning", {"notice": "--uvicorn-log-level"}),
    (f"{M} --host 0.0.0.0 --port 8000", {"host": "0.0.0.0", "port": 8000}),
    (f"{M} --api-key token-abc123", {"keys": ["token-abc123"]}),
    (f"{M} --quantization int8", {"quantization": "int8"}),
    (f"{M} --quantization awq", ("refused", "quantization must be int8")),
    (f"{M} --quantization fp8", ("refused", "quantization must be int8")),
    (f"{M} --enable-lora --lora-modules sql-lora=/adapters/sql", ("refused", "LoRA adapters are not supported")),
    (f"{M} --max-lora-rank 64", ("refused", "LoRA adapters are not supported")),
    (f"{M} --limit-mm-per-prompt image=2", ("refused", "text-only")),
    (f"{M} --task embed", ("refused", "no task to pick")),
    (f"{M} --rope-scaling '{{\"rope_type\":\"yarn\",\"factor\":4.0}}'", ("refused", "config.json")),
    (f"{M} --hf-overrides '{{\"max_position_embeddings\": 65536}}'", ("refused", "config.json")),
    (f"{M} --max-modle-len 4096", ("refused", "did you mean --max-model-len")),
    (f"{M} --model-path other/model", ("refused", "the model is given twice")),
    (f"{M} --model {M}", {"model_path": M}),
    (f"{M} --max-model-len 8192 --gpu-memory-utilization 0.85 --max-num-seqs 64 --enable-auto-tool-choice "
     "--tool-call-parser hermes --served-model-name qwen2.5", {"context_length": 8192, "mem_fraction": 0.85,
                                                               "max_running_requests": 64, "served": ("qwen2.5",)}),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B --reasoning-parser deepseek_r1 --max-model-len 16384",
     {"reasoning_parser": "deepseek_r1", "context_length": 16384}),
    ("meta-llama/Llama-3.1-8B-Instruct --enable-auto-tool-choice --tool-call-parser llama3_json "
     "--chat-template examples/tool_chat_template_llama3.1_json.jinja", {"tool_call_parser": "llama3_json"}),
    ("mistralai/Mistral-7B-Instruct-v0.3 --tokenizer-mode mistral --tool-call-parser mistral "
     "--enable-auto-tool-choice", {"tool_call_parser": "mistral", "notice": "--tokenizer-mode"}),
    ("ibm-granite/granite-3.1-8b-instruct --tool-call-parser granite --enable-auto-tool-choice",
     {"tool_call_parser": "granite"}),
    ("openai/gpt-oss-20b --tool-call-parser openai --enable-auto-tool-choice --reasoning-parser gpt_oss",
     {"tool_call_parser": "openai", "reasoning_parser": "gpt_oss"}),
    ("Qwen/Qwen3-8B --enable-reasoning --reasoning-parser deepseek_r1", ("refused", "--enable-reasoning")),
    # SGLang: `python -m sglang.launch_server --model-path MODEL ...`
    (f"--model-path {M}", {"model_path": M}),
    (f"--model-path {M} --port 30000 --host 0.0.0.0", {"port": 30000, "host": "0.0.0.0"}),
    (f"--model-path {M} --mem-fraction-static 0.8", {"mem_fraction": 0.8}),
    (f"--model-path {M} --context-length 8192", {"context_length": 8192}),
    (f"--model-path {M} --chunked-prefill-size 4096", {"chunked_prefill_size": 4096}),
    (f"--model-path {M} --chunked-prefill-size -1", {"chunked_prefill_size": -1}),
    (f"--model-path {M} --max-running-requests 64", {"max_running_requests": 64}),
    (f"--model-path {M} --max-prefill-tokens 16384", {"max_prefill_tokens": 16384}),
    (f"--model-path {M} --tp 2", {"tp_size": 2}),
    (f"--model-path {M} --tp-size 2", {"tp_size": 2}),
    (f"--model-path {M} --dp 2", {"dp_size": 2}),
    (f"--model-path {M} --dp-size 2", {"dp_size": 2}),
    (f"--model-path {M} --random-seed 42", {"random_seed": 42}),
    (f"--model-path {M} --attention-backend triton", {"attention_backend": "triton"}),
    (f"--model-path {M} --attention-backend torch_native", {"attention_backend": "torch"}),
    (f"--model-path {M} --attention-backend flashinfer", ("refused", "invalid choice: 'flashinfer'")),
    (f"--model-path {M} --disable-radix-cache", {"disable_radix_cache": True}),
    (f"--model-path {M} --disable-cuda-graph", {"disable_cuda_graph": True}),
    (f"--model-path {M} --cuda-graph-max-bs 32", {"cuda_graph_max_bs": 32}),
    (f"--model-path {M} --disable-overlap-schedule", {"disable_overlap_schedule": True}),
    (f"--model-path {M} --enable-torch-compile", {"notice": "--enable-torch-compile"}),
    (f"--model-path {M} --torch-compile-max-bs 8", {"notice": "--torch-compile-max-bs"}),
    (f"--model-path {M} --enable-metrics", {"notice": "--enable-metrics"}),
    (f"--model-path {M} --metrics-prefix sglang", {"metrics_prefix": "sglang"}),
    (f"--model-path {M} --grammar-backend xgrammar", {"grammar_backend": "xgrammar"}),
    (f"--model-path {M} --grammar-backend outlines", ("refused", "invalid choice: 'outlines'")),
    (f"--model-path {M} --tool-call-parser qwen25", {"tool_call_parser": "qwen25"}),
    (f"--model-path {M} --tool-call-parser qwen", {"tool_call_parser": "qwen"}),
    (f"--model-path {M} --tool-call-parser llama3", {"tool_call_parser": "llama3"}),
    (f"--model-path {M} --tool-call-parser deepseekv3", {"tool_call_parser": "deepseekv3"}),
    (f"--model-path {M} --tool-call-parser kimi_k2 --reasoning-parser kimi_k2",
     {"tool_call_parser": "kimi_k2", "reasoning_parser": "kimi_k2"}),
    (f"--model-path {M} --reasoning-parser qwen3-thinking", {"reasoning_parser": "qwen3-thinking"}),
    (f"--model-path {M} --reasoning-parser deepseek-r1", {"reasoning_parser": "deepseek-r1"}),
    (f"--model-path {M} --chat-template chatml", {"chat_template": "chatml"}),
    (f"--model-path {M} --served-model-name default", {"served": ("default",)}),
    (f"--model-path {M} --api-key sk-123", {"keys": ["sk-123"]}),
    (f"--model-path {M} --trust-remote-code --enable-metrics --log-level warning",
     {"log_level": "warning", "notice": "--enable-metrics"}),
    (f"--model-path {M} --log-level debug", {"log_level": "debug"}),
    (f"--model-path {M} --schedule-policy lpm", {"schedule_policy": "lpm"}),
    (f"--model-path {M} --schedule-policy fcfs", {"schedule_policy": "fcfs"}),
    (f"--model-path {M} --page-size 16", {"page_size": 16}),
    (f"--model-path {M} --kv-cache-dtype fp8_e5m2", ("refused", "an FP8 KV cache has no meaning here")),
    (f"--model-path {M} --kv-cache-dtype fp8_e4m3", ("refused", "an FP8 KV cache has no meaning here")),
    (f"--model-path {M} --kv-cache-dtype fp16", {"kv_cache_dtype": "float16"}),
    (f"--model-path {M} --kv-cache-dtype bf16", {"kv_cache_dtype": "bfloat16"}),
    (f"--model-path {M} --kv-cache-dtype fp32", {"kv_cache_dtype": "float32"}),
    (f"--model-path {M} --kv-cache-dtype int4", ("refused", "--kv-cache-dtype")),
    (f"--model-path {M} --skip-server-warmup", {"notice": "--skip-server-warmup"}),
    (f"--model-path {M} --stream-interval 4", {"notice": "--stream-interval"}),
    (f"--model-path {M} --watchdog-timeout 600", {"notice": "--watchdog-timeout"}),
    (f"--model-path {M} --load-format auto", {"notice": "--load-format"}),
    (f"--model-path {M} --revision main", {"notice": "--revision"}),
    (f"--model-path {M} --download-dir /data", {"notice": "--download-dir"}),
    (f"--model-path {M} --base-gpu-id 1", {"notice": "--base-gpu-id"}),
    (f"--model-path {M} --disable-custom-all-reduce", {"notice": "--disable-custom-all-reduce"}),
    (f"--model-path {M} --decode-log-interval 40", {"notice": "--decode-log-interval"}),
    (f"--model-path {M} --show-time-cost", {"notice": "--show-time-cost"}),
    (f"--model-path {M} --enable-cache-report", {"notice": "--enable-cache-report"}),
    (f"--model-path {M} --schedule-conservativeness 0.3", {"notice": "--schedule-conservativeness"}),
    (f"--model-path {M} --enable-mixed-chunk", {"enable_mixed_chunk": True}),
    (f"--model-path {M} --quantization int8 --dtype bfloat16", {"quantization": "int8", "dtype": "bfloat16"}),
    (f"--model-path {M} --quantization gptq", ("refused", "quantization must be int8")),
    (f"--model-path {M} --nnodes 1 --node-rank 0", {"model_path": M}),
    (f"--model-path {M} --nnodes 2 --node-rank 0", ("refused", "runs on one node")),
    (f"--model-path {M} --json-model-override-args '{{\"rope_scaling\": null}}'", ("refused", "config.json")),
    (f"--model-path {M} --lora-paths a=/x", ("refused", "LoRA adapters are not supported")),
    (f"--model-path {M} --max-total-tokens 65536", {"max_total_tokens": 65536}),
    (f"--model-path {M} --max-queued-requests 512", {"max_queued_requests": 512}),
    (f"--model-path {M} --allowed-origins http://localhost:3000", {"allowed_origins": "http://localhost:3000"}),
    (f"--model-path {M} --context-length 0", ("refused", "context_length")),
    (f"--model-path {M} --mem-fraction-static 1.5", ("refused", "mem_fraction")),
    ("--model-path meta-llama/Llama-3.2-1B-Instruct --tool-call-parser llama3 --chat-template chatml",
     {"tool_call_parser": "llama3", "chat_template": "chatml"}),
    ("--model-path deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code", {"tp_size": 8}),
    ("--model-path google/gemma-3-1b-it --attention-backend torch_native --context-length 4096",
     {"attention_backend": "torch", "context_length": 4096}),
    ("--model-path ./qwen2.5-coder-0.5b-instruct-q8_0.gguf --port 30001", {"port": 30001}),
    ("Qwen/Qwen2.5-Coder-7B-Instruct --max-model-len 4096 --enforce-eager",
     {"context_length": 4096, "disable_cuda_graph": True}),
    ("Qwen/QwQ-32B --reasoning-parser deepseek_r1 --tensor-parallel-size 4", {"tp_size": 4}),
    ("Qwen/Qwen3-30B-A3B --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3",
     {"tool_call_parser": "hermes", "reasoning_parser": "qwen3"}),
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct --enable-auto-tool-choice --tool-call-parser qwen3_coder",
     {"tool_call_parser": "qwen3_coder"}),
    ("zai-org/GLM-4.5-Air --tool-call-parser glm45 --reasoning-parser glm45 --enable-auto-tool-choice",
     {"tool_call_parser": "glm45", "reasoning_parser": "glm45"}),
    ("moonshotai/Kimi-K2-Instruct --tool-call-parser kimi_k2 --enable-auto-tool-choice --trust-remote-code",
     {"tool_call_parser": "kimi_k2"}),
    ("MiniMaxAI/MiniMax-M2 --tool-call-parser minimax_m2 --reasoning-parser minimax_m2_append_think",
     ("refused", "reasoning_parser must be one of")),
    ("ByteDance-Seed/Seed-OSS-36B-Instruct --tool-call-parser seed_oss --enable-auto-tool-choice",
     {"tool_call_parser": "seed_oss"}),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct --tool-call-parser llama4_pythonic --max-model-len 100000",
     {"tool_call_parser": "llama4_pythonic", "context_length": 100000}),
    ("microsoft/Phi-4-mini-instruct --dtype auto --max-num-seqs 16 --gpu-memory-utilization 0.7",
     {"max_running_requests": 16, "mem_fraction": 0.7}),
    ("google/gemma-3-1b-it --max-model-len 8192 --seed 0", {"context_length": 8192, "random_seed": 0}),
    ("deepseek-ai/DeepSeek-V3.1 --tool-call-parser deepseek_v31 --enable-auto-tool-choice",
     {"tool_call_parser": "deepseek_v31"}),
    (f"--model-path {M} --tool-call-parser qwen3_xml", {"tool_call_parser": "qwen3_xml"}),
    (f"--model-path {M} --tool-call-parser gpt-oss --reasoning-parser gpt-oss",
     {"tool_call_parser": "gpt-oss", "reasoning_parser": "gpt-oss"}),
]


def settle(argv: list[str]):
    """``radixlm serve ARGV`` up to the model load: (ServerArgs, ServerConfig, notices)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(["serve", *argv])
    if unknown:
        args.parser.error(unknown_arguments(unknown, args.parser))
    server_args, config = serve_settings(args)
    return server_args, config, notices(args), args


def test_the_table_has_150_distinct_rows():
    assert len({c for c, _ in TABLE}) == len(TABLE) >= 150


@pytest.mark.parametrize("command, expected", TABLE, ids=[c[:60] for c, _ in TABLE])
def test_each_invocation_works_or_is_refused_in_one_line(command, expected, capsys):
    argv = shlex.split(command)
    if isinstance(expected, tuple):
        with pytest.raises(SystemExit) as e:
            settle(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        # the error line, then one pointer to --help (flags.OneLineErrorParser); no usage dump
        errors = [line for line in err if line.startswith(("radixlm: error: ", "radixlm serve: error: "))]
        assert len(errors) == 1 and expected[1] in errors[0], err
        assert len(err) <= 2 and (len(err) == 1 or "--help" in err[-1]), err
        return
    server_args, config, lines, args = settle(argv)
    for key, value in expected.items():
        if key == "served":
            assert (config.served_model_name, *config.served_model_aliases) == value
        elif key == "notice":
            assert any(line.startswith(f"radixlm: notice: {value}") for line in lines), lines
        elif key == "keys":
            assert config.keys == value
        elif key in ("host", "port", "dp_size"):
            assert getattr(args if key == "dp_size" else config, key) == value
        else:
            assert getattr(server_args, key) == value, key
    if "notice" not in expected:
        assert lines == [] or command.count("--trust-remote-code") or "--enable-auto-tool-choice" in command


def test_named_chat_templates_render_and_other_names_are_one_line_errors():
    assert _read_template_override("chatml") == NAMED_CHAT_TEMPLATES["chatml"]
    with pytest.raises(FileNotFoundError, match=r"'llama-2': no such file, and not a template this server names"):
        _read_template_override("llama-2")
