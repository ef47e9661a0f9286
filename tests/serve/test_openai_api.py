"""The pure rules of the OpenAI surface: stop sequences, what a stream holds back, finish reasons, token limits, and
an agent's conversation through OpenAI's tool-calling shapes and back."""

import json

import pytest

from clap.agent import chat
from clap.feedback.traffic import action_text
from clap.serve import openai_api as api


@pytest.mark.parametrize("text, stops, expected", [
    ('{"a": 1}\nNext', ["\n"], ('{"a": 1}', True)),
    ("abc", None, ("abc", False)),
    ("abcSTOPdefEND", ["END", "STOP"], ("abc", True)),  # the earliest stop wins, whatever its order in the list
    ("STOP first", ["STOP"], ("", True)),
    ("no stop here", ["zz"], ("no stop here", False)),
])
def test_cut_at_stop(text, stops, expected):
    assert api.cut_at_stop(text, stops) == expected


@pytest.mark.parametrize("text, stops, held", [
    ("answer EN", ["END"], 2),  # "EN" may be the start of "END": not sent yet
    ("answer E", ["END"], 1),
    ("answer", ["END"], 0),
    ("answer", None, 0),
    ("x\n", ["\n\n", "###"], 1),
])
def test_a_stream_holds_back_what_could_begin_a_stop(text, stops, held):
    assert api.held_back(text, stops) == held


@pytest.mark.parametrize("new_tokens, limit, stopped, reason", [
    (10, 64, False, "stop"), (64, 64, False, "length"), (64, 64, True, "stop")])
def test_finish_reason(new_tokens, limit, stopped, reason):
    assert api.finish_reason(new_tokens, limit, stopped) == reason


def test_token_limits_and_formats():
    req = api.ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                          "max_tokens": 10, "user": "ignored", "logprobs": False})
    assert req.token_limit(256, 2048) == 10 and req.schema() is None
    assert api.ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                                          ).token_limit(256, 2048) == 256
    with pytest.raises(ValueError, match="max_tokens 10 is above this server's limit 5"):
        req.token_limit(256, 5)
    schema = {"type": "object", "properties": {"v": {"type": "number"}}, "required": ["v"]}
    fmt = api.ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                          "response_format": {"type": "json_schema",
                                                              "json_schema": {"name": "a", "schema": schema}}})
    assert fmt.schema() == schema
    assert api.ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                           "response_format": {"type": "json_object"}}).schema() == {"type": "object"}
    for bad in ({"n": 2}, {"stop": [""]}, {"temperature": 3}, {"messages": []}, {"stop": ["a"] * 5}):
        with pytest.raises(ValueError):
            api.ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}]} | bad)


EPISODE = [  # an agent episode as the track writes it: a call, its return, a malformed turn, its error, finish
    *chat.start("What was Apex's net profit for FY2022?"),
    chat.Action("Search.", "search_reports", {"query": "Apex net profit 2022", "k": 3}).message(),
    chat.tool_message("search_reports", '[{"chunk_id": "c01-annual-2022-p1", "title": "Apex …"}]'),
    {"role": "assistant", "content": '{"thought": "Read.", "tool": "read_chunk", "arguments": {"chunk": 1}}'},
    chat.tool_message("error", '{"error": "unknown argument chunk"}'),
    chat.Action("", "read_chunk", {"chunk_id": "c01-annual-2022-p1"}).message(),
    chat.tool_message("read_chunk", "Net profit for FY2022 was 1,234.50 RMB 10k."),
]


def test_an_agent_episode_survives_the_round_trip_through_openai_shapes():
    sent = chat.openai_messages(EPISODE)
    call = sent[2]["tool_calls"][0]
    assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)  # OpenAI's JSON string
    assert sent[3]["tool_call_id"] == call["id"] and sent[5]["name"] == "error" and "tool_call_id" not in sent[5]
    body = json.loads(json.dumps({"messages": sent}))  # what crosses the wire
    request = api.ChatRequest.model_validate({"model": "m", **body})
    assert api.internal_messages(request.messages) == EPISODE


@pytest.mark.parametrize("turns, says", [
    ([{"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "read_chunk", "arguments": "[1]"}}]}], "messages.0.tool_calls.0.function.arguments: not a JSON object"),
    ([{"role": "tool", "tool_call_id": "c9", "content": "x"}], "messages.0.tool_call_id: 'c9' answers no tool call"),
    ([{"role": "user", "content": None}], "messages.0.content: Field required"),
    ([{"role": "tool", "name": "search_reports"}], "messages.0.content: Field required"),
])
def test_a_turn_the_agent_cannot_read_is_named(turns, says):
    request = api.ChatRequest.model_validate({"model": "m", "messages": turns})
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        api.internal_messages(request.messages)


@pytest.mark.parametrize("message, text", [
    (api.tool_call_message("Read.", "read_chunk", {"chunk_id": "c1"}),
     '{"thought": "Read.", "tool": "read_chunk", "arguments": {"chunk_id": "c1"}}'),
    ({"role": "assistant", "content": "no JSON here"}, "no JSON here"),  # the loop scores it as a malformed turn
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                             "function": {"name": "f", "arguments": "{oops"}}]}, "{oops"),
])
def test_the_client_reads_an_answer_back_into_the_action_the_agent_wrote(message, text):
    assert action_text(message) == text
    if message.get("tool_calls") and message["content"]:
        assert chat.parse_action(text) == chat.Action("Read.", "read_chunk", {"chunk_id": "c1"})


