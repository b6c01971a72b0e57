"""The ConvMemory v2 ablation arms (docs/retrievers.md#ablation-arms): the one list every part reads (config
validation, the cascade, the trainer, the ablation table). Built in :func:`memrepro.retrievers.cascade.corrupt_texts`;
kept in a module of its own so the config layer can read it without importing the cascade (torch)."""

ARMS = ("full_text", "no_memory_text", "random_other_query_text", "shuffled_memory_text", "scalar_only")
RANDOM_ARMS = ("random_other_query_text", "shuffled_memory_text")  # the arms that draw from a generator
NO_TEXT_ARMS = ("no_memory_text", "scalar_only")  # the arms whose pairs carry no memory text (short, cheap)
