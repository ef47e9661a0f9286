"""The agent's learned reward model: a scalar head over SmolLM2 that scores one action in its state.

Trained by `clap train agent-rm` (TRL's `RewardTrainer`) on the agent's preference pairs; used by
`clap train agent-grpo` as one more reward — the mean over an episode's turns of sigmoid(score), a learned
process reward beside the rule-based one — when its agreement with the rule rewards on held-out pairs
reaches `agent.rm.min_agreement`. Loaded, like every adapter, only through the serving check.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from clap import model as base_model
from clap.agent import chat
from clap.agent.tools import ReportTools
from clap.config import AgentRmHuman
from clap.evaluate.stats import expected_calibration_error
from clap.integrity import attach
from clap.io import read_json


def state_text(tok, prefix: list[dict]) -> str:
    """The state the reward model reads: the conversation so far rendered by the tool-calling template (tools
    in the system turn) up to the agent's turn."""
    return chat.render(tok, prefix, ReportTools.tool_schemas(), add_generation_prompt=True, tokenize=False)


def state_action_text(tok, prefix: list[dict], action_text: str) -> str:
    """What the reward model reads: the state, then the action and its end-of-turn token."""
    return state_text(tok, prefix) + action_text + chat.end_of_turn(tok)


def load_base(base_dir: Path):
    """The base model with a fresh scalar head (`num_labels=1`): safetensors only, no remote code."""
    from transformers import AutoModelForSequenceClassification

    tok = base_model.load_tokenizer(base_dir)
    model = AutoModelForSequenceClassification.from_pretrained(str(base_dir), num_labels=1, trust_remote_code=False,
                                                               use_safetensors=True)
    model.config.pad_token_id = tok.pad_token_id
    return model


def load(base_dir: Path, adapter_dir: Path, expected: dict, base_identity: dict):
    """The trained reward model, its adapter (and head) verified against the manifest git pins."""
    return attach(load_base(base_dir), "default", Path(adapter_dir), expected, base_identity).eval()


def scores(model, tok, texts: list[str], batch_size: int = 8) -> list[float]:
    """The model's scalar score of each text (right-padded batches; the head reads the last real token)."""
    import torch

    out = []
    device = next(model.parameters()).device
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            enc = tok(texts[i:i + batch_size], return_tensors="pt", padding=True, padding_side="right",
                      add_special_tokens=False).to(device)
            out += model(**enc).logits[:, 0].float().tolist()
    return out


def state_scores(model, tok, states: list[str], actions: list[str], batch_size: int = 8) -> list[float]:
    """`scores` of each `states[i] + actions[i]`, reading each distinct state once.

    A preference pair's chosen and rejected actions follow the same state (≈ 800 tokens of tools, question
    and tool returns) and differ in ≈ 30 tokens: the state's KV is computed once and every distinct action
    after it is scored on a copy, so the held-out check reads ≈ 2.7× fewer tokens
    (`benchmarks/bench_rm_scores.py`). Positions and the read-out token are those of the whole text, so the
    scores equal `scores` up to floating-point rounding; a text whose tokens do not start with its state's
    (a merge across the boundary) or whose action has no token the head can read (all pad) is scored whole.
    """
    import torch

    texts: dict[str, dict[str, list[int]]] = {}  # state -> action -> the rows that ask for it
    for i, (state, action) in enumerate(zip(states, actions)):
        texts.setdefault(state, {}).setdefault(action, []).append(i)
    pad, device = model.config.pad_token_id, next(model.parameters()).device
    out: list[float] = [0.0] * len(states)
    whole: list[tuple[str, list[int]]] = []  # (text, rows) scored in one pass
    with torch.no_grad():
        for state, by_action in texts.items():
            head = tok(state, add_special_tokens=False).input_ids
            tails = []  # (action's tokens after the state, rows)
            for action, rows in by_action.items():
                ids = tok(state + action, add_special_tokens=False).input_ids
                if ids[:len(head)] == head and any(t != pad for t in ids[len(head):]):
                    tails.append((ids[len(head):], rows))
                else:
                    whole.append((state + action, rows))
            if not tails:
                continue
            kv = model(input_ids=torch.tensor([head], device=device), use_cache=True).cache
            for k in range(0, len(tails), batch_size):
                chunk = tails[k:k + batch_size]
                width = max(len(tail) for tail, _ in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long, device=device)
                mask = torch.zeros((len(chunk), len(head) + width), dtype=torch.long, device=device)
                mask[:, :len(head)] = 1
                for r, (tail, _) in enumerate(chunk):
                    ids[r, :len(tail)] = torch.tensor(tail, device=device)
                    mask[r, len(head):len(head) + len(tail)] = 1
                cache = copy.deepcopy(kv)
                cache.batch_repeat_interleave(len(chunk))
                logits = model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True).logits
                for r, (_, rows) in enumerate(chunk):
                    for i in rows:
                        out[i] = float(logits[r, 0])
    for (_, rows), score in zip(whole, scores(model, tok, [text for text, _ in whole], batch_size)):
        for i in rows:
            out[i] = score
    return out


