"""What a finished (or running) run holds: its metrics, and judgements of its dialogues."""

from __future__ import annotations

from nip.utils.sync import run_sync


class RunResults:
    """The results methods of a trainer (mixed into it): analysis and metrics tables."""

    async def analyse_async(
        self, judge, *, analysers=None, split: str = "train"
    ) -> dict[str, float | None]:
        """Judge every saved dialogue of ``split`` with the ``judge`` model's parameters
        (:class:`~nip.parameters.PureTextAgentParameters`), store the judgements under
        ``analysis/`` and return the share of "yes" per analyser and agent.

        Each iteration's summary also goes to the run's logger (W&B), prefixed ``analysis_``
        and plotted against ``analysis_iteration``."""
        from nip.analysis.judges import ANALYSERS, analyse_async, summarise

        backend = self.session.backends.backend_for(judge)
        logger = self._logger or self._make_logger()
        summary: dict[str, float | None] = {}
        for iteration in range(self.state.iteration + 1):
            if not self.run_dir.has_rollouts(split, iteration):
                continue
            results = await analyse_async(
                self.run_dir.load_rollouts(split, iteration),
                self.session.handler,
                backend,
                model=judge.model_name,
                analysers=tuple(analysers or ANALYSERS),
                seed=self.hyper_params.seed,
            )
            self.run_dir.write_jsonl(
                f"analysis/{split}_it{iteration:04d}.jsonl", [r.to_dict() for r in results]
            )
            iteration_summary = summarise(results)
            self.run_dir.write_json(
                f"analysis/{split}_it{iteration:04d}_summary.json", iteration_summary
            )
            # No step: a finished run's W&B steps are past these iterations, and W&B drops
            # data logged at an earlier step.
            prefix = "analysis_" if split == "train" else f"analysis_{split}_"
            logged = {f"{prefix}{k}": v for k, v in iteration_summary.items()}
            logger.log({"analysis_iteration": iteration, **logged}, step=None)
            summary = iteration_summary
        if logger is not self._logger:
            logger.finish()
        return summary

    def analyse(self, judge, **kwargs) -> dict[str, float | None]:
        """Sync :meth:`analyse_async`."""
        return run_sync(self.analyse_async(judge, **kwargs))

    def analysis_dataframe(self, split: str = "train"):
        """Every stored judgement, one row each."""
        import pandas as pd

        rows = []
        for path in sorted((self.run_dir.path / "analysis").glob(f"{split}_it*[0-9].jsonl")):
            rows += self.run_dir.read_jsonl(path.relative_to(self.run_dir.path).as_posix())
        return pd.DataFrame(rows)

    def metrics_dataframe(self):
        """The run's metrics so far, one row per (split, iteration)."""
        return self.run_dir.metrics_dataframe()
