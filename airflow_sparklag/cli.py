"""`sparklag`: lag and health of Spark streaming jobs from the command line.

Examples and the exit codes (0-4 the health or a failed check, 5 `migrate` refused, 64 usage,
75 `wait` gave up): README.md. Never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
from typing import TYPE_CHECKING, Any

from airflow_sparklag import params
from airflow_sparklag.errors import InvalidParameter, MigrationRefused, SparkLagError, UsageError
from airflow_sparklag.model.result import (
    CHECK_FAILED,
    CheckResult,
    check_document,
    document,
    summary_of,
)
from airflow_sparklag.model.verdict import EXIT_CHECK_FAILED, EXIT_USAGE, Health, Thresholds
from airflow_sparklag.redact import kafka_secrets, printable, scrub, secret_parts
from airflow_sparklag.storage.s3 import READERS

if TYPE_CHECKING:
    from airflow_sparklag.fleet import FleetChecker
    from airflow_sparklag.monitor import CheckOptions
    from airflow_sparklag.session import Session

EXIT_REFUSED = 5  # migrate: refused (or, with --dry-run, would be refused); nothing changed
EXIT_TIMEOUT = 75  # wait: --max-wait passed first (sysexits EX_TEMPFAIL)
EXIT_INTERRUPTED = 130
# The commands whose --json prints a document (docs/json.md), failures included.
DOCUMENTED = ("status", "wait", "snapshot", "migrate", "history")

# Thresholds field (its flag: --max-lag-seconds, as in docs/names.md) -> what it decides, for
# --help; its default is the Thresholds field's unless said.
THRESHOLD_HELP = {
    "max_lag_records_per_partition": "LAGGING when a partition lags more than N records",
    "max_lag_records_total": "LAGGING when the partitions together lag more than N records",
    "max_lag_seconds": "LAGGING when the oldest unprocessed record waited longer",
    "max_commit_age_seconds": "STOPPED when records wait and no batch committed for longer",
    "max_in_flight_seconds": "STALLED when the batch in flight runs longer",
    "min_time_to_loss_seconds": "LAGGING when retention would delete an unread record sooner "
    "(default: the smaller of 6h and --min-time-to-loss-ratio of the retention)",
    "min_time_to_loss_ratio": "the same as a share of the topic's retention, 0 to 1 "
    "(default: 0.25 unless --min-time-to-loss-seconds alone is given)",
    "min_time_to_breach_seconds": "LAGGING when a lag threshold set above will be crossed "
    "sooner, at the current production and consumption rates",
    "max_batch_time_ratio": "LAGGING when batches take more than this share of their trigger "
    "interval, e.g. 0.8",
    "allowed_lag": "records per partition that still count as caught up",
    "window": "batches of history the trend rules look at",
    "min_window": "fewest batches the trend rules need",
}
PROGRESS_MIN = 10  # checkpoints from which `status` shows a progress line
EPILOG = """\
durations take a unit: 500ms, 90s, 5m, 1h, 1d (a bare number is seconds)
exit codes: 0 healthy, 1 lagging, 2 stalled/stopped/rewound/data lost, 3 unknown,
  4 the check failed, 5 migrate refused, 64 usage or configuration error,
  75 wait gave up; several jobs: the verdict to act on first (2, 1, then 4, 3, 0)