def verdict(rm_metrics: dict, people: dict | None) -> dict:
    """Whether the reward model may drive training (pure): trained, agreeing with the rule rewards on held-out pairs
    (`agrees_with_rules`, `clap train agent-rm`) and matching people (`human_check`'s `passed`). `failed` names the
    first check it did not pass — only the outcome, so a new label that changes a number but not the verdict does
    not re-run the steps that read it."""
    failed = ("not_trained" if not rm_metrics.get("steps") else "rules" if not rm_metrics.get("agrees_with_rules")
              else "people" if not (people or {}).get("passed") else None)
    return {"usable_as_reward": failed is None, "failed": failed}


WHY_NOT = {"not_trained": "reward model not trained (no preference pair to learn from)",
           "rules": "reward model not used: its held-out agreement with the rule rewards is below agent.rm.min_agreement",
           "people": "reward model not used: its check against people's labels failed (agent.rm.human)",
           "disabled": "reward model not checked (the agent track is off)"}


def reward_model_use(weight: float, check_dir: Path | None) -> tuple[bool, str]:
    """Whether an RL step (agent GRPO, agent RLOO) adds the learned reward, and why: from its weight and the reward
    model's verdict (`clap agent-rm-check`: against the rule rewards, then against people; the figures behind it
    are in metrics/agent_rm_check.json)."""
    if weight == 0:
        return False, "the step's reward_model_weight is 0"
    file = None if check_dir is None else Path(check_dir) / "verdict.json"
    if file is None or not file.exists() or not file.read_text().strip():
        return False, "no reward model verdict (clap agent-rm-check)"
    v = read_json(file)
    if not v.get("usable_as_reward"):
        return False, WHY_NOT.get(v.get("failed"), f"reward model not used ({v.get('failed')})")
    return True, "reward model used (it agrees with the rule rewards and with people: metrics/agent_rm_check.json)"


def human_check(scores: list[float], correct: list[float], rules: AgentRmHuman) -> dict:
    """The reward model against people: its episode scores (mean sigmoid over turns, `episode_reward`) beside the
    share of raters who called each episode correct — Spearman's ρ (does it rank episodes as people do) and the
    expected calibration error of the score read as P(correct). `passed` needs at least `rules.min_labels`
    labelled episodes, ρ ≥ `min_spearman` and ECE ≤ `max_ece` (conf/ `agent.rm.human`); too few labels fail it."""
    from scipy.stats import spearmanr

    if len(scores) != len(correct):
        raise ValueError("the human check needs one score per labelled episode")
    n = len(scores)
    varied = n >= 3 and len(set(scores)) > 1 and len(set(correct)) > 1
    rho = round(float(spearmanr(scores, correct).statistic), 6) if varied else None
    ece = expected_calibration_error(scores, correct)
    why = (f"{n} labelled episodes, fewer than agent.rm.human.min_labels {rules.min_labels}" if n < rules.min_labels
           else "no spread to rank (every score or every label the same)" if rho is None
           else f"Spearman {rho} below agent.rm.human.min_spearman {rules.min_spearman}" if rho < rules.min_spearman
           else f"ECE {ece} above agent.rm.human.max_ece {rules.max_ece}" if ece > rules.max_ece else None)
    return {"n": n, "spearman": rho, "ece": ece, "passed": why is None, "why_not": why,
            "positive_share": round(sum(correct) / n, 6) if n else None}


def episode_reward(model, tok, messages: list[dict], steps: list[dict]) -> float:
    """Mean over the agent's turns of sigmoid(score of the turn in its state): the learned process reward.
    `messages` is the episode's conversation, `steps` its turns (the text the agent wrote each turn)."""
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    texts = [state_action_text(tok, messages[:i], s["text"]) for i, s in zip(turns, steps)]
    if not texts:
        return 0.0
    return sum(1.0 / (1.0 + math.exp(-x)) for x in scores(model, tok, texts)) / len(texts)
