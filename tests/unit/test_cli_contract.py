"""The CLI's exit-code contract, through the installed `sparklag` script: 0-3 verdicts, 4 the
check failed, 5 migration refused, 64 usage/configuration, 75 `wait` gave up; never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_sparklag.model.verdict import Health

SPARKLAG = Path(sys.executable).parent / "sparklag"
DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
NO_KAFKA = ["-b", "127.0.0.1:1", "--timeout", "2"]  # samples have no Kafka source: never asked


def run(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SPARKLAG), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli")
    (root / "bad.json").write_text('{"bootstrap.servers": ')
    (root / "list.json").write_text('["a"]')
    (root / "latin1.properties").write_bytes(b"bootstrap.servers=\xff\xfe\n")
    (root / "noeq.properties").write_text("bootstrap.servers\n")
    job = root / "job"
    shutil.copytree(DATA / "ckm4.3.0", job)
    return {
        name: str(root / name)
        for name in ("bad.json", "list.json", "latin1.properties", "noeq.properties", "job")
    }


@pytest.mark.parametrize(
    "args",
    [
        ["status", "/x", "-b", "b:1", "--max-lag-records-per-partition", "-5"],
        ["status", "/x", "-b", "b:1", "--max-lag-seconds", "nan"],
        ["status", "/x", "-b", "b:1", "--max-commit-age-seconds", "-1m"],
        ["status", "/x", "-b", "b:1", "--window", "1"],
        ["status", "/x", "-b", "b:1", "--history", "0"],
        ["status", "/x", "-b", "b:1", "--timeout", "inf"],
        ["status", "/x"],  # no bootstrap servers
        ["status", "-b", "b:1"],  # no checkpoint
        ["status", "/x", "--kafka-config", "/does/not/exist"],
        ["migrate", "/x", "--archive-root", "/a", "-b", "b:1", "--quiet-period", "nan"],
        ["migrate", "/x", "--archive-root", "/a", "-b", "b:1", "--quiet-period", "-60"],
        ["wait", "health", "/x", "-b", "b:1", "--accept", "HEALTHY"],
        ["wait", "catch-up", "/x", "-b", "b:1"],  # no --target-time
        ["wait", "catch-up", "/x", "-b", "b:1", "--target-time", "0001-01-01"],
        ["wait", "progress", "/x", "-b", "b:1", "--after-commit-time", "1e20"],
        ["status", "--prefix", "/x", "-b", "b:1", "--max-depth", "-1"],
        ["status", "/x", "-b", "127.0.0.1:99999"],  # librdkafka dialled port 34463
        ["status", "/x", "-b", ",,"],
        ["serve", "/x", "-b", "b:1", "--port", "99999"],
        ["serve", "/x", "-b", "b:1", "--port", "-1"],
        ["bogus"],
        [],
    ],
)
def test_usage_errors_exit_64_without_a_traceback(args: list[str]) -> None:
    proc = run(*args)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip(), "say what is wrong"


@pytest.mark.parametrize("name", ["bad.json", "list.json", "latin1.properties", "noeq.properties"])
def test_unreadable_kafka_config_is_a_usage_error_naming_the_file(
    files: dict[str, str], name: str
) -> None:
    proc = run("status", files["job"], "--kafka-config", files[name])
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert files[name] in proc.stderr and "Traceback" not in proc.stderr


def test_serve_on_a_port_in_use_says_so(files: dict[str, str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        proc = run("serve", files["job"], *NO_KAFKA, "--address", "127.0.0.1", "--port", port)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def aws_env(tmp_path: Path, config: str = "", **extra: str) -> dict[str, str]:
    """The environment with no AWS setting of this machine's: its own config file."""
    (tmp_path / "aws-config").write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-config"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return {**env, **extra}


