"""A team's own sources into the raw contract (`clap ingest`, docs/how-to/own-data.md).

    blocks.read_document(path)   a document as ordered blocks (heading, paragraph, table row) with page and section
    chunking.chunk_blocks(...)   blocks → chunks split on structure under a size bound
    ixbrl.extract_facts(...)     inline XBRL: every tagged numeric fact → a raw fact, or quarantined with its reason
    tables.read_mapped(...)      facts and decisions from CSV/XLSX/Parquet/JSONL with the user's column names
    pipeline.ingest(...)         a folder in, `chunks.jsonl`, `facts.jsonl`, `decisions.jsonl` and the report out
"""
