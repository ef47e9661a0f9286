"""Trainers on a tiny random model: LoRA weights change, base weights do not, guards stop, resume works."""

import copy
import json
import math
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import TrainerCallback

from clap.data.admission import NotAdmitted
from clap.model import identity
from clap.stages import train_dpo, train_grpo, train_sft


def tiny_cfg(params, **sft):
    cfg = copy.deepcopy(params)
    cfg.train.sft = cfg.train.sft.model_copy(update={"max_steps": 3, "logging_steps": 1, "save_steps": 2, "per_device_batch_size": 2,
                                "gradient_accumulation": 1, **sft})
    cfg.train.dpo = cfg.train.dpo.model_copy(update=dict(max_steps=2))
    cfg.train.grpo = cfg.train.grpo.model_copy(update=dict(max_steps=2, num_generations=2, per_device_batch_size=2, max_completion_length=8))
    return cfg


def base_weights(path):
    return load_file(str(path / "model.safetensors"))


def assert_lora_trained(out, tiny_dir, before):
    adapter = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b), "LoRA B matrices start at zero and must move"
    after = base_weights(tiny_dir)
    assert all(torch.equal(before[k], after[k]) for k in before), "base weights must not change"
    assert not list((out / "adapter").glob("*.bin")) and (out / "adapter" / "manifest.json").exists()
    card = (out / "adapter" / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "peft" and "base_model" not in front  # a local folder is no Hub repository
    assert f"Base model: {identity(tiny_dir)['hub_id']} (a local folder)" in card
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == identity(tiny_dir)["hub_id"] != str(tiny_dir)


@pytest.mark.parametrize("bf16", ["off", "on"])
def test_sft_changes_lora_not_base(bf16, params, small_loop, tiny_dir, tmp_path):
    before = base_weights(tiny_dir)
    cfg = tiny_cfg(params)
    cfg.train.sft.bf16 = bf16  # bf16 autocast: the master weights, and the saved adapter, stay fp32
    m = train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir,
                      tmp_path / "sft", tmp_path / "ckpt")
    assert m["steps"] >= 2 and m["status"] == "ok" and m["bf16"] is (bf16 == "on")
    assert_lora_trained(tmp_path / "sft", tiny_dir, before)
    assert {t.dtype for t in load_file(tmp_path / "sft" / "adapter" / "adapter_model.safetensors").values()} \
        == {torch.float32}
    report = json.loads((tmp_path / "sft" / "guard_report.json").read_text())
    assert report["status"] == "ok" and report["trainer"] == "sft"
    assert (tmp_path / "sft" / "train_log.csv").read_text().startswith("step,")


class AtStart(TrainerCallback):
    """Keeps the trained ("default") and reference ("ref") LoRA weights as training begins."""

    def on_train_begin(self, args, state, control, model=None, **kw):
        self.default = {k: v.detach().clone() for k, v in model.named_parameters() if ".default." in k}
        self.ref = {k.replace(".ref.", ".default."): v.detach().clone() for k, v in model.named_parameters()
                    if ".ref." in k}


def _peft_key(name):
    """A PEFT parameter name (…lora_A.default.weight) as the saved adapter writes it (…lora_A.weight)."""
    return name.replace(".default.", ".")


@pytest.mark.parametrize("trainer, kind", [(train_dpo, "dpo"), (train_grpo, "grpo")])
def test_chain_step_starts_from_sft_and_moves_only_lora(trainer, kind, params, small_loop, tiny_dir, sft_start, tmp_path):
    """Step 0 = the SFT adapter (trained and reference copies); after training the LoRA moved, the base did not."""
    cfg = tiny_cfg(params)
    cfg.train.guards = cfg.train.guards.model_copy(update=dict(kl_max=1e9, kl_spike_ratio=1e9, reward_collapse_std=-1.0, max_clipped_ratio=1.1))
    before = base_weights(tiny_dir)
    sft_adapter, sft_manifest = sft_start
    sft = load_file(str(sft_adapter / "adapter_model.safetensors"))
    # a random model earns the same decision reward for every completion (zero advantage, no update);
    # a length reward gives GRPO a signal to move on
    extra = {"reward_funcs": [lambda completions, **_: [float(len(str(c))) for c in completions]],
             "rewards": cfg.rewards, "constrained": cfg.generate.constrained,
             "action_playbook": cfg.evaluate_decisions.action_playbook} if kind == "grpo" else {}
    start = AtStart()
    m = trainer.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, tmp_path / kind,
                    tmp_path / "ckpt", start_adapter=sft_adapter, start_expected=sft_manifest, callbacks=[start], **extra)
    assert m["steps"] >= 2 and m["status"] == "ok"
    assert m["start_adapter_sha256"] == sft_manifest["files"]["adapter_model.safetensors"]
    assert start.default and start.default.keys() == start.ref.keys()
    for name, w in start.default.items():
        assert torch.equal(w.cpu(), sft[_peft_key(name)]), f"{name}: step 0 is not the SFT adapter"
        assert torch.equal(start.ref[name], w), f"{name}: the reference is not the SFT policy"
    trained = load_file(str(tmp_path / kind / "adapter" / "adapter_model.safetensors"))
    assert trained.keys() == sft.keys(), "the step saves one adapter in the SFT adapter's shape (no ref copy)"
    assert any(not torch.equal(trained[k], sft[k]) for k in sft), "the step must move the LoRA weights"
    assert_lora_trained(tmp_path / kind, tiny_dir, before)
    assert json.loads((tmp_path / kind / "guard_report.json").read_text())["status"] == "ok"


