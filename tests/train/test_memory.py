"""`clap.train.memory`: the estimate's parts as table tests, and the estimate checked against a tiny model's
measured footprint (weights and adapter exactly, activations within a stated band)."""

import pytest

from clap.train.memory import GIB, PUBLISHED, Shape, estimate, lora_params, measure_tiny

TINY = Shape(vocab=512, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=128, tied=True)


def test_published_shapes_count_the_parameters_their_model_cards_state():
    # SmolLM2-135M: 134.5M parameters; Qwen2.5-3B: 3.09B; Llama-3.1-8B: 8.03B (tied and untied heads alike)
    assert PUBLISHED["HuggingFaceTB/SmolLM2-135M-Instruct"].parameters() == pytest.approx(134.5e6, rel=0.01)
    assert PUBLISHED["Qwen/Qwen2.5-3B-Instruct"].parameters() == pytest.approx(3.09e9, rel=0.02)
    assert PUBLISHED["meta-llama/Llama-3.1-8B-Instruct"].parameters() == pytest.approx(8.03e9, rel=0.01)


@pytest.mark.parametrize("qlora, bf16, dtype_bytes", [(True, True, 2), (False, True, 2), (False, False, 4)])
def test_weights_are_four_bit_only_for_the_decoder_projections(qlora, bf16, dtype_bytes):
    shape = PUBLISHED["meta-llama/Llama-3.1-8B-Instruct"]
    parts = estimate(shape, lora_r=16, batch=1, seq_len=1, qlora=qlora, bf16=bf16, overhead=0)
    projections = shape.layers * shape.layer_projection_params()
    per_weight = 0.5 + 0.127 / 8 if qlora else dtype_bytes
    assert parts["weights"] == pytest.approx(projections * per_weight + shape.other_params() * dtype_bytes)
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))


@pytest.mark.parametrize("profile", ["qwen2.5-3b-qlora", "llama3.1-8b-qlora"])
def test_the_qlora_profiles_fit_the_24_gb_gpu_they_name(profile):
    from pathlib import Path

    from clap.config import compose

    cfg = compose([f"model={profile}"], conf=Path(__file__).resolve().parents[2] / "conf")
    s, base = cfg["train"]["sft"], cfg["model"]["base"]
    assert s["qlora"] is True and "24 GB" in (Path(__file__).resolve().parents[2] / f"conf/model/{profile}.yaml").read_text()
    need = estimate(PUBLISHED[base], lora_r=s["lora_r"], batch=s["per_device_batch_size"], seq_len=s["max_length"],
                    qlora=True, bf16=True, checkpointing=s["gradient_checkpointing"])["total"]
    assert need < 24 * GIB
    plain = estimate(PUBLISHED[base], lora_r=s["lora_r"], batch=s["per_device_batch_size"], seq_len=s["max_length"],
                     qlora=False, bf16=True)["total"]
    assert plain > 24 * GIB  # bf16 LoRA without checkpointing would not: what the recipe's settings are for


def test_checkpointing_keeps_one_layer_and_every_layers_input():
    shape = PUBLISHED["Qwen/Qwen2.5-3B-Instruct"]
    full = estimate(shape, lora_r=16, batch=1, seq_len=100, qlora=False, bf16=True, overhead=0)["activations"]
    kept = estimate(shape, lora_r=16, batch=1, seq_len=100, qlora=False, bf16=True, checkpointing=True,
                    overhead=0)["activations"]
    logits = 100 * shape.vocab * (2 + 4 + 4)
    per_layer = (full - logits) / shape.layers
    assert kept == pytest.approx(logits + per_layer + 100 * shape.layers * shape.hidden * 2)


def test_lora_parameters_count_r_times_in_plus_out_per_target():
    assert lora_params(TINY, 8, ["q_proj"]) == 2 * 8 * (64 + 64)
    assert lora_params(TINY, 8) == 2 * 8 * sum(a + b for a, b in TINY.projections().values())


def test_the_estimate_matches_a_tiny_models_measured_footprint():
    measured = measure_tiny(TINY, lora_r=8, batch=2, seq_len=48)
    estimated = estimate(TINY, lora_r=8, batch=2, seq_len=48, qlora=False, bf16=False, overhead=0)
    assert estimated["weights"] == measured["weights"]      # every base tensor, fp32
    assert estimated["adapter"] == measured["adapter"]      # LoRA weights, gradients, AdamW's two moments
    assert 0.75 <= estimated["activations"] / measured["activations"] <= 1.33  # what autograd saved


def _plan(available, per_token=1.0, per_labelled=0.0):
    from clap.train.memory import MicroBatchPlan

    return MicroBatchPlan(budget_mb=1024, available=available, per_token=per_token, per_labelled=per_labelled,
                          checkpointing=False)


