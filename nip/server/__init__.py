"""The language-model server: OpenAI-compatible fine-tuning (and, with vLLM, inference)."""