def test_chain_step_refuses_a_tampered_start(params, small_loop, tiny_dir, sft_start, tmp_path):
    from clap.integrity import AdapterRefused

    sft_adapter, manifest = sft_start
    forged = {**manifest, "files": {**manifest["files"], "adapter_model.safetensors": "0" * 64}}
    with pytest.raises(AdapterRefused, match="adapter_model.safetensors"):
        train_dpo.run(tiny_cfg(params).train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir,
                      tmp_path / "o", tmp_path / "c", start_adapter=sft_adapter, start_expected=forged)
    assert not (tmp_path / "o").exists()


class Inject(TrainerCallback):
    """Overwrites a logged value at one step, as a real spike or NaN would appear."""

    def __init__(self, key, value, at_step):
        self.key, self.value, self.at_step = key, value, at_step

    def on_log(self, args, state, control, logs=None, **kw):
        if logs is not None and state.global_step == self.at_step and "train_loss" not in logs:
            logs[self.key] = self.value


@pytest.mark.parametrize("key, value, rule", [("loss", math.nan, "non_finite:loss"), ("loss", math.inf, "non_finite:loss")])
def test_guard_stops_sft_on_nan_within_one_logging_step(key, value, rule, params, small_loop, tiny_dir, tmp_path):
    cfg = tiny_cfg(params, max_steps=6)
    m = train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, tmp_path / "o",
                      tmp_path / "c", callbacks=[Inject(key, value, 3)])
    report = json.loads((tmp_path / "o" / "guard_report.json").read_text())
    assert report["status"] == "stopped" and report["trip"]["rule"] == rule and report["trip"]["step"] == 3
    assert m["steps"] == 3, "stopped on the logging step that tripped"
    assert report["last_good_checkpoint"].endswith("checkpoint-2") and m["adapter_source"].endswith("checkpoint-2")


def test_guard_stops_grpo_on_injected_kl_spike(params, small_loop, tiny_dir, sft_start, tmp_path):
    cfg = tiny_cfg(params)
    cfg.train.grpo = cfg.train.grpo.model_copy(update=dict(max_steps=4, save_steps=1))
    cfg.train.guards = cfg.train.guards.model_copy(update=dict(reward_collapse_std=-1.0, max_clipped_ratio=1.1))
    m = train_grpo.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, tmp_path / "o",
                       tmp_path / "c", start_adapter=sft_start[0], start_expected=sft_start[1],
                       callbacks=[Inject("kl", 6712.0, 2)], rewards=cfg.rewards, constrained=cfg.generate.constrained, action_playbook=cfg.evaluate_decisions.action_playbook)
    report = json.loads((tmp_path / "o" / "guard_report.json").read_text())
    assert report["trip"]["rule"] == "kl_above_max" and report["trip"]["value"] == 6712.0
    assert m["steps"] == 2 and report["peaks"]["kl"] == 6712.0
    assert report["last_good_checkpoint"].endswith("checkpoint-1") and m["adapter_source"].endswith("checkpoint-1")


class Kill(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if state.global_step == 3:
            raise KeyboardInterrupt("simulated kill")


def test_killed_run_resumes_from_last_checkpoint(params, small_loop, tiny_dir, tmp_path):
    cfg = tiny_cfg(params, max_steps=4)
    with pytest.raises(KeyboardInterrupt):
        train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, tmp_path / "o",
                      tmp_path / "c", callbacks=[Kill()])
    assert not (tmp_path / "o").exists(), "a killed run leaves no output DVC would accept"
    m = train_sft.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, tmp_path / "o",
                      tmp_path / "c")
    assert m["resumed_from"].endswith("checkpoint-2") and m["steps"] == 4
    log = (tmp_path / "o" / "train_log.csv").read_text().splitlines()
    assert [int(line.split(",")[0]) for line in log[1:]][-2:] == [3, 4]


