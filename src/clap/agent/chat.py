"""How an agent turn is written: the chat template for tools and tool calls, the system prompt, and
the action format (Thought / Action / Finish as one JSON object). `render` is the one way a conversation
becomes tokens — in training (SFT masks, DPO and reward-model texts, GRPO rollouts) and in serving.

A base whose tokenizer brings its own template (Llama 3, Qwen, Gemma, …) renders through it (`own_template`):
the conversation is first written as plain turns (`as_plain_turns`: the tools listed in the system turn, a tool
call as the assistant's action JSON, a tool's return as a user turn), since templates disagree on tool turns
(Gemma's has none) and the action grammar is the same for every base. The agent's tokens — for SFT's loss and
GRPO's mask — are found by rendering each prefix (`assistant_mask`), as no such template marks them.

SmolLM2's own template renders neither `tools` nor `tool_calls`. `CHAT_TEMPLATE` is a superset of
it — a conversation without tools renders byte for byte as before (tests check it) — that lists the
tools in the system turn, writes an assistant tool call as `{"thought": …, "tool": …, "arguments": …}`
and a tool return as a `tool` turn. It adds no token (`<|im_start|>tool` is the existing marker and a
word), so no embedding rows become trainable `modules_to_save`, which vLLM's LoRA serving refuses.
The assistant turn and its stop token sit inside `{% generation %}`: SFT trains on the agent's
turns only, stop token included, and never on tool returns it cannot predict. The stop token is the tokenizer's
end-of-sequence token — `<|im_end|>` on SmolLM2, so its rendering is unchanged — because that is the one token
generation stops at: a base without a template of its own (Gemma 3 270M's GGUF) has no `<|im_end|>` token, and an
assistant turn closed by that text would never end a sampled action (every RL completion clipped).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from clap.evaluate.metrics import parse_answer
from clap.model import FALLBACK_CHAT_TEMPLATE

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
    "{{ eos_token if eos_token else '<|im_end|>' }}"
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


def openai_messages(messages: list[dict]) -> list[dict]:
    """The agent's conversation in OpenAI's shapes, as an application sends it to `clap canary serve --agent` (pure;
    `clap.serve.openai_api.internal_messages` reads it back unchanged): each tool call gets an id (`call_<turn>`),
    its arguments a JSON string, and the tool turn after it that id; an error turn (after a malformed action) its
    tool's name."""
    out, last_call = [], None
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("tool_calls"):
            f = m["tool_calls"][0]["function"]
            last_call = f"call_{i}"
            out.append({"role": "assistant", "content": m["content"], "tool_calls": [
                {"id": last_call, "type": "function",
                 "function": {"name": f["name"], "arguments": json.dumps(f["arguments"], ensure_ascii=False)}}]})
        elif m["role"] == "tool":
            out.append({"role": "tool", "content": m["content"],
                        **({"tool_call_id": last_call} if last_call else {"name": m.get("name", "tool")})})
            last_call = None
        else:
            out.append({"role": m["role"], "content": m["content"]})
            last_call = None
    return out


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


def own_template(tok) -> bool:
    """Whether conversations render through the tokenizer's own chat template: for every base but SmolLM2 (whose
    template renders no tools — `CHAT_TEMPLATE` is its tool-calling superset) or a tokenizer that brings none."""
    return bool(tok.chat_template) and tok.chat_template != FALLBACK_CHAT_TEMPLATE


def engine_rendering(tok, tool_schemas: list[dict]) -> dict:
    """How `clap.evaluate.generate.Engine` renders the agent's conversations for this tokenizer: `CHAT_TEMPLATE`
    with the tools, or the tokenizer's own template over `as_plain_turns`."""
    from functools import partial

    if own_template(tok):
        return {"as_turns": partial(as_plain_turns, tool_schemas=tool_schemas)}
    return {"chat_template": CHAT_TEMPLATE, "tools": tool_schemas}


def tools_text(tool_schemas: list[dict]) -> str:
    """The tools as the system turn lists them (what `CHAT_TEMPLATE` writes after the system prompt)."""
    lines = []
    for tool in tool_schemas:
        f = tool.get("function", tool)
        args = ", ".join(f"{name}: {'|'.join(p['enum']) if 'enum' in p else p['type']}"
                         for name, p in f["parameters"]["properties"].items())
        lines.append(f"\n- {f['name']}({args}): {f['description']}")
    return "\nTools:" + "".join(lines)


