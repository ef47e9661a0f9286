"""The pure rules of the OpenAI surface: stop sequences, what a stream holds back, finish reasons, token limits."""

import pytest

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