def test_a_run_already_at_its_last_step_is_taken_not_trained_again(params, small_loop, tiny_dir, tmp_path):
    """The demo's round 3: its admitted data equal round 2's, so the run key matches a checkpoint that already
    holds the last step. The adapter is that checkpoint's, byte for byte — the answers stored for it stay valid."""
    cfg = tiny_cfg(params, max_steps=2, save_steps=2)
    args = (small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir)
    first = train_sft.run(cfg.train, *args, tmp_path / "o1", tmp_path / "c")
    again = train_sft.run(cfg.train, *args, tmp_path / "o2", tmp_path / "c")
    assert first["steps"] == 2 and again["resumed_from"].endswith("checkpoint-2") and again["steps"] == 2
    assert first["tokens_per_s"] > 0 and again["tokens_per_s"] is None  # nothing trained the second time
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert (tmp_path / "o1" / "adapter" / name).read_bytes() == (tmp_path / "o2" / "adapter" / name).read_bytes()
    # across processes too: PEFT keeps target_modules as a set, whose order follows the interpreter's hash seed
    modules = json.loads((tmp_path / "o2" / "adapter" / "adapter_config.json").read_text())["target_modules"]
    assert modules == sorted(modules) and len(modules) > 1


def test_blocked_batch_is_refused(params, small_loop, tiny_dir, tmp_path):
    rec = json.loads((small_loop / "admission" / "b1.json").read_text())
    blocked = tmp_path / "admission"
    blocked.mkdir()
    (blocked / "b1.json").write_text(json.dumps(rec | {"decision": "block", "trainable": [],
                                                       "reasons": ["train_eval_overlap=4 violates <= 0 → block"]}))
    with pytest.raises(NotAdmitted, match="train_eval_overlap=4"):
        train_sft.run(tiny_cfg(params).train, small_loop / "materialized", blocked, ["b1"], tiny_dir, tmp_path / "o",
                      tmp_path / "c")


def test_checkpoints_of_another_config_are_not_resumed(params, small_loop, tiny_dir, tmp_path):
    args = (small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, tmp_path / "o", tmp_path / "c")
    first = train_sft.run(tiny_cfg(params, max_steps=2, save_steps=1).train, *args)
    again = train_sft.run(tiny_cfg(params, max_steps=3, save_steps=1).train, *args)
    assert first["steps"] == 2 and again["resumed_from"] is None and again["steps"] == 3


def test_a_chain_step_tripped_before_its_first_checkpoint_keeps_the_sft_policy(params, small_loop, tiny_dir,
                                                                               sft_start, tmp_path):
    """The paper's pattern, early: KL spikes at step 1, before any checkpoint; the step writes the SFT
    adapter it started from (the last policy known good), never the tripped weights."""
    cfg = tiny_cfg(params)
    cfg.train.grpo = cfg.train.grpo.model_copy(update=dict(max_steps=4, save_steps=4))
    cfg.train.guards = cfg.train.guards.model_copy(update=dict(reward_collapse_std=-1.0, max_clipped_ratio=1.1))
    m = train_grpo.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, tmp_path / "o",
                       tmp_path / "c", start_adapter=sft_start[0], start_expected=sft_start[1],
                       callbacks=[Inject("kl", 168.2, 1)], rewards=cfg.rewards, constrained=cfg.generate.constrained, action_playbook=cfg.evaluate_decisions.action_playbook)
    assert m["status"] == "stopped" and m["steps"] == 1 and m["adapter_source"].startswith("start")
    written = (tmp_path / "o" / "adapter" / "adapter_model.safetensors").read_bytes()
    assert written == (sft_start[0] / "adapter_model.safetensors").read_bytes()


