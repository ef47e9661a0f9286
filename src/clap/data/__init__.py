"""Data at any size: raw tables read in blocks, spilled by unit of work, global steps out of core
in DuckDB, units run here or on Ray, and the column-at-a-time fact steps. The stage is `clap.stages.assetize`."""