docs: README.md and docs/index.md"""


# -- reading flags -----------------------------------------------------------------------------


def _thresholds(args: argparse.Namespace) -> Thresholds:
    given = {field: getattr(args, field) for field in THRESHOLD_HELP}
    try:
        return Thresholds.from_dict({k: v for k, v in given.items() if v is not None})
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_options(args: argparse.Namespace) -> CheckOptions:
    from airflow_sparklag.monitor import CheckOptions

    return params.from_flags(CheckOptions, args, thresholds=_thresholds(args))


def open_session(args: argparse.Namespace, *, kafka_required: bool = True) -> Session:
    """The one session of a command: storage options and Kafka from the flags."""
    from airflow_sparklag.kafka import load_kafka_config
    from airflow_sparklag.session import Session

    config = load_kafka_config(args.kafka_config, args.bootstrap_servers)
    if kafka_required and not config.get("bootstrap.servers"):
        raise UsageError("give --bootstrap-server (or bootstrap.servers in --kafka-config)")
    # main() shares this list with its error handler: errors raised later are scrubbed too.
    getattr(args, "secrets", []).extend(_secrets(config))
    # --timeout bounds each storage attempt too (S3: 3 attempts, (min(5, t) + t) x 3 s at most).
    bounds = {"connect_timeout": min(5.0, args.timeout), "read_timeout": args.timeout}
    storage = params.storage_flags(args)
    return Session(
        kafka_config=config,
        kafka_timeout=args.timeout,
        source_kafka=params.source_configs("--source-servers", args.source_servers or [], config),
        s3_options={**storage["s3_options"], **bounds},
        webhdfs_options={**storage["webhdfs_options"], **bounds},
    )


# Credentials the AWS default chain reads from the environment (not the *_FILE paths).
AWS_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


def _secrets(config: dict[str, Any]) -> list[str]:
    """What the command never prints: the Kafka config's secrets, and the AWS credentials of
    the environment (botocore may quote them in an error)."""
    found = list(kafka_secrets(config))
    for name in AWS_SECRET_ENV:
        found.extend(secret_parts(os.environ.get(name, "")))
    return found


# -- parser ------------------------------------------------------------------------------------


CHECK, OUTPUT, THRESHOLDS, UNTIL = "what to check", "output", "thresholds", "what to wait for"
LOCATION = "checkpoint location (path, s3a://, hdfs://)"
Flag = tuple[str, str, dict[str, Any]]  # its --help group, its name, its argparse settings


def _flag(group: str, name: str, text: str, **settings: Any) -> Flag:
    """A flag of the tables below; ``read=`` (a reader of :mod:`params`) is its type."""
    if "read" in settings:
        settings["type"] = params.FlagType(name[2:].replace("-", "_"), settings.pop("read"))
    return group, name, {"help": text, **settings}


def _port(name: str, value: Any) -> int:
    port = params.count(name, value)
    if port > 65535:
        raise params.invalid(name, f"must be a port number 0-65535, got {port}")
    return port


def _fleet_flags(prefix_help: str) -> tuple[Flag, ...]:
    return (
        _flag(CHECK, "checkpoints", "checkpoint locations (path, s3a://, ...)", nargs="*"),
        _flag(CHECK, "--prefix", prefix_help, action="append", default=[]),
        _flag(CHECK, "--max-depth", "levels searched under --prefix", read=params.count, default=4),
    )


STATUS_FLAGS = (
    *_fleet_flags("also check every checkpoint under it"),
    _flag(
        CHECK,
        "--query-ids",
        "also read each job's query id from its metadata file (one more GET per job)",
        action="store_true",
    ),
    _flag(OUTPUT, "--detail", "with several jobs, every partition of each", action="store_true"),
    _flag(OUTPUT, "--no-progress", "no progress line on stderr", action="store_true"),
    _flag(
        OUTPUT,
        "--explain",
        "a line per job: what was read to judge it and which rule asked for it "
        "(always in --json: 'evidence')",
        action="store_true",
    ),
)
WAIT_FLAGS = (
    _flag(UNTIL, "condition", "what to wait for", choices=("health", "progress", "catch-up")),
    _flag(UNTIL, "checkpoint", "checkpoint location"),
    _flag(UNTIL, "--accept", "health: verdicts that end the wait", default="OK"),
    _flag(
        UNTIL,
        "--fail-fast",
        "health: verdicts that fail at once (never STOPPED for a scheduled job)",
        default="DATA_LOSS,STOPPED",
    ),
    _flag(UNTIL, "--after-batch-id", "progress: a batch newer than this id"),
    _flag(UNTIL, "--after-commit-time", "progress: a commit after this time (ISO or epoch)"),
    _flag(UNTIL, "--target-time", "catch-up: everything produced before this time"),
    _flag(
        UNTIL, "--topic", "catch-up: only these topics", action="append", dest="topics", default=[]
    ),
    _flag(
        UNTIL, "--poll-interval", "time between checks", read=params.positive_duration, default=10.0
    ),
    _flag(
        UNTIL, "--max-wait", "give up after this long, exit 75", read=params.duration, default=600.0
    ),
)
SNAPSHOT_FLAGS = (
    _flag(CHECK, "checkpoint", LOCATION),
    _flag(CHECK, "--snapshot-root", "snapshot root (path, s3a://, hdfs://)", required=True),
    _flag(CHECK, "--consumer-group", "also commit the offsets to this idle group"),
)
MIGRATE_FLAGS = (
    _flag(CHECK, "checkpoint", LOCATION),
    _flag(CHECK, "--archive-root", "archive root for the old checkpoint", required=True),
)
HISTORY_FLAGS = (
    _flag(CHECK, "checkpoint", LOCATION),
    _flag(
        CHECK,
        "--batches",
        "retained batches to rebuild (100: Spark's minBatchesToRetain)",
        read=params.batches,
        default=100,
    ),
    _flag(CHECK, "--no-now", "no last point for the live lag", action="store_true"),
)
SERVE_FLAGS = (
    *_fleet_flags("serve every job under it"),
    _flag("exporter", "--address", "address to listen on", default="0.0.0.0"),
    _flag("exporter", "--port", "HTTP port", read=_port, default=9109),
    _flag(
        "exporter",
        "--interval",
        "time between refreshes",
        read=params.positive_duration,
        default=30.0,
    ),
    _flag(
        "exporter",
        "--rediscover",
        "list --prefix again this often",
        read=params.duration,
        default=300.0,
    ),
    _flag(
        "exporter",
        "--max-partitions-per-job",
        "per-partition series per job, most lagging first",
        read=params.count,
        default=1000,
    ),
    _flag("exporter", "--once", "refresh once, print, exit", action="store_true"),
)
# Every command's, beside params.connection_flags.
SHARED_FLAGS = (
    _flag(
        "storage",
        "--s3-reader",
        "who lists and reads checkpoint files on S3: obstore (the default where it "
        "installs, Python >= 3.11) or boto3; writes always go through boto3",
        choices=READERS,
    ),
    _flag(
        "storage",
        "--hdfs-token-file",
        "Hadoop token file whose HDFS delegation token to use (default: "
        "HADOOP_TOKEN_FILE_LOCATION, as in a YARN container) unless a principal/keytab or "
        "--hdfs-user is given",
        metavar="FILE",
    ),
    _flag(
        "Kafka",
        "--timeout",
        "bound of each Kafka request round and storage attempt",
        read=params.positive_duration,
        default=10.0,
    ),
    _flag(OUTPUT, "--json", "print JSON instead of text", action="store_true"),
)


@dataclasses.dataclass(frozen=True)
class Subcommand:
    usage: str
    text: str  # its line in --help
    flags: tuple[Flag, ...]  # its own
    groups: tuple[str, ...] = ()  # its own --help groups, listed before the shared ones
    checks: bool = False  # takes the check options and thresholds
    migrates: bool = False  # takes the migration options


FLEET_USAGE = "CHECKPOINT... | --prefix PREFIX"
SUBCOMMANDS = {
    "status": Subcommand(FLEET_USAGE, "lag and health of checkpoints", STATUS_FLAGS, checks=True),
    "wait": Subcommand(
        "{health,progress,catch-up} CHECKPOINT",
        "wait until a job is healthy, progresses or caught up",
        WAIT_FLAGS,
        (UNTIL,),
        checks=True,
    ),
    "snapshot": Subcommand(
        "CHECKPOINT --snapshot-root ROOT",
        "write a verified snapshot of committed offsets",
        SNAPSHOT_FLAGS,
    ),
    "migrate": Subcommand(
        "CHECKPOINT --archive-root ROOT",
        "snapshot, validate and archive a checkpoint",
        MIGRATE_FLAGS,
        (CHECK, "migration"),
        migrates=True,
    ),
    "history": Subcommand(
        "CHECKPOINT", "lag at each retained batch, from checkpoint + Kafka", HISTORY_FLAGS
    ),
    "serve": Subcommand(
        FLEET_USAGE,
        "Prometheus exporter of a fleet's lag and health",
        SERVE_FLAGS,
        (CHECK, "exporter"),
        checks=True,
    ),
}


def _check_flags(command: argparse.ArgumentParser) -> None:
    from airflow_sparklag.monitor import CheckOptions

    params.option_flags(command, CheckOptions, group=CHECK)
    group = params.flag_group(command, THRESHOLDS)
    for field, text in THRESHOLD_HELP.items():
        reader = params.threshold_reader(field)  # as operators read their thresholds
        default = Thresholds.__dataclass_fields__[field].default
        if "default" not in text:
            text += f" (default: {'off' if default is None else default})"
        group.add_argument(
            params.flag_of(field), type=params.FlagType(field, reader), dest=field, help=text
        )


def build_parser() -> argparse.ArgumentParser:
    from airflow_sparklag import __version__
    from airflow_sparklag.migration import MigrationOptions

    parser = params.FlagParser(prog="sparklag", description=__doc__.split("\n\n")[0], epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"sparklag {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=params.FlagParser)
    for name, spec in SUBCOMMANDS.items():
        usage = f"%(prog)s {spec.usage} [options]"
        command = sub.add_parser(
            name, help=spec.text, description=spec.text, usage=usage, epilog=EPILOG
        )
        # --help lists the flags by group, in this order.
        for title in (*spec.groups, CHECK, "Kafka", "storage", "Kerberos", THRESHOLDS, OUTPUT):
            params.flag_group(command, title)
        for group, flag, settings in spec.flags:
            params.flag_group(command, group).add_argument(flag, **settings)
        if spec.migrates:
            params.option_flags(command, MigrationOptions, group="migration")
        params.connection_flags(command, "-b", "--bootstrap-server", "--bootstrap-servers")
        for group, flag, settings in SHARED_FLAGS:
            params.flag_group(command, group).add_argument(flag, **settings)
        if spec.checks:
            _check_flags(command)
    return parser


# -- status ------------------------------------------------------------------------------------


def _progress_line(done: int, total: int) -> None:
    """`read 120/1000 checkpoints` on stderr, rewritten in place; only on a terminal."""
    if total < PROGRESS_MIN or not sys.stderr.isatty():
        return
    if done == total or done % max(1, total // 100) == 0:
        end = "\n" if done == total else ""
        print(f"\rsparklag: read {done}/{total} checkpoints", end=end, file=sys.stderr, flush=True)


def _fleet(args: argparse.Namespace, session: Session, **given: Any) -> FleetChecker:
    """The jobs of the command's locations and ``--prefix`` (``status``, ``serve``)."""
    from airflow_sparklag.fleet import FleetChecker

    return FleetChecker(
        args.checkpoints, session=session, prefix=args.prefix, max_depth=args.max_depth, **given
    )


