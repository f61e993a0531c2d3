"""Test harness that :func:`nip.data.checking.check_solution` runs inside the sandbox.

Not imported by nip. Runs ``payload.json``'s steps and probes in the *solution's* namespace
(HumanEval tests call the prompt's helpers), re-seeding ``random`` before each, and prints
each result as one ``<nonce><json>`` line, apart from what the solution prints.
"""

import json
import random
import signal
import sys
import time


class StepTimeout(BaseException):
    """Raised when a step runs out of CPU time; ``except Exception`` cannot swallow it."""


def _on_alarm(signum, frame):
    raise StepTimeout


def _short(text, limit=300):
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _timed(thunk, seconds):
    # CPU time rather than wall-clock time, so that a busy machine does not change verdicts.
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        return thunk()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def _main():
    with open("payload.json", encoding="utf-8") as file:
        payload = json.load(file)
    out = sys.__stdout__
    nonce = payload["nonce"]

    def emit(record):
        out.write("\n" + nonce + json.dumps(record) + "\n")
        out.flush()

    signal.signal(signal.SIGPROF, _on_alarm)
    seed, step_timeout = payload["seed"], payload["step_timeout_s"]
    namespace = {"__name__": "__solution__", "__builtins__": __builtins__}
    random.seed(seed)
    try:
        _timed(lambda: exec(compile(payload["solution"], "<solution>", "exec"), namespace), 5)
        candidate = namespace[payload["entry_point"]]
        exec(compile(payload["setup"], "<tests>", "exec"), namespace)
    except BaseException as error:
        kind = {"kind": "load_error", "error_type": type(error).__name__}
        emit({**kind, "message": _short(str(error))})
        return
    namespace["candidate"] = candidate

    for index, step in enumerate(payload["steps"]):
        random.seed(seed + index)
        record = {"kind": "step", "index": index, "outcome": "passed"}
        start = time.perf_counter()
        try:
            code = compile(step["source"], f"<test {index}>", "exec")
            _timed(lambda code=code: exec(code, namespace), step_timeout)
        except StepTimeout:
            record["outcome"] = "timeout"
        except BaseException as error:
            record["outcome"] = "failed" if isinstance(error, AssertionError) else "error"
            record["error_type"] = type(error).__name__
            record["message"] = _short(str(error))
            if step["compare"] and isinstance(error, AssertionError):
                for key, expression in zip(("got", "expected"), step["compare"], strict=True):
                    random.seed(seed + index)
                    try:
                        value = _timed(lambda e=expression: eval(e, namespace), step_timeout)
                        record[key] = _short(repr(value))
                    except BaseException as inner:
                        record[key] = f"<{type(inner).__name__}>"
        record["seconds"] = round(time.perf_counter() - start, 4)
        emit(record)
        if record["outcome"] == "timeout" and payload["stop_on_timeout"]:
            break

    for index, probe in enumerate(payload["probes"]):
        random.seed(seed)
        record = {"kind": "probe", "index": index}
        try:
            value = _timed(lambda p=probe: eval(p, namespace), step_timeout)
            record["value"] = _short(repr(value), 2000)
        except BaseException as error:
            record["value"] = f"<{type(error).__name__}>"
        emit(record)
    emit({"kind": "done"})


_main()
