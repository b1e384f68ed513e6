"""Size of a check's XCom against the job's partition count: the full ``CheckResult.to_dict()``
and the bounded form the Airflow classes store (``airflow_sparklag.compact``).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/xcom_size.py [--partitions 10 100 1000 10000]

Each job reads one topic of N partitions; its checkpoint keeps 10 committed batches (every
partition's offset history then has 10 entries, as a check that reads the whole window
records); ``compute_lag`` and ``evaluate`` (the real code) make the result. Two verdicts: the
default thresholds (OK), and ``max_lag_records_per_partition=10`` where every partition
breaches (the verdict names each one). Prints the JSON bytes of each form and the time
``json.loads`` takes to decode it (what the job view pays per check it reads whole).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lag_cpu import NOW, make_job

from airflow_sparklag.compact import compact
from airflow_sparklag.health import evaluate
from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets
from airflow_sparklag.lag import compute_lag
from airflow_sparklag.model.verdict import Thresholds
from airflow_sparklag.monitor import CheckResult


def result(partitions: int, thresholds: Thresholds) -> dict:
    rng = random.Random(partitions)
    offsets = {p: PartitionOffsets(0, 10_000_000 + rng.randint(0, 100_000), None)
               for p in range(partitions)}  # fmt: skip
    snapshot = KafkaSnapshot({"orders": offsets}, frozenset(), NOW, None)
    state = make_job(rng, 10, "orders", snapshot)
    report = compute_lag(state, snapshot, now=NOW)
    verdict = evaluate(report, thresholds, now=NOW)
    return CheckResult(report, verdict, state.location).to_dict()


def measure(value: dict) -> tuple[int, float]:
    text = json.dumps(value)
    start = time.perf_counter()
    for _ in range(5):
        json.loads(text)
    return len(text), (time.perf_counter() - start) / 5 * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[10, 100, 1000, 10000])
    args = parser.parse_args()
    print("| partitions | verdict | full: bytes | decode | compact: bytes | decode | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in args.partitions:
        for name, thresholds in (
            ("OK", Thresholds()),
            ("every partition breaches", Thresholds(max_lag_records_per_partition=10)),
        ):
            full = result(n, thresholds)
            size, decode = measure(full)
            small, small_decode = measure(compact(full))
            print(
                f"| {n:,} | {name} | {size:,} | {decode:.2f} ms | {small:,} | "
                f"{small_decode:.2f} ms | {size / small:.1f}x |"
            )


if __name__ == "__main__":
    main()
