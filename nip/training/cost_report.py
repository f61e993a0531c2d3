"""The records of a dry run (made by :func:`~nip.training.cost_estimate.estimate_cost`):
what each stage of each iteration will cost, summed and shown as text, HTML or a DataFrame."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from nip.extras import needs
from nip.runs.spend import sum_known
from nip.utils import counted

if TYPE_CHECKING:
    import pandas as pd

Stage = Literal["train", "test", "fine-tune"]


@dataclass(frozen=True)
class CostLine:
    """What one agent costs in one stage of one iteration.

    Attributes:
        model: The price-table key priced (``ft:gpt-4o-mini``; for a job, the model trained).
        free: Served by the dummy API, the embedded model or one's own server: 0 USD.
        items / dialogues: Datapoints and full dialogues (MALT: trees and all their leaves).
        calls: Model requests, an upper bound from the turn schedule.
        examples: Fine-tuning examples (SFT conversations or DPO pairs), an upper bound.
        training_tokens: Tokens billed for fine-tuning: the examples' tokens times epochs.
        usd: The estimated price, or None when the model has no price.
    """

    iteration: int
    stage: Stage
    agent: str
    model: str
    free: bool = False
    items: int = 0
    dialogues: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    examples: int = 0
    training_tokens: int = 0
    usd: float | None = 0.0


_SUMMED = ("calls", "prompt_tokens", "completion_tokens", "examples", "training_tokens")


@dataclass
class CostEstimate:
    """What a run will cost, estimated before any model is called (see ``estimate_cost``).

    ``str(estimate)`` is the table ``nip run CONFIG --dry-run`` prints; in Jupyter it shows
    as HTML. ``lines`` has one :class:`CostLine` per (iteration, stage, agent), ``unpriced``
    the models without a price, ``plan`` the :class:`~nip.training.plan.RunPlan` priced.
    """

    protocol: str
    trainer: str
    num_iterations: int
    lines: list[CostLine] = field(default_factory=list)
    tokenizers: dict[str, str] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    unpriced: list[str] = field(default_factory=list)
    plan: Any = None

    # ------------------------------------------------------------------ sums
    @property
    def total_usd(self) -> float | None:
        """The whole run's estimated price (None when a model has no price)."""
        return sum_known(line.usd for line in self.lines)

    @property
    def total_calls(self) -> int:
        return sum(line.calls for line in self.lines)

    def _grouped(self, key: Callable[[CostLine], tuple]) -> list[dict[str, Any]]:
        groups: dict[tuple, list[CostLine]] = {}
        for line in self.lines:
            groups.setdefault(key(line), []).append(line)
        rows = []
        for lines in groups.values():
            row: dict[str, Any] = {name: sum(getattr(x, name) for x in lines) for name in _SUMMED}
            # Every agent of a stage goes through the same items and dialogues.
            row["items"] = max(x.items for x in lines)
            row["dialogues"] = max(x.dialogues for x in lines)
            row["usd"] = sum_known(x.usd for x in lines)
            rows.append({**asdict(lines[0]), **row})
        return rows

    def by_stage(self) -> list[dict[str, Any]]:
        """One row per (iteration, stage), every agent summed."""
        return self._grouped(lambda line: (line.iteration, line.stage))

    def by_kind(self) -> list[dict[str, Any]]:
        """One row per kind of stage (``train``, ``test``, ``fine-tune``), all else summed."""
        return self._grouped(lambda line: (line.stage,))

    def shares(self) -> str:
        """Each kind of stage's share of the run, in USD where all is priced and something
        costs, else in calls (``train 55 % ($1.20), ...``), and how to test after training."""
        rows = self.by_kind()
        total = self.total_usd
        priced = total is not None and total > 0
        whole = total if priced else self.total_calls
        if not whole:
            return ""

        def share(row: dict[str, Any]) -> str:
            part = row["usd"] if priced else row["calls"]
            money = f" (${part:,.2f})" if priced else ""
            return f"{row['stage']} {100 * part / whole:.0f} %{money}"

        text = ("of the cost: " if priced else "of the model calls: ") + ", ".join(
            share(r) for r in rows
        )
        if any(r["stage"] == "test" and (r["usd"] if priced else r["calls"]) for r in rows):
            text += (
                "; to test after training instead (as the paper's script did): "
                "--set text_rl.test_scheme=none, then nip retest RUN_DIR --passes N"
            )
        return text

    def by_agent(self) -> list[dict[str, Any]]:
        """One row per (agent, priced model), every iteration summed."""
        return self._grouped(lambda line: (line.agent, line.model))

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (iteration, stage, agent), with every :class:`CostLine` field."""
        with needs("dataframes"):
            import pandas as pd

        return pd.DataFrame(
            [asdict(line) for line in self.lines], columns=[f.name for f in fields(CostLine)]
        )

    # --------------------------------------------------------------- display
    def _headline(self) -> str:
        total = self.total_usd
        price = "unknown (no price for " + ", ".join(self.unpriced) + ")"
        if total is not None:
            price = f"${total:,.2f}"
        return (
            f"Dry run of {self.protocol} with {self.trainer}, "
            f"{counted(self.num_iterations, 'iteration')}: {self.total_calls:,} model calls "
            f"at most, about {price}"
        )

    def _tables(self) -> list[tuple[tuple[str, ...], list[list[str]]]]:
        """The two tables shown: per (iteration, stage), and per (agent, priced model)."""
        counts = ("calls", "prompt tok", "compl. tok", "examples", "train tok", "USD")
        stages = [
            [str(row["iteration"]), row["stage"], *_stage_cells(row)] for row in self.by_stage()
        ]
        agents = [
            [row["agent"], row["model"], *_usage_cells(row, say_free=True)]
            for row in self.by_agent()
        ]
        return [
            (("iter", "stage", "items", "dialogues", *counts), stages),
            (("agent", "model", *counts), agents),
        ]

    def __str__(self) -> str:
        tokenizers = ", ".join(f"{a}: {t}" for a, t in self.tokenizers.items())
        shares = self.shares()
        parts = [self._headline(), *([shares] if shares else [])]
        for head, rows in self._tables():
            parts += ["", text_table(head, rows)]
        parts += [
            "",
            f"tokens counted with {tokenizers}",
            "assumes:",
            *(f"  - {a}" for a in self.assumptions),
        ]
        return "\n".join(parts)

    def __repr__(self) -> str:
        return f"CostEstimate({self._headline()})"

    def _repr_html_(self) -> str:
        tokenizers = ", ".join(f"{a}: {t}" for a, t in self.tokenizers.items())
        assumptions = "".join(f"<li>{html.escape(a)}</li>" for a in self.assumptions)
        tables = "".join(html_table(head, rows) for head, rows in self._tables())
        shares = self.shares()
        shares = f"<p>{html.escape(shares)}</p>" if shares else ""
        return (
            f"<div><b>{html.escape(self._headline())}</b>{shares}{tables}"
            f"<small>tokens counted with {html.escape(tokenizers)}; assumes:"
            f"<ul>{assumptions}</ul></small></div>"
        )


def _usage_cells(row: dict[str, Any], *, say_free: bool = False) -> list[str]:
    """calls, prompt, completion, examples, training tokens and USD of a summed row."""
    usd = "?" if row["usd"] is None else f"{row['usd']:.4f}"
    if say_free and row["free"]:
        usd = "free"
    return [
        f"{row['calls']:,}",
        f"{row['prompt_tokens']:,}",
        f"{row['completion_tokens']:,}",
        f"{row['examples']:,}",
        f"{row['training_tokens']:,}",
        usd,
    ]


def _stage_cells(row: dict[str, Any]) -> list[str]:
    cells = [f"{row['items']:,}", f"{row['dialogues']:,}", *_usage_cells(row)]
    blank = (0, 1, 2, 3, 4) if row["stage"] == "fine-tune" else (5, 6)
    return ["-" if i in blank else c for i, c in enumerate(cells)]


def text_table(head: Sequence[str], rows: list[list[str]], labels: int = 2) -> str:
    """A plain-text table: its first ``labels`` columns aligned left, the numbers right."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        first = [f"{c:<{w}}" for c, w in zip(cells[:labels], widths[:labels], strict=True)]
        rest = [f"{c:>{w}}" for c, w in zip(cells[labels:], widths[labels:], strict=True)]
        return "  ".join(first + rest).rstrip()

    return "\n".join([line(head), *(line(r) for r in rows)])


def html_table(head: Sequence[str], rows: list[list[str]], labels: int = 2) -> str:
    """:func:`text_table` in HTML."""

    def cell(tag: str, index: int, text: str) -> str:
        align = "left" if index < labels else "right"
        return f'<{tag} style="text-align:{align}">{html.escape(text)}</{tag}>'

    body = "".join(
        "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table><tr>{''.join(cell('th', i, h) for i, h in enumerate(head))}</tr>{body}</table>"
