import json

import pytest
import torch
from tests.helpers.namesakes import EQUITY_ROWS, asking, saying

from clap.domain import prompts
from clap.evaluate.generate import (
    Engine,
    Sampling,
    json_end,
    pick_tokens,
    plain_generate_loop,
    sampling_scores,
    truncate_at_json_end,
)
from clap.model import load_model, load_tokenizer


@pytest.mark.parametrize("text, end", [('{"a": 1} tail', 8), ('x {"a": "}"} y', 12), ('{"a": {"b": 2}}', 15),
                                       ('{"a": 1', None), ("no json", None), ('{"s": "\\"}"}z', 12)])
def test_json_end(text, end):
    assert json_end(text) == end


def test_batched_engine_matches_plain_loop(tiny_dir):
    convs = [prompts.messages(prompts.system_extract(["万元", "%"]), q) for q in
             ["Source:\nRevenue was 5.", "Source:\nA much longer source text, with several clauses; " * 4 + "\nQuestion: x",
              "短的问题？", "Question: what?", "Source:\n" + "数字 1,234.5 万元。" * 3]]
    engine = Engine(tiny_dir)
    got = [g.text for g in engine.generate(convs, use_adapter=False, max_new_tokens=12, batch_size=3, progress=False)]
    ref = plain_generate_loop(load_model(tiny_dir), load_tokenizer(tiny_dir), convs, max_new_tokens=12)
    assert got == ref
    assert got == [truncate_at_json_end(t) for t in got]


INF = float("-inf")


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 50, 1.0), (0.7, 3, 1.0), (1.3, 0, 0.9), (0.5, 4, 0.6),
                                                        (1.0, 1, 1.0), (2.0, 100, 0.3)])
