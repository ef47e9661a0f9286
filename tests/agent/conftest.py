import pandas as pd
import pytest

from clap.agent.tools import ReportTools

CHUNKS = pd.DataFrame([
    {"chunk_id": "c01-annual-2022-p1", "doc_id": "c01-annual-2022", "page": 1, "lang": "en", "batch": "b1",
     "text": "Apex Precision Co. Annual Report 2022, page 1. Net profit for FY2022 was 1,234.50 RMB 10k. "
             "The FY2021 comparative for net profit was 1,000.00 RMB 10k."},
    {"chunk_id": "c01-annual-2023-p1", "doc_id": "c01-annual-2023", "page": 1, "lang": "en", "batch": "b2",
     "text": "Apex Precision Co. Annual Report 2023, page 1. Net profit for FY2023 was 1,500.00 RMB 10k."},
    {"chunk_id": "c02-annual-2022-p1", "doc_id": "c02-annual-2022", "page": 1, "lang": "en", "batch": "b1",
     "text": "Boreal Motors Co. Annual Report 2022, page 1. Net profit for FY2022 was 900.25 RMB 10k."},
    {"chunk_id": "c03-annual-2022-p2", "doc_id": "c03-annual-2022", "page": 2, "lang": "zh", "batch": "b1",
     "text": "宏源机械股份有限公司2022年年度报告，第2页。2022年，公司净利润为3,210.00万元。"},
])


@pytest.fixture
def tools():
    return ReportTools(CHUNKS)


@pytest.fixture
def lookup_task():
    """Apex's FY2022 net profit: search, read c01-annual-2022-p1, finish."""
    return {"task_id": "t1", "kind": "lookup", "answer": "1234.5 万元", "answer_type": "number",
            "entities": ["Apex Precision Co."], "needed_chunks": ["c01-annual-2022-p1"],
            "needed_reads": ["c01-annual-2022-p1"], "needed_values": [], "gold_calls": 2, "gold_steps": 3,
            "question": "What was Apex Precision Co.'s net profit for FY2022?"}
