"""A PySpark driver on a Kerberized HDFS, started as Spark users start one: ``spark-submit
--principal <user> --keytab <keytab>`` (Spark logs in from the keytab before the session
starts), with the cluster's Hadoop client configuration in ``HADOOP_CONF_DIR`` and the KDC's
krb5.conf in ``-Djava.security.krb5.conf``.

It runs testbed/spark35_driver.py (commands: ``available_now``, ``files``, ``scan``) with the
main venv's pyspark, in its own JVM: the suite's shared SparkSession stays on simple
authentication (Hadoop's login is one per JVM).

>>> driver = KerberizedSpark(Path("/tmp/ks"), secure_hdfs, "alice").start()
>>> driver.info
{'ok': True, 'spark': '4.x', 'user': 'alice@EXAMPLE.TEST', 'keytab': True}
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.paths import REPO, jars
from testbed.spark35 import DRIVER, SparkDriver

if TYPE_CHECKING:
    from testbed.secure_hdfs import SecureHdfs

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"  # pyspark's, in the same venv


class KerberizedSpark(SparkDriver):
    """``spark-submit --principal/--keytab`` of ``user`` on ``cluster``, ``local[2]``."""

    name = "Kerberized Spark driver"

    def __init__(self, workdir: Path, cluster: SecureHdfs, user: str) -> None:
        super().__init__(workdir)
        self.cluster = cluster
        self.user = user
        self.fifo = workdir / "commands"  # spark-submit does not hand its stdin to Python

    def command(self) -> list[str]:
        classpath = ":".join(jars("spark-kafka"))
        java = f"-Djava.security.krb5.conf={self.cluster.krb5_conf} -XX:+UseSerialGC"
        confs = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "2",
            "spark.local.dir": str(self.workdir / "local"),
        }
        return [
            str(SPARK_SUBMIT),
            "--master",
            "local[2]",
            "--principal",
            self.cluster.principal(self.user),
            "--keytab",
            str(self.cluster.keytab(self.user)),
            "--driver-memory",
            "768m",
            "--driver-class-path",
            classpath,
            "--driver-java-options",
            f"{java} -Dderby.system.home={self.workdir}",
            *(arg for key, value in confs.items() for arg in ("--conf", f"{key}={value}")),
            str(DRIVER),
            classpath,
            str(self.workdir),
            str(self.fifo),
        ]

    def environment(self) -> dict[str, str]:
        """The tree's package for the driver and its Python workers; the cluster's Hadoop client
        configuration; krb5.conf for the package's own (MIT) Kerberos login, and an empty
        ticket cache, so that every login comes from the keytab spark-submit was given."""
        return {
            **super().environment(),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": str(REPO),
            "HADOOP_CONF_DIR": str(self.cluster.client_conf()),
            "KRB5_CONFIG": self.cluster.krb5_conf,
            "KRB5CCNAME": f"FILE:{self.workdir / 'no-ticket.cc'}",
        }
