"""Argilla's on-disk dataset format (what `rg.Dataset.to_disk` writes and `rg.Dataset.from_disk` reads):
a folder with `settings.json` (fields, questions), `dataset.json` (the dataset model) and
`records.json` (a list of records, each `{"id", "fields", "metadata", ...}`).

    clap human export                     # also writes feedback/human/export/argilla/
    python -c "import argilla as rg; rg.Dataset.from_disk('feedback/human/export/argilla', client=rg.Argilla(...))"

The same blind tasks as the Label Studio file: a record's id is the task's uid, its fields the source,
the question and the answer; the questions the same three 1–5 ratings and the correct / incorrect label.
Import stays Label Studio's (one round trip, one parser); Argilla is an export for teams that use it.
"""

from __future__ import annotations

import json
from pathlib import Path

from clap.feedback.labelstudio import CHOICES, CORRECTNESS, SCALES

FIELDS = ("source", "question", "answer")
GUIDELINES = ("Rate one answer at a time, given the source and the question. The model that wrote the answer "
              "is not shown. Usefulness, safety and fluency: 1 = worst, 5 = best.")


def settings() -> dict:
    """The dataset settings, as `rg.Settings.serialize()` writes them."""
    fields = [{"name": f, "title": f.capitalize(), "required": True, "settings": {"type": "text", "use_markdown": False}}
              for f in FIELDS]
    ratings = [{"name": s, "title": f"{s.capitalize()} (1 = worst, 5 = best)", "description": None, "required": True,
                "settings": {"type": "rating", "options": [{"value": v} for v in range(1, 6)]}} for s in SCALES]
    label = {"name": CORRECTNESS, "title": "Is the answer correct for the question, given the source?",
             "description": None, "required": True,
             "settings": {"type": "label_selection", "options": [{"value": c, "text": c} for c in CHOICES],
                          "visible_options": None}}
    return {"guidelines": GUIDELINES, "allow_extra_metadata": True,
            "distribution": {"strategy": "overlap", "min_submitted": 1},
            "fields": fields, "questions": [*ratings, label], "vectors": [], "metadata": []}


def write(folder: Path, tasks: list[dict], name: str) -> Path:
    """Write the Label Studio `tasks` (`[{"data": {uid, export_id, source, question, answer}}]`) as an
    Argilla dataset folder named `name`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    records = [{"id": t["data"]["uid"], "fields": {f: t["data"][f] for f in FIELDS},
                "metadata": {"export_id": t["data"]["export_id"]}, "suggestions": {}, "responses": {}, "vectors": {},
                "status": "pending"} for t in tasks]
    dataset = {"name": name, "guidelines": GUIDELINES, "allow_extra_metadata": True, "status": "draft",
               "distribution": {"strategy": "overlap", "min_submitted": 1}}
    for file, body in (("settings.json", settings()), ("dataset.json", dataset), ("records.json", records)):
        (folder / file).write_text(json.dumps(body, ensure_ascii=False, indent=1), encoding="utf-8")
    return folder
