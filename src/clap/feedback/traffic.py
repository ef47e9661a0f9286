"""The demo's production traffic: the held-out replay questions, sent to the canary server as the
application sends them (retrieved chunks in the prompt, the answer schema as `response_format`), each
answer scored against its gold answer and the outcome posted back as feedback.

    clap canary traffic [--paired] [--limit N]
    clap canary traffic --agent [--paired] [--limit N]

Split (default): the server routes each request by its share. Paired: each question is sent to both
arms (`"model": "prod"` and `"canary"`), a paired A/B that needs half the questions for the same power.

`--agent` (`send_agent`): the held-out agent tasks as episodes over HTTP, as an application drives a tool-calling
model — each turn a chat request with the agent's tools and the episode's id, each tool call run here in the
reports' tools and its return sent back as a `tool` message — until the agent calls `finish` or runs out of turns;
then the task's success (the evaluation's own scoring) is posted on the episode's last request.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from clap import paths
from clap.agent import chat, scoring
from clap.agent.chat import Action
from clap.agent.episode import rollout
from clap.agent.tasks import by_kind_round_robin, load
from clap.agent.tools import ReportTools
from clap.config import Params
from clap.domain import prompts
from clap.errors import UserError
from clap.evaluate.decoding import answer_schema
from clap.evaluate.metrics import parse_answer
from clap.evaluate.replay import score_case
from clap.io import read_jsonl
from clap.retrieval import BM25Index, retrieve


class TrafficError(UserError, RuntimeError):
    pass


@dataclass
class UpstreamGeneration:
    """A turn another server answered, as the engine's generations read: its text and its new tokens."""

    text: str
    new_tokens: int


def post(url: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise TrafficError(f"{url}: HTTP {exc.code}: {exc.read().decode('utf-8', 'replace')[:200]}") from None
    except urllib.error.URLError as exc:
        raise TrafficError(f"{url}: no canary server answers ({exc.reason}); start `clap canary serve`") from None


def requests_from_replay(cfg: Params, root: Path, limit: int | None) -> list[dict]:
    """The application's requests for the held-out replay cases: {case, messages, schema, context}."""
    root = Path(root)
    cases = [c for b in cfg.data.batches for c in read_jsonl(root / paths.MATERIALIZED / b / "replay_cases.jsonl")]
    if limit and limit < len(cases):  # spread over every batch, not the first batch's cases
        cases = cases[::len(cases) // limit][:limit]
    chunks = pd.read_parquet(root / paths.ASSETS / "chunks.parquet")
    by_id = {c["chunk_id"]: c for c in chunks.to_dict("records")}
    hits = retrieve(cfg.retrieval, BM25Index.load(root / paths.INDEX / "bm25"), chunks, [c["question"] for c in cases])
    out = []
    for case, hit in zip(cases, hits):
        ctx = [by_id[h] for h in hit]
        out.append({"case": case, "context": ctx,
                    "messages": prompts.messages(prompts.SYSTEM_APP, prompts.app_prompt(case["question"], ctx)),
                    "schema": answer_schema(ctx, with_location=True) if cfg.generate.constrained else None})
    return out


def send(cfg: Params, root: Path, url: str, paired: bool, limit: int | None,
         decided: Callable[[], bool] | None = None) -> dict:
    """Send the traffic, score each answer with the replay's metric `canary.outcome`, post the outcome.
    `decided` is asked after every question: traffic stops once it answers True (the sequential
    analysis has reached a verdict), so a canary costs the requests its evidence needs, no more."""
    metric = cfg.canary.outcome
    counts: dict[str, list[int]] = {"prod": [], "canary": []}
    for r in requests_from_replay(cfg, root, limit):
        body = {"messages": r["messages"]}
        if r["schema"] is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "answer", "schema": r["schema"]}}
        for arm in (("prod", "canary") if paired else ("clap",)):
            resp = post(f"{url}/v1/chat/completions", body | {"model": arm})
            text = resp["choices"][0]["message"]["content"]
            scores = score_case(parse_answer(text), json.loads(r["case"]["target"]), r["context"])
            ok = scores[metric]
            post(f"{url}/v1/feedback", {"request_id": resp["id"], "outcome": int(ok),
                                        "reason": None if ok else f"{metric} missed",
                                        "record_id": r["case"].get("record_id"), "scores": scores})
            counts[resp["model"]].append(int(ok))
        if decided is not None and decided():
            break
    return {arm: {"requests": len(v), "success": sum(v)} for arm, v in counts.items()}


