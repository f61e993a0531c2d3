"""``serve_in_background``: ``nip serve`` owned by a notebook or a script, never left running.

Each test starts a real server (the transformers engine on the tiny model, a free port) and
checks that it stops in one of the ways its owner can go: a ``with`` block, ``stop()``, an
exception inside the block, the owning process killed with SIGKILL, a Jupyter kernel restart.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from nip import serve_in_background
from nip.server.background import (
    VLLM_PYTHON_ENV,
    ServerHandle,
    ServerStartError,
    _tail,
    find_vllm_python,
)
from tests.doubles.fake_vllm import fake_vllm_python
from tests.doubles.tiny_model import build_tiny_chat_model

#: Every wait in these tests ends by then (a loaded machine included).
WAIT_S = 90.0


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny-chat"))


def start(model: str, **settings) -> ServerHandle:
    return serve_in_background(
        model, engine="transformers", device="cpu", show_progress=False, **settings
    )


def is_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting to be reaped has ended too)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def wait_until_gone(pid: int) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not is_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return is_gone(pid)


def test_a_background_server_is_ready_when_returned_and_answers_chat(tiny_model):
    with start(tiny_model) as server:
        reply = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={
                "model": server.model_name,
                "messages": [{"role": "user", "content": "Is the code correct?"}],
                "max_tokens": 4,
            },
            timeout=WAIT_S,
        )
        assert server.engine_kind == "transformers"
        assert server.health()["engine"]["state"] == "ready"
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]


def test_health_checks_share_one_tls_context(tiny_model, ca_bundle_reads):
    """Waiting for a server polls its health; each check read the CA bundle (~30 ms)."""
    with start(tiny_model) as server:
        for _ in range(3):
            assert server.health()["engine"]["kind"] == "transformers"
    assert len(ca_bundle_reads) == 1


def test_the_with_block_stops_the_server(tiny_model):
    with start(tiny_model) as server:
        pid = server.pid
    assert not server.running and wait_until_gone(pid)


def test_an_exception_inside_the_with_block_stops_the_server_and_propagates(tiny_model):
    with pytest.raises(ZeroDivisionError), start(tiny_model) as server:  # a failing cell
        pid = server.pid
        1 / 0  # noqa: B018
    assert wait_until_gone(pid)


def test_stop_ends_the_server_and_a_second_stop_does_nothing(tiny_model, tmp_path):
    server = start(tiny_model, storage_dir=str(tmp_path / "srv"))
    server.stop()
    server.stop()
    assert wait_until_gone(server.pid)
    assert "stopped" in repr(server)
    assert (tmp_path / "srv" / "logs" / "serve.log").exists()  # a given storage is kept


def test_a_temporary_storage_folder_goes_with_the_server(tiny_model):
    server = start(tiny_model)
    storage = server.storage
    assert storage.is_dir()
    server.stop()
    assert not storage.exists()


def test_agent_params_point_self_hosted_agents_at_the_server(tiny_model):
    with start(tiny_model, served_model_name="tiny") as server:
        params = server.agent_params(lora_rank=8, max_response_words=20)
    assert params.model_provider == "SelfHosted" and params.model_name == "tiny"
    assert params.language_model_server_scheme_host == "http://127.0.0.1"
    assert params.language_model_server_port == server.port
    assert (params.lora_rank, params.max_response_words) == (8, 20)


def test_the_handle_shows_a_status_card_with_the_end_of_the_server_log(tiny_model):
    with start(tiny_model) as server:
        card = server._repr_html_()
    assert server.url in card and "transformers" in card and "engine ready" in card
    assert "Application startup complete" in card  # uvicorn's line, from the log's tail
    assert "GET /health" not in card  # the handle's own polls would bury everything else


def test_a_server_that_cannot_start_is_an_error_with_its_log_and_is_gone(tmp_path):
    with pytest.raises(ServerStartError, match="exited with status") as caught:
        start(str(tmp_path / "no-such-model"), storage_dir=str(tmp_path / "srv"))
    assert "no-such-model" in str(caught.value)  # the log's end names what went wrong


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_asking_for_vllm_where_the_interpreter_has_none_names_the_fix(tiny_model):
    with pytest.raises(ServerStartError, match=r"setup_vllm_cpu\.sh"):
        serve_in_background(tiny_model, engine="vllm", vllm_python=sys.executable)


def test_a_server_whose_owner_is_killed_with_sigkill_stops_too(tiny_model, tmp_path):
    script = textwrap.dedent(
        f"""
        import time
        from nip import serve_in_background
        server = serve_in_background(
            {tiny_model!r}, engine="transformers", device="cpu", show_progress=False
        )
        print(server.pid, flush=True)
        time.sleep({WAIT_S})
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(owner.stdout.readline())  # the owner exits (and this fails) on a start error
        assert not is_gone(pid)
        owner.kill()  # SIGKILL: no atexit, no finalizer
        owner.wait(timeout=WAIT_S)
        assert wait_until_gone(pid)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


@pytest.mark.notebook  # starts a Jupyter kernel: not in the quick tier
def test_a_kernel_restart_stops_the_server_started_in_the_kernel(tiny_model):
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=WAIT_S)
    printed: list[str] = []

    def keep_stdout(message: dict) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])

    try:
        code = (
            "from nip import serve_in_background\n"
            f"server = serve_in_background({tiny_model!r}, engine='transformers', "
            "device='cpu', show_progress=False)\n"
            "print(server.pid)"
        )
        reply = client.execute_interactive(code, timeout=WAIT_S, output_hook=keep_stdout)
        assert reply["content"]["status"] == "ok", reply["content"]
        pid = int("".join(printed).split()[-1])
        assert not is_gone(pid)
        manager.restart_kernel()
        assert wait_until_gone(pid)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_the_interpreter_named_by_the_environment_is_the_vllm_one(tmp_path, monkeypatch):
    python = fake_vllm_python(tmp_path)
    monkeypatch.setenv(VLLM_PYTHON_ENV, python)

    assert find_vllm_python() == python


def test_none_in_the_environment_turns_vllm_off_unless_one_is_named(tmp_path, monkeypatch):
    python = fake_vllm_python(tmp_path)
    monkeypatch.setenv(VLLM_PYTHON_ENV, "none")
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".vllm-venv" / "bin").mkdir(parents=True)
    (tmp_path / ".vllm-venv" / "bin" / "python").symlink_to(python)  # would be found
    assert find_vllm_python() is None
    assert find_vllm_python(explicit=python) == python


def test_an_interpreter_asked_for_without_vllm_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv(VLLM_PYTHON_ENV, fake_vllm_python(tmp_path))

    assert find_vllm_python(explicit=str(tmp_path / "missing-python")) is None


def test_a_log_tail_leaves_out_terminal_colour_codes(tmp_path):
    """vLLM colours its log even into a file; the card would show the codes as text."""
    log = tmp_path / "vllm.log"
    log.write_text("\x1b[0;36m(APIServer pid=1)\x1b[0;0m \x1b[32mINFO\x1b[0m Route: /v1/models\n")
    assert _tail(log, 5) == "(APIServer pid=1) INFO Route: /v1/models\n"
