"""Generation and judgement: the engines that answer (`generate`, `generate_vllm`), the grammar they decode
under (`decoding`), answers reused by content (`answer_store`), the metrics, the paired statistics, and the
tables and report that show them. The stages are `clap.stages.evaluate*` and `clap.stages.replay`."""