def test_grpo_rollouts_sample_under_the_decision_schema(params, small_loop, tiny_dir, sft_start, tmp_path):
    """With constrained rollouts even a random policy writes decisions: a JSON object whose action is one of
    the playbook's, whose cause is one of its case's cause fields."""
    from clap.data.playbook import playbook
    from clap.domain.prompts import RISK_FOCUS, decision_cause_fields

    cfg = tiny_cfg(params)
    cfg.train.grpo = cfg.train.grpo.model_copy(update=dict(max_completion_length=160, max_steps=1))
    cfg.train.guards = cfg.train.guards.model_copy(update=dict(kl_max=1e9, kl_spike_ratio=1e9, reward_collapse_std=-1.0, max_clipped_ratio=1.1))
    seen = []

    def record(completions, prompts, **_):
        seen.extend((c[-1]["content"], decision_cause_fields(p[-1]["content"])) for c, p in zip(completions, prompts))
        return [float(len(c[-1]["content"])) for c in completions]

    sft_adapter, manifest = sft_start
    m = train_grpo.run(cfg.train, small_loop / "materialized", small_loop / "admission", ["b1"], tiny_dir, tmp_path / "g",
                       tmp_path / "ckpt", start_adapter=sft_adapter, start_expected=manifest, reward_funcs=[record], rewards=cfg.rewards, constrained=cfg.generate.constrained, action_playbook=cfg.evaluate_decisions.action_playbook)
    actions = playbook({"b1": small_loop / "materialized" / "b1" / "decision_eval.jsonl"})
    assert m["constrained_rollouts"] is True and m["playbook_actions"] == len(actions) > 0
    parsed = [(json.loads(text), causes) for text, causes in seen]
    assert len(parsed) == 2 and all(p["action"] in actions and p["risk_focus"] in RISK_FOCUS and p["cause"] in causes
                                    for p, causes in parsed)


@pytest.mark.parametrize("kind, switch", [("dpo", ("train", "dpo")), ("grpo", ("train", "grpo")),
                                          ("agent-dpo", ("agent", "dpo")), ("agent-grpo", ("agent", "grpo"))])
def test_a_disabled_chain_step_trains_nothing_and_says_so(kind, switch, params, tmp_path, monkeypatch):
    """`enabled: false` is obeyed by the trainer itself (not only by evaluation and the gate): no model is
    loaded, no adapter written; the outputs DVC expects exist and say `disabled`."""
    from typer.testing import CliRunner

    from clap.cli import app

    cfg = copy.deepcopy(params)
    getattr(getattr(cfg, switch[0]), switch[1]).enabled = False
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(cfg.as_yaml_dict(), sort_keys=False))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["train", kind], catch_exceptions=False)
    name = kind.replace("-", "_")
    assert r.exit_code == 0 and f"{switch[0]}.{switch[1]}.enabled is false" in r.output
    folder = tmp_path / "models" / name
    assert json.loads((folder / "guard_report.json").read_text())["status"] == "disabled"
    assert not (folder / "adapter").exists() and not (tmp_path / "models" / "checkpoints").exists()
    assert json.loads((tmp_path / "metrics" / f"train_{name}.json").read_text())["status"] == "disabled"
    assert (tmp_path / "metrics" / "dvclive" / name / "metrics.json").read_text() == "{}\n"  # the declared outputs


def test_a_switched_off_stage_does_not_import_the_training_stack(params, tmp_path):
    """A disabled trainer or agent stage runs in every round of `dvc repro`; importing torch, PEFT and TRL costs
    ≈ 13 s of a 2-core machine each time, for nothing. A fresh interpreter runs the switched-off commands and
    reports which of those libraries it loaded."""
    cfg = copy.deepcopy(params)
    cfg.train.dpo.enabled = False
    cfg.agent.enabled = False
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(cfg.as_yaml_dict(), sort_keys=False))
    script = """
import sys
from typer.testing import CliRunner
from clap.cli import app
for argv in (["train", "dpo"], ["train", "agent-sft"], ["agent-tasks"], ["agent-pairs"], ["evaluate-agent"]):
    r = CliRunner().invoke(app, argv, catch_exceptions=False)
    assert r.exit_code == 0 and "disabled" in r.output, (argv, r.output)
print(sorted(m for m in ("torch", "transformers", "peft", "trl") if m in sys.modules))
"""
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_a_guard_that_stopped_training_is_named_on_the_command_line(capsys):
    """`clap train …` says which guard stopped the step, with its value and threshold, and which adapter it kept."""
    from clap.cli.train import _say_trained

    m = {"status": "stopped", "steps": 1, "train_loss": -0.01, "tokens_per_s": 68.0,
         "adapter_source": "start (models/agent_sft/adapter): tripped before the first checkpoint"}
    _say_trained("agent-rloo", m, {"rule": "completion_length_clipped", "step": 1, "value": 1.0, "threshold": 0.8})
    out = capsys.readouterr()
    said = " ".join((out.out + out.err).split())
    assert "agent-rloo: stopped after 1 steps" in said
    assert "guard completion_length_clipped tripped at step 1 (value 1.0, threshold 0.8)" in said
    assert "adapter: start (models/agent_sft/adapter)" in said
    _say_trained("agent-rloo", m | {"status": "ok", "adapter_source": "final"})
    out = capsys.readouterr()
    assert "guard" not in out.out + out.err
