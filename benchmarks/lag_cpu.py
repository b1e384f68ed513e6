"""CPU of compute_lag + evaluate per job, without storage or Kafka: synthetic 32-partition jobs.

    .venv/bin/python benchmarks/lag_cpu.py [--jobs 1000] [--topics 20] [--profile]

Each job reads one topic; the Kafka snapshot holds `--topics` topics of 32 partitions, like the
one snapshot a FleetChecker shares between all jobs of a fleet. Prints the CPU time (process
time, min of 3 passes) per job for history 1 and 10; `--profile` adds a cProfile of one pass.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import sys
import time
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_sparklag.checkpoint_files import BatchOffsets, CheckpointState, SourceOffset
from airflow_sparklag.health import evaluate
from airflow_sparklag.kafka import KafkaSnapshot, PartitionOffsets
from airflow_sparklag.lag import compute_lag
from airflow_sparklag.model.verdict import Thresholds

NOW = 1_700_000_100.0
PARTITIONS = 32


def make_job(
    rng: random.Random, history: int, topic: str, snapshot: KafkaSnapshot
) -> CheckpointState:
    """Committed batches climbing to (log end - a random lag of 0..50) on every partition."""
    ends = {p: po.log_end for p, po in snapshot.partitions[topic].items()}
    lag = {p: rng.randint(0, 50) for p in ends}
    batches = []
    for b in range(history):
        behind = (history - 1 - b) * 7
        offsets = {p: max(0, ends[p] - lag[p] - behind) for p in ends}
        kafka = MappingProxyType({topic: MappingProxyType(offsets)})
        source = SourceOffset("0", "kafka", kafka, json.dumps({topic: offsets}))
        batches.append(
            BatchOffsets(
                100 + b,
                1,
                int((NOW - 100 + b * 10) * 1000),
                0,
                MappingProxyType({}),
                (source,),
                NOW - 100 + b * 10,
            )
        )
    ids = tuple(b.batch_id for b in batches)
    last = batches[-1]
    return CheckpointState(
        "s3a://bench/ck", "q", last.batch_id, last, NOW - 10, None, tuple(batches), ids, ids, False
    )


def one_pass(jobs: list[tuple[CheckpointState, KafkaSnapshot]], thresholds: Thresholds) -> None:
    for state, snapshot in jobs:
        evaluate(compute_lag(state, snapshot, now=NOW), thresholds, now=NOW)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    rng = random.Random(1)
    topics = [f"topic-{t:02d}" for t in range(args.topics)]
    snapshot = KafkaSnapshot(
        {
            t: {p: PartitionOffsets(0, 10_000 + rng.randint(0, 1000), None) for p in range(32)}
            for t in topics
        },
        frozenset(),
        NOW,
        None,
    )
    thresholds = Thresholds()
    for history in (1, 10):
        jobs = [
            (make_job(rng, history, topics[i % len(topics)], snapshot), snapshot)
            for i in range(args.jobs)
        ]
        times = []
        for _ in range(3):
            start = time.process_time()
            one_pass(jobs, thresholds)
            times.append(time.process_time() - start)
        print(
            f"history={history}: {min(times) / args.jobs * 1000:.3f} ms CPU per "
            f"{PARTITIONS}-partition job (min of 3 passes over {args.jobs} jobs; snapshot of "
            f"{args.topics} topics; passes {', '.join(f'{t:.2f}' for t in times)} s)"
        )
        if args.profile and history == 1:
            profile = cProfile.Profile()
            profile.enable()
            one_pass(jobs, thresholds)
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
