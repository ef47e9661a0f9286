"""How an agent turn is written: the chat template for tools and tool calls, the system prompt, and
the action format (Thought / Action / Finish as one JSON object).

SmolLM2's own template renders neither `tools` nor `tool_calls`. `CHAT_TEMPLATE` is a superset of
it — a conversation without tools renders byte for byte as before (tests check it) — that lists the
tools in the system turn, writes an assistant tool call as `{"thought": …, "tool": …, "arguments": …}`
and a tool return as a `tool` turn. It adds no token (`<|im_start|>tool` is the existing marker and a
word), so no embedding rows become trainable `modules_to_save`, which vLLM's LoRA serving refuses.
The assistant turn and its `<|im_end|>` sit inside `{% generation %}`: SFT trains on the agent's
turns only, stop token included, and never on tool returns it cannot predict.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from clap.evaluate.metrics import parse_answer

SYSTEM = ("You answer questions about company reports by calling tools. Each turn, reply with one JSON "
          'object {"thought": ..., "tool": ..., "arguments": {...}}. Search, read the page, compute when '
          'asked, then call finish. If the reports do not hold the answer, finish with "not found".')
MAX_THOUGHT_CHARS = 48  # a thought is a short note ("Search.", "No report covers 2018."); a long one is a loop
MAX_ARGUMENT_CHARS = 160

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- if message['role'] == 'system' and tools -%}"
    "{{ '<|im_start|>system\n' + message['content'] + '\nTools:' }}"
    "{%- for tool in tools -%}"
    "{%- set f = tool['function'] if 'function' in tool else tool -%}"
    "{{ '\n- ' + f['name'] + '(' }}"
    "{%- for name, p in f['parameters']['properties'].items() -%}"
    "{{ (', ' if not loop.first else '') + name + ': ' + ('|'.join(p['enum']) if 'enum' in p else p['type']) }}"
    "{%- endfor -%}"
    "{{ '): ' + f['description'] }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\n' }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\n' }}"
    "{%- generation -%}"
    "{%- if message.get('tool_calls') -%}"
    "{%- set call = message['tool_calls'][0]['function'] -%}"
    "{{ '{\"thought\": ' + (message['content'] or '')|tojson + ', \"tool\": ' + call['name']|tojson"
    " + ', \"arguments\": ' + call['arguments']|tojson + '}' }}"
    "{%- else -%}"
    "{{ message['content'] }}"
    "{%- endif -%}"
    "{{ '<|im_end|>' }}"
    "{%- endgeneration -%}"
    "{{ '\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class Action:
    thought: str
    tool: str
    arguments: dict

    def message(self) -> dict:
        """The assistant turn in the chat format (`tool_calls`), as the template renders it."""
        return {"role": "assistant", "content": self.thought,
                "tool_calls": [{"type": "function", "function": {"name": self.tool, "arguments": self.arguments}}]}

    def text(self) -> str:
        """What the model writes for this action (the template's rendering, `json.dumps` separators)."""
        return json.dumps({"thought": self.thought, "tool": self.tool, "arguments": self.arguments}, ensure_ascii=False)


def parse_action(text: str) -> Action | None:
    """The action in a model turn: a JSON object with exactly thought (string), tool (string) and
    arguments (object), in that order; None for anything else (pure)."""
    obj = parse_answer(text)
    if not isinstance(obj, dict) or tuple(obj) != ("thought", "tool", "arguments"):
        return None
    if not isinstance(obj["thought"], str) or not isinstance(obj["tool"], str) or not isinstance(obj["arguments"], dict):
        return None
    return Action(obj["thought"], obj["tool"], obj["arguments"])


def tool_message(name: str, observation: str) -> dict:
    return {"role": "tool", "name": name, "content": observation}


def start(question: str) -> list[dict]:
    """The first turns of an episode."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def action_schema(tool_schemas: list[dict]) -> dict:
    """JSON schema of one action: for each tool, thought (bounded), the tool's name, its arguments
    (required ones required, no others, strings bounded) — what constrained decoding allows."""
    options = []
    for tool in tool_schemas:
        f = tool["function"]
        props = {name: ({"type": p["type"], "maxLength": MAX_ARGUMENT_CHARS} | ({"enum": p["enum"]} if "enum" in p else {})
                        if p["type"] == "string" else {"type": p["type"]})
                 for name, p in f["parameters"]["properties"].items()}
        options.append({"type": "object", "properties": {
            "thought": {"type": "string", "maxLength": MAX_THOUGHT_CHARS},
            "tool": {"const": f["name"]},
            "arguments": {"type": "object", "properties": props, "required": f["parameters"].get("required", []),
                          "additionalProperties": False}},
            "required": ["thought", "tool", "arguments"], "additionalProperties": False})
    return {"anyOf": options}
