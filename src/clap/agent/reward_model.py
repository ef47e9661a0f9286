"""The agent's learned reward model: a scalar head over SmolLM2 that scores one action in its state.

Trained by `clap train agent-rm` (TRL's `RewardTrainer`) on the agent's preference pairs; used by
`clap train agent-grpo` as one more reward — the mean over an episode's turns of sigmoid(score), a learned
process reward beside the rule-based one — when its agreement with the rule rewards on held-out pairs
reaches `agent.rm.min_agreement`. Loaded, like every adapter, only through the serving check.
"""

from __future__ import annotations

import math
from pathlib import Path

from clap.agent import chat
from clap.agent.tools import ReportTools


def state_action_text(tok, prefix: list[dict], action_text: str) -> str:
    """What the reward model reads: the conversation so far rendered by the tool-calling template (tools
    in the system turn) up to the agent's turn, then the action and its end-of-turn token."""
    head = tok.apply_chat_template(prefix, tools=ReportTools.tool_schemas(), chat_template=chat.CHAT_TEMPLATE,
                                   tokenize=False, add_generation_prompt=True)
    return head + action_text + tok.eos_token


def load_base(base_dir: Path):
    """The base model with a fresh scalar head (`num_labels=1`): safetensors only, no remote code."""
    from transformers import AutoModelForSequenceClassification

    from clap import model as base_model

    tok = base_model.load_tokenizer(base_dir)
    model = AutoModelForSequenceClassification.from_pretrained(str(base_dir), num_labels=1, trust_remote_code=False,
                                                               use_safetensors=True)
    model.config.pad_token_id = tok.pad_token_id
    return model


def load(base_dir: Path, adapter_dir: Path, expected: dict, base_identity: dict):
    """The trained reward model, its adapter (and head) verified against the manifest git pins."""
    from clap.release.serving import attach

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


def episode_reward(model, tok, messages: list[dict], steps: list[dict]) -> float:
    """Mean over the agent's turns of sigmoid(score of the turn in its state): the learned process reward.
    `messages` is the episode's conversation, `steps` its turns (the text the agent wrote each turn)."""
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    texts = [state_action_text(tok, messages[:i], s["text"]) for i, s in zip(turns, steps)]
    if not texts:
        return 0.0
    return sum(1.0 / (1.0 + math.exp(-x)) for x in scores(model, tok, texts)) / len(texts)