@pytest.mark.parametrize(
    ("config", "extra", "flags", "named"),
    [
        ("", {"AWS_PROFILE": "prod"}, [], "ProfileNotFound"),
        ("[default\n", {}, [], "ConfigParseError"),
        ("", {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE"}, [], "PartialCredentialsError"),
        ("", {}, ["--s3-endpoint-url", "not-a-url"], "Invalid endpoint"),
        ("", {}, ["--s3-region", "eu west"], "InvalidRegionError"),
    ],
)
def test_an_unusable_aws_setup_is_a_configuration_error(
    tmp_path: Path, config: str, extra: dict[str, str], flags: list[str], named: str
) -> None:
    # Before: "internal error, please report: ProfileNotFound ..." (exit 4), or a failed check
    # per job. Two jobs: the configuration concerns every job, so it is said once.
    env = aws_env(tmp_path, config, **extra)
    proc = run("status", "s3a://b/ck/a", "s3a://b/ck/b", *NO_KAFKA, *flags, env=env)
    assert proc.returncode == 64, proc.stdout + proc.stderr
    assert proc.stderr.startswith("sparklag: S3: the AWS configuration is not usable ("), (
        proc.stderr
    )
    assert named in proc.stderr and "internal error" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and not proc.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["wait", "progress", "s3a://b/ck", "--max-wait", "1"],
        ["history", "s3a://b/ck"],
        ["snapshot", "s3a://b/ck", "--snapshot-root", "/nowhere"],
        ["serve", "s3a://b/ck", "--once"],
    ],
)
def test_every_command_says_an_unusable_aws_setup_once(tmp_path: Path, command: list[str]) -> None:
    proc = run(*command, *NO_KAFKA, env=aws_env(tmp_path, AWS_PROFILE="prod"))
    assert proc.returncode == 64, proc.stdout + proc.stderr  # serve --once: 0 before, jobs down
    assert "ProfileNotFound" in proc.stderr and "internal error" not in proc.stderr


def test_a_failing_credential_provider_is_a_failed_check(tmp_path: Path) -> None:
    env = aws_env(tmp_path, "[profile p]\ncredential_process = /bin/false\n", AWS_PROFILE="p")
    endpoint = ["--s3-endpoint-url", "http://127.0.0.1:1"]
    proc = run("status", "s3a://b/ck", *NO_KAFKA, *endpoint, env=env)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "could not get AWS credentials (CredentialRetrievalError" in proc.stdout
    assert "internal error" not in proc.stdout + proc.stderr


def test_missing_checkpoint_is_a_failed_check(tmp_path: Path) -> None:
    proc = run("status", str(tmp_path / "nothing"), *NO_KAFKA)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "CheckpointNotFound" in proc.stdout + proc.stderr


