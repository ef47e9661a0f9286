"""The loop's names, defined once: the training chains and their trainers, the replay's arms and metrics. Every
stage, report, gate rule and config schema that names one of them imports it from here."""

from __future__ import annotations

# The extraction/decision chain, in order: SFT, then DPO and GRPO, both continuing SFT. The trainers themselves are
# declared by their stage modules (`clap.stages.trainers`, tested to agree with these names); these are the names
# the evaluation, admission and gate below the stages judge by.
CHAIN = ("sft", "dpo", "grpo")
# The tool-calling agent's chain, in order, and the reward model its RL step may use.
AGENT_CHAIN = ("agent_sft", "agent_dpo", "agent_grpo", "agent_rloo")
REWARD_MODEL = "agent_rm"
# The agent's task kinds (`clap.agent.tasks`): those trained on, then the held-out tool compositions only evaluation has.
AGENT_TRAIN_KINDS = ("lookup", "change", "convert", "compare", "unanswerable", "tool_error")
AGENT_HELD_OUT_KINDS = ("change_convert", "total")
AGENT_CORRECTED = "corrected"  # a trajectory a person corrected (repair/agent/): training only
AGENT_KINDS = (*AGENT_TRAIN_KINDS, *AGENT_HELD_OUT_KINDS, AGENT_CORRECTED)


# The application-chain replay (docs/design.md §4): arm → (adapter on, retrieval on), and what each arm is.
REPLAY_ARMS = {"A": (False, True), "B": (True, True), "C": (False, False), "D": (True, False)}
PROD_ARM = {"P": ("prod", True)}  # the adapter in prod + RAG: the champion the candidate must beat in the application
ARM_LABELS = {"A": "base + RAG", "B": "adapter + RAG", "C": "base alone", "D": "adapter alone", "P": "prod + RAG"}
REPLAY_CONTRASTS = {"B-A": ("A", "B"), "D-C": ("C", "D"), "B-P": ("P", "B")}  # (reference, new) arm
# Scored from the answer (the first six), then the retriever's two (the same for every arm).
REPLAY_ANSWER_METRICS = ("answer_json_parse", "value_exact", "period_exact", "core_fields_exact",
                         "evidence_chunk_exact", "evidence_doc_page_exact")
REPLAY_METRICS = (*REPLAY_ANSWER_METRICS, "retrieved_target_chunk", "retrieved_target_doc_page")
