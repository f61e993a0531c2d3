"""Wall time of `python -c "import nip"` (target: under 0.5 s), median of repeated runs.

.venv/bin/python bench/import_time.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def median_wall(code: str, repeats: int = 9) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


if __name__ == "__main__":
    bare = median_wall("pass")
    with_nip = median_wall("import nip")
    print(f"python -c 'import nip': {with_nip:.3f} s (bare interpreter {bare:.3f} s)")