def as_plain_turns(messages: list[dict], tool_schemas: list[dict]) -> list[dict]:
    """The conversation as system / user / assistant turns only (pure): the tools in the system turn, a tool call
    as the action JSON the model writes, a tool's return as a user turn naming the tool."""
    out = []
    for m in messages:
        if m["role"] == "system":
            out.append({"role": "system", "content": m["content"] + tools_text(tool_schemas)})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            call = m["tool_calls"][0]["function"]
            out.append({"role": "assistant", "content": Action(m["content"] or "", call["name"], call["arguments"]).text()})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": f"Tool result ({m.get('name', 'tool')}):\n{m['content']}"})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def render(tok, messages: list[dict], tool_schemas: list[dict], add_generation_prompt: bool = False,
           tokenize: bool = True, assistant_mask: bool = False):
    """A conversation rendered for the agent: text, or a dict with `input_ids` (and with `assistant_mask`,
    `assistant_masks`: 1 on the agent's own tokens, its end-of-turn marker included)."""
    if not own_template(tok):
        return tok.apply_chat_template(messages, tools=tool_schemas, chat_template=CHAT_TEMPLATE, tokenize=tokenize,
                                       return_dict=tokenize, add_generation_prompt=add_generation_prompt,
                                       return_assistant_tokens_mask=assistant_mask)
    plain = as_plain_turns(messages, tool_schemas)
    if not tokenize:
        return tok.apply_chat_template(plain, tokenize=False, add_generation_prompt=add_generation_prompt)
    ids = _ids(tok, plain, add_generation_prompt)
    if not assistant_mask:
        return {"input_ids": ids}
    mask, end = [0] * len(ids), end_of_turn_ids(tok)
    for i, m in enumerate(plain):
        if m["role"] != "assistant":
            continue
        head, upto = _ids(tok, plain[:i], True), _ids(tok, plain[:i + 1], False)
        start = next((k for k, (a, b) in enumerate(zip(head, upto)) if a != b), min(len(head), len(upto)))
        stop = _find(upto[start:], end)  # the turn runs to its end-of-turn marker (whitespace after it is the template's)
        stop = len(upto) if stop is None else start + stop + len(end)
        if ids[:stop] != upto[:stop]:
            raise ValueError("the tokenizer's chat template does not render a conversation as a prefix of its "
                             "continuation; the agent track cannot find the agent's turns in it")
        for j in range(start, stop):  # from where the prompt alone and the turn diverge, as TRL's SFT splits them
            mask[j] = 1
    return {"input_ids": ids, "assistant_masks": mask}


def plan_and_call_masks(tok, ids: list[int], mask: list[int]) -> tuple[list[int], list[int]]:
    """The agent's own tokens (`mask`, from `render(..., assistant_mask=True)`) split per turn into the *plan* —
    the thought and the tool chosen ("when", and which: `{"thought": …, "tool": "search_reports"`) — and the
    *call* — its arguments and the end of the turn ("how"). A turn's call starts at the token whose text completes
    `"arguments"`; a turn without one (not an action) is all plan. Two-stage SFT trains each with its own loss."""
    plan, call = [0] * len(ids), [0] * len(ids)
    k = 0
    while k < len(ids):
        if not mask[k]:
            k += 1
            continue
        end = next((j for j in range(k, len(ids)) if not mask[j]), len(ids))
        split = next((j for j in range(k, end) if '"arguments"' in tok.decode(ids[k:j + 1])), end)
        if split < end:  # back to the token where `"arguments"` begins
            split = next(j for j in range(split, k - 1, -1) if '"arguments"' in tok.decode(ids[j:split + 1]))
        for j in range(k, end):
            (plan if j < split else call)[j] = 1
        k = end
    return plan, call


def _ids(tok, messages: list[dict], add_generation_prompt: bool) -> list[int]:
    return list(tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                        add_generation_prompt=add_generation_prompt)["input_ids"])


def _find(seq: list[int], sub: list[int]) -> int | None:
    return next((i for i in range(len(seq) - len(sub) + 1) if sub and seq[i:i + len(sub)] == sub), None)


def end_of_turn(tok) -> str:
    """The text that closes an assistant turn in the template the agent renders with (`<|im_end|>` for SmolLM2's,
    `<|eot_id|>` for Llama 3's, `<end_of_turn>` for Gemma's): what follows an action in DPO and reward-model texts."""
    if not own_template(tok):
        return tok.eos_token
    marker = "ACTION-7f3a"
    rendered = tok.apply_chat_template([{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}],
                                       tokenize=False)
    return rendered.split(marker, 1)[1].strip() or tok.eos_token


def end_of_turn_ids(tok) -> list[int]:
    return tok(end_of_turn(tok), add_special_tokens=False)["input_ids"]


def trajectory_labels(tok, messages: list[dict], tool_schemas: list[dict]) -> dict:
    """input_ids and labels (-100 outside the agent's turns) of one trajectory, what `clap train agent-sft` trains
    on; `plan_labels` and `call_labels` keep only each turn's plan (thought, tool) or its call (arguments, end of
    turn)."""
    enc = render(tok, messages, tool_schemas, assistant_mask=True)
    ids = list(enc["input_ids"])
    plan, call = plan_and_call_masks(tok, ids, enc["assistant_masks"])
    return {"input_ids": ids, "labels": [t if m else -100 for t, m in zip(ids, enc["assistant_masks"])],
            "plan_labels": [t if m else -100 for t, m in zip(ids, plan)],
            "call_labels": [t if m else -100 for t, m in zip(ids, call)]}
