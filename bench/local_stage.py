"""Generation speed of the embedded model on a stage's work, beside the machine's matmul limit.

Run (SmolLM2-135M-Instruct on CPU)::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/local_stage.py
    HF_HUB_OFFLINE=1 .venv/bin/python bench/local_stage.py --dtype bfloat16 --threads 1 2
    HF_HUB_OFFLINE=1 .venv/bin/python bench/local_stage.py --prefix-cache-mb 0 256  # reuse off/on
    HF_HUB_OFFLINE=1 .venv/bin/python bench/local_stage.py --engine vllm  # vLLM's CPU build

A "stage" here is what sampling does in the README's main job: ``--dialogues`` conversations
at once, ``--rounds`` rounds each, every round re-sending the whole history (a system prompt
of about 400 tokens with a problem and a solution, then the turns), up to ``--tokens`` new
tokens per turn, greedy. Throughput counts prompt + completion tokens processed per second
of wall time (model loading and a warm-up excluded), as issue 14 asks; the answers of each
setting are printed as a hash, so settings that change them show it.

The matmul micro-benchmark multiplies a ``[tokens, 576] x [576, 1536]`` activation by a weight
(the model's MLP shape; 2·m·n·k FLOP) in the same dtype and thread count: the machine's
arithmetic limit for this model. A 135M-parameter model costs about 0.27 GFLOP per token, so
``limit tokens/s = matmul GFLOP/s / 0.27``, and the ratio is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import time

FLOP_PER_TOKEN = 2 * 134.5e6  # two FLOP per parameter and token

PROBLEM = (
    "Here is a programming problem and a proposed solution. Decide whether the solution is "
    "correct.\n\nProblem:\n```python\nfrom typing import List\n\n\ndef {name}(numbers: "
    'List[float], threshold: float) -> bool:\n    """ Check if in given list of numbers, are '
    "any two numbers closer to each other than\n    given threshold.\n    >>> {name}([1.0, "
    "2.0, 3.0], 0.5)\n    False\n    >>> {name}([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    "
    'True\n    """\n```\n\nSolution:\n```python\ndef {name}(numbers, threshold):\n    for '
    "idx, elem in enumerate(numbers):\n        for idx2, elem2 in enumerate(numbers):\n      "
    "      if idx != idx2:\n                distance = abs(elem - elem2)\n                if "
    "distance < threshold:\n                    return True\n    return False\n```\n\nYou "
    "talk with an expert who argues about the solution. End with 'Decision: accept' or "
    "'Decision: reject' when you are sure."
)


def matmul_gflops(dtype_name: str, tokens: int = 3072, seconds: float = 2.0) -> float:
    """GFLOP/s of a ``[tokens, 576]`` by ``[576, 1536]`` linear layer in ``dtype_name``."""
    import torch

    dtype = getattr(torch, dtype_name)
    a = torch.randn(tokens, 576, dtype=dtype)
    weight = torch.randn(1536, 576, dtype=dtype)  # stored as nn.Linear stores it
    linear = torch.nn.functional.linear
    for _ in range(3):
        linear(a, weight)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        linear(a, weight)
        count += 1
    return 2 * tokens * 576 * 1536 * count / (time.perf_counter() - start) / 1e9


async def stage(args, dtype: str, prefix_cache_mb: float) -> dict:
    from nip.backends import GenerationRequest
    from nip.backends.local import LocalBackend, LocalVllmBackend

    if args.engine == "vllm":  # vLLM's own prefix caching; its start is not timed
        backend = LocalVllmBackend(args.model, dtype=dtype, prefix_caching=prefix_cache_mb > 0)
    else:
        backend = LocalBackend(
            args.model,
            device="cpu",
            dtype=dtype,
            max_batch_size=args.dialogues,
            max_wait_ms=20,
            prefix_cache_mb=prefix_cache_mb,
        )
    name = args.model
    if args.adapter:
        name = "adapter"
        backend.register_adapter(name, args.adapter)

    def ask(messages) -> GenerationRequest:
        return GenerationRequest(name, tuple(messages), max_tokens=args.tokens, temperature=0)

    try:
        started = time.perf_counter()
        await backend.generate(ask([{"role": "user", "content": "Hi"}]))  # load, warm up
        load_s = time.perf_counter() - started
        before = backend.stats() if args.engine == "transformers" else None
        histories = [
            [
                {"role": "system", "content": PROBLEM.format(name=f"close_{i}")},
                {"role": "user", "content": "Expert: the solution is correct."},
            ]
            for i in range(args.dialogues)
        ]
        answers = []
        prompt = completion = 0
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.rounds):
            results = await asyncio.gather(*(backend.generate(ask(h)) for h in histories))
            for history, result in zip(histories, results, strict=True):
                text = result.completions[0].text or ""
                answers.append(text)
                prompt += result.usage.prompt_tokens
                completion += result.usage.completion_tokens
                history += [
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": "Expert: I disagree; look again."},
                ]
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        after = backend.stats() if before is not None else None
    finally:
        await backend.aclose()
    return {
        "load_s": load_s,
        "wall_s": wall,
        "cpu_s": cpu,  # this process's: vLLM's own processes are not counted
        "prompt_tokens": prompt,
        "reused": after.reused_prompt_tokens - before.reused_prompt_tokens if after else -1,
        "completion_tokens": completion,
        "tokens_per_s": (prompt + completion) / wall,
        "answers": hashlib.sha256("\x00".join(answers).encode()).hexdigest()[:12],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--dialogues", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=60)
    parser.add_argument("--dtype", nargs="+", default=["float32"])
    parser.add_argument("--threads", nargs="+", type=int, default=[os.cpu_count() or 1])
    parser.add_argument("--adapter", default=None, help="a LoRA adapter folder to generate with")
    parser.add_argument("--prefix-cache-mb", nargs="+", type=float, default=[0.0])
    parser.add_argument(
        "--engine",
        choices=["transformers", "vllm"],
        default="transformers",
        help="the Local engine (vllm: prefix caching on when --prefix-cache-mb > 0)",
    )
    args = parser.parse_args()

    import torch

    print(f"load average {os.getloadavg()[0]:.2f}")
    header = (
        f"{'dtype':<9}{'threads':>8}{'cache MB':>9}{'wall s':>8}{'CPU s':>7}{'prompt':>8}"
        f"{'reused':>8}{'new':>6}{'tok/s':>8}{'matmul GFLOP/s':>15}{'limit tok/s':>12}"
        f"{'ratio':>7}{'start s':>8}  answers"
    )
    print(header)
    for dtype in args.dtype:
        for threads in args.threads:
            torch.set_num_threads(threads)
            gflops = matmul_gflops(dtype)
            limit = gflops * 1e9 / FLOP_PER_TOKEN
            for cache_mb in args.prefix_cache_mb:
                row = asyncio.run(stage(args, dtype, cache_mb))
                print(
                    f"{dtype:<9}{threads:>8}{cache_mb:>9.0f}{row['wall_s']:>8.1f}"
                    f"{row['cpu_s']:>7.1f}{row['prompt_tokens']:>8}{row['reused']:>8}"
                    f"{row['completion_tokens']:>6}{row['tokens_per_s']:>8.0f}{gflops:>15.1f}"
                    f"{limit:>12.0f}{row['tokens_per_s'] / limit:>7.2f}{row['load_s']:>8.1f}"
                    f"  {row['answers']}"
                )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
