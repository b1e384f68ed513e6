"""A real PostgreSQL server (Debian package ``postgresql``) on 127.0.0.1, for Airflow's metadata
database: most production Airflow installs keep it there, not in SQLite.

    server = PostgresServer(workdir).start()
    url = server.create_database("airflow")  # postgresql+psycopg2://sparklag@127.0.0.1:P/airflow
    server.stop()

``initdb`` into a fresh directory, then ``postgres`` on a free port with durability off
(``fsync``, ``synchronous_commit``, ``full_page_writes``: a test database need not survive a
power cut; ``airflow db migrate`` takes a third of the time). Trust authentication, loopback
only. PostgreSQL refuses to run as root: as root (CI, the sessions here) the server runs as
the ``postgres`` user the Debian package creates, its data directory owned by it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from testbed.process import Process, TestbedError, free_port, log_tail

USER = "sparklag"  # the database superuser initdb creates
SERVER_USER = "postgres"  # who runs the server when the tests run as root


def _bin_dir() -> Path:
    """The newest installed server's binaries (Debian keeps them off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=_version)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    if on_path:
        return Path(on_path).parent
    raise TestbedError(
        "PostgreSQL is not installed: run scripts/setup.sh (apt-get install -y postgresql)"
    )


def _version(path: str) -> int:
    part = Path(path).parts[-3]
    return int(part) if part.isdigit() else 0


class PostgresServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.process: Process | None = None
        self.data: Path | None = None

    def _as_server_user(self) -> list[str]:
        """The prefix that drops root to the server's user (exec, no fork: the pid stays)."""
        if os.geteuid() != 0:
            return []
        return ["setpriv", f"--reuid={SERVER_USER}", f"--regid={SERVER_USER}", "--clear-groups"]

    def _data_dir(self) -> Path:
        """A directory the server's user may enter: as root, pytest's 0700 temp directories
        are closed to it, so the data lives in a directory of its own under TMPDIR."""
        if os.geteuid() != 0:
            return self.workdir / "data"
        try:
            user = pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise TestbedError(
                f"no user {SERVER_USER!r} to run PostgreSQL as (root may not): "
                "apt-get install -y postgresql creates it"
            ) from None
        base = Path(tempfile.mkdtemp(prefix="sparklag-postgres-"))
        os.chown(base, user.pw_uid, user.pw_gid)
        return base / "data"

    def start(self, timeout: float = 60.0) -> PostgresServer:
        binaries = _bin_dir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data = self._data_dir()
        log = self.workdir / "initdb.log"
        initdb = [
            *self._as_server_user(), str(binaries / "initdb"), "-D", str(self.data), "-U", USER,
            "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync",
        ]  # fmt: skip
        with open(log, "wb") as out:
            done = subprocess.run(
                initdb, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        if done.returncode != 0:
            raise TestbedError(f"initdb failed ({done.returncode}). Log {log}:\n{log_tail(log)}")
        argv = [
            *self._as_server_user(), str(binaries / "postgres"), "-D", str(self.data),
            "-p", str(self.port), "-k", str(self.data),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
            "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            "-c", "max_connections=200",
        ]  # fmt: skip
        self.process = Process("postgres", argv, self.workdir / "postgres.log")
        self.process.wait_ready(self._ready, timeout, f"SELECT 1 on 127.0.0.1:{self.port}")
        return self

    def _connect(self, database: str = "postgres"):  # type: ignore[no-untyped-def]
        import psycopg2

        return psycopg2.connect(
            host="127.0.0.1", port=self.port, user=USER, dbname=database, connect_timeout=5
        )

    def _ready(self) -> bool:
        with self._connect() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return bool(cursor.fetchone() == (1,))

    def create_database(self, name: str, template: str | None = None) -> str:
        """A new database (a copy of ``template`` when given); its SQLAlchemy URL."""
        connection = self._connect()
        connection.autocommit = True  # CREATE DATABASE runs outside a transaction
        try:
            with connection.cursor() as cursor:
                copy = f' TEMPLATE "{template}"' if template else ""
                cursor.execute(f'CREATE DATABASE "{name}"{copy}')
        finally:
            connection.close()
        return self.url(name)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()  # SIGTERM: a smart shutdown
        if self.data is not None and os.geteuid() == 0:
            shutil.rmtree(self.data.parent, ignore_errors=True)
