"""Counting the tokens of prompts and completions before any model is called.

OpenAI's models are counted with ``tiktoken`` (``o200k_base`` for gpt-4o, gpt-4.1 and o;
``cl100k_base`` for gpt-4 and gpt-3.5) when it is installed (the ``cost`` extra) and its
encoding file is already here (a dry run makes no HTTP request). Fetch it once with a network::

    python -c "import tiktoken; tiktoken.get_encoding('o200k_base')"

Otherwise a token is four characters, rounded up (within 4 % of ``o200k_base`` on nip's
prompts).
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from nip.providers.openai import price_key

#: Where tiktoken downloads each encoding from (its cache file is named by this URL's SHA-1).
_ENCODING_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}

#: Tokens OpenAI adds around each chat message, and to prime the reply (its cookbook's
#: figures for the gpt-4o family; a name costs one more token).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_REPLY_PRIMING = 3


class TokenCounter(Protocol):
    """Counts the tokens of a text."""

    #: How the counting is done, for reports (``"o200k_base (tiktoken)"``, ``"chars/4"``).
    name: str

    def count(self, text: str) -> int:
        """The number of tokens of ``text``."""
        ...


@dataclass(frozen=True)
class CharsPerTokenCounter:
    """One token per ``chars_per_token`` characters, rounded up."""

    chars_per_token: float = 4.0

    @property
    def name(self) -> str:
        return f"chars/{self.chars_per_token:g}"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


class TiktokenCounter:
    """Exact counts with a tiktoken encoding."""

    def __init__(self, encoding: Any):
        self._encoding = encoding
        self.name = f"{encoding.name} (tiktoken)"

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


def encoding_name(model: str) -> str | None:
    """The tiktoken encoding of an OpenAI model, or None for other models."""
    key = price_key(model).removeprefix("ft:")
    if key.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")):
        return "o200k_base"
    if key.startswith(("gpt-4", "gpt-3.5")):
        return "cl100k_base"
    return None


def _tiktoken_cache_path(encoding: str) -> str | None:
    """Where tiktoken keeps ``encoding``'s file (its own rule), or None with caching off."""
    cache_dir = os.environ.get(
        "TIKTOKEN_CACHE_DIR",
        os.environ.get("DATA_GYM_CACHE_DIR", os.path.join(tempfile.gettempdir(), "data-gym-cache")),
    )
    if not cache_dir:
        return None
    key = hashlib.sha1(_ENCODING_URLS[encoding].encode()).hexdigest()
    return os.path.join(cache_dir, key)


def _offline_tiktoken(encoding: str) -> TiktokenCounter | None:
    try:
        import tiktoken
    except ImportError:
        return None
    path = _tiktoken_cache_path(encoding)
    if path is None or not os.path.isfile(path):
        return None  # tiktoken would download it: not in a dry run
    try:
        return TiktokenCounter(tiktoken.get_encoding(encoding))
    except Exception:  # a corrupt cache file: tiktoken would try to download it again
        return None


def token_counter(model: str) -> TokenCounter:
    """The best offline counter for ``model``: tiktoken where possible, else chars/4."""
    encoding = encoding_name(model)
    counter = _offline_tiktoken(encoding) if encoding else None
    return counter or CharsPerTokenCounter()


def count_chat_tokens(
    messages: Iterable[Mapping[str, Any]], counter: TokenCounter, *, reply: bool = True
) -> int:
    """The prompt tokens of a chat request (with ``reply=False``, of a training example): per
    message its content, role and :data:`TOKENS_PER_MESSAGE` (a ``name``: :data:`TOKENS_PER_NAME`).
    """
    total = TOKENS_REPLY_PRIMING if reply else 0
    for message in messages:
        total += TOKENS_PER_MESSAGE + counter.count(str(message.get("content") or ""))
        total += counter.count(str(message["role"]))
        if message.get("name"):
            total += TOKENS_PER_NAME + counter.count(str(message["name"]))
    return total


def filler_text(tokens: int) -> str:
    """A text of exactly ``tokens`` tokens for every counter here (``"the the ..."``):
    stands in for a response of that length when prompts are built ahead of a run."""
    return " ".join(["the"] * tokens) if tokens > 0 else "the"
