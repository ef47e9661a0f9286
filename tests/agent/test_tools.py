"""Every tool on good and bad arguments: failures are observations, never exceptions."""

import json

import pytest

from clap.agent.tools import ReportTools


def test_schemas_come_from_signatures_and_docstrings(tools):
    by_name = {s["function"]["name"]: s["function"] for s in tools.schemas}
    assert list(by_name) == list(ReportTools.NAMES)
    assert by_name["search_reports"]["parameters"]["required"] == ["query"]
    assert by_name["search_reports"]["parameters"]["properties"]["k"]["type"] == "integer"
    assert by_name["calculate"]["parameters"]["properties"]["op"]["enum"] == ["add", "sub", "mul", "div", "pct_change"]
    assert ReportTools.tool_schemas() == tools.schemas  # they depend on no data


def test_search_returns_ids_and_title_lines(tools):
    obs, ok = tools.call("search_reports", {"query": "Apex Precision net profit 2022", "k": 2})
    hits = json.loads(obs)
    assert ok and len(hits) == 2 and hits[0] == {"chunk_id": "c01-annual-2022-p1",
                                                 "title": "Apex Precision Co. Annual Report 2022, page 1."}
    assert "1,234.50" not in obs  # a search shows where to read, not the value


def test_read_chunk(tools):
    obs, ok = tools.call("read_chunk", {"chunk_id": "c02-annual-2022-p1"})
    assert ok and obs.startswith("Boreal Motors Co. Annual Report 2022") and "900.25" in obs


@pytest.mark.parametrize("name, arguments, result", [
    ("convert_unit", {"value": 1234.5, "from_unit": "万元", "to_unit": "百万元"}, "12.345"),
    ("convert_unit", {"value": 2, "from_unit": "吨", "to_unit": "千克"}, "2000"),
    ("calculate", {"op": "sub", "a": 1500, "b": 1234.5}, "265.5"),
    ("calculate", {"op": "pct_change", "a": 1000, "b": 1234.5}, "23.45"),
    ("calculate", {"op": "div", "a": 1, "b": 3}, "0.33"),
    ("finish", {"answer": "1234.5 万元"}, "1234.5 万元"),
])
def test_good_calls(tools, name, arguments, result):
    assert tools.call(name, arguments) == (result, True)


@pytest.mark.parametrize("name, arguments, error", [
    ("search_reports", {"query": "  "}, "empty query"),
    ("search_reports", {"query": "net profit", "k": 9}, "k must be 1 to 5"),
    ("search_reports", {"q": "net profit"}, "unknown argument(s) q; missing argument(s) query"),
    ("search_reports", {"query": 3}, "argument query must be a string"),
    ("read_chunk", {"chunk_id": "c01-annual-2022-p9"}, "unknown chunk_id 'c01-annual-2022-p9'"),
    ("convert_unit", {"value": 1, "from_unit": "万元", "to_unit": "吨"}, "cannot convert 万元 to 吨"),
    ("convert_unit", {"value": 1, "from_unit": "furlong", "to_unit": "万元"}, "unknown unit 'furlong'"),
    ("convert_unit", {"value": "1", "from_unit": "万元", "to_unit": "元"}, "argument value must be a number"),
    ("calculate", {"op": "div", "a": 1, "b": 0}, "division by zero"),
    ("calculate", {"op": "pct_change", "a": 0, "b": 5}, "division by zero"),
    ("calculate", {"op": "pow", "a": 2, "b": 3}, "argument op must be one of add, sub, mul, div, pct_change"),
    ("calculate", {"op": "mul", "a": 1e308, "b": 10}, "result is not a finite number"),
    ("calculate", {"op": "add", "a": True, "b": 1}, "argument a must be a number"),
    ("finish", "42", "arguments must be a JSON object"),
    ("delete_reports", {}, "unknown tool 'delete_reports'; tools: search_reports, read_chunk, convert_unit, "
                           "calculate, finish"),
])
def test_bad_calls_come_back_as_error_observations(tools, name, arguments, error):
    obs, ok = tools.call(name, arguments)
    assert not ok and json.loads(obs) == {"error": error}
