import pytest
import torch
from transformers import DynamicCache

from clap.domain import prompts
from clap.evaluate.decoding import answer_schema
from clap.evaluate.generate import Engine, decode_under_grammar
from clap.evaluate.kv_cache import GrowingCache, GrowingLayer

CHUNKS = [{"chunk_id": "c1-p1", "doc_id": "c1", "page": 1, "text": "Revenue was 1,200.5 RMB 10k. Margin was 7%."},
          {"chunk_id": "c2-p3", "doc_id": "c2", "page": 3, "text": "毛利率为14.4%。存货周转天数为16.5天。"}]


def _step(batch: int, tokens: int, start: float) -> torch.Tensor:
    return torch.arange(start, start + batch * 2 * tokens * 3, dtype=torch.float32).reshape(batch, 2, tokens, 3)


def test_a_growing_layer_holds_what_a_dynamic_layer_holds_through_growth_and_row_selection():
    """Steps written in place, a step beyond the spare room (the buffer grows), rows leaving: after each, the keys
    and values equal those of transformers' `DynamicLayer`, which concatenates."""
    from transformers.cache_utils import DynamicLayer

    growing, plain = GrowingLayer(reserve=3), DynamicLayer()
    steps = [_step(4, 5, 0), _step(4, 1, 100), _step(4, 2, 200), _step(4, 1, 300)]  # 5 + 1 + 2 fill the room; then grow
    for k, step in enumerate(steps):
        got, want = growing.update(step, -step), plain.update(step, -step)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert growing.get_seq_length() == plain.get_seq_length()
        if k == 1:
            keep = torch.tensor([0, 2])
            growing.batch_select_indices(keep)
            plain.batch_select_indices(keep)
            steps[2:] = [s[:2] for s in steps[2:]]
    assert growing._k.shape[-2] == 8 + 1 + 3  # grown once, when the fourth step did not fit: filled + step + reserve


def test_the_first_update_allocates_the_prompt_and_the_reserve():
    cache = GrowingCache(num_layers=2, reserve=7)
    keys, values = cache.update(_step(3, 4, 0), _step(3, 4, 50), 0)
    assert keys.shape == (3, 2, 4, 3) and cache.layers[0]._k.shape == (3, 2, 11, 3)
    assert cache.get_seq_length(0) == 4 and cache.get_seq_length(1) == 0
    assert torch.equal(cache.layers[0].values, _step(3, 4, 50))


@pytest.mark.parametrize("jump_forward", [False, True])
def test_decoding_with_the_growing_cache_gives_the_tokens_of_dynamic_cache(tiny_dir, jump_forward):
    """The loop's own cache against transformers' `DynamicCache`, one left-padded batch whose rows leave at
    different steps, under the answer grammar: the same tokens, row by row."""
    engine = Engine(tiny_dir)
    convs = [prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(q, CHUNKS)) for q in ("Revenue?", "毛利率?", "Days?")]
    encoded = [engine.encode(c) for c in convs]
    width = max(map(len, encoded))
    ids = torch.tensor([[engine.tok.pad_token_id] * (width - len(e)) + e for e in encoded])
    mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in encoded])
    compiled = [engine.grammars.compiled(answer_schema(CHUNKS, True))] * len(convs)
    growing = decode_under_grammar(engine.model, ids, mask, compiled, 60, jump_forward)
    plain = decode_under_grammar(engine.model, ids, mask, compiled, 60, jump_forward,
                                 cache=DynamicCache(config=engine.model.config))
    assert growing == plain and any(growing)
