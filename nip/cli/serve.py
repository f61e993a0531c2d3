"""``nip serve``: the language-model server (see docs/self_hosted.md)."""

import argparse
import sys

HELP = "Run the language-model server: vLLM inference and LoRA SFT/DPO fine-tuning."
DESCRIPTION = (
    "Serve a base model and its LoRA fine-tunes behind the OpenAI API (chat completions, files, "
    "fine-tuning jobs). See docs/self_hosted.md."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--config", help="A ServerConfig as YAML or JSON; flags override it.")
    add("--host", help="Interface to listen on (default 127.0.0.1).")
    add("--port", type=int, help="Port (default 5000).")
    add("--api-key", help="Bearer token every request must carry (or $NIP_SERVER_API_KEY).")
    add("--storage-dir", help="Files, jobs, adapters and logs (default: user data dir).")
    add("--model", help="Base model: a Hugging Face folder or an embedded model name.")
    add("--served-model-name", help="The name clients use for the base model.")
    add("--engine", choices=["auto", "vllm", "transformers", "none"])
    add("--device", choices=["auto", "cuda", "cpu"])
    add("--vllm-python", help="Interpreter with vLLM installed (e.g. .vllm-venv/bin/python).")
    add("--vllm-port", type=int, help="vLLM's loopback port (0: any free port).")
    add("--vllm-startup-timeout-s", type=float)
    add("--max-lora-rank", type=int, help="Largest LoRA rank vLLM serves (default 64).")
    add("--max-loras", type=int, help="Adapters vLLM uses in one batch (default 4).")
    add("--gpu-sharing", choices=["fraction", "pause"])
    add("--gpu-memory-utilization", type=float)
    add("--tensor-parallel-size", type=int)
    add("--data-parallel-size", type=int, help="vLLM replicas behind the server.")
    add("--dtype", help="vLLM's --dtype.")
    add("--quantization", choices=["none", "bitsandbytes"], help="vLLM's --quantization.")
    add("--max-model-len", type=int)
    add("--enforce-eager", action="store_true", default=None)
    add("--inference-devices", help="CUDA_VISIBLE_DEVICES of vLLM.")
    add("--training-devices", help="CUDA_VISIBLE_DEVICES of training jobs.")
    add("--training-processes", type=int, help="Processes per job (accelerate launch).")
    add("--accelerate-config", help="An accelerate config file for training jobs.")
    add("--max-concurrent-jobs", type=int)
    # serve_in_background's child: it ends when this process is no longer its parent.
    add("--owner-pid", type=int, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    import os

    from nip.server.app import run_server
    from nip.server.config import API_KEY_ENV, InsecureServerError, ServerConfig
    from nip.utils.processes import exit_with_owner

    if args.owner_pid is not None:
        if os.getppid() != args.owner_pid:  # the owner died before we got here
            return 1
        exit_with_owner(args.owner_pid)
    # --config, then the flags given.
    config = ServerConfig.load(args.config) if args.config else ServerConfig()
    config.update(
        **{
            info.name: value
            for info in ServerConfig.fields_info()
            if (value := getattr(args, info.name, None)) is not None
        }
    )
    try:
        run_server(config, api_key=args.api_key or os.environ.get(API_KEY_ENV))
    except InsecureServerError as error:
        print(f"nip serve: {error}", file=sys.stderr)
        return 2
    return 0
