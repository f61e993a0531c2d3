"""Notebook widgets (ipywidgets 8): forms, prompt inspector, step-through, launcher, monitors.

::

    form = ParametersForm(params)                  # edits params in place
    PromptInspector(dialogue)                      # the exact messages an agent is sent
    DialogueController(dialogue)                   # Next round / Regenerate / Branch / Run
    FineTuneLauncher(group, transcripts)           # preview, launch, watch, switch
    RunMonitor(trainer)                            # live dashboard (or RunMonitor(run_dir))
    SweepMonitor(sweep)                            # a sweep's cells (or SweepMonitor(dir))

Needs the ``notebook`` extra (``pip install 'nip[notebook]'``); ``import nip`` never loads it.
"""

from nip.extras import needs

with needs("widgets"):  # without ipywidgets: one line naming the extra
    from nip.widgets.config_form import OptionalControl, ParametersForm, agents_for_protocol
    from nip.widgets.job_monitor import FineTuneLauncher, job_loss, job_progress
    from nip.widgets.run_monitor import JobSnapshot, RunMonitor, RunSnapshot
    from nip.widgets.step_controller import DialogueController, PromptInspector
    from nip.widgets.sweep_monitor import SweepMonitor

__all__ = [
    "DialogueController",
    "FineTuneLauncher",
    "JobSnapshot",
    "OptionalControl",
    "ParametersForm",
    "PromptInspector",
    "RunMonitor",
    "RunSnapshot",
    "SweepMonitor",
    "agents_for_protocol",
    "job_loss",
    "job_progress",
]
