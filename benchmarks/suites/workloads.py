"""Deterministic workload builders shared by the suites (same input on every machine and run).

Token-level workloads return ``list[list[int]]`` prompts so that every system (radixlm, HF,
llama.cpp) is handed exactly the same token ids; text-level ones feed the DSL suites.
"""

from __future__ import annotations

import random
from typing import Any

_CITIES = ["Paris", "Lagos", "Osaka", "Lima", "Oslo", "Quito", "Hanoi", "Perth", "Cairo", "Dakar"]
_VERBS = ["find", "compare", "summarise", "book", "check", "convert", "schedule", "estimate"]
_NOUNS = ["flights", "invoices", "the weather", "exchange rates", "meetings", "train times", "prices"]


def tool_definitions(count: int) -> list[dict[str, Any]]:
    """``count`` OpenAI-style tool definitions with distinct names and parameter schemas."""
    tools = []
    for i in range(count):
        verb, noun = _VERBS[i % len(_VERBS)], _NOUNS[(i * 3) % len(_NOUNS)]
        tools.append({"type": "function", "function": {
            "name": f"{verb}_{noun.replace(' ', '_').replace('the_', '')}_{i}",
            "description": f"Tool {i}: {verb} {noun} for the user. Returns a JSON summary with a status "
                           f"field, the matched records and a short explanation of how they were chosen.",
            "parameters": {"type": "object", "required": ["query", "limit"], "properties": {
                "query": {"type": "string", "description": f"what to {verb}, in plain words"},
                "city": {"type": "string", "enum": _CITIES[i % 4: i % 4 + 4]},
                "limit": {"type": "integer", "description": "most records to return (1-50)"},
                "strict": {"type": "boolean", "description": "only exact matches"},
            }},
        }})
    return tools


def tool_system_messages(tokenizer: Any, target_tokens: int = 1500) -> tuple[list[dict], list[dict]]:
    """(system messages, tools) whose rendered system turn is at least ``target_tokens`` tokens."""
    system = [{"role": "system", "content": "You are a careful assistant that solves tasks by calling tools. "
               "Call exactly one tool per turn; answer in plain words once you have what you need."}]
    count = 1
    while True:
        tools = tool_definitions(count)
        text = tokenizer.apply_chat_template(system, tools=tools, add_generation_prompt=False)
        if len(tokenizer.encode(text)) >= target_tokens:
            return system, tools
        count += 1


def user_turn(i: int, words: int = 30) -> str:
    """A distinct, deterministic user request (about ``words`` words)."""
    rng = random.Random(1000 + i)
    head = f"Request {i}: please {rng.choice(_VERBS)} {rng.choice(_NOUNS)} in {rng.choice(_CITIES)}"
    filler = " ".join(rng.choice(["and", "then", "also", "the", "next", "week", "cheapest", "option", "for",
                                  "two", "people", "before", "noon", "with", "details", "report"])
                      for _ in range(words))
    return f"{head}, {filler}."


def agent_prompts(tokenizer: Any, num_requests: int, system_tokens: int = 1500) -> list[list[int]]:
    """``num_requests`` chat prompts: one shared tool-definition system turn, distinct user turns."""
    system, tools = tool_system_messages(tokenizer, system_tokens)
    prompts = []
    for i in range(num_requests):
        text = tokenizer.apply_chat_template(system + [{"role": "user", "content": user_turn(i)}], tools=tools)
        prompts.append(tokenizer.encode(text, add_special_tokens=True))
    return prompts


def chat_openers(tokenizer: Any, num_conversations: int) -> list[list[int]]:
    """First-turn prompts of ``num_conversations`` distinct conversations (short system turn each)."""
    out = []
    for c in range(num_conversations):
        messages = [{"role": "system", "content": f"You are assistant #{c}, a concise travel planner."},
                    {"role": "user", "content": user_turn(5000 + c, words=40)}]
        out.append(tokenizer.encode(tokenizer.apply_chat_template(messages), add_special_tokens=True))
    return out


def chat_followup(tokenizer: Any, conversation: int, turn: int) -> list[int]:
    """The tokens appended after an assistant answer: end of turn, next user turn, generation prompt."""
    text = ("<|im_end|>\n<|im_start|>user\n" + user_turn(9000 + 97 * conversation + turn, words=40)
            + "<|im_end|>\n<|im_start|>assistant\n")
    return tokenizer.encode(text)


FEW_SHOT_EXAMPLES = [
    ("Which planet is known as the red planet?", ["Venus", "Mars", "Jupiter", "Mercury"], "Mars"),
    ("What is the boiling point of water at sea level in Celsius?", ["90", "100", "110", "120"], "100"),
    ("Which gas do plants absorb from the air?", ["oxygen", "nitrogen", "carbon dioxide", "helium"],
     "carbon dioxide"),
    ("How many legs does a spider have?", ["six", "eight", "ten", "four"], "eight"),
    ("Which ocean is the largest?", ["Atlantic", "Indian", "Arctic", "Pacific"], "Pacific"),
]


def few_shot_prefix() -> str:
    """The shared 5-shot prompt (question, choices, answer) every question is appended to."""
    parts = ["Answer each multiple-choice question with one of its choices.\n\n"]
    for question, choices, answer in FEW_SHOT_EXAMPLES:
        parts.append(f"Question: {question}\nChoices: {', '.join(choices)}\nAnswer: {answer}\n\n")
    return "".join(parts)


def few_shot_questions(num_questions: int) -> list[tuple[str, list[str]]]:
    """``num_questions`` distinct (question, 4 choices) pairs."""
    out = []
    for i in range(num_questions):
        rng = random.Random(7000 + i)
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        choices = [str(a + b + d) for d in rng.sample([-2, -1, 0, 1, 2, 3], 4)]
        out.append((f"What is {a} plus {b}, counted in {rng.choice(_NOUNS)}?", choices))
    return out


def tot_problems(num_programs: int) -> list[str]:
    """Distinct tree-of-thought problem statements."""
    return [f"Plan {i}: {user_turn(3000 + i, words=20)}" for i in range(num_programs)]


TOOL_CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool_name": {"type": "string", "enum": ["search_flight_availability", "convert_currency_amount",
                                                 "lookup_weather_forecast", "schedule_calendar_meeting"]},
        "destination_city": {"type": "string", "enum": _CITIES},
        "number_of_travellers": {"type": "integer", "minimum": 1, "maximum": 9},
        "requires_confirmation": {"type": "boolean"},
        "preferred_departure_time": {"type": "string", "enum": ["morning", "afternoon", "evening"]},
        "notes_for_the_operator": {"type": "string", "maxLength": 12},
    },
    "required": ["tool_name", "destination_city", "number_of_travellers", "requires_confirmation",
                 "preferred_departure_time", "notes_for_the_operator"],
    "additionalProperties": False,
}


def random_prompts(vocab_size: int, batch: int, length: int, seed: int = 0) -> list[list[int]]:
    """``batch`` distinct prompts of random ordinary token ids (no shared prefix), for the raw suite."""
    rng = random.Random(seed)
    return [[rng.randrange(16, vocab_size) for _ in range(length)] for _ in range(batch)]