@pytest.mark.parametrize("lengths, labelled, available, per_labelled, groups", [
    ([5, 4, 8, 12], [2, 2, 2, 2], 1000, 0.0, [[3, 2, 0, 1]]),           # all fit: one group, longest first
    ([5, 4, 8, 12], [2, 2, 2, 2], 13, 0.0, [[3], [2], [0, 1]]),         # 2 × 5 = 10 fits, 8 + 8 = 16 does not
    ([30, 4], [1, 1], 10, 0.0, [[0], [1]]),                            # a row over the budget is a group of its own
    ([6, 6, 6], [0, 0, 0], 12, 0.0, [[0, 1], [2]]),                    # padded cost: rows × the longest row
    ([6, 6, 6], [4, 4, 4], 12, 1.0, [[0], [1], [2]]),                  # labelled tokens pay for the LM head too
    ([7, 3, 7], [1, 1, 1], 14, 0.0, [[0, 2], [1]]),                    # equal lengths keep their order
    ([], [], 10, 0.0, []),
])
def test_micro_batches_fill_the_budget_longest_first(lengths, labelled, available, per_labelled, groups):
    from clap.train.memory import micro_batches

    assert micro_batches(lengths, labelled, _plan(available, per_labelled=per_labelled)) == groups


def test_every_row_is_in_exactly_one_micro_batch():
    import random

    from clap.train.memory import micro_batches

    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 12)
        lengths = [rng.randint(1, 50) for _ in range(n)]
        groups = micro_batches(lengths, [1] * n, _plan(rng.choice([1, 40, 120, 600])))
        assert sorted(i for g in groups for i in g) == list(range(n))


SMOL = PUBLISHED["HuggingFaceTB/SmolLM2-135M-Instruct"]


@pytest.mark.parametrize("budget_mb, max_length, asked, recomputes_long_rows", [
    (8192, 1024, False, False),    # a 1,024-token row fits: nothing is recomputed
    (3500, 2048, False, True),     # a 2,048-token row does not: some of its layers are, and only its
    (3500, 2048, True, True),      # asked for (or QLoRA): every layer of every micro-batch
])
def test_the_plan_recomputes_only_what_does_not_fit(budget_mb, max_length, asked, recomputes_long_rows):
    from clap.train.memory import micro_batch_plan, recompute

    plan = micro_batch_plan(SMOL, budget_mb, lora_r=16, weights_bytes=4, qlora=False, max_length=max_length,
                            checkpointing=asked)
    fixed = estimate(SMOL, lora_r=16, batch=0, seq_len=0, qlora=False, bf16=False)
    assert plan.available == pytest.approx(budget_mb * 2**20 - fixed["total"])
    assert plan.checkpointing is asked and plan.layers == SMOL.layers
    fits = plan.longest_without_recompute()
    long_layers = recompute([0], [max_length], [10], plan)
    short_layers = recompute([0], [min(fits, max_length) - 1], [0], plan)
    assert short_layers == (SMOL.layers if asked else 0)
    if asked:
        assert long_layers == SMOL.layers
    elif recomputes_long_rows:
        assert 0 < long_layers < SMOL.layers  # just enough: what the row holds with k layers recomputed fits
        held = max_length * (plan.per_token - long_layers * plan.saved_per_layer) + 10 * plan.per_labelled
        assert held <= plan.available < held + max_length * plan.saved_per_layer
        assert "recomputed" in plan.line("sft", max_length)
    else:
        assert long_layers == 0
    assert "memory budget" in plan.line("sft", max_length)


@pytest.mark.parametrize("over, tokens, saved, layers, expected", [
    (0.0, 10, 1.0, 30, 0),        # fits: none
    (1.0, 10, 1.0, 30, 1),        # a tenth of a layer's saving over: one layer
    (10.0, 10, 1.0, 30, 1),       # exactly one layer's saving
    (10.5, 10, 1.0, 30, 2),
    (1e9, 10, 1.0, 30, 30),       # never more than the model has
])
def test_recompute_takes_just_enough_layers(over, tokens, saved, layers, expected):
    from clap.train.memory import MicroBatchPlan, recompute

    plan = MicroBatchPlan(budget_mb=1024, available=100.0, per_token=(100.0 + over) / tokens, per_labelled=0.0,
                          checkpointing=False, layers=layers, saved_per_layer=saved)
    assert recompute([0], [tokens], [0], plan) == expected


def test_a_budget_below_the_weights_is_refused_with_what_they_take():
    from clap.train.memory import micro_batch_plan

    with pytest.raises(ValueError, match=r"memory_budget_mb 1024 is below .* \d+ MB"):
        micro_batch_plan(PUBLISHED["google/gemma-3-270m"], 1024, lora_r=16, weights_bytes=4, qlora=False,
                         max_length=1024, checkpointing=False)
