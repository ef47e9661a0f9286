"""The agent track's stages on a tiny random model: tasks, SFT on trajectories, evaluation."""

import copy
import json

import pytest
from rich.console import Console
from tests.stages.test_train import AtStart, _peft_key, assert_lora_trained, base_weights

from clap.agent import chat, report, reward_model, rewards, trl_rollout
from clap.agent.chat import CHAT_TEMPLATE
from clap.agent.tools import ReportTools
from clap.config import AgentRmHuman
from clap.evaluate.generate import Engine
from clap.evaluate.summary import agent_table
from clap.io import OUTPUT_MARKER, read_jsonl, write_jsonl
from clap.stages import (
    agent_pairs,
    agent_pass_k,
    agent_rm_check,
    agent_tasks,
    evaluate_agent,
    train_agent_dpo,
    train_agent_grpo,
    train_agent_rloo,
    train_agent_rm,
    train_agent_sft,
)


@pytest.fixture(scope="module")
def agent_cfg(params):
    cfg = copy.deepcopy(params)
    cfg.data.batches = ["b1", "b2"]
    cfg.agent.tasks = cfg.agent.tasks.model_copy(update=dict(max_tasks_per_batch={"train": 1, "eval": 1}))
    cfg.agent.sft = cfg.agent.sft.model_copy(update=dict(max_steps=3, logging_steps=1, save_steps=2, per_device_batch_size=2, gradient_accumulation=1))
    cfg.agent = cfg.agent.model_copy(update=dict(max_steps=3, turn_tokens=24, max_new_tokens=60))
    cfg.agent.evaluate = cfg.agent.evaluate.model_copy(update=dict(samples=2, pass_k=[1, 2], batch_size=8, max_tasks=None))
    cfg.agent.dpo = cfg.agent.dpo.model_copy(update=dict(mine_samples=1, max_steps=2, gradient_accumulation=1))
    cfg.evaluate.bootstrap = 50
    return cfg


@pytest.fixture(scope="module")
def tasks_dir(agent_cfg, small_loop, tmp_path_factory):
    out = tmp_path_factory.mktemp("agent") / "agent"
    agent_tasks.run(agent_cfg.agent.tasks, small_loop / "assets", agent_cfg.data.batches, out)
    return out


