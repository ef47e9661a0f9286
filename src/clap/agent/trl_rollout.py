"""The agent's episodes as TRL's `rollout_func`: the policy a trainer holds steps every prompt's episode in the
sandboxed tools (`clap.agent.episode.rollout`, the loop evaluation uses), each turn sampled under the action
grammar when one is given; the completion TRL trains on is the conversation after the question, rendered by the
tool-calling template, with `env_mask` marking the agent's own tokens (1) apart from tool returns and the
template's turn headers (0). Used by `clap train agent-grpo` (`clap.stages.train_agent_grpo`).
"""

from __future__ import annotations

from dataclasses import dataclass

from clap.agent import chat
from clap.agent.episode import rollout as run_episodes
from clap.agent.tools import ReportTools
from clap.config import Agent
from clap.evaluate.decoding import GrammarCache
from clap.evaluate.generate import left_padded, sample_under_grammar


@dataclass
class Turn:
    text: str
    new_tokens: int


def render(tok, conversation: list[dict], generation_prompt: bool) -> dict:
    """input_ids (and, for a whole conversation, the mask of the agent's own tokens) by the tool-calling template."""
    return chat.render(tok, conversation, ReportTools.tool_schemas(), add_generation_prompt=generation_prompt,
                       assistant_mask=not generation_prompt)


def completion_of(tok, prompt_ids: list[int], messages: list[dict], last_turn_clipped: bool) -> tuple[list, list]:
    """(completion ids, env mask) of a finished episode: its conversation after the prompt, up to the
    agent's last token. A last turn cut at the turn cap loses the end-of-turn token the template adds,
    so TRL counts the completion as clipped (the guard's `completion_length_clipped`)."""
    full = render(tok, messages, generation_prompt=False)
    ids, mask = list(full["input_ids"]), list(full["assistant_masks"])
    if ids[:len(prompt_ids)] != prompt_ids:
        raise RuntimeError("agent-grpo: the tool-calling template does not render the prompt as a prefix of the episode")
    end, closing = max(i for i, m in enumerate(mask) if m) + 1, chat.end_of_turn_ids(tok)
    if last_turn_clipped and ids[end - len(closing):end] == closing:
        end -= len(closing)
    return ids[len(prompt_ids):end], mask[len(prompt_ids):end]


def episode_rollout(tools: ReportTools, grammars: GrammarCache | None, schema: dict | None, agent: Agent,
                    temperature: float):
    """A TRL `rollout_func`: one sampled episode per prompt of the (already repeated) slice, all episodes
    stepped together (one batched generation per turn). Returns the completions with their `env_mask`
    and, per completion, the episode (its steps and answer) for the reward functions. Log-probabilities
    are left to TRL (`logprobs: None`: it scores the completions itself)."""
    import torch

    def rollout(prompts: list, trainer) -> dict:
        tok = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        stop = set(getattr(trainer, "eos_token_ids", None) or [tok.eos_token_id])
        closing = chat.end_of_turn_ids(tok)
        stop |= set(closing) if len(closing) == 1 else set()  # a template's end-of-turn token (<|eot_id|>, …)
        last_clipped: dict[int, bool] = {}

        def policy(conversations: list[list[dict]]) -> list[Turn]:
            encoded = [render(tok, c, generation_prompt=True)["input_ids"] for c in conversations]
            if grammars is not None:  # the engine's grammar loop: a turn leaves the batch as its action closes
                rows = sample_under_grammar(model, encoded, [grammars.compiled(schema)] * len(encoded),
                                            agent.turn_tokens, temperature, tok.pad_token_id)
                for conv, (_, closed) in zip(conversations, rows):
                    last_clipped[id(conv)] = not closed  # cut at agent.turn_tokens before its end-of-turn token
                return [Turn(tok.decode(row, skip_special_tokens=True), len(row) + closed) for row, closed in rows]
            pad = tok.pad_token_id
            ids, mask = left_padded(encoded, pad, model.device)
            width = ids.shape[1]
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=agent.turn_tokens,
                                 do_sample=True, temperature=temperature, pad_token_id=pad, eos_token_id=sorted(stop))
            turns = []
            for conv, row in zip(conversations, out[:, width:].tolist()):
                end = next((i for i, t in enumerate(row) if t in stop), None)
                kept = row if end is None else row[:end]
                last_clipped[id(conv)] = end is None  # cut at agent.turn_tokens before its end-of-turn token
                turns.append(Turn(tok.decode(kept, skip_special_tokens=True), len(kept) + (end is not None)))
            return turns

        tasks = [{"task_id": str(i), "question": p[-1]["content"]} for i, p in enumerate(prompts)]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                episodes = run_episodes(policy, tools, tasks, agent.max_steps, agent.max_new_tokens)
        finally:
            model.train(was_training)
        prompt_ids, completion_ids, env_mask = [], [], []
        for p, ep in zip(prompts, episodes):
            head = render(tok, p, generation_prompt=True)["input_ids"]
            ids, m = completion_of(tok, head, ep["messages"], last_clipped.get(id(ep["messages"]), False))
            prompt_ids.append(head)
            completion_ids.append(ids)
            env_mask.append(m)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "env_mask": env_mask,
                "episode": [{k: ep[k] for k in ("messages", "steps", "answer", "stop", "new_tokens")} for ep in episodes]}

    return rollout
