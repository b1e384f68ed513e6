"""`sparklag`: lag and health of Spark streaming jobs from the command line.

    sparklag status /data/checkpoints/orders --bootstrap-servers broker:9092
    sparklag status s3a://bucket/ck/orders --bootstrap-servers b:9092 --json
    sparklag snapshot /data/checkpoints/orders --to s3a://bucket/snaps --bootstrap-servers b:9092
    sparklag migrate /data/checkpoints/orders --archive /data/archive --bootstrap-servers b:9092 \\
        --dry-run

Exit codes: 0 healthy, 1 lagging, 2 stalled / stopped / rewound / data lost, 3 unknown,
4 the check itself failed (bad checkpoint, unreachable storage or Kafka; the message says which).
`migrate` exits 5 when the migration is refused (nothing was changed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from airflow_sparklag.health import EXIT_CHECK_FAILED, Health

# Verdict name -> exit code, from the verdicts' own policy (Health.exit_code).
EXIT_CODES = {h.value: h.exit_code for h in Health}
EXIT_FAILED = EXIT_CHECK_FAILED

# CLI flag -> Thresholds field
THRESHOLD_FLAGS = {
    "max_lag": "max_lag_records_per_partition",
    "max_total_lag": "max_lag_records_total",
    "max_lag_seconds": "max_lag_seconds",
    "max_commit_age": "max_commit_age_seconds",
    "max_in_flight": "max_in_flight_seconds",
    "allowed_lag": "allowed_lag",
    "window": "window",
}


def load_kafka_config(path: str | None, bootstrap_servers: str | None) -> dict[str, Any]:
    """librdkafka settings from a JSON object or a .properties file, plus --bootstrap-servers."""
    config: dict[str, Any] = {}
    if path:
        text = Path(path).read_text()
        if text.lstrip().startswith("{"):
            config = json.loads(text)
        else:
            for raw in text.splitlines():
                line = raw.strip()
                if not line or line.startswith(("#", "!")):
                    continue
                key, sep, value = line.partition("=")
                if not sep:
                    key, _, value = line.partition(":")
                config[key.strip()] = value.strip()
    if bootstrap_servers:
        config["bootstrap.servers"] = bootstrap_servers
    if not config.get("bootstrap.servers"):
        raise SystemExit(
            "sparklag: give --bootstrap-servers or bootstrap.servers in --kafka-config"
        )
    return config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklag", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="lag and health of one or more checkpoints")
    status.add_argument(
        "checkpoints", nargs="*", help="checkpoint locations (path, s3a://, hdfs://)"
    )
    status.add_argument(
        "--prefix",
        action="append",
        default=[],
        help="also check every checkpoint found under this prefix (repeatable)",
    )
    status.add_argument(
        "--max-depth", type=int, default=4, help="directory levels searched under --prefix"
    )
    status.add_argument(
        "--no-progress", action="store_true", help="no progress line on stderr for many checks"
    )
    status.add_argument(
        "--query-ids",
        action="store_true",
        help="with several checkpoints or --prefix, also read each query id (+1 GET per job)",
    )
    status.add_argument("--bootstrap-servers", help="Kafka bootstrap servers")
    status.add_argument("--kafka-config", help="librdkafka settings: JSON or .properties file")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--history", type=int, default=10, help="batches of history to evaluate")
    status.add_argument(
        "--exact",
        action="store_true",
        help="time lag from the record timestamp at the committed offset",
    )
    status.add_argument(
        "--read-committed",
        action="store_true",
        default=None,
        help="measure against the last stable offset (transactional topics)",
    )
    status.add_argument(
        "--s3-endpoint-url", help="S3 endpoint (credentials: the AWS default chain)"
    )
    status.add_argument("--s3-region", help="S3 region")
    status.add_argument(
        "--webhdfs-url",
        action="append",
        help="WebHDFS URL http://namenode:9870 (repeat for NameNode HA)",
    )
    status.add_argument("--hdfs-user", help="user name for WebHDFS")
    for flag, field in THRESHOLD_FLAGS.items():
        status.add_argument(
            f"--{flag.replace('_', '-')}", type=float, dest=flag, help=f"threshold {field}"
        )
    add_snapshot_commands(sub)
    return parser


def _thresholds(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from airflow_sparklag.health import Thresholds

    given = {
        field: getattr(args, flag)
        for flag, field in THRESHOLD_FLAGS.items()
        if getattr(args, flag) is not None
    }
    return Thresholds.from_dict(given) if given else None


PROGRESS_MIN = 10  # checkpoints from which `status` shows a progress line


def _progress_line(done: int, total: int) -> None:
    """`read 120/1000 checkpoints` on stderr, rewritten in place; stdout stays clean."""
    if total < PROGRESS_MIN:
        return
    if done == total or done % max(1, total // 100) == 0:
        end = "\n" if done == total else ""
        print(f"\rsparklag: read {done}/{total} checkpoints", end=end, file=sys.stderr, flush=True)


def run_status(args: argparse.Namespace) -> int:
    from airflow_sparklag.errors import SparkLagError
    from airflow_sparklag.monitor import check_checkpoints
    from airflow_sparklag.render import render

    kafka_config = load_kafka_config(args.kafka_config, args.bootstrap_servers)
    if not args.checkpoints and not args.prefix:
        print("sparklag: give checkpoint locations or --prefix", file=sys.stderr)
        return EXIT_FAILED
    options: dict[str, Any] = {
        "kafka_config": kafka_config,
        **_storage_options(args),
        "thresholds": _thresholds(args),
        "history": args.history,
        "exact_time_lag": args.exact,
        "read_committed": args.read_committed,
    }
    try:
        if args.prefix or len(args.checkpoints) > 1:
            from airflow_sparklag.fleet import check_fleet

            progress = None if args.no_progress else _progress_line
            results = check_fleet(
                args.checkpoints,
                prefix=args.prefix,
                max_depth=args.max_depth,
                progress=progress,
                query_ids=args.query_ids,
                **options,
            )
        else:
            results = check_checkpoints(args.checkpoints, **options)
        if args.prefix and not results:
            print(f"sparklag: no checkpoint found under {', '.join(args.prefix)}", file=sys.stderr)
            return EXIT_FAILED
    except SparkLagError as exc:
        print(f"sparklag: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    worst = 0
    if args.json:
        payload = [r.to_dict() for r in results]
        print(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2))
    for i, result in enumerate(results):
        if not args.json:
            if i:
                print("\n" + "-" * 80 + "\n")
            if result.error is not None or result.report is None:
                print(f"checkpoint  {result.location}\nerror       {result.error}")
            else:
                print(render(result.report, result.verdict))
        code = (
            EXIT_FAILED
            if result.error is not None
            else EXIT_CODES.get(result.verdict.health.value, 3)
        )
        worst = max(worst, code)
    return worst


# -- snapshot / migrate ------------------------------------------------------------------------

EXIT_REFUSED = 5  # migrate: refused (or, with --dry-run, would be refused); nothing changed


def _storage_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument("--bootstrap-servers", help="Kafka bootstrap servers")
    command.add_argument("--kafka-config", help="librdkafka settings: JSON or .properties file")
    command.add_argument("--s3-endpoint-url", help="S3 endpoint (credentials: AWS default chain)")
    command.add_argument("--s3-region", help="S3 region")
    command.add_argument(
        "--webhdfs-url", action="append", help="WebHDFS URL (repeat for NameNode HA)"
    )
    command.add_argument("--hdfs-user", help="user name for WebHDFS")
    command.add_argument("--json", action="store_true", help="print JSON")


def add_snapshot_commands(sub: Any) -> None:
    snapshot = sub.add_parser(
        "snapshot", help="write a verified snapshot of a checkpoint's committed offsets"
    )
    snapshot.add_argument("checkpoint", help="checkpoint location (path, s3a://, hdfs://)")
    snapshot.add_argument("--to", required=True, help="snapshot root (path, s3a://, hdfs://)")
    snapshot.add_argument(
        "--consumer-group", help="also commit the offsets to this (idle) Kafka consumer group"
    )
    _storage_flags(snapshot)

    migrate = sub.add_parser(
        "migrate", help="snapshot, validate and archive a checkpoint for a new query"
    )
    migrate.add_argument("checkpoint", help="checkpoint location (path, s3a://, hdfs://)")
    migrate.add_argument("--archive", required=True, help="archive root for the old checkpoint")
    migrate.add_argument("--snapshot-to", help="snapshot root (default: the archive directory)")
    migrate.add_argument("--snapshot", help="use this existing snapshot instead of taking one")
    migrate.add_argument(
        "--file-sink-path", action="append", default=[], help="output path of a file sink"
    )
    migrate.add_argument(
        "--move-sink-log", action="store_true", help="move the file sinks' logs aside"
    )
    migrate.add_argument(
        "--quiet-period", type=float, default=60.0, help="seconds without commits (default 60)"
    )
    migrate.add_argument("--force", action="store_true", help="migrate even if it looks alive")
    migrate.add_argument(
        "--allow-data-loss", action="store_true", help="start from the log start on data loss"
    )
    migrate.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _storage_flags(migrate)


def _storage_options(args: argparse.Namespace) -> dict[str, Any]:
    s3_options = {
        key: value
        for key, value in (("endpoint_url", args.s3_endpoint_url), ("region_name", args.s3_region))
        if value
    }
    webhdfs_options: dict[str, Any] = {}
    if args.webhdfs_url:
        webhdfs_options["url"] = (
            args.webhdfs_url if len(args.webhdfs_url) > 1 else args.webhdfs_url[0]
        )
    if args.hdfs_user:
        webhdfs_options["user"] = args.hdfs_user
    return {"s3_options": s3_options or None, "webhdfs_options": webhdfs_options or None}


def run_snapshot(args: argparse.Namespace) -> int:
    from airflow_sparklag.errors import SparkLagError
    from airflow_sparklag.snapshot import snapshot_checkpoint

    kafka_config = load_kafka_config(args.kafka_config, args.bootstrap_servers)
    try:
        result = snapshot_checkpoint(
            args.checkpoint, args.to, kafka_config=kafka_config, **_storage_options(args)
        )
        payload = result.to_dict()
        if args.consumer_group:
            from airflow_sparklag.consumer_group import export_offsets

            offsets = {
                t: {int(p): o for p, o in ps.items()}
                for t, ps in result.snapshot.starting_offsets(source_id=None).items()
            }
            ends = (
                {
                    t: {p: po.log_end for p, po in ps.items()}
                    for t, ps in result.kafka.partitions.items()
                }
                if result.kafka
                else None
            )
            payload["consumer_group"] = export_offsets(
                kafka_config, args.consumer_group, offsets, log_ends=ends
            ).to_dict()
    except SparkLagError as exc:
        print(f"sparklag: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(f"snapshot    {payload['path']}")
        print(f"batch       {payload['committed_batch_id']} (committed)")
        if payload["in_flight_batch_id"] is not None:
            print(f"in flight   {payload['in_flight_batch_id']} (not used as the start)")
        for sid, offsets in payload["starting_offsets"].items():
            print(f"source {sid}    startingOffsets {json.dumps(offsets, separators=(',', ':'))}")
        if "consumer_group" in payload:
            group = payload["consumer_group"]
            print(f"group       {group['group_id']} (lag {group['total_lag']})")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    from airflow_sparklag.errors import SparkLagError
    from airflow_sparklag.migration import MigrationRefused, migrate_checkpoint

    kafka_config = load_kafka_config(args.kafka_config, args.bootstrap_servers)
    try:
        result = migrate_checkpoint(
            args.checkpoint,
            args.archive,
            kafka_config=kafka_config,
            snapshot_root=args.snapshot_to,
            snapshot=args.snapshot,
            quiet_period=args.quiet_period,
            force=args.force,
            allow_data_loss=args.allow_data_loss,
            file_sink_paths=args.file_sink_path,
            move_sink_log=args.move_sink_log,
            dry_run=args.dry_run,
            **_storage_options(args),
        )
    except MigrationRefused as exc:
        print(f"sparklag: refused: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except SparkLagError as exc:
        print(f"sparklag: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    payload = result.to_dict()
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(_render_migration(payload))
    return EXIT_REFUSED if result.refusals else 0


def _render_migration(payload: dict[str, Any]) -> str:
    lines = [
        f"checkpoint  {payload['checkpoint']}",
        f"status      {payload['status']}",
        f"snapshot    {payload['snapshot_path']}",
        f"archive to  {payload['archive_location']}",
        f"journal     {payload['journal_path']}",
        f"batch       {payload['committed_batch_id']} (committed; in flight: "
        f"{payload['in_flight_batch_id']})",
    ]
    for sid, offsets in payload["starting_offsets"].items():
        lines.append(
            f"source {sid}    startingOffsets {json.dumps(offsets, separators=(',', ':'))}"
        )
    if payload["partitions_added"]:
        lines.append(f"added       {payload['partitions_added']} (from earliest)")
    if payload["records_lost"]:
        lines.append(f"LOST        {payload['records_lost']}")
    if payload["replay_ranges"]:
        lines.append(f"replayed    {payload['replay_ranges']} (possible duplicates)")
    for sink in payload["sink_logs"]:
        lines.append(
            f"sink log    {sink['log']}: latest batch {sink['latest_batch_id']}: "
            f"{sink.get('action')}"
        )
    lines += [f"warning     {w}" for w in payload["warnings"]]
    lines += [f"REFUSED     {r}" for r in payload["refusals"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "status":
        return run_status(args)
    if args.command == "snapshot":
        return run_snapshot(args)
    if args.command == "migrate":
        return run_migrate(args)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
