"""The training process of a local LoRA job: ``python -m nip.jobs.lora_train JOB_DIR``.

Reads ``spec.json`` (a :class:`~nip.jobs.FineTuneSpec`), trains a LoRA adapter with TRL
(``SFTTrainer`` or ``DPOTrainer``) and PEFT into ``JOB_DIR/adapter``, and reports through
``status.json`` and ``events.jsonl`` (losses). ``quantization="bitsandbytes"`` is QLoRA (CUDA
only). SFT's loss covers the agent's own ``assistant`` turns (templates without TRL's
``{% generation %}`` markers get a marked ChatML template). With ``stack_lora_adapters`` the
previous adapter is merged into the weights and a new one trained on top; its folder lists the
adapters beneath it (:mod:`nip.backends.local.adapters`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nip.extras import require
from nip.utils.files import atomic_write_text
from nip.utils.precision import cpu_dtype

#: ChatML with the assistant's content (and its end token) marked for the loss.
CHATML_TRAINING_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}"
    "{% endgeneration %}{{ '\\n' }}"
    "{%- else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def is_main_process() -> bool:
    """Whether this is the process that reports (rank 0 under ``accelerate launch``)."""
    return os.environ.get("RANK", "0") == "0"


def write_status(job_dir: Path, status: str, **fields: Any) -> None:
    """Replace ``status.json`` atomically (from the main process only)."""
    if not is_main_process():
        return
    data = {"status": status, "updated": time.time(), **fields}
    atomic_write_text(job_dir / "status.json", json.dumps(data))


def add_event(job_dir: Path, message: str, level: str = "info", **data: Any) -> None:
    if not is_main_process():
        return
    line = {"created_at": time.time(), "level": level, "message": message, "data": data}
    with (job_dir / "events.jsonl").open("a", encoding="utf-8") as file:
        file.write(json.dumps(line) + "\n")


def _strip(messages: list[dict]) -> list[dict]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def _sft_rows(examples: list[dict]) -> list[dict]:
    return [{"messages": _strip(e["messages"])} for e in examples]


def _dpo_rows(examples: list[dict]) -> list[dict]:
    return [
        {
            "prompt": _strip(e["input"]["messages"]),
            "chosen": _strip(e["preferred_output"]),
            "rejected": _strip(e["non_preferred_output"]),
        }
        for e in examples
    ]


class QuantizationUnavailableError(RuntimeError):
    """QLoRA was asked for where bitsandbytes cannot run (no CUDA device)."""


def quantized_loading_kwargs(quantization: str, cuda: bool) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments for the job's ``quantization`` (``bitsandbytes``: 4-bit
    NF4, double quantization, bf16 compute; the adapter trains in full precision).

    Raises:
        QuantizationUnavailableError: ``bitsandbytes`` without a CUDA device.
    """
    if quantization in ("none", None):
        return {}
    if quantization != "bitsandbytes":
        raise ValueError(f"unknown quantization {quantization!r}")
    if not cuda:
        raise QuantizationUnavailableError(
            "quantization='bitsandbytes' (QLoRA) needs a CUDA GPU; this job runs on the CPU. "
            "Set quantization='none' for this agent, or train on a GPU server"
        )
    import torch
    from transformers import BitsAndBytesConfig

    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    # Each process (under accelerate launch) loads its copy onto its own GPU.
    return {"quantization_config": config, "device_map": {"": int(os.environ.get("LOCAL_RANK", 0))}}


def trained_token_count(dataset: Any, max_length: int | None, epochs: float) -> int | None:
    """The tokens a job trains on, epochs included (OpenAI's ``trained_tokens``): every token
    of each tokenized example (a DPO pair counts its prompt twice, once with each answer),
    as truncated to ``max_length``; None for a dataset whose columns are not known."""
    columns = set(dataset.column_names)

    def cut(n: int) -> int:
        return n if max_length is None else min(n, max_length)

    if "input_ids" in columns:  # SFT
        per_epoch = sum(cut(len(ids)) for ids in dataset["input_ids"])
    else:  # DPO: TRL >= 1.0 names them *_ids, earlier versions *_input_ids
        names = next(
            (
                (f"prompt{s}", f"chosen{s}", f"rejected{s}")
                for s in ("_ids", "_input_ids")
                if {f"prompt{s}", f"chosen{s}", f"rejected{s}"} <= columns
            ),
            None,
        )
        if names is None:
            return None
        prompts, chosen, rejected = (dataset[name] for name in names)
        per_epoch = sum(
            cut(len(p) + len(c)) + cut(len(p) + len(r))
            for p, c, r in zip(prompts, chosen, rejected, strict=True)
        )
    return round(per_epoch * epochs)