def run_status(args: argparse.Namespace) -> int:
    from airflow_sparklag.monitor import check_many

    if not args.checkpoints and not args.prefix:
        raise UsageError("give checkpoint locations or --prefix")
    options = _check_options(args)
    with open_session(args) as session:
        _storage_ready(session, [*args.checkpoints, *args.prefix])
        if args.prefix or len(args.checkpoints) > 1:
            progress = None if args.no_progress else _progress_line
            checker = _fleet(args, session, options=options, query_ids=args.query_ids)
            results = checker.check(progress=progress)
        else:
            # The query id costs a GET of `metadata` that lag and health do not need: a
            # default check of a healthy job on S3 is LIST + GET offsets/C (--query-ids: +1).
            results = check_many(session, args.checkpoints, options, query_id=args.query_ids)
    if args.prefix and not results:
        if args.json:
            print_document(args, check_document("status", []))
        print(
            f"sparklag: no checkpoint found under {printable(', '.join(args.prefix))}",
            file=sys.stderr,
        )
        return EXIT_CHECK_FAILED
    _print_results(args, results)
    return exit_code(results)


def exit_code(results: list[CheckResult]) -> int:
    """The code of the verdict users act on first (``Health.worst``): a breach (2 before 1)
    outranks a failed check (4), which outranks "cannot tell" (3) and OK (0)."""
    worst = Health.worst(r.verdict.health for r in results if r.error is None)
    if any(r.error is not None for r in results) and not (worst and worst.is_breach):
        return EXIT_CHECK_FAILED
    return worst.exit_code if worst else EXIT_CHECK_FAILED