def agent_tasks(cfg: Params, root: Path, limit: int | None) -> list[dict]:
    """The held-out agent tasks the agent traffic asks, the kinds in turn (as `evaluate_agent` takes them)."""
    return by_kind_round_robin(load(Path(root) / paths.AGENT_TASKS, "eval"), limit or cfg.agent.evaluate.max_tasks)


def send_agent(cfg: Params, root: Path, url: str, paired: bool, limit: int | None,
               decided: Callable[[], bool] | None = None) -> dict:
    """Run the held-out agent tasks as episodes against the server at `url` (`clap canary serve --agent`) and post
    each episode's task success on its last request. The episode loop, the tools and the scoring are the
    evaluation's (`clap.agent.episode.rollout`, `clap.agent.scoring.episode_scores`); only the policy is remote.
    `decided`: asked after every task, as in `send`."""
    a = cfg.agent
    tools = ReportTools.over_batches(Path(root) / paths.ASSETS, cfg.data.batches)
    weights = a.rewards.weights.model_dump()
    counts: dict[str, list[int]] = {"prod": [], "canary": []}
    run = uuid.uuid4().hex[:8]  # a second run of the traffic logs new episodes, never more turns of old ones
    for task in agent_tasks(cfg, root, limit):
        for arm in (("prod", "canary") if paired else ("clap",)):
            episode_id = f"{task['task_id']}:{arm}:{run}"
            served: list[tuple[str, str]] = []  # (request id, arm) of each turn
            policy = remote_policy(url, arm, episode_id, tools.schemas, a.turn_tokens, served)
            episode = rollout(policy, tools, [task], a.max_steps, a.max_new_tokens)[0]
            scores = scoring.episode_scores(episode, task, a.rewards.per_extra_call, weights)
            ok = int(scores["success"])
            last_id, served_by = served[-1]
            post(f"{url}/v1/feedback", {"request_id": last_id, "outcome": ok, "record_id": task["task_id"],
                                        "reason": None if ok else f"task failed ({episode['stop']})",
                                        "scores": {k: scores[k] for k in ("success", "reward", "hallucinated",
                                                                          "abstained", "n_calls")}})
            counts[served_by].append(ok)
        if decided is not None and decided():
            break
    return {arm: {"requests": len(v), "success": sum(v)} for arm, v in counts.items()}


def remote_policy(url: str, arm: str, episode_id: str, tool_schemas: list[dict], turn_tokens: int,
                  served: list[tuple[str, str]]):
    """The episode loop's policy (`clap.agent.episode.Policy`) answered over HTTP: each conversation sent as an
    OpenAI chat request with the tools and the episode's id, each answer read back into the action's text; every
    turn's (request id, arm that served it) appended to `served`."""
    def policy(conversations: list[list[dict]]) -> list[UpstreamGeneration]:
        turns = []
        for messages in conversations:
            resp = post(f"{url}/v1/chat/completions", {
                "model": arm, "messages": chat.openai_messages(messages), "tools": tool_schemas,
                "tool_choice": "auto", "episode_id": episode_id, "request_id": f"{episode_id}:{len(served)}",
                "max_tokens": turn_tokens})
            served.append((resp["id"], resp["model"]))
            turns.append(UpstreamGeneration(action_text(resp["choices"][0]["message"]),
                                            int(resp["usage"]["completion_tokens"])))
        return turns
    return policy


def action_text(message: dict) -> str:
    """The action an assistant message holds, as the agent writes it (pure): a tool call back into the action
    JSON `clap.agent.chat.parse_action` reads; a message without one, its content (the loop's malformed turn)."""
    calls = message.get("tool_calls") or []
    if not calls:
        return message.get("content") or ""
    f = calls[0]["function"]
    try:
        arguments = json.loads(f["arguments"])
    except json.JSONDecodeError:
        return f["arguments"]
    return Action(message.get("content") or "", f["name"], arguments).text()