def import_training_libraries() -> None:
    """Import what :func:`train` needs, so a process that trains later starts at once (and a
    job in a worker thread imports nothing while another thread may be importing)."""
    require("lora")
    import accelerate  # noqa: F401
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import trl  # noqa: F401
    from transformers import (  # noqa: F401
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
        PrinterCallback,
        TrainerCallback,
    )
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer  # noqa: F401
    from trl.chat_template_utils import has_generation_markers  # noqa: F401


@dataclass(frozen=True)
class TrainingOptions:
    """How a job trains, beside what its spec says (none of these change what it learns).

    Attributes:
        quiet: Print nothing (no progress bars or library warnings).
        stop: When set, training ends at the next step and no adapter is saved.
        mixed_precision: bfloat16 autocast over float32 weights; default on a GPU and on a CPU
            with native bfloat16 (:func:`~nip.utils.precision.cpu_dtype`).
        base_weights: The base weights already in this process, by model name, used instead of
            a second copy when they fit (same dtype and device, nothing to merge). Never written.
        low_memory: Micro-batches of one example (gradient accumulation: the same update) and
            gradient checkpointing. Default: on the CPU (about 2 GB less); off on a GPU.
        loaded_base: Called with the model name and the unquantized base weights a job loaded
            itself, so a later job may be given them.
    """

    quiet: bool = False
    stop: threading.Event | None = None
    mixed_precision: bool | None = None
    base_weights: Callable[[str], Mapping[str, Any] | None] | None = None
    low_memory: bool | None = None
    loaded_base: Callable[[str, Mapping[str, Any]], None] | None = None


def train(job_dir: Path, options: TrainingOptions | None = None) -> None:
    """Run the job described in ``job_dir/spec.json`` (``options``: how; default the defaults)."""
    from nip.backends.local._quiet import quiet_libraries
    from nip.backends.local.model_store import check_model_name

    require("lora")  # without the training libraries: the job fails with the install line
    # An unknown base model fails now, before the slow imports of the training libraries.
    check_model_name(json.loads((job_dir / "spec.json").read_text())["base_model"])
    options = options or TrainingOptions()
    with quiet_libraries() if options.quiet else contextlib.nullcontext():
        _train(job_dir, options)


