"""Per-row decoding for a batch whose rows have different settings (torch; worker thread only).

``model.generate`` applies one set of settings to a batch and draws from torch's global
generator, so a row's sample would depend on its batch-mates. Here each row has its own
settings and :class:`torch.Generator`: :class:`RowSampler` picks its next token and hands
``generate`` a one-hot score row, decoded greedily.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor, StoppingCriteria


@dataclass(frozen=True)
class RowSettings:
    """How one generated sequence is decoded: ``greedy`` (temperature and top-p then ignored),
    ``temperature``, ``top_p`` (1.0: off), a CTRL-style ``repetition_penalty`` (1.0: off), its token
    limit, and the ``seed`` of its own generator."""

    greedy: bool
    temperature: float
    top_p: float
    repetition_penalty: float
    max_new_tokens: int
    seed: int


class RowSampler(LogitsProcessor):
    """Chooses each row's next token with that row's settings and generator (``pad_lengths``: each
    row's left-padding, never counted for the repetition penalty)."""

    def __init__(self, rows: list[RowSettings], pad_lengths: list[int], device: torch.device):
        self.device = device
        self.greedy = torch.tensor([r.greedy for r in rows], device=device)
        self.sampled_rows = [i for i, r in enumerate(rows) if not r.greedy]
        self.temperature = torch.tensor(
            [[max(r.temperature, 1e-6)] for r in rows], device=device, dtype=torch.float32
        )
        self.top_p = torch.tensor([[r.top_p] for r in rows], device=device, dtype=torch.float32)
        self.penalty = torch.tensor(
            [[r.repetition_penalty] for r in rows], device=device, dtype=torch.float32
        )
        self.uses_penalty = any(r.repetition_penalty != 1.0 for r in rows)
        self.pad_lengths = torch.tensor(pad_lengths, device=device)
        self.generators = {
            i: torch.Generator(device=device).manual_seed(rows[i].seed) for i in self.sampled_rows
        }

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.float()
        if self.uses_penalty:
            scores = self._penalise(input_ids, scores)
        chosen = scores.argmax(dim=-1)
        if self.sampled_rows:
            index = torch.tensor(self.sampled_rows, device=self.device)
            chosen[index] = self._sample(scores[index], index)
        one_hot = torch.full_like(scores, float("-inf"))
        one_hot.scatter_(1, chosen.unsqueeze(1), 0.0)
        return one_hot

    def _penalise(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=self.device)
        real = (positions.unsqueeze(0) >= self.pad_lengths.unsqueeze(1)).to(torch.int32)
        counts = torch.zeros(scores.shape, dtype=torch.int32, device=self.device)
        counts.scatter_add_(1, input_ids, real)
        penalised = torch.where(scores < 0, scores * self.penalty, scores / self.penalty)
        return torch.where(counts > 0, penalised, scores)

    def _sample(self, scores: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores / self.temperature[index], dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        outside = (cumulative - sorted_probs) >= self.top_p[index]
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        cumulative = sorted_probs.cumsum(dim=-1)
        uniforms = torch.stack(
            [
                torch.rand((), generator=self.generators[row], device=self.device)
                for row in self.sampled_rows
            ]
        )
        threshold = (uniforms * cumulative[:, -1]).unsqueeze(1)
        picked = torch.searchsorted(cumulative, threshold, right=True).clamp_(
            max=cumulative.shape[1] - 1
        )
        return order.gather(1, picked).squeeze(1)


class RowStop(StoppingCriteria):
    """Stops each row after its own token limit (``prompt_length``: where generation starts), and
    every row once ``event`` is set, from any thread (the backend is closing)."""

    def __init__(
        self, limits: list[int], prompt_length: int, event: threading.Event, device: torch.device
    ):
        self.limits = torch.tensor(limits, device=device)
        self.prompt_length = prompt_length
        self.event = event

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: object
    ) -> torch.BoolTensor:
        done = (input_ids.shape[1] - self.prompt_length) >= self.limits
        return done | self.event.is_set()
