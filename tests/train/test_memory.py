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