def _base_model(spec: dict, options: TrainingOptions, cuda: bool, merges: bool):
    """The job's base model: sharing ``options.base_weights`` where they fit (never when
    adapters are to be merged into the weights: that would write into them), else
    loaded."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from nip.backends.local import ensure_local_model

    model_dir = ensure_local_model(spec["base_model"])
    dtype = torch.bfloat16 if cuda else torch.float32
    quantization = spec.get("quantization") or "none"
    weights = options.base_weights(spec["base_model"]) if options.base_weights else None
    device = "cuda" if cuda else "cpu"
    fits = (
        weights
        and quantization == "none"
        and not merges
        and all(w.dtype == dtype and w.device.type == device for w in weights.values())
    )
    if fits:
        from accelerate import init_empty_weights

        config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
        # Parameters without storage (buffers such as rotary frequencies are real)...
        with init_empty_weights(include_buffers=False):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        # assign=True: the model's parameters are the given tensors, not copies of them.
        model.load_state_dict(dict(weights), assign=True, strict=True)
        model.tie_weights()
        return model_dir, model, True
    quantized = quantized_loading_kwargs(quantization, cuda)
    if quantized:
        require("qlora")  # loading in 4 bits imports bitsandbytes
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, local_files_only=True, dtype=dtype, **quantized
    )
    if options.loaded_base is not None and quantization == "none" and not merges:
        model.to(device)  # where the trainer would put it: kept there for the next job
        options.loaded_base(spec["base_model"], MappingProxyType(dict(model.state_dict())))
    return model_dir, model, False


def _train(job_dir: Path, options: TrainingOptions) -> None:
    import torch
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import AutoTokenizer, TrainerCallback

    from nip.backends.local._memory import release_free_memory
    from nip.backends.local.adapters import predecessors, write_predecessors

    stop, quiet, mixed_precision = options.stop, options.quiet, options.mixed_precision
    spec = json.loads((job_dir / "spec.json").read_text())
    write_status(job_dir, "running")
    add_event(job_dir, f"Training started: {spec['method']} on {len(spec['examples'])} examples.")
    cuda = torch.cuda.is_available()
    quantization = spec.get("quantization") or "none"
    previous = spec.get("previous_adapter")
    # A stacked previous adapter only means something on top of its own predecessors.
    beneath: list[Path] = predecessors(previous) if previous else []  # oldest first
    merges = bool(beneath) or bool(previous and spec.get("stack_lora_adapters"))
    model_dir, model, shared = _base_model(spec, options, cuda, merges)
    if shared:
        add_event(job_dir, "The base model's weights are shared: already loaded in this process.")
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if quantization != "none":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model)
    peft_config: LoraConfig | None = LoraConfig(
        r=spec["lora_rank"],
        lora_alpha=spec["lora_alpha"],
        lora_dropout=spec["lora_dropout"],
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    if previous:
        for layer in beneath:
            model = PeftModel.from_pretrained(model, str(layer)).merge_and_unload()
        if spec.get("stack_lora_adapters"):
            # Fold the previous adapter into the weights, then train a new one on top.
            model = PeftModel.from_pretrained(model, previous).merge_and_unload()
            beneath.append(Path(previous))
        else:
            model = PeftModel.from_pretrained(model, previous, is_trainable=True)
            peft_config = None
    output = job_dir / "trainer"
    low_memory = (not cuda) if options.low_memory is None else options.low_memory

    class Progress(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            add_event(job_dir, "Model and data loaded; training steps begin.", step=0)

        def on_step_end(self, args, state, control, **kwargs):
            if stop is not None and stop.is_set():
                control.should_training_stop = True
            if low_memory:
                # Give the step's freed memory back to the OS, so peaks do not pile up (young
                # generations only: a full collection costs more than a tiny model's step).
                release_free_memory(generation=1)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                add_event(
                    job_dir,
                    f"step {state.global_step}: {json.dumps(logs)}",
                    step=state.global_step,
                    **logs,
                )

    micro_batch = 1 if low_memory else spec["batch_size"]
    common = dict(
        output_dir=str(output),
        num_train_epochs=spec["num_epochs"],
        learning_rate=spec["learning_rate"],
        per_device_train_batch_size=micro_batch,
        gradient_accumulation_steps=spec["batch_size"] // micro_batch,
        gradient_checkpointing=low_memory,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=spec["seed"],
        use_cpu=not cuda,
        bf16=(cuda or cpu_dtype(fast=True) == "bfloat16")
        if mixed_precision is None
        else mixed_precision,
        max_length=1024,
        disable_tqdm=quiet,
    )
    if spec["method"] == "supervised":
        from trl import SFTConfig, SFTTrainer
        from trl.chat_template_utils import has_generation_markers

        if not has_generation_markers(tokenizer.chat_template or ""):
            tokenizer.chat_template = CHATML_TRAINING_TEMPLATE
        args = SFTConfig(assistant_only_loss=True, **common)
        trainer_class, rows = SFTTrainer, _sft_rows
    else:
        from trl import DPOConfig, DPOTrainer

        args = DPOConfig(beta=spec.get("dpo_beta") or 0.1, **common)
        trainer_class, rows = DPOTrainer, _dpo_rows
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows(spec["examples"])),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[Progress()],
    )
    if quiet:  # without tqdm, transformers prints every log dict instead
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    result = trainer.train()
    if stop is not None and stop.is_set():
        return
    adapter_dir = job_dir / "adapter"
    if is_main_process():
        trainer.model.save_pretrained(str(adapter_dir))
        write_predecessors(adapter_dir, beneath)
    write_status(
        job_dir,
        "succeeded",
        adapter_path=str(adapter_dir),
        training_loss=float(result.training_loss),
        trained_tokens=trained_token_count(
            trainer.train_dataset, common["max_length"], spec["num_epochs"]
        ),
    )
    add_event(job_dir, f"Training finished: loss {result.training_loss:.4f}.")


def run_job(job_dir: Path, options: TrainingOptions | None = None) -> bool:
    """:func:`train`, a failure recorded in the job's status; whether it succeeded."""
    try:
        train(job_dir, options)
    except BaseException as error:
        message = f"{type(error).__name__}: {error}"
        write_status(job_dir, "failed", error=message, traceback=traceback.format_exc())
        add_event(job_dir, f"Training failed: {message}", level="error")
        return False
    return True


if __name__ == "__main__":
    sys.exit(0 if run_job(Path(sys.argv[1])) else 1)
