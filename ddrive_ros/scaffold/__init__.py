"""Output schema, tokenizer, layout (positions and blocks) and codec (plan <-> tokens)."""
