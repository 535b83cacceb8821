"""Tool-call cases every chat-format test shares: the tools and their schemas, golden outputs per
family, the families checked live, and an OpenAI client of a live server parsing one family."""

from __future__ import annotations

from contextlib import contextmanager

import openai
from radixlm.runtime.chat_formats.tools import ToolSpec

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Tokyo", "Lima"]},
                                            "metric": {"type": "boolean"}},
           "required": ["city", "metric"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = [ToolSpec("get_weather", "Weather", WEATHER), ToolSpec("get_time", "Time", TIME)]
W = ("get_weather", {"city": "Paris", "metric": True})
T = ("get_time", {"zone": "UTC"})
V32 = ("<｜DSML｜function_calls>", '<｜DSML｜invoke name=', '<｜DSML｜parameter name=', "</｜DSML｜parameter>",
       "</｜DSML｜invoke>", "</｜DSML｜function_calls>")
DS = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"

# family -> (single call, parallel calls, text around a call, malformed call); each (output, content, calls)
GOLDEN = {
    "hermes": [
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}\n</tool_call>', "", [W]),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}\n</tool_call>\n'
         '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>', "\n", [W, T]),
        ('Let me check.\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>\nDone.',
         "Let me check.\n\nDone.", [T]),
        ('<tool_call>\n{"name": "get_time", "arguments": {"zone": </tool_call> tail',
         '<tool_call>\n{"name": "get_time", "arguments": {"zone": </tool_call> tail', []),
    ],
    "qwen3_coder": [
        ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=metric>\ntrue\n"
         "</parameter>\n</function>\n</tool_call>", "", [W]),
        ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=metric>\ntrue\n"
         "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n"
         "</parameter>\n</function>\n</tool_call>", "\n", [W, T]),
        ("I will look.\n\n<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n"
         "</tool_call>", "I will look.\n\n", [T]),
        ("<tool_call>\n<function=get_time>\nzone=UTC\n</tool_call>", "<tool_call>\n<function=get_time>\nzone=UTC\n"
         "</tool_call>", []),
    ],
    "llama3": [
        ('{"name": "get_weather", "parameters": {"city": "Paris", "metric": true}}', "", [W]),
        ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "metric": true}}; '
         '{"name": "get_time", "parameters": {"zone": "UTC"}}', "", [W, T]),
        ('Sure. {"name": "get_time", "parameters": {"zone": "UTC"}}', "Sure. ", [T]),
        ('{"name": "get_time", "parameters": {"zone": "UTC"', '{"name": "get_time", "parameters": {"zone": "UTC"', []),
    ],
    "pythonic": [
        ('[get_weather(city="Paris", metric=True)]', "", [W]),
        ('[get_weather(city="Paris", metric=True), get_time(zone="UTC")]', "", [W, T]),
        ('Checking: [get_time(zone="UTC")] now', "Checking:  now", [T]),
        ("[get_time(zone=UTC, ]", "[get_time(zone=UTC, ]", []),
    ],
    "mistral": [
        ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}]', "", [W]),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "metric": true}[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}',
         "", [W, T]),
        ('Okay. [TOOL_CALLS][{"name": "get_time", "arguments": {"zone": "UTC"}, "id": "abcDEF123"}]', "Okay. ", [T]),
        ('[TOOL_CALLS][{"name": "get_time", "arguments": ', '[TOOL_CALLS][{"name": "get_time", "arguments": ', []),
    ],
    "deepseekv3": [
        (f'{DS[0]}{DS[1]}function{DS[2]}get_weather\n```json\n{{"city": "Paris", "metric": true}}\n```{DS[3]}{DS[4]}',
         "", [W]),
        (f'{DS[0]}{DS[1]}function{DS[2]}get_weather\n```json\n{{"city": "Paris", "metric": true}}\n```{DS[3]}\n'
         f'{DS[1]}function{DS[2]}get_time\n```json\n{{"zone": "UTC"}}\n```{DS[3]}{DS[4]}', "", [W, T]),
        (f'Hmm.{DS[0]}{DS[1]}function{DS[2]}get_time\n```json\n{{"zone": "UTC"}}\n```{DS[3]}{DS[4]} ok', "Hmm. ok", [T]),
        (f'{DS[0]}{DS[1]}function{DS[2]}get_time\n```json\n{{"zone": \n```{DS[3]}{DS[4]}',
         f'{DS[0]}{DS[1]}function{DS[2]}get_time\n```json\n{{"zone": \n```{DS[3]}{DS[4]}', []),
    ],
    "deepseekv31": [
        (f'{DS[0]}{DS[1]}get_weather{DS[2]}{{"city": "Paris", "metric": true}}{DS[3]}{DS[4]}', "", [W]),
        (f'{DS[0]}{DS[1]}get_weather{DS[2]}{{"city": "Paris", "metric": true}}{DS[3]}{DS[1]}get_time{DS[2]}'
         f'{{"zone": "UTC"}}{DS[3]}{DS[4]}', "", [W, T]),
        (f'Looking.{DS[0]}{DS[1]}get_time{DS[2]}{{"zone": "UTC"}}{DS[3]}{DS[4]}', "Looking.", [T]),
        (f'{DS[0]}{DS[1]}get_time{DS[2]}{{"zone"}}{DS[3]}{DS[4]}', f'{DS[0]}{DS[1]}get_time{DS[2]}{{"zone"}}{DS[3]}{DS[4]}', []),
    ],
    "deepseekv32": [
        (f'{V32[0]}\n{V32[1]}"get_weather">\n{V32[2]}"city" string="true">Paris{V32[3]}\n{V32[2]}"metric" '
         f'string="false">true{V32[3]}\n{V32[4]}\n{V32[5]}', "", [W]),
        (f'{V32[0]}\n{V32[1]}"get_weather">\n{V32[2]}"city" string="true">Paris{V32[3]}\n{V32[2]}"metric" '
         f'string="false">true{V32[3]}\n{V32[4]}\n{V32[1]}"get_time">\n{V32[2]}"zone" string="true">UTC{V32[3]}\n'
         f'{V32[4]}\n{V32[5]}', "", [W, T]),
        (f'Checking.\n\n{V32[0]}\n{V32[1]}"get_time">\n{V32[2]}"zone" string="true">UTC{V32[3]}\n{V32[4]}\n'
         f'{V32[5]}', "Checking.\n\n", [T]),
        (f'{V32[0]}\n{V32[1]}"get_time">\n{V32[2]}"zone" string="false">UTC{V32[3]}\n{V32[4]}\n{V32[5]}',
         f'{V32[0]}\n{V32[1]}"get_time">\n{V32[2]}"zone" string="false">UTC{V32[3]}\n{V32[4]}\n{V32[5]}', []),
    ],
    "glm45": [
        ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>metric</arg_key>\n"
         "<arg_value>true</arg_value>\n</tool_call>", "", [W]),
        ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>metric</arg_key>\n"
         "<arg_value>true</arg_value>\n</tool_call>\n<tool_call>get_time\n<arg_key>zone</arg_key>\n"
         "<arg_value>UTC</arg_value>\n</tool_call>", "\n", [W, T]),
        ("Sure.\n<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>UTC</arg_value>\n</tool_call>",
         "Sure.\n", [T]),
        ("<tool_call>get time\nzone</tool_call>", "<tool_call>get time\nzone</tool_call>", []),
    ],
    "kimi_k2": [
        ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
         '{"city": "Paris", "metric": true}<|tool_call_end|><|tool_calls_section_end|>', "", [W]),
        ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
         '{"city": "Paris", "metric": true}<|tool_call_end|><|tool_call_begin|>functions.get_time:1'
         '<|tool_call_argument_begin|>{"zone": "UTC"}<|tool_call_end|><|tool_calls_section_end|>', "", [W, T]),
        ('One moment.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>'
         '{"zone": "UTC"}<|tool_call_end|><|tool_calls_section_end|>', "One moment.", [T]),
        ("<|tool_calls_section_begin|>oops<|tool_calls_section_end|>",
         "<|tool_calls_section_begin|>oops<|tool_calls_section_end|>", []),
    ],
    "granite": [
        ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}]', "", [W]),
        ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "metric": true}}, '
         '{"name": "get_time", "arguments": {"zone": "UTC"}}]', "", [W, T]),
        ('Let me see. <|tool_call|>[{"name": "get_time", "arguments": {"zone": "UTC"}}]', "Let me see. ", [T]),
        ('<|tool_call|>[{"name": "get_time"}]', '<|tool_call|>[{"name": "get_time"}]', []),
    ],
    "minimax_m2": [
        ('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
         '<parameter name="metric">true</parameter>\n</invoke>\n</minimax:tool_call>', "", [W]),
        ('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
         '<parameter name="metric">true</parameter>\n</invoke>\n<invoke name="get_time">\n'
         '<parameter name="zone">UTC</parameter>\n</invoke>\n</minimax:tool_call>', "", [W, T]),
        ('Checking.\n<minimax:tool_call>\n<invoke name="get_time">\n<parameter name="zone">UTC</parameter>\n'
         '</invoke>\n</minimax:tool_call>', "Checking.\n", [T]),
        ('<minimax:tool_call>\n<invoke name="get_time">zone=UTC</invoke>\n</minimax:tool_call>',
         '<minimax:tool_call>\n<invoke name="get_time">zone=UTC</invoke>\n</minimax:tool_call>', []),
    ],
    "seed_oss": [
        ("<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=metric>true"
         "</parameter>\n</function>\n</seed:tool_call>", "", [W]),
        ("<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=metric>true"
         "</parameter>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=get_time>\n<parameter=zone>"
         "UTC</parameter>\n</function>\n</seed:tool_call>", "\n", [W, T]),
        ("Let me look.\n<seed:tool_call>\n<function=get_time>\n<parameter=zone>UTC</parameter>\n</function>\n"
         "</seed:tool_call>", "Let me look.\n", [T]),
        ("<seed:tool_call>\n<function=get_time>\nzone=UTC\n</seed:tool_call>",
         "<seed:tool_call>\n<function=get_time>\nzone=UTC\n</seed:tool_call>", []),
    ],
    "cohere": [
        ('<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", '
         '"metric": true}}\n]<|END_ACTION|>', "", [W]),
        ('<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", '
         '"metric": true}},\n    {"tool_call_id": "1", "tool_name": "get_time", "parameters": {"zone": "UTC"}}\n]'
         '<|END_ACTION|>', "", [W, T]),
        ('<|START_THINKING|>the time<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_time", '
         '"parameters": {"zone": "UTC"}}]<|END_ACTION|>', "<|START_THINKING|>the time<|END_THINKING|>", [T]),
        ('<|START_ACTION|>[{"tool_name": "get_time"}]<|END_ACTION|>',
         '<|START_ACTION|>[{"tool_name": "get_time"}]<|END_ACTION|>', []),
    ],
    "command_r": [
        ('Action:\n```json\n[\n    {"tool_name": "get_weather", "parameters": {"city": "Paris", "metric": true}}\n]```',
         "", [W]),
        ('Action:\n```json\n[\n    {"tool_name": "get_weather", "parameters": {"city": "Paris", "metric": true}},\n'
         '    {"tool_name": "get_time", "parameters": {"zone": "UTC"}}\n]```', "", [W, T]),
        ('I will check.\nAction:\n```json\n[{"tool_name": "get_time", "parameters": {"zone": "UTC"}}]```\n',
         "I will check.\n\n", [T]),
        ('Action:\n```json\n[{"tool_name": "get_time"}]```', 'Action:\n```json\n[{"tool_name": "get_time"}]```', []),
    ],
    "functionary_v31": [
        ('<function=get_weather>{"city": "Paris", "metric": true}</function>', "", [W]),
        ('<function=get_weather>{"city": "Paris", "metric": true}</function><function=get_time>{"zone": "UTC"}'
         '</function>', "", [W, T]),
        ('Sure: <function=get_time>{"zone": "UTC"}</function>', "Sure: ", [T]),
        ('<function=get_time>{"zone": UTC}</function>', '<function=get_time>{"zone": UTC}</function>', []),
    ],
    "functionary_v32": [  # the prompt ends with ">>>": the output starts with the recipient line
        ('get_weather\n{"city": "Paris", "metric": true}', "", [W]),
        ('get_weather\n{"city": "Paris", "metric": true}>>>get_time\n{"zone": "UTC"}', "", [W, T]),
        ('all\nSure, one moment.>>>get_time\n{"zone": "UTC"}', "Sure, one moment.", [T]),
        ('get_time\n{"zone": UTC}', 'get_time\n{"zone": UTC}', []),
    ],
    "gemma4": [
        ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,metric:true}<tool_call|>', "", [W]),
        ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,metric:true}<tool_call|><|tool_call>call:get_time'
         '{zone:<|"|>UTC<|"|>}<tool_call|>', "", [W, T]),
        ('One moment.<|tool_call>call:get_time{zone:<|"|>UTC<|"|>}<tool_call|>', "One moment.", [T]),
        ('<|tool_call>call:get_time{zone:<|"|>UTC}<tool_call|>', '<|tool_call>call:get_time{zone:<|"|>UTC}<tool_call|>',
         []),
    ],
}
LIVE = ("hermes", "qwen3_coder", "llama3", "pythonic", "mistral", "deepseekv31", "glm45", "kimi_k2", "granite",
        "deepseekv3", "deepseekv32", "minimax_m2", "seed_oss", "cohere", "functionary_v31", "gemma4", "command_r", "functionary_v32")
MAX_TOKENS = {"command_r": 160, "deepseekv32": 240, "minimax_m2": 160, "seed_oss": 160, "cohere": 160, "gemma4": 160,
              "glm45": 160, "qwen3_coder": 160}  # DSML's fullwidth markers take many byte-level tokens of the tiny vocab
ZONE = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}  # an enum: a free string from the tiny model may run past max_tokens
SCHEMAS = {"get_weather": WEATHER, "get_time": ZONE}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
API_TOOLS = [ToolSpec("get_weather", "Weather", WEATHER).to_template(), ToolSpec("get_time", "Time", ZONE).to_template()]


@contextmanager
def family_client(engine, family: str):
    """An OpenAI client of a live server on ``engine`` that parses calls in ``family``'s syntax."""
    from radixlm.runtime.server.app import BackgroundServer
    from radixlm.runtime.server.transport.state import ServerConfig

    engine.server_args.tool_call_parser = family
    srv = BackgroundServer(engine, ServerConfig(port=0)).start()
    try:
        yield openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=60)
    finally:
        srv.stop()
        engine.server_args.tool_call_parser = None
