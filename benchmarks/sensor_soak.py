"""Soak: the deferred SparkLagSensor's poll path over 100 jobs on S3, 1,000 polls.

    .venv/bin/python benchmarks/sensor_soak.py --mode triggers --jobs 100 --polls 1000 \\
        [--template-checkpoint /path/to/a/real/kafka/checkpoint] [--history 10]

Test bed: a real Kafka broker (KRaft) and the moto S3 server, each its own process. The jobs are
clones of ONE real Spark-written Kafka checkpoint (the given one, or one made by running a real
query first; see fleet_common), over real topics of 32 partitions, uploaded to moto in buckets
of ``--jobs-per-bucket``. The ``kafka`` and ``aws`` connections are ``AIRFLOW_CONN_*`` variables
pointing at the test bed, as a deployment would set them.

Modes:

- ``triggers`` (what a deferred sensor runs): one ``SparkLagTrigger`` per job, all in one event
  loop as in the triggerer, ``poll_interval=0``; each trigger's own ``run()`` loop polls (its
  hook's ``probe`` in a worker thread). The only change is a subclass whose hook counts polls
  and reports "done" after its ``--polls``-th real probe, so the trigger ends the way it does in
  production (event, then ``hook.close()``). A "poll" below is one poll of every job (100
  probes); the triggers run freely, so at a sample some are a poll or two ahead of others.
- ``check-many``: one ``SparkLagHook.check_many`` over all jobs per poll (a sensor of many jobs).

Every ``--every`` polls, ``--advancing`` random jobs commit a new batch (offsets/N, then
commits/N; same offsets as N-1) and Spark's retention is imitated (batch N-100 deleted; with
``--retain R``, batch N-R: ``--retain`` equal to ``--batches`` keeps every listing the same
length, so that CPU per poll does not grow with the checkpoints).

Prints, every ``--sample`` polls: RSS (VmRSS), tracemalloc current and peak since the last
sample, CPU seconds per poll of this process (getrusage) and of the moto server (/proc),
storage requests per poll (lines of moto's access log, minus this script's own uploads), and at
the end a flat-memory verdict and the clients the hooks shared (``SHARED_CLIENTS``). Not part
of the test suite.

``--no-tracemalloc`` leaves tracing off (it costs ~3x the CPU of a poll here): heap columns are
then 0 and the verdict judges RSS only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet_common import counting_s3_client, job_files, load_template, real_template, upload_s3

RETAINED = 100  # Spark's default minBatchesToRetain
KAFKA_CONN = "sparklag_soak_kafka"
AWS_CONN = "sparklag_soak_aws"
THRESHOLDS = {"max_lag_records_total": 10}  # every clone lags more: the sensors keep waiting


def rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of one process (a test-bed server), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# One request line of werkzeug's access log; it colours 4xx lines (a HEAD of a missing key is
# "\x1b[33mHEAD /b/k HTTP/1.1\x1b[0m" 404), which must count too.
_REQUEST_LINE = re.compile(rb'"(?:\x1b\[[0-9;]*m)?([A-Z]+) (\S+) HTTP/1\.1(?:\x1b\[[0-9;]*m)?" ')


class AccessLog:
    """Counts the requests moto served, from its werkzeug access log lines, in all and by
    kind: ``list`` (ListObjectsV2), ``get`` (GetObject), ``head`` (HeadObject), ``write``
    (PUT/POST/DELETE: this script's own uploads and purges)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.count = 0
        self.by_kind: dict[str, int] = {}

    def requests(self) -> int:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        complete = chunk.rfind(b"\n") + 1
        for method, target in _REQUEST_LINE.findall(chunk[:complete]):
            self.count += 1
            kind = _request_kind(method, target)
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        self.offset += complete
        return self.count


def _request_kind(method: bytes, target: bytes) -> str:
    if method == b"HEAD":
        return "head"
    if method != b"GET":
        return "write"
    path, _, query = target.partition(b"?")
    bucket_level = path.strip(b"/").count(b"/") == 0
    return "list" if b"list-type=" in query or bucket_level else "get"


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    return (
        sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    )


class Fleet:
    """The cloned jobs on S3 and the batches they commit during the soak."""

    def __init__(self, args: argparse.Namespace, s3: Any, template: Any, kafka: Any) -> None:
        self.template = template
        self.retain = args.retain
        self.client, self.own_requests = counting_s3_client(s3.options)
        topics = [
            kafka.create_topic(f"soak-{t}", partitions=args.partitions) for t in range(args.topics)
        ]
        for topic in topics:
            kafka.produce(topic, args.partitions * 400)
        ends = {topic: kafka.end_offsets(topic) for topic in topics}
        self.rng = random.Random(7)
        self.locations: list[str] = []
        self.keys: list[tuple[str, str]] = []
        self.next_batch: list[int] = []
        self.last_offsets: list[bytes] = []
        objects: list[tuple[str, str, bytes]] = []
        buckets = sorted({f"soak-{i // args.jobs_per_bucket:03d}" for i in range(args.jobs)})
        for bucket in buckets:
            self.client.create_bucket(Bucket=bucket)
        for i in range(args.jobs):
            bucket, prefix = f"soak-{i // args.jobs_per_bucket:03d}", f"job-{i:03d}"
            topic = topics[i % len(topics)]
            files = job_files(
                template, topic, ends[topic], batches=args.batches, state_objects=0, rng=self.rng
            )
            objects += [(bucket, f"{prefix}/{name}", data) for name, data in files.items()]
            last = max(int(n.split("/")[1]) for n in files if n.startswith("offsets/"))
            self.locations.append(f"s3a://{bucket}/{prefix}")
            self.keys.append((bucket, prefix))
            self.next_batch.append(last + 1)
            self.last_offsets.append(files[f"offsets/{last}"])
        upload_s3(self.client, objects)
        self.objects = len(objects)

    def advance(self, count: int) -> None:
        """`count` random jobs commit one new batch; retention deletes batch N - retain."""
        for i in self.rng.sample(range(len(self.locations)), count):
            (bucket, prefix), batch = self.keys[i], self.next_batch[i]
            put = self.client.put_object
            put(Bucket=bucket, Key=f"{prefix}/offsets/{batch}", Body=self.last_offsets[i])
            put(Bucket=bucket, Key=f"{prefix}/commits/{batch}", Body=self.template.commit)
            if batch - self.retain >= 0:
                for directory in ("offsets", "commits"):
                    key = f"{prefix}/{directory}/{batch - self.retain}"
                    self.client.delete_object(Bucket=bucket, Key=key)
            self.next_batch[i] += 1


class Recorder:
    """Samples memory, CPU and storage requests at poll boundaries; prints one JSON line each."""

    def __init__(self, jobs: int, log: AccessLog, fleet: Fleet, moto_pid: int) -> None:
        self.jobs, self.log, self.fleet, self.moto_pid = jobs, log, fleet, moto_pid
        self.samples: list[dict[str, float]] = []
        self.started = time.perf_counter()
        self.last = self._point(0.0)
        self.points = [self.last]

    def _point(self, polls: float) -> dict[str, float]:
        return {
            "polls": polls,
            "cpu": own_cpu(),
            "moto_cpu": process_cpu(self.moto_pid),
            "requests": self.log.requests() - self.fleet.own_requests(),
            "wall": time.perf_counter(),
            **{f"kind:{kind}": count for kind, count in self.log.by_kind.items()},
        }

    def sample(self, polls: float, spread: tuple[int, int] | None = None) -> None:
        point = self._point(polls)
        current, peak = tracemalloc.get_traced_memory()  # (0, 0) when tracing is off
        tracemalloc.reset_peak()
        done = max(point["polls"] - self.last["polls"], 1e-9)
        row: dict[str, Any] = {
            "poll": round(polls, 1),
            "rss_mb": round(rss_mb(), 1),
            "heap_mb": round(current / 2**20, 2),
            "heap_peak_mb": round(peak / 2**20, 2),
            "cpu_s_per_poll": round((point["cpu"] - self.last["cpu"]) / done, 4),
            "moto_cpu_s_per_poll": round((point["moto_cpu"] - self.last["moto_cpu"]) / done, 4),
            "storage_requests_per_poll": round(
                (point["requests"] - self.last["requests"]) / done, 1
            ),
            "wall_s_per_poll": round((point["wall"] - self.last["wall"]) / done, 3),
            "elapsed_s": round(point["wall"] - self.started, 1),
        }
        if spread is not None:
            row["probes_per_trigger_min_max"] = list(spread)
        self.samples.append(row)
        self.points.append(point)
        self.last = point
        print(json.dumps(row), flush=True)

    def by_kind_since(self, poll: float) -> dict[str, float]:
        """Requests per job per poll by kind from the first sample at ``poll`` on."""
        first = next(p for p in self.points if p["polls"] >= poll)
        last = self.points[-1]
        done = max(last["polls"] - first["polls"], 1e-9) * self.jobs
        kinds = sorted({k for k in last if k.startswith("kind:")})
        return {k[5:]: round((last[k] - first.get(k, 0)) / done, 3) for k in kinds}


async def run_triggers(args: argparse.Namespace, fleet: Fleet, recorder: Recorder) -> list:
    from airflow_sparklag.conditions import Probe
    from airflow_sparklag.triggers.sparklag import SparkLagTrigger

    counts = [0] * args.jobs

    class Counted(SparkLagTrigger):
        index = 0

        def _hook(self) -> Any:
            hook = super()._hook()
            real_probe = hook.probe

            def probe(condition: Any) -> Probe:
                result = real_probe(condition)  # the real poll
                counts[self.index] += 1
                if result.done or result.failed:
                    ended = result.message
                    raise RuntimeError(f"{self.location}: the sensor's wait ended: {ended}")
                if counts[self.index] >= args.polls:
                    return Probe(True, f"soak over after {args.polls} polls", {})
                return result

            hook.probe = probe
            return hook

    events: list[dict[str, Any]] = []

    async def drive(index: int, location: str) -> None:
        trigger = Counted(
            location,
            thresholds=THRESHOLDS,
            history=args.history,
            kafka_config_id=KAFKA_CONN,
            aws_conn_id=AWS_CONN,
            poll_interval=0.0,
        )
        trigger.index = index
        async for event in trigger.run():
            events.append(event.payload)

    tasks = [asyncio.create_task(drive(i, loc)) for i, loc in enumerate(fleet.locations)]
    next_sample, next_advance = args.sample, args.every
    while not all(task.done() for task in tasks):
        await asyncio.sleep(0.05)
        polls = sum(counts) / args.jobs
        while polls >= next_advance and next_advance <= args.polls:
            await asyncio.to_thread(fleet.advance, args.advancing)
            next_advance += args.every
        if polls >= next_sample or (polls >= 1 and not recorder.samples):
            recorder.sample(polls, (min(counts), max(counts)))
            if polls >= next_sample:
                next_sample += args.sample
    await asyncio.gather(*tasks)
    if recorder.samples[-1]["poll"] < args.polls:
        recorder.sample(sum(counts) / args.jobs, (min(counts), max(counts)))
    return events


def run_check_many(args: argparse.Namespace, fleet: Fleet, recorder: Recorder) -> list:
    from airflow_sparklag.hooks.sparklag import SparkLagHook

    hook = SparkLagHook(kafka_config_id=KAFKA_CONN, aws_conn_id=AWS_CONN)
    errors: list[str] = []
    try:
        for poll in range(1, args.polls + 1):
            results = hook.check_many(fleet.locations, thresholds=THRESHOLDS, history=args.history)
            errors += [f"poll {poll}: {r.error}" for r in results if r.error]
            if poll == 1 or poll % args.sample == 0:
                recorder.sample(float(poll))
            if poll % args.every == 0:
                fleet.advance(args.advancing)
    finally:
        hook.close()
    return errors


def verdict(samples: list[dict[str, Any]], sample_every: int) -> dict[str, Any]:
    """RSS growth and tracemalloc trend from the first full interval to the end."""
    steady = [s for s in samples if s["poll"] >= sample_every - 1]
    first, last = steady[0], steady[-1]
    rss_growth = (last["rss_mb"] - first["rss_mb"]) / first["rss_mb"]
    polls = [s["poll"] for s in steady]
    heap_slope = slope(polls, [s["heap_mb"] for s in steady])  # MB per poll
    rss_slope = slope(polls, [s["rss_mb"] for s in steady])
    span = polls[-1] - polls[0]
    heap_fit_growth = heap_slope * span / first["heap_mb"] if first["heap_mb"] else 0.0
    return {
        "from_poll": first["poll"],
        "to_poll": last["poll"],
        "rss_mb": [first["rss_mb"], last["rss_mb"]],
        "rss_growth_pct": round(100 * rss_growth, 2),
        "rss_slope_kb_per_100_polls": round(rss_slope * 100 * 1024, 1),
        "heap_mb": [first["heap_mb"], last["heap_mb"]],
        "heap_slope_kb_per_100_polls": round(heap_slope * 100 * 1024, 1),
        "heap_fit_growth_pct": round(100 * heap_fit_growth, 2),
        "flat": rss_growth < 0.05 and heap_fit_growth < 0.05,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("triggers", "check-many"), default="triggers")
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--polls", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=100, help="print every N polls")
    parser.add_argument("--every", type=int, default=10, help="new batches every N polls")
    parser.add_argument("--advancing", type=int, default=10, help="jobs with a new batch")
    parser.add_argument("--history", type=int, default=10, help="the sensor's history")
    parser.add_argument("--batches", type=int, default=20, help="retained batches per clone")
    parser.add_argument(
        "--retain", type=int, default=RETAINED, help="batches kept as new ones come (Spark: 100)"
    )
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=32)
    parser.add_argument("--jobs-per-bucket", type=int, default=10)
    parser.add_argument("--template-checkpoint", type=Path)
    parser.add_argument(
        "--no-tracemalloc", action="store_true", help="RSS only (tracing triples the CPU)"
    )
    args = parser.parse_args()

    from testbed.kafka_broker import KafkaBroker
    from testbed.s3_server import S3Server

    workdir = Path(tempfile.mkdtemp(prefix="sparklag-sensor-soak-"))
    kafka = KafkaBroker(workdir / "kafka").start()
    s3 = S3Server(workdir / "s3").start()
    try:
        os.environ[f"AIRFLOW_CONN_{KAFKA_CONN.upper()}"] = json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka.bootstrap}}
        )
        options = s3.options
        os.environ[f"AIRFLOW_CONN_{AWS_CONN.upper()}"] = json.dumps(
            {
                "conn_type": "aws",
                "login": options["aws_access_key_id"],
                "password": options["aws_secret_access_key"],
                "extra": {
                    "endpoint_url": options["endpoint_url"],
                    "region_name": options["region_name"],
                },
            }
        )
        if args.template_checkpoint:
            template = load_template(args.template_checkpoint)
        else:
            template = real_template(workdir, kafka, "soak-template")
        started = time.perf_counter()
        fleet = Fleet(args, s3, template, kafka)
        print(
            f"# {args.jobs} jobs, {fleet.objects} objects in "
            f"{-(-args.jobs // args.jobs_per_bucket)} buckets, uploaded in "
            f"{time.perf_counter() - started:.0f} s; mode {args.mode}, history {args.history}, "
            f"{args.advancing} jobs commit a batch every {args.every} polls",
            flush=True,
        )
        assert s3.process is not None
        if not args.no_tracemalloc:
            tracemalloc.start()
        recorder = Recorder(args.jobs, AccessLog(s3.process.log), fleet, s3.process.pid)
        if args.mode == "triggers":
            events = asyncio.run(run_triggers(args, fleet, recorder))
            unexpected = [
                e for e in events if e.get("message") != f"soak over after {args.polls} polls"
            ]
            print(f"# {len(events)} trigger events, unexpected: {unexpected[:3]}", flush=True)
        else:
            errors = run_check_many(args, fleet, recorder)
            print(f"# check errors: {len(errors)} {errors[:3]}", flush=True)
        result = verdict(recorder.samples, args.sample)
        steady = [s for s in recorder.samples if s["poll"] >= args.sample - 1]
        cpu = sorted(s["cpu_s_per_poll"] for s in steady)
        requests = sorted(s["storage_requests_per_poll"] for s in steady)
        result["cpu_s_per_poll_median"] = cpu[len(cpu) // 2]
        result["storage_requests_per_poll_median"] = requests[len(requests) // 2]
        result["per_job_per_poll_by_kind"] = recorder.by_kind_since(args.sample - 1)
        result["wall_s"] = recorder.samples[-1]["elapsed_s"]
        print("# verdict " + json.dumps(result), flush=True)
        from airflow_sparklag.hooks.sparklag import SHARED_CLIENTS

        shared = [f"{k.kind} {k.conn_id}" for k in SHARED_CLIENTS.cached_keys()]
        print(f"# clients shared by the {args.jobs} jobs' hooks: {shared}", flush=True)
    finally:
        s3.stop()
        kafka.stop()


if __name__ == "__main__":
    main()
