"""How a run plan reads: a table per iteration, its jobs, and the differences between two
plans (:mod:`nip.training.plan`); each algorithm says how its iterations read."""

from __future__ import annotations

import html
from typing import Any

from nip.runs.plan_steps import GroupStep
from nip.training.algorithms import BY_NAME
from nip.training.cost_report import html_table, text_table
from nip.utils import counted


class PlanDisplay:
    """How a :class:`~nip.training.plan.RunPlan` reads (its base class): a table per
    iteration, and its jobs as sent."""

    def rows(self) -> list[dict[str, str]]:
        """One row per iteration: what it samples, tests and trains."""
        rows = []
        for it in self.iterations:
            count = str(it.test_items) if it.test_items or it.test_item_ids is not None else "all"
            test = f"{it.test_passes} x {count} {self.test_split}" if it.tests else "no test"
            train = "; ".join(_describe_step(g) for g in it.groups) or "nothing (last iteration)"
            algorithm = BY_NAME[it.algorithm]
            rows.append(
                {
                    "iteration": str(it.iteration),
                    "algorithm": algorithm.label,
                    "samples": f"{it.items} {self.train_split} {algorithm.unit}",
                    "test": test,
                    "fine-tuning": train,
                }
            )
        return rows

    def jobs(self) -> list[str]:
        """Each distinct job's settings, as sent to its provider, with the first iteration."""
        lines: dict[str, str] = {}  # by group and settings: the first iteration's line
        for it in self.iterations:
            for g in (g for g in it.groups if g.job is not None):
                settings = {k: v for k, v in g.job.items() if k not in ("suffix", "job_name")}
                key = f"{g.group}:{sorted(settings.items(), key=str)}"
                lines.setdefault(key, f"{g.group} (from iteration {it.iteration}): {settings}")
        return list(lines.values())

    def _headline(self) -> str:
        head = (
            f"Run plan: {self.protocol}, {self.trainer}, seed {self.seed}, "
            f"{counted(len(self.iterations), 'iteration')}"
        )
        if self.iterations and self.iterations[0].item_ids is None:
            head += " (the dataset is not at hand here: items are counted, not named)"
        return head

    def __str__(self) -> str:
        rows, jobs = self.rows(), self.jobs()
        if not rows:
            return self._headline()
        table = text_table(list(rows[0]), [list(r.values()) for r in rows], labels=len(rows[0]))
        shown = ["", "Jobs as sent to their provider:", *(f"  {j}" for j in jobs)] if jobs else []
        return "\n".join([self._headline(), table, *shown])

    def _repr_html_(self) -> str:
        rows, head = self.rows(), f"<b>{html.escape(self._headline())}</b>"
        if not rows:
            return head
        table = html_table(list(rows[0]), [list(r.values()) for r in rows], labels=len(rows[0]))
        jobs = "".join(f"<li><code>{html.escape(j)}</code></li>" for j in self.jobs())
        return (
            head
            + table
            + (f"<p>Jobs as sent to their provider:</p><ul>{jobs}</ul>" if jobs else "")
        )


def _describe_step(step: GroupStep) -> str:
    if step.method is None:
        return f"{step.group}: {step.skip}"
    data = step.data_iterations
    span = f"it {data[0]}" if len(data) == 1 else f"its {data[0]}-{data[-1]}"
    return f"{step.group}: {step.method} on {span}"


def plan_diff(old: Any, new: Any, where: str = "") -> list[str]:
    """Readable lines, one per value that differs between two plans' dicts (the keys of
    ``old``: a plan saved by an earlier nip recorded fewer)."""
    if isinstance(old, dict) and isinstance(new, dict):
        lines = []
        for key in old:
            lines += plan_diff(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
        return lines
    same_shape = (
        isinstance(old, list | tuple) and isinstance(new, list | tuple) and len(old) == len(new)
    )
    if same_shape and all(isinstance(v, dict) for v in (*old, *new)):
        pairs = zip(old, new, strict=True)
        return [line for i, (a, b) in enumerate(pairs) for line in plan_diff(a, b, f"{where}[{i}]")]
    if old != new:
        return [f"{where}: {_short(old)} -> {_short(new)}"]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
