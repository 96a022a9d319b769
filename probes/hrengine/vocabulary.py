"""The names the engine shares with core, generated from core's tables (sharedVocabulary,
core/domain/types.cpp) by tests/gen_vocabulary.cpp: do not edit; ctest engine_vocabulary fails
when this file and the tables differ (gen_vocabulary --write rewrites it)."""

PHASES = ("after_load", "forward", "backward", "optimizer", "generation", "reference")

CATEGORIES = ("weights", "gradients", "optimizer_state", "activations", "logits", "temporaries", "communication", "allocator_slack", "cuda_context", "reference_model")

PRECISIONS = ("fp32", "bf16", "fp16", "amp-bf16", "amp-fp16")

OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion")

IMPLS = ("foreach", "fused", "for-loop")

FINETUNES = ("full", "lora", "qlora")

ATTENTIONS = ("sdpa", "eager", "flash")

LOSSES = ("standard", "fused")

MODES = ("sft", "dpo", "kto", "orpo", "reward", "grpo")

REFERENCES = ("adapter", "copy", "none")