def test_a_closed_pipe_ends_quietly(files: dict[str, str]) -> None:
    shell = f"'{SPARKLAG}' status '{files['job']}' {' '.join(NO_KAFKA)} --json | head -1"
    proc = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {shell}"], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "{"
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_version() -> None:
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("sparklag ")


def test_wait_for_progress_done_and_given_up(files: dict[str, str]) -> None:
    done = run("wait", "progress", files["job"], *NO_KAFKA, "--after-batch-id", "2")
    assert done.returncode == 0, done.stderr  # the sample committed batch 3
    gave_up = run(
        "wait", "progress", files["job"], *NO_KAFKA, "--after-batch-id", "3",
        "--poll-interval", "0.2", "--max-wait", "1",
    )  # fmt: skip
    assert gave_up.returncode == 75, gave_up.stderr
    assert "gave up after 1 s" in gave_up.stderr


def test_userinfo_in_a_location_is_never_printed(tmp_path: Path) -> None:
    secret = "CANARY-cli-userinfo-7f3a"
    proc = run(
        "status",
        f"s3a://AKIAEXAMPLE:{secret}@bucket/ck",
        *NO_KAFKA,
        "--s3-endpoint-url",
        "http://127.0.0.1:1",
    )
    assert secret not in proc.stdout + proc.stderr
    assert proc.returncode == 4, proc.stdout + proc.stderr


@pytest.mark.parametrize("command", ["status", "snapshot"])
def test_userinfo_in_bootstrap_servers_is_refused_unprinted(
    files: dict[str, str], command: str
) -> None:
    # Was printed in the KafkaUnavailable message: "Kafka bootstrap servers alice:<pw>@..."
    secret = "CANARY-cli-bootstrap-91c2"
    extra = ["--snapshot-root", files["job"] + "-snapshots"] if command == "snapshot" else []
    proc = run(command, files["job"], "-b", f"alice:{secret}@127.0.0.1:1", *extra)
    assert secret not in proc.stdout + proc.stderr
    assert proc.returncode == 64 and "holds user info" in proc.stderr, proc.stdout + proc.stderr


def test_library_warnings_are_one_scrubbed_line_without_traceback() -> None:
    """gcsfs logs "out of retries" with its traceback; Python's last-resort handler printed all
    of it. The CLI's handler prints one line, scrubbed with the command's secrets."""
    script = (
        "import logging; from airflow_sparklag import cli\n"
        "secrets = []; cli._quiet_client_logs(secrets); secrets.append('s3cr3t')\n"
        "try:\n    raise ValueError('inner')\nexcept ValueError:\n"
        "    logging.getLogger('gcsfs').exception('out of retries: token=%s', 's3cr3t')\n"
        "logging.getLogger('gcsfs').info('not shown')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=_no_debug()
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["sparklag: error from gcsfs: out of retries: token=***"]


def _no_debug() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "SPARKLAG_DEBUG"}


def test_names_a_terminal_would_obey_are_shown_escaped(tmp_path: Path) -> None:
    # A directory (an S3 key) found under --prefix, or a location given, with an ANSI escape
    # and a bidi override: printed raw, they cleared the screen or reordered the line.
    name = "job\x1b[2J\u202e"
    shutil.copytree(DATA / "ckm4.3.0", tmp_path / "fleet" / name)
    found = run("status", "--prefix", str(tmp_path / "fleet"), *NO_KAFKA)
    missing = run("status", str(tmp_path / name), *NO_KAFKA)
    assert (found.returncode, missing.returncode) == (3, 4)
    assert "job\\x1b[2J\\u202e" in found.stdout and "job\\x1b[2J\\u202e" in missing.stdout
    for output in (found.stdout, found.stderr, missing.stdout, missing.stderr):
        assert "\x1b" not in output and "\u202e" not in output


@pytest.mark.parametrize(
    ("verdicts", "worst"),
    [
        ("UNKNOWN STOPPED OK", "STOPPED"),
        ("UNKNOWN LAGGING", "LAGGING"),
        ("OK UNKNOWN", "UNKNOWN"),
        ("REWIND DATA_LOSS STALLED", "DATA_LOSS"),
        ("OK", "OK"),
    ],
)
def test_the_worst_verdict_is_the_one_to_act_on_first(verdicts: str, worst: str) -> None:
    assert Health.worst(Health(v) for v in verdicts.split()) is Health(worst)
    assert Health.worst([]) is None


def test_a_failure_document_says_what_stderr_says_and_no_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --json a failed command's document carries the line stderr shows, and neither
    holds a secret nor a location's credentials (stdout is scrubbed as stderr is). A bug of
    ours whose message quotes a secret is a fault no real input causes: the command is
    replaced by one that raises it."""
    import json

    from airflow_sparklag import cli

    def broken(args: object) -> int:
        args.secrets.append("s3cr3t-value")  # type: ignore[attr-defined]
        raise RuntimeError("boom near s3cr3t-value")

    monkeypatch.setitem(cli.COMMANDS, "history", broken)
    code = cli.main(["history", "s3a://AKIAX:hidden-key@bucket/ck", "--json"])
    out, err = capsys.readouterr()
    assert code == 4
    assert "s3cr3t-value" not in out + err and "hidden-key" not in out + err
    (result,) = json.loads(out)["results"]
    assert result["location"] == "s3a://bucket/ck"
    assert err.strip() == f"sparklag: {result['error']}"
