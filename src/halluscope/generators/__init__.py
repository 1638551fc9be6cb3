"""Generators that build benchmarks and stress tests: montage lies, meaning-preserving perturbations,
hallucination injection. Each writes harness-format ``Example`` JSONL."""
