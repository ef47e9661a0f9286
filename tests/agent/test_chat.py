"""The tool-calling chat template, the action format and its grammar."""

import json

import pytest

from clap.agent import chat
from clap.agent.tools import ReportTools


@pytest.fixture(scope="module")
def tok(smollm2_dir):
    from clap.model import load_tokenizer

    return load_tokenizer(smollm2_dir)


@pytest.mark.parametrize("messages, generation_prompt", [
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}], False),
    ([{"role": "user", "content": "U"}], True),
    ([{"role": "system", "content": "S"}, {"role": "user", "content": "问题"}], True),
])
def test_without_tools_it_renders_like_smollm2s_own_template(tok, messages, generation_prompt):
    own = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    assert tok.apply_chat_template(messages, chat_template=chat.CHAT_TEMPLATE, tokenize=False,
                                   add_generation_prompt=generation_prompt) == own


def test_tool_calls_render_as_the_action_the_model_writes_and_parse_back(tok):
    action = chat.Action("Find it.", "search_reports", {"query": "宏源机械 2022 净利润", "k": 3})
    messages = chat.start("Q?") + [action.message(), chat.tool_message("search_reports", "[]")]
    text = tok.apply_chat_template(messages, tools=ReportTools.tool_schemas(), chat_template=chat.CHAT_TEMPLATE,
                                   tokenize=False, add_generation_prompt=True)
    assert f"<|im_start|>assistant\n{action.text()}<|im_end|>\n<|im_start|>tool\n[]<|im_end|>\n" in text
    assert "- calculate(op: add|sub|mul|div|pct_change, a: number, b: number): " in text
    assert text.endswith("<|im_start|>assistant\n")
    assert chat.parse_action(action.text()) == action
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text and max(ids) < tok.vocab_size  # the existing vocabulary: no token added


def test_loss_mask_covers_the_agents_turns_and_their_end_token_only(tok):
    a1 = chat.Action("Find.", "search_reports", {"query": "Apex 2022"})
    a2 = chat.Action("Answer.", "finish", {"answer": "1234.5 万元"})
    messages = chat.start("Q?") + [a1.message(), chat.tool_message("search_reports", "OBSERVED"), a2.message()]
    row = chat.trajectory_labels(tok, messages, ReportTools.tool_schemas())
    trained = tok.decode([t for t in row["labels"] if t != -100])
    assert trained == a1.text() + "<|im_end|>" + a2.text() + "<|im_end|>"
    assert "OBSERVED" not in trained and "Q?" not in trained


def test_a_base_without_a_template_ends_each_action_with_the_token_generation_stops_at(tok):
    """Gemma 3 270M's GGUF brings no template and no `<|im_end|>` token: its actions must end with its own
    end-of-sequence token, or a sampled action never ends (TRL counts every RL completion as clipped)."""
    import copy

    other = copy.deepcopy(tok)
    other.chat_template, other.eos_token = None, "<|endoftext|>"
    assert other.eos_token_id != tok.eos_token_id and not chat.own_template(other)
    a1 = chat.Action("Find.", "search_reports", {"query": "Apex 2022"})
    a2 = chat.Action("Answer.", "finish", {"answer": "1234.5 万元"})
    messages = chat.start("Q?") + [a1.message(), chat.tool_message("search_reports", "OBSERVED"), a2.message()]
    row = chat.trajectory_labels(other, messages, ReportTools.tool_schemas())
    trained = [t for t in row["labels"] if t != -100]
    assert other.decode(trained) == a1.text() + "<|endoftext|>" + a2.text() + "<|endoftext|>"
    assert trained[-1] == other.eos_token_id and trained.count(other.eos_token_id) == 2
    assert chat.end_of_turn(other) == "<|endoftext|>" and chat.end_of_turn_ids(other) == [other.eos_token_id]
    assert chat.end_of_turn(tok) == "<|im_end|>" and chat.end_of_turn_ids(tok) == [tok.eos_token_id]


@pytest.mark.parametrize("text", [
    "", "I will search the reports.", '{"tool": "finish", "arguments": {"answer": "x"}}',
    '{"thought": "t", "tool": "finish", "arguments": "x"}', '{"thought": 1, "tool": "finish", "arguments": {}}',
    '{"tool": "finish", "thought": "t", "arguments": {}}', '{"thought": "t", "tool": "finish", "arguments": {}, "x": 1}',
])
def test_anything_but_one_action_object_does_not_parse(text):
    assert chat.parse_action(text) is None


def test_action_grammar_accepts_every_tool_and_refuses_unknown_arguments(tok):
    import xgrammar as xgr

    from clap.evaluate.decoding import GrammarCache

    compiled = GrammarCache(tok, tok.vocab_size).compiled(chat.action_schema(ReportTools.tool_schemas()))

    def accepts(obj) -> bool:
        matcher = xgr.GrammarMatcher(compiled)
        return matcher.accept_string(json.dumps(obj, ensure_ascii=False)) and matcher.accept_token(tok.eos_token_id)

    assert accepts({"thought": "t", "tool": "search_reports", "arguments": {"query": "q", "k": 3}})
    assert accepts({"thought": "t", "tool": "search_reports", "arguments": {"query": "q"}})
    assert accepts({"thought": "t", "tool": "calculate", "arguments": {"op": "sub", "a": 2, "b": 1.5}})
    assert accepts({"thought": "", "tool": "finish", "arguments": {"answer": "not found"}})
    assert not accepts({"thought": "t", "tool": "calculate", "arguments": {"op": "pow", "a": 2, "b": 1}})
    assert not accepts({"thought": "t", "tool": "finish", "arguments": {"answer": "x", "why": "y"}})
    assert not accepts({"thought": "t", "tool": "delete", "arguments": {}})
