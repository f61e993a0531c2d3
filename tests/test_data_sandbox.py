"""The sandbox runs untrusted code in a confined child process and says how it ended."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nip.data import run_in_sandbox

pytestmark = pytest.mark.timeout(60)


def test_ordinary_code_runs_and_its_output_is_captured():
    result = run_in_sandbox("print(6 * 7)", timeout_s=10)
    assert result.ok
    assert result.stdout == "42\n"
    assert result.reason == ""


def test_an_exception_is_reported_as_an_error_with_its_last_traceback_line():
    result = run_in_sandbox("raise ValueError('bad input')", timeout_s=10)
    assert result.status == "error"
    assert result.reason == "ValueError: bad input"
    assert "Traceback" in result.stderr


def test_an_infinite_loop_is_killed_at_the_wall_clock_limit():
    result = run_in_sandbox("while True:\n    pass", timeout_s=1.5)
    assert result.status == "timeout"
    assert result.wall_s < 10


def test_a_loop_that_catches_everything_still_hits_the_cpu_limit():
    code = "while True:\n    try:\n        pass\n    except BaseException:\n        pass"
    result = run_in_sandbox(code, timeout_s=20, cpu_s=1)
    assert result.status == "timeout"
    assert "CPU" in result.reason


def test_a_memory_bomb_is_stopped_by_the_memory_limit():
    result = run_in_sandbox("blocks = [bytearray(2**20) for _ in range(10**6)]", memory_mb=256)
    assert result.status == "memory"
    assert "256 MiB" in result.reason


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.system('echo escaped')",
        "import os\nos.fork()",
        "import subprocess\nsubprocess.run(['echo', 'escaped'])",
        "import os\nos.execv('/bin/echo', ['echo', 'escaped'])",
    ],
    ids=["os.system", "fork", "subprocess", "exec"],
)
def test_starting_a_process_is_blocked_and_reported(code):
    result = run_in_sandbox(code, timeout_s=10)
    assert result.status == "violation"
    assert result.reason.startswith("blocked ")
    assert "escaped" not in result.stdout


def test_writing_outside_the_sandbox_directory_is_blocked(tmp_path: Path):
    target = tmp_path / "escaped.txt"
    result = run_in_sandbox(f"open({str(target)!r}, 'w').write('x')", timeout_s=10)
    assert result.status == "violation"
    assert "open" in result.reason
    assert not target.exists()


def test_leaving_the_directory_to_write_elsewhere_is_blocked(tmp_path: Path):
    code = f"import os\nos.chdir({str(tmp_path)!r})\nopen('escaped.txt', 'w')"
    result = run_in_sandbox(code, timeout_s=10)
    assert result.status == "violation"
    assert not (tmp_path / "escaped.txt").exists()


def test_deleting_a_file_outside_the_sandbox_is_blocked(tmp_path: Path):
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    result = run_in_sandbox(f"import os\nos.remove({str(victim)!r})", timeout_s=10)
    assert result.status == "violation"
    assert victim.read_text() == "precious"


def test_files_can_be_written_and_read_inside_the_sandbox_directory():
    code = "open('notes.txt', 'w').write('kept')\nprint(open('notes.txt').read())"
    result = run_in_sandbox(code, timeout_s=10)
    assert result.ok
    assert result.stdout == "kept\n"


def test_files_given_to_the_sandbox_are_in_its_working_directory():
    result = run_in_sandbox("print(open('data.txt').read())", files={"data.txt": "hello"})
    assert result.stdout == "hello\n"


def test_opening_a_socket_is_blocked():
    code = "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)"
    result = run_in_sandbox(code, timeout_s=10)
    assert result.status == "violation"
    assert "socket" in result.reason


def test_the_child_does_not_inherit_the_parents_environment(monkeypatch):
    monkeypatch.setenv("NIP_SECRET_FOR_TEST", "do-not-leak")
    result = run_in_sandbox("import os\nprint(os.environ.get('NIP_SECRET_FOR_TEST'))")
    assert result.stdout == "None\n"


def test_string_hashing_is_reproducible_by_default():
    code = "print(list({'apple', 'banana', 'cherry', 'damson'}))"
    first, second = run_in_sandbox(code), run_in_sandbox(code)
    assert first.stdout == second.stdout


def test_huge_output_is_cut_off_by_the_file_size_limit():
    result = run_in_sandbox("import sys\nsys.stdout.write('x' * 10**8)", max_file_mb=1)
    assert result.status != "ok"
    assert len(result.stdout) <= 2**20


def test_the_working_directory_is_removed_afterwards():
    result = run_in_sandbox("import os\nprint(os.getcwd())")
    assert not os.path.exists(result.stdout.strip())
