"""Tables with the user's column names: the same rows from CSV, XLSX, Parquet and JSONL; declarative transforms as a
table of cases (pure)."""

import datetime as dt
import json

import pandas as pd
import pytest
from tests.helpers.documents import write_xlsx

from clap.data.ingest import tables as tb

HEADER = ["Company", "KPI", "FY", "Amount"]
ROWS = [["Acme", "Revenue", "2024", "1,234"], ["Borealis", "Defect rate", "2023", "1.8"]]


@pytest.fixture
def the_same_table(tmp_path):
    csv = tmp_path / "t.csv"
    pd.DataFrame(ROWS, columns=HEADER).to_csv(csv, index=False)
    pq = tmp_path / "t.parquet"
    pd.DataFrame(ROWS, columns=HEADER).to_parquet(pq)
    jl = tmp_path / "t.jsonl"
    jl.write_text("".join(json.dumps(dict(zip(HEADER, r))) + "\n" for r in ROWS))
    return [csv, write_xlsx(tmp_path / "t.xlsx", HEADER, ROWS), pq, jl]


def test_every_format_reads_the_same_rows(the_same_table):
    for path in the_same_table:
        rows = [row for _, row in tb.read_rows(path)]
        assert rows == [dict(zip(HEADER, r)) for r in ROWS], path.suffix
        assert tb.header(path, None) == HEADER


def test_row_numbers_are_the_ones_a_user_sees(the_same_table):
    csv, xlsx, pq, jl = the_same_table
    assert [n for n, _ in tb.read_rows(csv)] == [2, 3]  # the header is row 1
    assert [n for n, _ in tb.read_rows(xlsx)] == [2, 3]
    assert [n for n, _ in tb.read_rows(jl)] == [1, 2]


def test_a_missing_sheet_and_a_table_that_is_not_one(tmp_path):
    xlsx = write_xlsx(tmp_path / "t.xlsx", HEADER, ROWS, sheet="KPIs")
    with pytest.raises(tb.TableFileError, match="no sheet 'Facts' \\(sheets: KPIs\\)"):
        list(tb.read_rows(xlsx, "Facts"))
    (tmp_path / "x.xlsx").write_bytes(b"not a zip")
    with pytest.raises(tb.TableFileError, match="not a readable XLSX"):
        list(tb.read_rows(tmp_path / "x.xlsx"))
    with pytest.raises(tb.TableFileError, match="must be one of"):
        list(tb.read_rows(tmp_path / "x.ods"))
    (tmp_path / "latin.csv").write_bytes("a,b\ncafé,1\n".encode("latin-1"))
    with pytest.raises(tb.TableFileError, match="not UTF-8"):
        list(tb.read_rows(tmp_path / "latin.csv"))


@pytest.mark.parametrize("value, op, arg, out", [
    ("  Acme ", "strip", True, "Acme"),
    ("Acme", "lower", True, "acme"),
    ("acme", "upper", True, "ACME"),
    ("2024", "prefix", "FY", "FY2024"),
    (2024.0, "prefix", "FY", "FY2024"),               # a spreadsheet's number reads as the integer it shows
    ("12", "suffix", "%", "12%"),
    ("USDm", "replace", {"USDm": "million USD"}, "million USD"),
    ("Q", "map", {"Q": "quality_loss"}, "quality_loss"),
    ("other", "map", {"Q": "quality_loss"}, "other"),  # not listed: passes as it is
    ("1,234", "multiply", 1000.0, 1234000.0),
    ('{"a": 0.6}', "from_json", True, {"a": 0.6}),
    ({"a": 1}, "from_json", True, {"a": 1}),
    ("2024-03-31", "date", "quarter", "2024Q1"),
    ("20241105", "date", "month", "2024-11"),
    (dt.datetime(2024, 7, 1), "date", "year", "2024"),
    ("2024/12/31", "date", "day", "2024-12-31"),
])
def test_transforms(value, op, arg, out):
    assert tb.apply_transform(value, op, arg) == out


@pytest.mark.parametrize("value, op, arg", [
    ("n/a", "multiply", 2.0), ("inf", "multiply", 2.0), ("{not json", "from_json", True), ("last year", "date", "year"),
])
def test_transforms_that_fail(value, op, arg):
    with pytest.raises(ValueError):
        tb.apply_transform(value, op, arg)


def test_map_row_columns_constants_then_transforms():
    row = {"Company": "Acme", "Year": 2024, "Amount": float("nan"), "When": dt.date(2024, 5, 1)}
    out = tb.map_row(row, {"entity": "Company", "period": "Year", "value": "Amount", "date": "When"}, {"lang": "en"},
                     {"period": [("prefix", "FY")], "entity": [("upper", True)]})
    assert out == {"entity": "ACME", "period": "FY2024", "value": None, "date": "2024-05-01", "lang": "en"}
    with pytest.raises(tb.MappingError) as err:
        tb.map_row({"c": "x"}, {"causes": "c"}, {}, {"causes": [("from_json", True)]})
    assert (err.value.field, err.value.rule) == ("causes", "transform_failed")
