"""Test helpers that ship with nip: a local OpenAI-compatible server and tiny models."""
