"""HDFS for tests: Hadoop's CLI MiniCluster (NameNode + one DataNode, WebHDFS on)."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.paths import classpath
from testbed.process import Process, free_port, hadoop_jvm, port_open


class HdfsCluster:
    """`namenode_uri` is "hdfs://127.0.0.1:<port>", `webhdfs_url` "http://127.0.0.1:<port>".

    >>> hdfs = HdfsCluster(Path("/tmp/hdfs")).start()
    >>> hdfs.namenode_uri
    'hdfs://127.0.0.1:40111'
    """

    def __init__(self, workdir: Path, heap: str = "768m") -> None:
        self.workdir = workdir
        self.heap = heap
        self.nn_port = free_port()
        self.http_port = free_port()
        self.namenode_uri = f"hdfs://127.0.0.1:{self.nn_port}"
        self.webhdfs_url = f"http://127.0.0.1:{self.http_port}"
        self.process: Process | None = None

    def start(self, timeout: float = 120.0) -> HdfsCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        details = self.workdir / "details.json"
        argv = [
            *hadoop_jvm(self.workdir, self.heap),
            "-cp",
            classpath("hdfs"),
            "org.apache.hadoop.mapreduce.MiniHadoopClusterManager",
            "-nomr",
            "-format",
            "-datanodes",
            "1",
            "-nnport",
            str(self.nn_port),
            "-nnhttpport",
            str(self.http_port),
            "-writeDetails",
            str(details),
            "-D",
            "dfs.webhdfs.enabled=true",
            "-D",
            "dfs.permissions.enabled=false",
            "-D",
            "dfs.namenode.safemode.extension=0",
            "-D",
            "dfs.replication=1",
        ]
        self.process = Process(
            "hdfs-minicluster", argv, self.workdir / "minicluster.log", cwd=self.workdir
        )
        self.process.wait_ready(
            lambda: details.exists() and self._webhdfs_answers(),
            timeout,
            f"WebHDFS LISTSTATUS on {self.webhdfs_url}",
        )
        json.loads(details.read_text())
        return self

    def _webhdfs_answers(self) -> bool:
        import requests

        if not port_open(self.http_port):
            return False
        r = requests.get(f"{self.webhdfs_url}/webhdfs/v1/?op=LISTSTATUS", timeout=3)
        return r.status_code == 200

    def list_names(self, path: str) -> list[str]:
        """Names under `path`, over WebHDFS (independent of the package's own client)."""
        import requests

        r = requests.get(
            f"{self.webhdfs_url}/webhdfs/v1{path}?op=LISTSTATUS&user.name=root", timeout=10
        )
        r.raise_for_status()
        return sorted(s["pathSuffix"] for s in r.json()["FileStatuses"]["FileStatus"])

    def stop(self) -> None:
        if self.process:
            self.process.stop()
