"""An interpreter that "has vLLM" for tests of code that looks for vLLM or starts it."""

from __future__ import annotations

import sys
from pathlib import Path

#: The source of a stand-in for ``python -m vllm.entrypoints.openai.api_server``: it answers
#: ``/health``, records adapter loads in ``$FAKE_VLLM_RECORD`` (if set), answers a chat request for
#: model ``m`` with "m answers" (after ``$FAKE_VLLM_DELAY_S`` seconds), exits with status 3
#: on a request for model ``crash``, and with ``$FAKE_VLLM_WORKER`` set starts a worker that
#: ignores SIGTERM (as vLLM's can) and writes its pid there. ``$FAKE_VLLM_NEVER_READY``
#: keeps ``/health`` at 503.
FAKE_VLLM_SERVER = r"""
print("fake vLLM starting", flush=True)
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port = int(sys.argv[sys.argv.index("--port") + 1])
record = os.environ.get("FAKE_VLLM_RECORD", os.devnull)
if os.environ.get("FAKE_VLLM_WORKER"):  # a worker that outlives SIGTERM, as vLLM's can
    import subprocess
    worker = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    pid = subprocess.Popen([sys.executable, "-c", worker]).pid
    with open(os.environ["FAKE_VLLM_WORKER"], "w") as file:
        file.write(str(pid))

class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        ready = self.path == "/health" and not os.environ.get("FAKE_VLLM_NEVER_READY")
        self.reply(200 if ready else 503, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if self.headers.get("authorization") != "Bearer " + os.environ["VLLM_API_KEY"]:
            return self.reply(401, {"error": "Unauthorized"})
        if self.path == "/v1/load_lora_adapter":
            with open(record, "a") as file:
                file.write(body["lora_name"] + " " + body["lora_path"] + "\n")
            return self.reply(200, {})
        if body.get("model") == "crash":
            os._exit(3)
        time.sleep(float(os.environ.get("FAKE_VLLM_DELAY_S", "0")))  # a slow model
        message = {"role": "assistant", "content": body["model"] + " answers"}
        self.reply(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    def log_message(self, *args):
        pass

print("fake vLLM listening", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def fake_vllm_python(folder: Path, api_server: str | None = None) -> str:
    """A shell script running this interpreter with a package named ``vllm`` on its path.

    Args:
        folder: Where the script and the package go.
        api_server: The source of ``vllm.entrypoints.openai.api_server`` (what
            ``python -m vllm.entrypoints.openai.api_server`` runs); None: the package is empty.

    Returns:
        The script's path, usable wherever an interpreter with vLLM is asked for.
    """
    package = folder / "site" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    if api_server is not None:
        server = package / "entrypoints" / "openai"
        server.mkdir(parents=True)
        (package / "entrypoints" / "__init__.py").write_text("")
        (server / "__init__.py").write_text("")
        (server / "api_server.py").write_text(api_server)
    script = folder / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={folder / "site"} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script)