@pytest.fixture(scope="module")
def agent_adapter(agent_cfg, tasks_dir, tiny_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("agent_sft")
    before = base_weights(tiny_dir)
    metrics = train_agent_sft.run(agent_cfg.agent.sft, tasks_dir, tiny_dir, root / "agent_sft", root / "ckpt", train=agent_cfg.train)
    return root / "agent_sft", metrics, before


def test_agent_tasks_stage_writes_checked_tasks_and_a_report(tasks_dir):
    rows = read_jsonl(tasks_dir / "tasks.jsonl")
    report = json.loads((tasks_dir / "report.json").read_text())
    assert report["tasks"] == len(rows) and {"train", "eval"} == {t["split"] for t in rows}
    assert report["tools"] == list(ReportTools.NAMES) and report["batches"] == ["b1", "b2"]
    assert (tasks_dir / OUTPUT_MARKER).exists()  # a folder clap created, so the next run may replace it


def test_agent_sft_trains_lora_on_the_agents_turns_and_leaves_the_base(agent_adapter, tiny_dir):
    out, metrics, before = agent_adapter
    assert metrics["status"] == "ok" and metrics["steps"] == 3 and metrics["trajectories"] > 0
    assert 0 < metrics["assistant_tokens"] < metrics["tokens_seen"]
    assert_lora_trained(out, tiny_dir, before)
    assert "tool-calling-agent" in (out / "adapter" / "README.md").read_text()


def test_a_trajectory_over_max_length_is_set_aside_by_name(agent_cfg, tasks_dir, tiny_dir, tmp_path):
    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.sft = cfg.agent.sft.model_copy(update=dict(max_length=900, max_steps=1))
    metrics = train_agent_sft.run(cfg.agent.sft, tasks_dir, tiny_dir, tmp_path / "out", tmp_path / "ckpt", train=cfg.train)
    train = {t["task_id"]: t for t in read_jsonl(tasks_dir / "tasks.jsonl") if t["split"] == "train"}
    assert metrics["set_aside_too_long"] and set(metrics["set_aside_too_long"]) <= set(train)
    assert metrics["trajectories"] + len(metrics["set_aside_too_long"]) == len(train)


@pytest.fixture(scope="module")
def mined(agent_cfg, tasks_dir, agent_adapter, small_loop, tiny_dir, tmp_path_factory):
    import pandas as pd

    out, _, _ = agent_adapter
    adapter = out / "adapter"
    engine = Engine(tiny_dir, others=[("agent_sft", adapter, json.loads((adapter / "manifest.json").read_text()))],
                    chat_template=CHAT_TEMPLATE, tools=ReportTools.tool_schemas())
    tools = ReportTools(pd.read_parquet(small_loop / "assets" / "chunks.parquet"))
    pairs_dir = tmp_path_factory.mktemp("pairs") / "agent_pairs"
    return agent_pairs.run(agent_cfg.agent, tasks_dir, engine, tools, pairs_dir, constrained=agent_cfg.generate.constrained), pairs_dir


def test_agent_pairs_are_the_adapters_own_wrong_actions_against_gold(mined, tasks_dir):
    report, pairs_dir = mined
    pairs = read_jsonl(pairs_dir / "pairs.jsonl")
    train = {t["task_id"]: t for t in read_jsonl(tasks_dir / "tasks.jsonl") if t["split"] == "train"}
    assert report["pairs"] == len(pairs) > 0 and report["draws"] == 2
    assert report["states"] == sum(t["gold_steps"] for t in train.values())
    for p in pairs:
        task = train[p["task_id"]]
        gold = task["messages"][p["turn"]]
        assert p["prompt_messages"] == task["messages"][:p["turn"]] and gold["role"] == "assistant"
        assert p["chosen"] != p["rejected"] and p["reason"] in ("format", "tool", "arguments")
    assert len({(p["task_id"], p["turn"], p["rejected"]) for p in pairs}) == len(pairs)


def test_agent_dpo_continues_the_sft_adapter_on_the_pairs(agent_cfg, mined, agent_adapter, tiny_dir, tmp_path):
    from safetensors.torch import load_file

    _, pairs_dir = mined
    out, _, before = agent_adapter
    start = out / "adapter"
    metrics = train_agent_dpo.run(agent_cfg.agent, pairs_dir, tiny_dir, tmp_path / "agent_dpo", tmp_path / "ckpt", start,
                                  json.loads((start / "manifest.json").read_text()), train=agent_cfg.train)
    assert metrics["status"] == "ok" and metrics["steps"] == 2 and metrics["pairs"] > 0
    started = load_file(str(start / "adapter_model.safetensors"))
    trained = load_file(str(tmp_path / "agent_dpo" / "adapter" / "adapter_model.safetensors"))
    assert started.keys() == trained.keys() and any(not (started[k] == trained[k]).all() for k in started)
    assert all((before[k] == base_weights(tiny_dir)[k]).all() for k in before)
    assert json.loads((tmp_path / "agent_dpo" / "guard_report.json").read_text())["trainer"] == "agent_dpo"


def test_evaluate_agent_scores_base_prod_and_adapters_with_full_trajectories(agent_cfg, tasks_dir, agent_adapter,
                                                                           small_loop, tiny_dir, tmp_path):
    out, _, _ = agent_adapter
    adapter = out / "adapter"
    manifest = json.loads((adapter / "manifest.json").read_text())
    engine = Engine(tiny_dir, others=[("prod", adapter, manifest), ("agent_sft", adapter, manifest),
                                      ("agent_dpo", adapter, manifest)],
                    chat_template=CHAT_TEMPLATE, tools=ReportTools.tool_schemas())
    arms = [("base", False), ("agent_sft", "agent_sft"), ("agent_dpo", "agent_dpo")]
    result = evaluate_agent.run(agent_cfg.agent, tasks_dir, small_loop / "assets", engine, arms, tmp_path / "eval",
                                tmp_path / "agent.json", prod=True, evaluate=agent_cfg.evaluate, batches=agent_cfg.data.batches, constrained=agent_cfg.generate.constrained)
    n = result["n_tasks"]
    assert n == len([t for t in read_jsonl(tasks_dir / "tasks.jsonl") if t["split"] == "eval"])
    for m in result["models"].values():
        assert "pass_hat_k" not in m and 0 <= m["tool_call_accuracy"] <= m["tool_selection_accuracy"] <= 1
        assert m["n_steps"] <= agent_cfg.agent.max_steps
    assert result["deltas_vs_base"]["agent_sft"]["success"]["n"] == n
    for same in (result["deltas_chain"]["agent_dpo-agent_sft"]["success"],  # one adapter under three names
                 result["deltas_vs_prod"]["agent_sft"]["success"], result["deltas_vs_prod"]["agent_dpo"]["success"]):
        assert same["delta"] == same["ci_low"] == same["ci_high"] == 0.0
    assert set(result["deltas_vs_prod"]) == {"agent_sft", "agent_dpo"} and "prod" in result["deltas_vs_base"]
    console = Console(width=250, record=True)
    console.print(agent_table(result))
    table = console.export_text()
    assert "Δ success vs prod" in table and "+0.00 [+0.00, +0.00]" in table
    episodes = read_jsonl(tmp_path / "eval" / "episodes.jsonl")
    assert len(episodes) == 4 * n and {e["run"] for e in episodes} == {"greedy"}  # sampled runs: agent_pass_k
    assert all(e["messages"][1]["role"] == "user" and len(e["steps"]) >= 1 for e in episodes)
    calls = read_jsonl(tmp_path / "eval" / "next_calls.jsonl")
    gold_turns = sum(t["gold_steps"] for t in read_jsonl(tasks_dir / "tasks.jsonl") if t["split"] == "eval")
    assert len(calls) == 4 * gold_turns
    failed = read_jsonl(tmp_path / "eval" / "failed_episodes.jsonl")
    assert len(failed) == sum(1 for e in episodes if e["model"] == "agent_dpo" and e["run"] == "greedy" and not e["success"])
    assert all(f["reason"].startswith(("no_finish", "wrong_")) for f in failed)
    assert json.loads((tmp_path / "agent.json").read_text())["models"].keys() == {"base", "prod", "agent_sft", "agent_dpo"}
    # every task metric has its interval for each model and its paired delta in each table
    for m in result["models"].values():
        figures = m["with_ci"]["metrics"]
        assert set(report.TASK_METRICS) <= set(figures) and figures["success"]["n"] == n
        assert all(f["ci_low"] <= f["mean"] <= f["ci_high"] for f in figures.values() if f["n"])
        assert set(m["with_ci"]["by_kind"]) == set(result["by_kind_tasks"])
    kinds_with_both = {"abstention_recall", "false_abstention"} if "unanswerable" in result["by_kind_tasks"] else set()
    assert set(result["deltas_vs_base"]["agent_sft"]) >= set(report.TASK_METRICS) - {"abstention_recall"} | kinds_with_both
    assert set(result["success_by_kind"]["deltas_vs_base"]["agent_sft"]) == set(result["by_kind_tasks"])


@pytest.mark.parametrize("decision, in_prod, sampled", [
    ("promote", True, ["agent_dpo", "prod"]),   # the shipped adapter and prod's, and their paired difference
    ("hold", True, ["prod"]),                   # the gate held the agent: only what stays in prod
    ("hold", False, []),                        # nothing ships, nothing in prod: nothing sampled, and why
])
def test_agent_pass_k_samples_the_shipped_adapter_and_prod(agent_cfg, tasks_dir, agent_adapter, small_loop, tiny_dir,
                                                            tmp_path, decision, in_prod, sampled):
    out, _, _ = agent_adapter
    adapter = out / "adapter"
    manifest = json.loads((adapter / "manifest.json").read_text())
    engine = Engine(tiny_dir, others=[("prod", adapter, manifest), ("agent_dpo", adapter, manifest)],
                    chat_template=CHAT_TEMPLATE, tools=ReportTools.tool_schemas())
    models = [*([("agent_dpo", "agent_dpo")] if decision == "promote" else []), *([("prod", "prod")] if in_prod else [])]
    result = agent_pass_k.run(agent_cfg.agent, tasks_dir, small_loop / "assets", engine, models, tmp_path / "passk",
                              tmp_path / "agent_pass_k.json", {"candidate": "agent_dpo", "decision": decision},
                              evaluate=agent_cfg.evaluate, batches=agent_cfg.data.batches,
                              constrained=agent_cfg.generate.constrained)
    e, n = agent_cfg.agent.evaluate, result["n_tasks"]
    assert list(result["models"]) == sampled and result["shipped"] == {"candidate": "agent_dpo", "decision": decision}
    episodes = read_jsonl(tmp_path / "passk" / "episodes.jsonl")
    assert len(episodes) == len(sampled) * e.samples * n
    assert {x["run"] for x in episodes} == ({f"sample{k}" for k in range(e.samples)} if sampled else set())
    for name in sampled:
        m = result["models"][name]
        assert set(m["pass_hat_k"]) == {str(k) for k in e.pass_k}
        assert m["with_ci"]["metrics"][f"pass^{e.pass_k[-1]}"]["n"] == n
        wins = [sum(x["success"] for x in episodes if x["model"] == name and x["task_id"] == t)
                for t in {x["task_id"] for x in episodes}]
        assert m["pass_hat_k"]["1"] == pytest.approx(sum(wins) / (e.samples * n))
    if sampled == ["agent_dpo", "prod"]:  # one adapter under two names, each draw seeded: the same episodes
        d = result["delta_vs_prod"][f"pass^{e.pass_k[-1]}"]
        assert d["delta"] == d["ci_low"] == d["ci_high"] == 0.0 and d["n"] == n
    else:
        assert "delta_vs_prod" not in result
    assert ("note" in result) == (not sampled)
    assert json.loads((tmp_path / "agent_pass_k.json").read_text()) == json.loads(json.dumps(result))


def test_agent_dpo_with_balance_finish_learns_from_the_balanced_pairs_and_counts_what_it_left_out(
        agent_cfg, tasks_dir, agent_adapter, tiny_dir, tmp_path):
    """Three too-early pairs against one too-late one: balanced, DPO trains on one of each; the mined file is
    untouched and the metrics say what was left out."""
    from clap.agent.chat import Action

    task = next(t for t in read_jsonl(tasks_dir / "tasks.jsonl") if t["split"] == "train")
    turns = [i for i, m in enumerate(task["messages"]) if m["role"] == "assistant"]
    early_state, finish_state = task["messages"][:turns[0]], task["messages"][:turns[-1]]
    read = Action("Read.", "read_chunk", {"chunk_id": "c01-annual-2022-p1"}).text()
    finish = Action("Answer.", "finish", {"answer": "not found"}).text()
    search = Action("Find.", "search_reports", {"query": "net profit"}).text()
    pairs = [{"pair_id": f"e{i}", "draw": "greedy", "prompt_messages": early_state, "chosen": search,
              "rejected": finish.replace("not found", f"{i} 万元")} for i in range(3)]
    pairs.append({"pair_id": "l0", "draw": "greedy", "prompt_messages": finish_state, "chosen": finish, "rejected": read})
    write_jsonl(tmp_path / "pairs" / "pairs.jsonl", pairs)
    out, _, _ = agent_adapter
    start = out / "adapter"
    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.dpo = cfg.agent.dpo.model_copy(update=dict(balance_finish=True))
    metrics = train_agent_dpo.run(cfg.agent, tmp_path / "pairs", tiny_dir, tmp_path / "agent_dpo", tmp_path / "ckpt",
                                  start, json.loads((start / "manifest.json").read_text()), train=cfg.train)
    assert metrics["status"] == "ok" and metrics["steps"] == 2
    assert (metrics["pairs_mined"], metrics["pairs"], metrics["pairs_left_out"]) == (4, 2, 2)
    assert metrics["finish_direction"] == {"finish_too_early": 1, "finish_too_late": 1}
    assert len(read_jsonl(tmp_path / "pairs" / "pairs.jsonl")) == 4


def test_agent_dpo_without_pairs_keeps_its_start_and_says_so(agent_cfg, agent_adapter, tiny_dir, tmp_path):
    out, _, _ = agent_adapter
    start = out / "adapter"
    (tmp_path / "pairs").mkdir()
    (tmp_path / "pairs" / "pairs.jsonl").write_text("")
    metrics = train_agent_dpo.run(agent_cfg.agent, tmp_path / "pairs", tiny_dir, tmp_path / "agent_dpo", tmp_path / "ckpt",
                                  start, json.loads((start / "manifest.json").read_text()), train=agent_cfg.train)
    assert metrics["pairs"] == 0 and metrics["steps"] == 0 and "no pair" in metrics["adapter_source"]
    copied = tmp_path / "agent_dpo" / "adapter" / "adapter_model.safetensors"
    assert copied.read_bytes() == (start / "adapter_model.safetensors").read_bytes()
    assert json.loads((tmp_path / "agent_dpo" / "guard_report.json").read_text())["status"] == "ok"


def test_agent_grpo_trains_on_whole_episodes_from_the_sft_adapter(agent_cfg, tasks_dir, agent_adapter, small_loop,
                                                                   tiny_dir, tmp_path):
    """Step 0 = the agent SFT adapter (trained and reference copies); every rollout is an episode the tools
    answered, scored by the composite agent reward; the LoRA moved, the base did not."""
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    class Logs(TrainerCallback):
        rows: list = []

        def on_log(self, args, state, control, logs=None, **kw):
            self.rows.append(dict(logs or {}))

    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.grpo = cfg.agent.grpo.model_copy(update=dict(max_steps=2, num_generations=4, save_steps=1, learning_rate=1e-2))
    cfg.train.guards = cfg.train.guards.model_copy(update=dict(kl_max=1e9, kl_spike_ratio=1e9, reward_collapse_std=-1.0, max_clipped_ratio=1.1))
    out, _, before = agent_adapter
    start_dir = out / "adapter"
    manifest = json.loads((start_dir / "manifest.json").read_text())
    sft = load_file(str(start_dir / "adapter_model.safetensors"))
    start, logs = AtStart(), Logs()
    m = train_agent_grpo.run(cfg.agent, tasks_dir, small_loop / "assets", tiny_dir, tmp_path / "agent_grpo", tmp_path / "ckpt",
                             start_dir, manifest, callbacks=[start, logs], train=cfg.train, batches=cfg.data.batches, constrained=cfg.generate.constrained)
    assert m["status"] == "ok" and m["steps"] == 2 and m["start_adapter_sha256"] == manifest["files"]["adapter_model.safetensors"]
    for name, w in start.default.items():
        assert torch.equal(w.cpu(), sft[_peft_key(name)]) and torch.equal(start.ref[name], w)
    trained = load_file(str(tmp_path / "agent_grpo" / "adapter" / "adapter_model.safetensors"))
    assert trained.keys() == sft.keys() and any(not torch.equal(trained[k], sft[k]) for k in sft)
    assert_lora_trained(tmp_path / "agent_grpo", tiny_dir, before)
    logged = [r for r in logs.rows if "kl" in r]
    assert len(logged) == 2 and all(f"rewards/{p}/mean" in r for r in logged for p in train_agent_grpo.REWARD_PARTS)
    assert json.loads((tmp_path / "agent_grpo" / "guard_report.json").read_text())["trainer"] == "agent_grpo"


def test_an_episodes_completion_masks_the_tool_returns(tiny_dir):
    """The completion GRPO trains on is the conversation after the question; only the agent's own tokens
    (its actions and their end-of-turn) count, the tool returns and turn headers do not."""
    from clap import model as base_model
    from clap.agent import chat

    tok = base_model.load_tokenizer(tiny_dir)
    prompt = chat.start("What was Acme's revenue in FY2022?")
    search = chat.Action("Search first.", "search_reports", {"query": "Acme revenue 2022", "k": 3})
    done = chat.Action("Found it.", "finish", {"answer": "12.5 USD million"})
    messages = [*prompt, search.message(), chat.tool_message("search_reports", "[c1] Acme annual report 2022"),
                done.message()]
    head = trl_rollout.render(tok, prompt, generation_prompt=True)["input_ids"]
    ids, mask = trl_rollout.completion_of(tok, head, messages, last_turn_clipped=False)
    assert len(ids) == len(mask) and ids[-1] == tok.eos_token_id and mask[-1] == 1
    agent_text = tok.decode([t for t, m in zip(ids, mask) if m])
    assert search.text() in agent_text and done.text() in agent_text and "Acme annual report" not in agent_text
    assert "Acme annual report" in tok.decode([t for t, m in zip(ids, mask) if not m])
    clipped, _ = trl_rollout.completion_of(tok, head, messages, last_turn_clipped=True)
    assert clipped == ids[:-1]  # a turn cut at the cap has no end-of-turn token: TRL counts it clipped


@pytest.fixture(scope="module")
def reward_model_dir(agent_cfg, mined, tasks_dir, tiny_dir, tmp_path_factory):
    _, pairs_dir = mined
    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.rm = cfg.agent.rm.model_copy(update=dict(max_steps=2, gradient_accumulation=1, eval_fraction=0.5, min_agreement=0.0))
    root = tmp_path_factory.mktemp("agent_rm")
    before = base_weights(tiny_dir)
    metrics = train_agent_rm.run(cfg.agent, pairs_dir, tiny_dir, root / "agent_rm", root / "ckpt", train=cfg.train)
    return root / "agent_rm", metrics, before, pairs_dir


@pytest.fixture(scope="module")
def rm_checked(agent_cfg, reward_model_dir, tasks_dir, tiny_dir, tmp_path_factory):
    """The reward model checked against six people-labelled episodes, thresholds relaxed (the rule is table-tested)."""
    rm_dir = reward_model_dir[0]
    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.rm.human = AgentRmHuman(min_labels=4, min_spearman=-1.0, max_ece=1.0)
    root = tmp_path_factory.mktemp("rm_check")
    write_jsonl(root / "agent_labels.jsonl", people_labels(read_jsonl(tasks_dir / "tasks.jsonl")[:6]))
    metrics = agent_rm_check.run(cfg.agent.rm.human, rm_dir, tiny_dir, root / "agent_labels.jsonl", root / "check", root / "check.json",
                                 json.loads((rm_dir / "adapter" / "manifest.json").read_text()))
    return root / "check", metrics


def people_labels(tasks: list[dict]) -> list[dict]:
    """Labelled agent episodes as `clap human import` writes them: gold conversations, every other one called wrong."""
    from clap.agent.chat import Action

    def turns(t):
        return [{"text": Action(m["content"], m["tool_calls"][0]["function"]["name"],
                                m["tool_calls"][0]["function"]["arguments"]).text()}
                for m in t["messages"] if m["role"] == "assistant"]
    return [{"export_id": "e1", "uid": f"u{i}", "task_id": t["task_id"], "model": "agent_sft", "correct": float(i % 2),
             "usefulness": 3.0, "annotators": ["SIMULATED-rater-1"], "messages": t["messages"], "steps": turns(t)}
            for i, t in enumerate(tasks)]


def test_the_same_seed_trains_the_same_reward_model(agent_cfg, reward_model_dir, tiny_dir, tmp_path):
    """The scalar head is initialised before the trainer seeds: seeded there too, a second run from scratch gives the
    same adapter byte for byte (it did not: two runs of one commit trained different reward models)."""
    first, _, _, pairs_dir = reward_model_dir
    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.rm = cfg.agent.rm.model_copy(update=dict(max_steps=2, gradient_accumulation=1, eval_fraction=0.5, min_agreement=0.0))
    again = train_agent_rm.run(cfg.agent, pairs_dir, tiny_dir, tmp_path / "agent_rm", tmp_path / "ckpt", train=cfg.train)
    assert again["status"] == "ok" and again["resumed_from"] is None
    name = "adapter/adapter_model.safetensors"
    assert (tmp_path / "agent_rm" / name).read_bytes() == (first / name).read_bytes()


def test_agent_reward_model_learns_on_the_pairs_and_is_checked_against_the_rules(reward_model_dir, tiny_dir):
    from peft import PeftConfig
    from safetensors.torch import load_file

    out, metrics, before, pairs_dir = reward_model_dir
    pairs = read_jsonl(pairs_dir / "pairs.jsonl")
    assert metrics["status"] == "ok" and metrics["steps"] == 2
    assert metrics["train_pairs"] + metrics["held_out_pairs"] == metrics["pairs"] == len(pairs)
    assert metrics["train_pairs"] > 0 and metrics["held_out_pairs"] > 0 and metrics["tokens_seen"] > 0
    checked = metrics["agreement_with_rules"]
    assert checked["train"]["n"] == metrics["train_pairs"] and checked["held_out"]["n"] == metrics["held_out_pairs"]
    assert 0.0 <= checked["held_out"]["agreement"] <= 1.0
    assert metrics["agrees_with_rules"] is True  # min_agreement 0 here; the rule itself is table-tested below
    adapter = out / "adapter"
    weights = load_file(str(adapter / "adapter_model.safetensors"))
    assert any("score" in k for k in weights) and any("lora_" in k for k in weights)  # the head is saved beside LoRA
    assert PeftConfig.from_pretrained(str(adapter)).task_type == "SEQ_CLS"
    assert all((before[k] == base_weights(tiny_dir)[k]).all() for k in before)
    assert "text-classification" in (adapter / "README.md").read_text()


def test_reward_model_pairs_split_by_task():
    pairs = [{"task_id": f"t{i}", "pair_id": f"p{i}{j}"} for i in range(40) for j in range(3)]
    train, held = train_agent_rm.split_pairs(pairs, 0.25, "agent-1")
    assert train and held and len(train) + len(held) == len(pairs)
    assert not {p["task_id"] for p in train} & {p["task_id"] for p in held}


def test_the_reward_model_is_checked_against_peoples_labels_in_its_own_stage(rm_checked):
    check_dir, metrics = rm_checked
    people = metrics["against_people"]  # the episodes' scores against the labels, with the raters named
    assert people["n"] == metrics["labelled_episodes"] == 6 and people["spearman"] is not None
    assert 0.0 <= people["ece"] <= 1.0 and people["annotators"] == ["SIMULATED-rater-1"] and people["passed"]
    # the verdict file holds the outcome alone: new labels that do not flip it change no byte downstream reads
    assert json.loads((check_dir / "verdict.json").read_text()) == {"usable_as_reward": True, "failed": None}


def test_without_peoples_labels_the_reward_model_is_not_trusted(agent_cfg, reward_model_dir, tiny_dir, tmp_path):
    rm_dir = reward_model_dir[0]
    m = agent_rm_check.run(agent_cfg.agent.rm.human, rm_dir, tiny_dir, tmp_path / "none.jsonl", tmp_path / "check", tmp_path / "c.json",
                           json.loads((rm_dir / "adapter" / "manifest.json").read_text()))
    assert m["usable_as_reward"] is False and m["failed"] == "people"
    assert m["against_people"]["n"] == 0 and "fewer than agent.rm.human.min_labels" in m["against_people"]["why_not"]


@pytest.mark.parametrize("rm_metrics, people, verdict", [
    ({"steps": 0}, None, {"usable_as_reward": False, "failed": "not_trained"}),
    ({"steps": 2, "agrees_with_rules": False}, {"passed": True}, {"usable_as_reward": False, "failed": "rules"}),
    ({"steps": 2, "agrees_with_rules": True}, {"passed": False}, {"usable_as_reward": False, "failed": "people"}),
    ({"steps": 2, "agrees_with_rules": True}, None, {"usable_as_reward": False, "failed": "people"}),
    ({"steps": 2, "agrees_with_rules": True}, {"passed": True}, {"usable_as_reward": True, "failed": None}),
])
def test_the_reward_models_verdict_needs_both_checks(rm_metrics, people, verdict):
    assert reward_model.verdict(rm_metrics, people) == verdict


@pytest.mark.parametrize("weight, verdict, use, why", [
    (0.0, {"usable_as_reward": True, "failed": None}, False, "reward_model_weight is 0"),
    (0.2, None, False, "no reward model verdict"),
    (0.2, {"usable_as_reward": False, "failed": "rules"}, False, "agreement with the rule rewards is below"),
    (0.2, {"usable_as_reward": False, "failed": "not_trained"}, False, "not trained"),
    (0.2, {"usable_as_reward": False, "failed": "people"}, False, "check against people's labels failed"),
    (0.2, {"usable_as_reward": True, "failed": None}, True, "reward model used"),
])
def test_the_rl_steps_use_the_reward_model_only_on_its_verdict(weight, verdict, use, why, tmp_path):
    if verdict is not None:
        (tmp_path / "verdict.json").write_text(json.dumps(verdict))
    got, note = reward_model.reward_model_use(weight, tmp_path)
    assert got is use and why in note


def test_agent_grpo_adds_the_reward_model_as_one_reward(agent_cfg, tasks_dir, agent_adapter, reward_model_dir, rm_checked,
                                                        small_loop, tiny_dir, tmp_path):
    from transformers import TrainerCallback

    class Logs(TrainerCallback):
        rows: list = []

        def on_log(self, args, state, control, logs=None, **kw):
            self.rows.append(dict(logs or {}))

    rm_dir = reward_model_dir[0]
    check_dir, _ = rm_checked
    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.grpo = cfg.agent.grpo.model_copy(update=dict(max_steps=1, num_generations=2, save_steps=1))
    cfg.train.guards = cfg.train.guards.model_copy(update=dict(kl_max=1e9, kl_spike_ratio=1e9, reward_collapse_std=-1.0, max_clipped_ratio=1.1))
    out, _, _ = agent_adapter
    logs = Logs()
    m = train_agent_grpo.run(cfg.agent, tasks_dir, small_loop / "assets", tiny_dir, tmp_path / "g", tmp_path / "ckpt",
                             out / "adapter", json.loads((out / "adapter" / "manifest.json").read_text()), callbacks=[logs],
                             rm_dir=rm_dir, rm_expected=json.loads((rm_dir / "adapter" / "manifest.json").read_text()),
                             rm_check=check_dir, train=cfg.train, batches=cfg.data.batches, constrained=cfg.generate.constrained)
    assert m["status"] == "ok" and m["reward_model"].startswith("reward model used")
    scored = [r["rewards/reward_model/mean"] for r in logs.rows if "rewards/reward_model/mean" in r]
    assert scored and all(0.0 < s < 1.0 for s in scored)  # mean sigmoid over turns


@pytest.mark.parametrize("prefix, step, credit", [
    # the first search that brings the needed page moves the task forward; the same search again does not
    ([], {"valid": True, "tool": "search_reports", "ok": True,
          "observation": json.dumps([{"chunk_id": "c1-p1"}])}, 1.0),
    ([{"valid": True, "tool": "search_reports", "ok": True, "observation": json.dumps([{"chunk_id": "c1-p1"}])}],
     {"valid": True, "tool": "search_reports", "ok": True, "observation": json.dumps([{"chunk_id": "c1-p1"}])}, 0.0),
    ([], {"valid": True, "tool": "read_chunk", "arguments": {"chunk_id": "c1-p1"}, "ok": True, "observation": "x"}, 1.0),
    ([], {"valid": True, "tool": "read_chunk", "arguments": {"chunk_id": "c9-p9"}, "ok": False, "observation": "x"}, 0.0),
    ([], {"valid": True, "tool": "calculate", "ok": True, "observation": "5"}, 1.0),     # the needed difference
    ([], {"valid": True, "tool": "calculate", "ok": True, "observation": "6"}, 0.0),     # a number nobody needs
    ([], {"valid": True, "tool": "finish", "arguments": {"answer": "5 万元"}}, 1.0),
    ([], {"valid": True, "tool": "finish", "arguments": {"answer": "6 万元"}}, 0.0),
    ([], {"valid": False, "tool": None}, 0.0),                                            # not an action at all
])
def test_the_dense_process_reward_credits_each_turn_in_its_state(prefix, step, credit):
    task = {"answer": "5 万元", "answer_type": "number", "needed_chunks": ["c1-p1"], "needed_reads": ["c1-p1"],
            "needed_values": [5.0]}
    assert rewards.step_credit(prefix, step, task) == credit


def test_agent_rloo_trains_per_turn_with_the_reward_model_and_moves_only_the_lora(
        agent_cfg, tasks_dir, agent_adapter, reward_model_dir, rm_checked, small_loop, tiny_dir, tmp_path):
    """RLOO (TRL's RLOOTrainer) from the agent SFT adapter over every gold state of the train tasks: each sampled
    action rewarded by its process credit, its format and the reward model; the LoRA moved, the base did not."""
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    class Logs(TrainerCallback):
        rows: list = []

        def on_log(self, args, state, control, logs=None, **kw):
            self.rows.append(dict(logs or {}))

    logs = Logs()
    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.rloo = cfg.agent.rloo.model_copy(update=dict(max_steps=2, num_generations=2, states_per_step=1, save_steps=1, learning_rate=1e-2))
    cfg.train.guards = cfg.train.guards.model_copy(update=dict(kl_max=1e9, kl_spike_ratio=1e9, reward_collapse_std=-1.0, max_clipped_ratio=1.1))
    out, _, before = agent_adapter
    start_dir = out / "adapter"
    sft = load_file(str(start_dir / "adapter_model.safetensors"))
    rm_dir = reward_model_dir[0]
    m = train_agent_rloo.run(cfg.agent, tasks_dir, small_loop / "assets", tiny_dir, tmp_path / "agent_rloo", tmp_path / "ckpt",
                             start_dir, json.loads((start_dir / "manifest.json").read_text()), rm_dir=rm_dir,
                             rm_expected=json.loads((rm_dir / "adapter" / "manifest.json").read_text()), callbacks=[logs],
                             rm_check=rm_checked[0], train=cfg.train, batches=cfg.data.batches)
    train = [t for t in read_jsonl(tasks_dir / "tasks.jsonl") if t["split"] == "train"]
    assert m["status"] == "ok" and m["steps"] == 2 and m["tasks"] == len(train)
    assert m["states"] == sum(t["gold_steps"] for t in train)  # every turn of every train trajectory
    assert m["reward_model"].startswith("reward model used")
    trained = load_file(str(tmp_path / "agent_rloo" / "adapter" / "adapter_model.safetensors"))
    assert trained.keys() == sft.keys() and any(not torch.equal(trained[k], sft[k]) for k in sft)
    assert_lora_trained(tmp_path / "agent_rloo", tiny_dir, before)
    logged = [r for r in logs.rows if "rewards/process/mean" in r]  # each reward logged beside the total
    assert logged and all(0.0 <= r["rewards/process/mean"] <= 1.0 and 0.0 < r["rewards/reward_model/mean"] < 1.0
                          and "kl" in r for r in logged)


@pytest.mark.parametrize("policy, epochs, max_steps, expected", [
    ("joint", 2, -1, [("joint", "labels", 2, -1)]),
    ("two_stage", 2, -1, [("plan", "plan_labels", 1, -1), ("call", "call_labels", 1, -1)]),
    ("two_stage", 1, -1, [("plan", "plan_labels", 1, -1), ("call", "call_labels", 1, -1)]),  # never an empty phase
    ("two_stage", 3, -1, [("plan", "plan_labels", 2, -1), ("call", "call_labels", 1, -1)]),
    ("two_stage", 1, 5, [("plan", "plan_labels", 1, 3), ("call", "call_labels", 1, 2)]),      # a dose in steps
])
def test_two_stage_sft_splits_the_dose_between_the_plan_and_the_call(policy, epochs, max_steps, expected, params):
    assert train_agent_sft.phases(params.agent.sft.model_copy(update={"policy": policy, "epochs": epochs, "max_steps": max_steps})) == expected


def test_the_plan_is_the_thought_and_tool_and_the_call_its_arguments(tasks_dir, tiny_dir):
    from clap import model as base_model
    from clap.agent.tools import ReportTools

    tok = base_model.load_tokenizer(tiny_dir)
    task = read_jsonl(tasks_dir / "tasks.jsonl")[0]
    row = chat.trajectory_labels(tok, task["messages"], ReportTools.tool_schemas())
    agent = [t != -100 for t in row["labels"]]
    plan, call = ([t != -100 for t in row[k]] for k in ("plan_labels", "call_labels"))
    assert all(a == (p or c) and not (p and c) for a, p, c in zip(agent, plan, call))  # a partition of the agent's turns
    turns = [m for m in task["messages"] if m["role"] == "assistant"]
    plan_text = tok.decode([t for t in row["plan_labels"] if t != -100])
    call_text = tok.decode([t for t in row["call_labels"] if t != -100])
    for m in turns:
        assert f'"tool": "{m["tool_calls"][0]["function"]["name"]}",' in plan_text
    assert call_text.count('"arguments"') == len(turns) and '"tool"' not in call_text


def test_two_stage_agent_sft_trains_the_plan_then_the_call_and_moves_only_the_lora(agent_cfg, tasks_dir, tiny_dir,
                                                                                  tmp_path):
    cfg = copy.deepcopy(agent_cfg)
    cfg.agent.sft = cfg.agent.sft.model_copy(update=dict(policy="two_stage", max_steps=4))
    before = base_weights(tiny_dir)
    m = train_agent_sft.run(cfg.agent.sft, tasks_dir, tiny_dir, tmp_path / "out", tmp_path / "ckpt", train=cfg.train)
    assert m["status"] == "ok" and m["policy"] == "two_stage" and m["steps_by_phase"] == {"plan": 2, "call": 2}
    assert_lora_trained(tmp_path / "out", tiny_dir, before)
    import torch
    from safetensors.torch import load_file

    after_plan = load_file(str(tmp_path / "ckpt" / "plan" / "checkpoint-2" / "adapter_model.safetensors"))
    final = load_file(str(tmp_path / "out" / "adapter" / "adapter_model.safetensors"))
    assert final.keys() == after_plan.keys() and any(not torch.equal(final[k], after_plan[k]) for k in final)
