"""A real page's rows with near namesakes (TAT-QA dev, MIT: benchmarks/data/tatqa), and an answer schema whose head
is fixed, so a random tiny model writes a given metric and then picks a quote (`generate.evidence_names_metric`)."""

from clap.domain import prompts
from clap.evaluate.decoding import answer_schema

EQUITY_PAGE = """US$’000
Total assets | 2019: 383,665
Total assets | 2018: 336,032
Total current liabilities | 2019: 154,619
Equity: Total equity | 2019: 228,144
Equity: Total equity | 2018: 243,668"""
EQUITY_ROWS = {"Equity: Total equity | 2019: 228,144", "Equity: Total equity | 2018: 243,668"}


def saying(metric: str, page: str = EQUITY_PAGE) -> dict:
    """The page's answer schema with entity, metric and period fixed: the model's one choice is the quote."""
    head = {"entity": {"const": "X"}, "metric": {"const": metric}, "period": {"const": "2019"}}
    return {"anyOf": [a | {"properties": a["properties"] | head}
                      for a in answer_schema([{"text": page}], with_location=False)["anyOf"]]}


def asking(metric: str, page: str = EQUITY_PAGE) -> list[dict]:
    """The extraction prompt over the page asking for `metric`."""
    return prompts.messages(prompts.system_extract(["thousand USD"]), f"Source:\n{page}\nQuestion: {metric}?")
