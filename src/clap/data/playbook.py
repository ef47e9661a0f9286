"""The application's playbook: the actions the training cases recommend, the set a recommendation chooses from
(`evaluate_decisions.action_playbook`, and GRPO's decision task)."""

from __future__ import annotations

import json
from pathlib import Path

from clap.io import read_jsonl


def playbook(case_files: dict[str, Path]) -> list[str]:
    """The actions the training cases recommend (every batch's `grpo_groups.jsonl` beside its holdout):
    the application's playbook, the set a recommendation chooses from. Only the set leaves training,
    never a held-out case's answer; an action no training case used cannot be chosen."""
    return sorted({json.loads(g["reference_json"])["action"] for f in case_files.values()
                   if (Path(f).parent / "grpo_groups.jsonl").exists()
                   for g in read_jsonl(Path(f).parent / "grpo_groups.jsonl")})
