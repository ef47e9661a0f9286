import pytest
import torch

from clap.domain import prompts
from clap.evaluate.decoding import answer_schema
from clap.evaluate.generate import Engine
from clap.evaluate.prefix_cache import PrefixCache

CHUNKS = [{"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 1,200.5 RMB 10k. Margin was 7%."},
          {"chunk_id": "c2-p3", "doc_id": "c2", "page": 3, "text": "毛利率为14.4%。存货周转天数为16.5天。"}]


def _kv(n: int, layers: int = 2) -> list:
    return [(torch.arange(n, dtype=torch.float32).expand(1, n)[..., None].repeat(1, 1, 2),) * 2 for _ in range(layers)]


@pytest.mark.parametrize("cached, prompt, model, expected", [
    ([1, 2, 3, 4], [1, 2, 3, 4, 5, 6], "m", 4),   # the whole cached sequence starts the prompt
    ([1, 2, 3, 9], [1, 2, 3, 4, 5], "m", 3),      # diverges after three tokens
    ([1, 2, 3], [1, 2, 3], "m", 2),               # the last prompt token always goes through the model
    ([1, 2, 3], [1, 2, 3], "other", 0),           # another model's keys and values are never reused
    ([7, 8], [1, 2, 3], "m", 0),                  # nothing in common
])
def test_the_longest_cached_prefix(cached, prompt, model, expected):
    cache = PrefixCache(max_tokens=100)
    cache.put("m", cached, _kv(len(cached)))
    n, kv = cache.longest(model, prompt)
    assert n == expected
    assert (kv is None) if expected == 0 else all(k.shape[1] == expected and v.shape[1] == expected for k, v in kv)


def test_the_cache_keeps_its_token_budget_least_recently_used_out():
    cache = PrefixCache(max_tokens=10)
    cache.put("m", [1, 2, 3, 4], _kv(4))
    cache.put("m", [5, 6, 7, 8], _kv(4))
    assert cache.longest("m", [1, 2, 3, 4, 0])[0] == 4  # [1..4] is now the most recently used
    cache.put("m", [9, 10, 11], _kv(3))
    assert cache.tokens == 7 and cache.longest("m", [5, 6, 7, 8, 0])[0] == 0 and cache.longest("m", [1, 2, 0])[0] == 2
    cache.put("m", list(range(20)), _kv(20))  # longer than the whole budget: not kept
    assert cache.tokens == 7
    with pytest.raises(ValueError, match="3 tokens for a KV of 4"):
        cache.put("m", [1, 2, 3], _kv(4))


@pytest.mark.parametrize("jump_forward", [False, True])
def test_a_second_turn_prefills_only_what_follows_the_first_and_answers_alike(tiny_dir, jump_forward):
    """Multi-turn decoding: turn 2 is turn 1's conversation, its answer and a new question. With prefix reuse the
    engine prefills only the new tokens of each turn-2 prompt — one batch mixing reused rows and a fresh one —
    and gives the answers of an engine that prefills every prompt whole."""
    fresh = Engine(tiny_dir, jump_forward=jump_forward)
    reusing = Engine(tiny_dir, jump_forward=jump_forward, reuse_prefixes=10_000)
    first = [prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(q, CHUNKS)) for q in ("Revenue?", "毛利率?")]
    schemas = [answer_schema(CHUNKS, True)] * 3

    def turn(engine, convs):
        return [g.text for g in engine.generate(convs, use_adapter=False, max_new_tokens=80, batch_size=3,
                                                progress=False, schemas=schemas[:len(convs)])]

    answers = turn(reusing, first)
    assert answers == turn(fresh, first) and reusing.prefixes.reused_tokens == 0
    second = [c + [{"role": "assistant", "content": a}, {"role": "user", "content": "And the margin?"}]
              for c, a in zip(first, answers)]
    second.append(prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt("Days?", CHUNKS[1:])))  # nothing to reuse
    whole = sum(len(reusing.encode(c)) for c in second)
    before = reusing.prefixes.prefilled_tokens
    assert turn(reusing, second) == turn(fresh, second)
    prefilled = reusing.prefixes.prefilled_tokens - before
    assert reusing.prefixes.reused_tokens >= sum(len(reusing.encode(c)) for c in first)
    assert prefilled == whole - reusing.prefixes.reused_tokens and prefilled < whole / 2
