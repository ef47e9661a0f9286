"""Label Studio's formats, as its documentation gives them: the labelling config (XML), the import file
(a JSON list of tasks, each `{"data": {...}}`), and the JSON export (tasks with `annotations`, each with
`completed_by`, `was_cancelled` and a `result` list of `{from_name, to_name, type, value}` regions).

The config asks, for one answer at a time, three 5-point Likert ratings (usefulness, safety, fluency —
the agent chain's human-evaluation scales) and a correct / incorrect choice; the task shows the source,
the question and the answer, never which model wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

SCALES = ("usefulness", "safety", "fluency")
CORRECTNESS = "correctness"
CHOICES = ("correct", "incorrect")


def labeling_config() -> str:
    """The project's labelling interface (Label Studio's XML config)."""
    ratings = "\n".join(f'  <Header value={quoteattr(f"{s.capitalize()} (1 = worst, 5 = best)")}/>\n'
                        f'  <Rating name="{s}" toName="answer" maxRating="5" required="true"/>' for s in SCALES)
    choices = "".join(f'<Choice value="{c}"/>' for c in CHOICES)
    return f"""<View>
  <Header value="Source"/>
  <Text name="source" value="$source"/>
  <Header value="Question"/>
  <Text name="question" value="$question"/>
  <Header value="Answer"/>
  <Text name="answer" value="$answer"/>
{ratings}
  <Header value="Is the answer correct for the question, given the source?"/>
  <Choices name="{CORRECTNESS}" toName="answer" choice="single" required="true">{choices}</Choices>
</View>
"""


@dataclass
class Label:
    """One person's labels on one task (None where a control was left empty)."""

    task_uid: str
    task_id: int | str | None
    annotator: str
    annotation_id: int | str | None
    ratings: dict[str, int | None] = field(default_factory=dict)
    correct: bool | None = None


@dataclass
class ParsedExport:
    labels: list[Label]
    cancelled: list[dict]   # {task_id, annotator}: skipped or cancelled annotations, kept out of every statistic
    problems: list[str]     # everything else left out, each with its reason


def _annotator(completed_by) -> str:
    if isinstance(completed_by, dict):
        return str(completed_by.get("email") or completed_by.get("id"))
    return str(completed_by)


def _region_values(result: list[dict]) -> tuple[dict[str, int | None], bool | None, list[str]]:
    ratings: dict[str, int | None] = dict.fromkeys(SCALES)
    correct, problems = None, []
    for region in result or []:
        name, value = region.get("from_name"), region.get("value") or {}
        if name in SCALES and "rating" in value:
            r = value["rating"]
            if isinstance(r, int | float) and 1 <= r <= 5 and float(r).is_integer():
                ratings[name] = int(r)
            else:
                problems.append(f"{name} rating {r!r} outside 1..5")
        elif name == CORRECTNESS and value.get("choices"):
            choice = value["choices"][0]
            if choice in CHOICES:
                correct = choice == "correct"
            else:
                problems.append(f"{CORRECTNESS} choice {choice!r} not one of {', '.join(CHOICES)}")
    return ratings, correct, problems


def parse_export(tasks: list, source: str) -> ParsedExport:
    """Flatten a Label Studio JSON export into one Label per (task, annotator); when one person
    annotated a task twice, the later annotation (higher id) counts and the earlier is reported."""
    if not isinstance(tasks, list):
        raise ValueError(f"{source}: not a Label Studio JSON export (expected a list of tasks)")
    labels: dict[tuple[str, str], Label] = {}
    cancelled, problems = [], []
    for pos, task in enumerate(tasks):
        if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
            raise ValueError(f"{source}: task #{pos} has no `data` object (not a Label Studio export)")
        uid, task_id = task["data"].get("uid"), task.get("id", pos)
        for ann in task.get("annotations") or []:
            who = _annotator(ann.get("completed_by"))
            if ann.get("was_cancelled"):
                cancelled.append({"task_id": task_id, "annotator": who})
                continue
            ratings, correct, bad = _region_values(ann.get("result"))
            problems += [f"task {task_id}, annotator {who}: {p}; that label left out" for p in bad]
            label = Label(str(uid), task_id, who, ann.get("id"), ratings, correct)
            key = (str(uid), who)
            if key in labels:
                older, newer = sorted((labels[key], label), key=lambda x: (x.annotation_id is None, x.annotation_id))
                problems.append(f"task {task_id}: annotator {who} annotated it twice; annotation "
                                f"{newer.annotation_id} counts, {older.annotation_id} left out")
                label = newer
            labels[key] = label
    return ParsedExport(list(labels.values()), cancelled, problems)