def test_sampling_scores_are_transformers_warpers_in_generates_order(temperature, top_k, top_p):
    """Temperature, top-k, top-p as `generate(do_sample=True)` chains them after xgrammar's mask (-inf where the
    grammar forbids), on rows with masked tokens and ties."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(4, 64)
    logits[0, 10:] = INF  # a grammar that allows ten tokens
    logits[1, ::2] = INF
    logits[2, :5] = 3.0  # ties at the top
    want = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k:
        want = TopKLogitsWarper(top_k)(None, want)
    if top_p < 1.0:
        want = TopPLogitsWarper(top_p)(None, want)
    got = sampling_scores(logits, Sampling(temperature, top_k, top_p))
    assert torch.equal(got.isinf(), want.isinf()) and torch.allclose(got[~got.isinf()], want[~want.isinf()])


@pytest.mark.parametrize("logits, sampling, allowed", [
    ([[0.0, 2.0, 1.0]], None, {1}),                                   # greedy: the argmax
    ([[0.0, 2.0, 1.0]], Sampling(5.0, top_k=1), {1}),                 # top-k 1 is greedy at any temperature
    ([[INF, 0.0, INF, 0.0]], Sampling(1.0), {1, 3}),                  # what the grammar masks is never drawn
    ([[2.0, 1.3, 0.2]], Sampling(1.0, top_p=0.5), {0}),               # the nucleus of 0.5 is the top token alone
    ([[2.0, 1.3, 0.2]], Sampling(1.0, top_p=0.8), {0, 1}),            # 0.60 + 0.30 reach 0.8: the 0.10 goes
])
def test_pick_tokens_draws_only_what_the_rules_allow(logits, sampling, allowed):
    torch.manual_seed(1)
    drawn = {pick_tokens(torch.tensor(logits), sampling)[0] for _ in range(200)}
    assert drawn == allowed


def test_pick_tokens_draws_follow_the_tempered_distribution():
    probs = torch.tensor([0.5, 0.3, 0.2])
    torch.manual_seed(2)
    for temperature in (1.0, 0.5):
        want = (probs ** (1 / temperature)) / (probs ** (1 / temperature)).sum()
        drawn = pick_tokens(probs.log().repeat(4000, 1), Sampling(temperature))
        freq = torch.bincount(torch.tensor(drawn), minlength=3) / 4000
        assert torch.allclose(freq, want, atol=0.03), (temperature, freq, want)


ENUM_SCHEMA = {"type": "object", "properties": {"pick": {"enum": ["alpha", "beta", "gamma", "delta"]}},
               "required": ["pick"], "additionalProperties": False}


def test_sampled_answers_under_a_grammar_run_in_the_engines_loop(tiny_dir, monkeypatch):
    """Sampled rows decode in `decode_under_grammar` (not `generate`): every answer completes its grammar, a seed
    repeats the draws, draws differ across rows, and top-k 1 gives the greedy answers."""
    import json

    from transformers import GenerationMixin

    monkeypatch.setattr(GenerationMixin, "generate", lambda *a, **k: pytest.fail("generate() was called"))
    engine = Engine(tiny_dir)
    convs = [prompts.messages(prompts.system_extract(["万元", "%"]), f"Question {i}: pick one.") for i in range(12)]

    def sampled(seed: int) -> list[str]:
        torch.manual_seed(seed)
        return [g.text for g in engine.generate(convs, use_adapter=False, max_new_tokens=24, batch_size=5,
                                                progress=False, schemas=[ENUM_SCHEMA] * len(convs), temperature=1.0)]

    first = sampled(3)
    assert all(json.loads(t)["pick"] in ENUM_SCHEMA["properties"]["pick"]["enum"] for t in first), first
    assert sampled(3) == first and len({json.loads(t)["pick"] for t in first}) > 1
    greedy = [g.text for g in engine.generate(convs, use_adapter=False, max_new_tokens=24, batch_size=5, progress=False,
                                              schemas=[ENUM_SCHEMA] * len(convs))]
    engine.model.generation_config.top_k = 1
    assert sampled(4) == greedy


def test_a_seeded_draw_is_the_requests_own_whatever_the_batch(tiny_dir):
    """A per-request seed (`Engine.generate(seed=)`): a request draws the same answer alone, in any batch and in any
    order, whatever the global RNG does; another seed draws other answers; a seed without sampling or a grammar is
    refused."""
    import json

    engine = Engine(tiny_dir)
    convs = [prompts.messages(prompts.system_extract(["万元", "%"]), f"Question {i}: pick one.") for i in range(10)]

    def sampled(rows, seed, batch_size):
        torch.manual_seed(len(rows) * 7 + batch_size)  # the global RNG moves: seeded draws must not follow it
        return [g.text for g in engine.generate([convs[i] for i in rows], use_adapter=False, max_new_tokens=24,
                                                batch_size=batch_size, progress=False,
                                                schemas=[ENUM_SCHEMA] * len(rows), temperature=1.0, seed=seed)]

    batched = sampled(range(10), 5, 4)
    assert all(json.loads(t)["pick"] in ENUM_SCHEMA["properties"]["pick"]["enum"] for t in batched)
    assert sampled(range(10), 5, 10) == batched
    assert sampled([7, 3, 0], 5, 2) == [batched[7], batched[3], batched[0]]
    assert sampled([4], 5, 1) == [batched[4]]
    assert sampled(range(10), 6, 4) != batched
    for bad in ({"temperature": 0.0, "schemas": [ENUM_SCHEMA]}, {"temperature": 1.0}):
        with pytest.raises(ValueError, match="per-request seed"):
            engine.generate(convs[:1], use_adapter=False, progress=False, seed=1, **bad)


def test_sample_under_grammar_says_which_completions_closed(tiny_dir):
    """GRPO's rollouts: a completion that closed its grammar before the cap is marked closed (the stage then adds the
    end-of-turn token), one cut at the cap is not."""
    import json

    from clap.evaluate.generate import sample_under_grammar

    engine = Engine(tiny_dir)
    encoded = [engine.encode(prompts.messages(prompts.system_extract(["万元", "%"]), f"Question {i}: pick one.")) for i in range(4)]
    compiled = [engine.grammars.compiled(ENUM_SCHEMA)] * len(encoded)
    torch.manual_seed(0)
    whole = sample_under_grammar(engine.model, encoded, compiled, 24, 1.0, engine.tok.pad_token_id)
    assert all(closed and json.loads(engine.tok.decode(row))["pick"] for row, closed in whole)
    cut = sample_under_grammar(engine.model, encoded, compiled, 2, 1.0, engine.tok.pad_token_id)
    assert all(len(row) == 2 and not closed for row, closed in cut)


@pytest.mark.parametrize("jump_forward", [False, True])
def test_the_evidence_names_the_metric_the_answer_wrote_in_one_pass(tiny_dir, jump_forward):
    """`generate.evidence_names_metric`: once the metric is written the grammar narrows to the rows naming it; the
    answer is the one the same model gives under the narrowed schema from the start (greedy: the head is written
    under the same grammar), and without the setting the grammar is the sources' own."""
    from clap.evaluate.decoding import naming_alternatives

    metrics = ("Total equity", "Total assets", "Net income")
    schemas, convs = [saying(m) for m in metrics], [asking(m) for m in metrics]
    engine = Engine(tiny_dir, jump_forward=jump_forward, evidence_names_metric=True)
    narrowed = [g.text for g in engine.generate(convs, use_adapter=False, max_new_tokens=120, batch_size=3,
                                                progress=False, schemas=schemas, use_store=False)]
    engine.evidence_names_metric = False
    fixed = [naming_alternatives(s, m) or s for s, m in zip(schemas, metrics)]
    assert narrowed == [g.text for g in engine.generate(convs, use_adapter=False, max_new_tokens=120, batch_size=3,
                                                        progress=False, schemas=fixed, use_store=False)]
    evidence = [json.loads(t)["evidence"] for t in narrowed]
    assert evidence[0] in EQUITY_ROWS and evidence[1].startswith("Total assets | ")
    free = [json.loads(g.text)["evidence"] for g in engine.generate(convs, use_adapter=False, max_new_tokens=120,
                                                                    batch_size=3, progress=False, schemas=schemas,
                                                                    use_store=False)]
    assert free[0] not in EQUITY_ROWS and free[2] == evidence[2]  # the grammar as given quotes elsewhere; a metric
                                                                    # no quote names leaves the answer as it was
    without = engine.decoding_id(False)
    engine.evidence_names_metric = True
    assert engine.decoding_id(False) != without  # the answer store keeps the two apart
    assert "evidence-names-metric" not in engine.decoding_id(False, scoring=True)  # a score reads a given answer
