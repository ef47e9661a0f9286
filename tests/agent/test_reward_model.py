"""The reward model's scores read each state once and equal scoring every text whole."""

import pytest
import torch

from clap import model as base_model
from clap.agent import reward_model
from clap.config import AgentRmHuman


@pytest.fixture(scope="module")
def scorer(tiny_dir):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(reward_model.load_base(tiny_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="SEQ_CLS"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)  # a trained-looking adapter: B = 0 would make LoRA invisible
    return model.eval(), base_model.load_tokenizer(tiny_dir)


def test_state_scores_equal_whole_texts_and_read_each_state_once(scorer):
    model, tok = scorer
    eos = tok.eos_token
    state_a = reward_model.state_text(tok, [{"role": "user", "content": "Apex's net profit for FY2022?"}])
    state_b = reward_model.state_text(tok, [{"role": "user", "content": "Compare Apex and Boreal in FY2023."}])
    merged_state, merged_action = "The cat", "alog"  # the boundary tokens merge: scored whole
    merged = tok(merged_state + merged_action, add_special_tokens=False).input_ids
    assert merged[:2] != tok(merged_state, add_special_tokens=False).input_ids  # " cat" + "alog" → " catalog"
    rows = [(state_a, '{"name": "search_reports", "arguments": {"query": "Apex net profit 2022"}}' + eos),
            (state_a, '{"name": "finish", "arguments": {"answer": "1234.5"}}' + eos),
            (state_b, '{"name": "search_reports", "arguments": {"query": "Boreal"}}' + eos),
            (state_a, '{"name": "search_reports", "arguments": {"query": "Apex net profit 2022"}}' + eos),  # again
            (state_b, eos),  # nothing the head can read after the state: scored whole
            (merged_state, merged_action + eos)]
    states, actions = [s for s, _ in rows], [a for _, a in rows]
    calls = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: calls.append(kwargs["input_ids"].shape),
                                           with_kwargs=True)
    try:
        shared = reward_model.state_scores(model, tok, states, actions, batch_size=2)
    finally:
        hook.remove()
    whole = reward_model.scores(model, tok, [s + a for s, a in rows], batch_size=1)
    assert shared == pytest.approx(whole, abs=1e-4)
    assert shared[0] == shared[3] and len(set(round(x, 6) for x in shared)) >= 4
    # state a once + its two actions, state b once + its one readable action, then the two whole texts
    assert [c[0] for c in calls] == [1, 2, 1, 1, 2]
    assert calls[0][1] == len(tok(state_a, add_special_tokens=False).input_ids)


RULES = AgentRmHuman(min_labels=6, min_spearman=0.3, max_ece=0.2)


@pytest.mark.parametrize("scores, correct, passed, why", [
    ([0.1, 0.2, 0.3, 0.7, 0.8, 0.9], [0, 0, 0, 1, 1, 1], True, None),          # ranks and calibrates as people do
    ([0.1, 0.2, 0.3], [0, 0, 1], False, "3 labelled episodes, fewer than agent.rm.human.min_labels 6"),
    ([0.9, 0.8, 0.7, 0.3, 0.2, 0.1], [0, 0, 0, 1, 1, 1], False, "Spearman -0.87831 below"),  # ranks them backwards
    ([0.91, 0.92, 0.93, 0.97, 0.98, 0.99], [0, 0, 0, 1, 1, 1], False, "ECE 0.45 above agent.rm.human.max_ece"),
    ([0.5] * 6, [0, 0, 0, 1, 1, 1], False, "no spread to rank"),               # one score for all: ranks nothing
    ([], [], False, "0 labelled episodes"),                                    # no labels: fail closed
])
def test_the_reward_model_is_trusted_only_when_it_matches_people(scores, correct, passed, why):
    check = reward_model.human_check(scores, correct, RULES)
    assert check["passed"] is passed and check["n"] == len(scores)
    assert (check["why_not"] is None) if why is None else why in check["why_not"], check