def _storage_ready(session: Session, locations: list[str]) -> None:
    """Each store's client made before any job is read: a configuration error (an unknown
    AWS_PROFILE) concerns every job, so it is the command's error (exit 64), not each job's."""
    for location in locations:
        try:
            session.storage(location)
        except UsageError:
            raise
        except SparkLagError:
            pass  # this job's own failure: its result says it


def natural_key(text: str) -> list[Any]:
    """Sort key that orders numbers by value: ``job2`` before ``job10``."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", text)]


def _print_results(args: argparse.Namespace, results: list[CheckResult]) -> None:
    from airflow_sparklag.render import render

    results = sorted(results, key=lambda r: natural_key(r.location))
    if args.json:
        print_document(args, check_document("status", results))
        return
    if len(results) > 1 and not args.detail:
        _out(compact_table(results), args)
    else:
        for i, result in enumerate(results):
            if i:
                _out("\n" + "-" * 80 + "\n", args)
            if result.error is not None or result.report is None:
                text = f"checkpoint  {result.location}\nhealth      {CHECK_FAILED}"
                _out(f"{text}\nerror       {result.error}", args)
            else:
                _out(render(result.report, result.verdict), args)
    if args.explain:  # what each job was judged on, and which rule asked for it
        for result in results:
            _out(f"evidence    {result.location}: {result.explain()}", args)


def compact_table(results: list[CheckResult]) -> str:
    """One line per job, then the totals: the default view of several jobs."""
    from airflow_sparklag.render import seconds_text, table

    rows = [("JOB", "HEALTH", "LAG", "LAG_TIME", "COMMIT_AGE", "REASON")]
    for r in results:
        report = r.report
        if report is None:
            rows.append((r.location, CHECK_FAILED, "-", "-", "-", r.error or ""))
            continue
        rows.append(
            (
                r.location,
                r.verdict.health.value,
                str(report.total_lag),
                seconds_text(report.max_lag_seconds),
                seconds_text(report.commit_age_seconds),
                r.verdict.reason,
            )
        )
    lines = table(rows)
    summary = summary_of(results)
    health = ", ".join(f"{n} {name}" for name, n in summary["health"].items())
    lines.append(
        f"{summary['jobs']} jobs ({health}); total lag {summary['total_lag']} records, "
        f"worst time lag {seconds_text(summary['max_lag_seconds'])}; --detail for partitions"
    )
    return "\n".join(lines)


def print_document(args: argparse.Namespace, shown: dict[str, Any]) -> None:
    """A command's JSON document (docs/json.md) on stdout: indented for one result, else one
    result per line (json's C encoder: ``indent=`` runs the pure-Python one, slow for a fleet)."""
    results = shown["results"]
    if len(results) <= 1:
        _out(json.dumps(shown, indent=2), args)
        return
    head = json.dumps({k: v for k, v in shown.items() if k != "results"})
    rows = ",\n".join(json.dumps(r) for r in results)
    _out(f'{head[:-1]}, "results": [\n{rows}\n]}}', args)


def _out(text: str, args: argparse.Namespace) -> None:
    """Print to stdout with every secret of the command removed (URL userinfo too)."""
    print(printable(scrub(text, getattr(args, "secrets", []))))


# -- wait --------------------------------------------------------------------------------------


def _condition(args: argparse.Namespace) -> Any:
    from airflow_sparklag import conditions

    if args.condition == "health":
        accept = params.health_names("--accept", args.accept)
        if not accept:
            raise params.invalid("--accept", "give at least one verdict, e.g. OK")
        fail_fast = params.health_names("--fail-fast", args.fail_fast)
        return conditions.HealthCondition(args.checkpoint, _check_options(args), accept, fail_fast)
    if args.condition == "progress":
        return conditions.ProgressCondition(
            args.checkpoint,
            params.optional_count("--after-batch-id", args.after_batch_id, minimum=-1),
            params.moment("--after-commit-time", args.after_commit_time),
        )
    target = params.moment("--target-time", args.target_time)
    if target is None:
        raise params.invalid("--target-time", "is required for catch-up (ISO time or epoch)")
    topics = tuple(args.topics) or None
    return conditions.CatchUpCondition(args.checkpoint, int(target * 1000), topics)


def run_wait(args: argparse.Namespace) -> int:
    import time

    condition = _condition(args)
    deadline = time.monotonic() + args.max_wait
    with open_session(args) as session:
        while True:
            probe = condition.probe(session)
            gave_up = time.monotonic() + args.poll_interval > deadline
            if not (probe.done or probe.failed or gave_up):  # a poll: progress, on stderr
                print(printable(scrub(probe.message, args.secrets)), file=sys.stderr, flush=True)
                time.sleep(args.poll_interval)
                continue
            # the result, on stdout
            probe.payload["summary"]["timed_out"] = not (probe.done or probe.failed)
            if args.json:
                print_document(args, probe.payload)
            else:
                _out(probe.message, args)
            if probe.done:
                return 0
            if not probe.failed:
                print(f"sparklag: gave up after {args.max_wait:g} s", file=sys.stderr)
                return EXIT_TIMEOUT
            verdict = probe.payload["results"][0].get("verdict") or {}
            return Health.parse(verdict.get("health", "STOPPED")).exit_code or EXIT_CHECK_FAILED


# -- snapshot / migrate ------------------------------------------------------------------------


def run_snapshot(args: argparse.Namespace) -> int:
    from airflow_sparklag.snapshot import export_to_group, snapshot_checkpoint

    with open_session(args, kafka_required=bool(args.consumer_group)) as session:
        result = snapshot_checkpoint(args.checkpoint, args.snapshot_root, session=session)
        payload = result.to_dict()
        if args.consumer_group:
            payload["consumer_group"] = export_to_group(session, args.consumer_group, result)
    if args.json:
        print_document(args, document("snapshot", [payload], {"jobs": 1, "failed_checks": 0}))
        return 0
    lines = [
        f"snapshot    {payload['path']}",
        f"batch       {payload['committed_batch_id']} (committed)",
    ]
    if payload["in_flight_batch_id"] is not None:
        lines.append(f"in flight   {payload['in_flight_batch_id']} (not used as the start)")
    lines += _starting_offsets(payload)
    if "consumer_group" in payload:
        group = payload["consumer_group"]
        lines.append(f"group       {group['group_id']} (lag {group['total_lag']})")
    _out("\n".join(lines), args)
    return 0


def _starting_offsets(payload: dict[str, Any]) -> list[str]:
    return [
        f"source {sid}    startingOffsets {json.dumps(offsets, separators=(',', ':'))}"
        for sid, offsets in payload["starting_offsets"].items()
    ]


def run_migrate(args: argparse.Namespace) -> int:
    from airflow_sparklag.migration import MigrationOptions, migrate_checkpoint

    options = params.from_flags(MigrationOptions, args)
    with open_session(args) as session:
        result = migrate_checkpoint(
            args.checkpoint, args.archive_root, session=session, options=options
        )
    payload = result.to_dict()
    if args.json:
        print_document(args, document("migrate", [payload], {"jobs": 1, "failed_checks": 0}))
    else:
        _out(_render_migration(payload), args)
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
    lines += _starting_offsets(payload)
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
    lines += [f"REFUSED     {in_cli_words(r)}" for r in payload["refusals"]]
    return "\n".join(lines)


# -- history / serve ---------------------------------------------------------------------------


def run_history(args: argparse.Namespace) -> int:
    from airflow_sparklag.history import history
    from airflow_sparklag.render import history_table

    with open_session(args) as session:
        past = history(session, args.checkpoint, batches=args.batches, include_now=not args.no_now)
    if args.json:
        print_document(args, past.document())
    else:
        _out(history_table(past), args)
    return 0 if past.verdict is None else past.verdict.health.exit_code


def run_serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from airflow_sparklag.exporter import LagExporter

    if not args.checkpoints and not args.prefix:
        raise UsageError("give checkpoint locations or --prefix")
    with open_session(args) as session:
        _storage_ready(session, [*args.checkpoints, *args.prefix])
        checker = _fleet(
            args,
            session,
            options=_check_options(args),
            rediscover_seconds=args.rediscover if args.prefix else None,
        )
        exporter = LagExporter(
            checker, interval=args.interval, max_partitions_per_job=args.max_partitions_per_job
        )
        if args.once:
            refreshed = exporter.refresh()
            _out(exporter.render()[0].decode().rstrip("\n"), args)
            return 0 if refreshed else EXIT_CHECK_FAILED
        server = exporter.serve(args.address, args.port)  # UsageError: cannot listen
        where = f"http://{args.address}:{server.server_port}"
        print(f"sparklag: serving {where}/metrics and /healthz", file=sys.stderr, flush=True)
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        try:
            while not stopped.wait(1.0):
                pass
        finally:
            exporter.stop(timeout=args.timeout)
            server.shutdown()
            server.server_close()
    return 0


# -- the exit-code contract --------------------------------------------------------------------

COMMANDS = {
    "status": run_status,
    "wait": run_wait,
    "snapshot": run_snapshot,
    "migrate": run_migrate,
    "history": run_history,
    "serve": run_serve,
}


def main(argv: list[str] | None = None) -> int:
    """Run one command; every outcome is an exit code and at most a scrubbed line on stderr
    (with --json its document on stdout too, a failed check included)."""
    secrets: list[str] = []
    _quiet_client_logs(secrets)
    args: argparse.Namespace | None = None

    def say(message: str, code: int) -> int:
        said = printable(scrub(in_cli_words(message), secrets))  # stdout's and stderr's words
        if (
            code in (EXIT_CHECK_FAILED, EXIT_REFUSED)  # a failed check, not a usage error
            and args is not None
            and getattr(args, "json", False)
            and args.command in DOCUMENTED
        ):
            print_document(args, failure_document(args, said))
        print(f"sparklag: {said}", file=sys.stderr)
        return code

    try:
        args = build_parser().parse_args(argv)
        args.secrets = secrets
        return COMMANDS[args.command](args)
    except (UsageError, InvalidParameter) as exc:
        return say(str(exc), EXIT_USAGE)
    except MigrationRefused as exc:
        return say(f"refused: {type(exc).__name__}: {exc}", EXIT_REFUSED)
    except SparkLagError as exc:
        return say(f"{type(exc).__name__}: {exc}", EXIT_CHECK_FAILED)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug of ours: still one line, never a secret
        return say(f"internal error, please report: {type(exc).__name__}: {exc}", EXIT_CHECK_FAILED)


def failure_document(args: argparse.Namespace, error: str) -> dict[str, Any]:
    """The document of a command that failed as a whole: a failed check of each location."""
    given = [*getattr(args, "checkpoints", []), *getattr(args, "prefix", [])]
    locations = given or ([args.checkpoint] if hasattr(args, "checkpoint") else [])
    return check_document(args.command, [CheckResult.failed(loc, error) for loc in locations])


def in_cli_words(message: str) -> str:
    """A core message in the command line's words: ``force=True``, ``webhdfs_options['url']``
    named by their flags (``--force``, ``--webhdfs-url``); docs/names.md."""
    from airflow_sparklag.migration import MigrationOptions
    from airflow_sparklag.monitor import CheckOptions

    flags = {
        f"{f.name}=True": f.metadata["flag"]
        for kind in (CheckOptions, MigrationOptions)
        for f in dataclasses.fields(kind)
        if f.metadata["flag"]
    }
    for options, keys in params.STORAGE_FLAGS.items():
        flags.update({f"{options}[{key!r}]": flag for key, flag in keys.items()})
    return re.sub("|".join(map(re.escape, flags)), lambda m: flags[m.group(0)], message)


def _quiet_client_logs(secrets: list[str]) -> None:
    """librdkafka's lines about refused connections muted (the command's message says what
    failed, once); other libraries' warnings one scrubbed line each on stderr, never their
    traceback. ``SPARKLAG_DEBUG=1`` leaves logging as Python has it."""
    if os.environ.get("SPARKLAG_DEBUG"):
        return
    chatter = logging.getLogger("airflow_sparklag.kafka.librdkafka")
    chatter.addHandler(logging.NullHandler())
    chatter.propagate = False
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(_OneLine(secrets))
        root.addHandler(handler)


class _OneLine(logging.Formatter):
    """A log record as ``sparklag: warning from <logger>: <message>``, scrubbed, one line."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = secrets  # main()'s list: secrets found later are scrubbed too

    def format(self, record: logging.LogRecord) -> str:
        try:
            message = record.getMessage()
        except Exception:  # a library's bad format string: its template, not a crash
            message = str(record.msg)
        line = " ".join(printable(scrub(message, self.secrets)).split())[:300]
        return f"sparklag: {record.levelname.lower()} from {record.name}: {line}"


if __name__ == "__main__":
    sys.exit(main())