@pytest.mark.parametrize("schema, says", [
    ({"type": "object", "properties": {"value": {"type": "number"}}}, None),
    ({"enum": list(range(49_998))}, None),  # the object, the list and 49,998 members: 50,000 nodes
    ({"enum": list(range(50_000))}, "more than 50000 nodes"),
    ({"a": {"a": {"a": 1}}}, None),
    ("deep", "nested deeper than 24 levels"),
])
def test_a_schema_is_bounded_before_its_grammar_compiles(schema, says):
    from clap.serve.openai_api import check_schema

    if schema == "deep":
        schema = {}
        for _ in range(30):
            schema = {"items": schema}
    if says is None:
        check_schema(schema)
    else:
        with pytest.raises(ValueError, match=says):
            check_schema(schema)


@pytest.mark.parametrize("prompt, max_tokens, context, fits", [
    (700, 256, 1024, True), (769, 256, 1024, False), (10, 10, None, True)])
def test_a_prompt_and_its_answer_must_fit_the_context(prompt, max_tokens, context, fits):
    from clap.serve.openai_api import check_prompt_length

    if fits:
        check_prompt_length(prompt, max_tokens, context)
    else:
        with pytest.raises(ValueError, match=f"the prompt is {prompt} tokens; with max_tokens {max_tokens}"):
            check_prompt_length(prompt, max_tokens, context)


SMOLLM2_KV = 2 * 30 * 3 * 64 * 4  # bytes a token: keys and values, 30 layers, 3 KV heads of 64, fp32
SMOLLM2_ACT = 2 * (2 * 576 + 576 + 2 * 192 + 3 * 1536) * 4  # one layer's prefill tensors a token, each alive twice


@pytest.mark.parametrize("prompt, max_tokens, grammar, mb", [
    (0, 0, 0, 0.0),
    (1000, 256, 0, (1256 * SMOLLM2_KV + 1000 * SMOLLM2_ACT + 1000 * 1000 * 4) / 2**20),  # ≈ 110 MB
    (7001, 8, 0, (7009 * SMOLLM2_KV + 7001 * SMOLLM2_ACT + 7001 * 7001 * 4) / 2**20),  # ≈ 880 MB
    (10, 10, 2**20, (20 * SMOLLM2_KV + 10 * SMOLLM2_ACT + 400 + 2**20) / 2**20),  # a grammar's bytes count in full
])
def test_a_requests_memory_is_its_kv_cache_its_prefill_and_its_grammar(prompt, max_tokens, grammar, mb):
    from clap.serve.openai_api import request_memory_mb

    assert request_memory_mb(prompt, max_tokens, SMOLLM2_KV, SMOLLM2_ACT, grammar_bytes=grammar) == pytest.approx(mb)


@pytest.mark.parametrize("needs, limit, refused", [(100.0, 2048.0, False), (2048.0, 2048.0, False),
                                                   (2049.0, 2048.0, True), (1e9, None, False)])
def test_a_request_past_the_memory_bound_is_refused_naming_the_flag(needs, limit, refused):
    from clap.serve.openai_api import check_request_memory

    if not refused:
        check_request_memory(needs, limit)
    else:
        with pytest.raises(ValueError, match=r"about 2,049 MB .* 2,048 MB a request \(--max-request-mb\)"):
            check_request_memory(needs, limit)


@pytest.mark.parametrize("body, chat, field", [
    ({"messages": []}, True, None),
    ({"top_p": 0.9}, True, None),                       # honoured: the nucleus a sampled token is drawn from
    ({"presence_penalty": 0}, True, None),              # the value that asks for nothing is accepted
    ({"presence_penalty": 0.9}, True, "presence_penalty"),
    ({"logprobs": False, "presence_penalty": 0}, True, None),
    ({"logprobs": True}, False, "logprobs"),
    ({"stream_options": {"include_usage": True}}, True, None),  # honoured: the usage chunk
    ({"logit_bias": {"42": 5}}, True, "logit_bias"),
    ({"response_format": {"type": "json_object"}}, False, "response_format"),
    ({"response_format": {"type": "json_object"}}, True, None),
    ({"user": "someone", "seed": 3}, True, None),        # fields that change nothing the server does
])
def test_unsupported_fields_are_named_not_ignored(body, chat, field):
    from clap.serve.openai_api import unsupported

    problem = unsupported(body, chat)
    assert (problem and problem[1]) == field or (problem is None and field is None)
