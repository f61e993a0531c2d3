"""The suite's test ids, to prove a change dropped none (issue 25: every test kept).

    python scripts/test_ids.py > before.txt          # on the commit before the change
    python scripts/test_ids.py --against before.txt  # after it: exit 1 if an id is missing

Ids come from ``pytest --collect-only -q`` in this checkout, without workers (pytest-xdist
suffixes ``@group`` to the ids it reports, not to the collected ones). Renamed tests are listed
in RENAMED (old id -> new id), so that a rename is not taken for a dropped test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Tests renamed on purpose: old id -> new id.
RENAMED: dict[str, str] = {
    # Issue 36: the presets' testing is not the script's; sharing the provers' model is.
    f"tests/test_presets.py::test_the_paper_presets_share_one_prover_model_and_test_ten_times_"
    f"as_the_script[{preset}]": "tests/test_presets.py::"
    f"test_the_paper_presets_share_one_prover_model_as_the_script[{preset}]"
    for preset in [
        *(f"paper/{p}-ei" for p in ("adp", "debate", "merlin_arthur", "nip", "mnip")),
        "paper/solo_verifier-ei",
        "paper/nip-malt",
        "paper/mnip-malt",
    ]
}
# Stop 47: the stacked job trains in the test's process (the training is the same).
RENAMED["tests/test_local_lora.py::test_a_stacked_job_records_the_adapters_it_sits_on"] = (
    "tests/test_local_lora_in_process.py::test_a_stacked_job_records_the_adapters_it_sits_on"
)

# Issue 50: one HTTP stack (the OpenAI SDK), so the tests parametrized by client are one test.
_FAULTS = "tests/test_reliability_faults.py::test_with_ten_percent_of_requests_failing_every_"
_REDACTED = "tests/test_reliability_security.py::test_a_refused_key_is_redacted_from_errors_and_"
for _client in ("lean-300", "sdk-100"):
    RENAMED[f"{_FAULTS}dialogue_completes_unchanged[{_client}]"] = (
        f"{_FAULTS}dialogue_completes_unchanged"
    )
for _client in ("lean", "sdk"):
    RENAMED[f"{_REDACTED}debug_logs[{_client}]"] = f"{_REDACTED}debug_logs"
RENAMED[
    "tests/test_reliability_http_client.py::test_a_server_that_is_not_there_is_backend_unavailable"
] = (
    "tests/test_backend_openai.py::"
    "test_a_server_that_is_not_there_is_a_counted_connection_retry_then_unavailable"
)

#: Tests of internals that are gone, each with what covers its behaviour now (issue 50).
REMOVED: dict[str, str] = {
    "tests/test_protocols.py::test_the_protocols_that_accept_stance_randomisation_are_those_"
    "whose_class_applies_it": "one table now (PROTOCOL_ONLY_SETTINGS): the refusal tests in "
    "test_custom_protocol.py and test_verifier_first_false_is_refused_where_the_schedule_is_fixed",
    "tests/test_protocols.py::test_the_protocols_that_accept_verifier_first_are_those_whose_"
    "schedule_follows_it": "as above: no second copy left to compare",
    **{
        f"tests/test_reliability_http_client.py::{name}": "nip's own HTTP client is gone (httpx "
        "parses HTTP); faults: test_reliability_faults.py::test_every_injected_fault_is_one_"
        "counted_retry_and_each_call_is_answered_once (drop, reset, timeout...)"
        for name in (
            "test_a_body_cut_short_is_a_counted_connection_retry",
            "test_a_chunked_answer_is_reassembled",
            "test_a_keep_alive_connection_the_server_dropped_is_replaced_without_a_retry",
            "test_an_answer_without_a_length_ends_when_the_server_closes",
            "test_an_interim_100_continue_is_skipped",
        )
    },
}


def collected() -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    ids = sorted(line for line in result.stdout.splitlines() if "::" in line)
    if result.returncode != 0 or not ids:
        sys.exit(f"collection failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", type=Path, help="ids collected before (one per line)")
    args = parser.parse_args()
    now = collected()
    if args.against is None:
        print("\n".join(now))
        return 0
    before = [line.strip() for line in args.against.read_text().splitlines() if "::" in line]
    present = set(now)
    missing = [i for i in before if RENAMED.get(i, i) not in present and i not in REMOVED]
    added = sorted(present - {RENAMED.get(i, i) for i in before})
    print(f"{len(before)} ids before, {len(now)} now: {len(missing)} missing, {len(added)} new")
    for test_id in missing:
        print(f"missing: {test_id}")
    for test_id in (i for i in before if i in REMOVED):
        print(f"removed: {test_id} ({REMOVED[test_id]})")
    for test_id in added:
        print(f"new: {test_id}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
