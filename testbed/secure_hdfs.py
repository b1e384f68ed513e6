"""A Kerberized HDFS for tests: Hadoop's MiniKdc and a secure MiniDFSCluster in one JVM
(testbed/java/SecureHdfs.java), WebHDFS over SPNEGO on HTTPS only.

What a Kerberized estate looks like to a client: realm EXAMPLE.TEST, a KDC on an ephemeral TCP
port, principals `hdfs/localhost` and `HTTP/localhost` (one service keytab), users `alice` (owns
/checkpoints) and `bob` with keytabs, a 700 directory /private, and a second KDC of the same
realm whose `alice` tickets the cluster does not accept. The TLS certificate is made here with
keytool (RSA 2048, SHA-256, SAN localhost and 127.0.0.1: Hadoop's own test certificate is refused
by OpenSSL 3). Clients use `localhost` in URLs: the SPNEGO service name follows the URL's host.

>>> hdfs = SecureHdfs(Path("/tmp/secure-hdfs")).start()
>>> hdfs.webhdfs_url, hdfs.ca_bundle
('https://localhost:40111', PosixPath('/tmp/secure-hdfs/tls/ca.pem'))
>>> env = hdfs.kinit("alice", ccache=Path("/tmp/alice.cc"))  # KRB5_CONFIG, KRB5CCNAME
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from testbed.paths import REPO, classpath
from testbed.process import Process, hadoop_jvm

KRB5_CONF = """[libdefaults]
    default_realm = {realm}
    udp_preference_limit = 1
    dns_lookup_kdc = false
    dns_lookup_realm = false
    rdns = false
    dns_canonicalize_hostname = false
    ticket_lifetime = 1h

[realms]
    {realm} = {{
        kdc = localhost:{port}
    }}
"""
STORE_PASSWORD = "testbed-store"  # the throwaway keystores' password: test-only
SSL_SERVER = """<configuration>
<property><name>ssl.server.keystore.location</name><value>{keystore}</value></property>
<property><name>ssl.server.keystore.password</name><value>{password}</value></property>
<property><name>ssl.server.keystore.keypassword</name><value>{password}</value></property>
<property><name>ssl.server.keystore.type</name><value>jks</value></property>
<property><name>ssl.server.truststore.location</name><value>{truststore}</value></property>
<property><name>ssl.server.truststore.password</name><value>{password}</value></property>
<property><name>ssl.server.truststore.type</name><value>jks</value></property>
</configuration>
"""
SSL_CLIENT = """<configuration>
<property><name>ssl.client.truststore.location</name><value>{truststore}</value></property>
<property><name>ssl.client.truststore.password</name><value>{password}</value></property>
<property><name>ssl.client.truststore.type</name><value>jks</value></property>
</configuration>
"""


def _site(properties: dict[str, str]) -> str:
    """A Hadoop *-site.xml."""
    rows = "".join(
        f"<property><name>{k}</name><value>{v}</value></property>\n" for k, v in properties.items()
    )
    return f"<configuration>\n{rows}</configuration>\n"


def _keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True, timeout=60)


class SecureHdfs:
    """Start with :meth:`start`; `details` holds ports, realm and keytab paths."""

    def __init__(self, workdir: Path, heap: str = "384m") -> None:
        self.workdir = workdir
        self.heap = heap
        self.process: Process | None = None
        self.details: dict[str, Any] = {}
        # The delegation tokens written for tests (URL strings, passwords): leak canaries.
        self.tokens: list[str] = []
        self.token_passwords: list[bytes] = []
        self.ca_bundle = workdir / "tls" / "ca.pem"

    @property
    def webhdfs_url(self) -> str:
        return f"https://localhost:{self.details['namenode_https_port']}"

    @property
    def namenode_uri(self) -> str:
        return f"hdfs://localhost:{self.details['namenode_rpc_port']}"

    @property
    def realm(self) -> str:
        return str(self.details["realm"])

    def keytab(self, user: str) -> Path:
        return Path(self.details[f"{user}_keytab"])

    def _tls(self) -> Path:
        """Keystore, truststore, CA bundle and the two ssl-*.xml files; the conf directory."""
        tls = self.workdir / "tls"
        tls.mkdir(parents=True, exist_ok=True)
        keystore, truststore = tls / "server.jks", tls / "trust.jks"
        for path in (keystore, truststore, self.ca_bundle):
            path.unlink(missing_ok=True)
        pw = STORE_PASSWORD
        _keytool(
            "-genkeypair",
            "-alias",
            "localhost",
            "-keyalg",
            "RSA",
            "-keysize",
            "2048",
            "-sigalg",
            "SHA256withRSA",
            "-dname",
            "CN=localhost",
            "-validity",
            "30",
            "-ext",
            "SAN=dns:localhost,ip:127.0.0.1",
            "-keystore",
            str(keystore),
            "-storepass",
            pw,
            "-keypass",
            pw,
            "-storetype",
            "jks",
        )
        _keytool(
            "-exportcert",
            "-rfc",
            "-alias",
            "localhost",
            "-keystore",
            str(keystore),
            "-storepass",
            pw,
            "-file",
            str(self.ca_bundle),
        )
        _keytool(
            "-importcert",
            "-noprompt",
            "-alias",
            "localhost",
            "-file",
            str(self.ca_bundle),
            "-keystore",
            str(truststore),
            "-storepass",
            pw,
            "-storetype",
            "jks",
        )
        conf = tls / "conf"
        conf.mkdir(exist_ok=True)
        values = {"keystore": keystore, "truststore": truststore, "password": pw}
        (conf / "ssl-server.xml").write_text(SSL_SERVER.format(**values))
        (conf / "ssl-client.xml").write_text(SSL_CLIENT.format(**values))
        return conf

    def start(self, timeout: float = 180.0) -> SecureHdfs:
        self.workdir.mkdir(parents=True, exist_ok=True)
        details = self.workdir / "details.json"
        details.unlink(missing_ok=True)
        conf = self._tls()
        argv = [
            *hadoop_jvm(self.workdir, self.heap),
            "-cp",
            f"{classpath('hdfs')}:{classpath('kdc')}:{conf}",
            str(REPO / "testbed" / "java" / "SecureHdfs.java"),
            str(self.workdir),
        ]
        self.process = Process(
            "secure-hdfs", argv, self.workdir / "secure-hdfs.log", cwd=self.workdir
        )
        self.process.wait_ready(details.exists, timeout, f"the secure cluster's {details}")
        self.details = json.loads(details.read_text())
        # Client configurations as a Hadoop user's /etc/krb5.conf would be (MIT, no DNS).
        for name, port in (("krb5.conf", "kdc_port"), ("rogue-krb5.conf", "rogue_kdc_port")):
            conf_file = self.workdir / name
            conf_file.write_text(KRB5_CONF.format(realm=self.realm, port=self.details[port]))
            self.details[name.replace("-", "_").replace(".", "_")] = str(conf_file)
        return self

    @property
    def krb5_conf(self) -> str:
        """The client krb5.conf of the cluster's KDC (KRB5_CONFIG)."""
        return str(self.details["krb5_conf"])

    @property
    def rogue_krb5_conf(self) -> str:
        """A krb5.conf naming the OTHER KDC of the same realm (tickets the cluster refuses)."""
        return str(self.details["rogue_krb5_conf"])

    def principal(self, user: str) -> str:
        return f"{user}@{self.realm}"

    def kinit(
        self,
        user: str,
        ccache: Path,
        *,
        keytab: Path | None = None,
        krb5_conf: str | None = None,
        lifetime: int | None = None,
    ) -> dict[str, str]:
        """A ticket for `user` from its keytab in the FILE cache `ccache` (what `kinit -kt`
        leaves), in a child process with its own KRB5_CONFIG; returns the environment that
        points a client at it."""
        env = {
            "KRB5_CONFIG": krb5_conf or self.krb5_conf,
            "KRB5CCNAME": f"FILE:{ccache}",
        }
        # The `krb5` package (built with the apache-hdfs provider's Kerberos extra) does what
        # `kinit -kt -l` does, in a child so that KRB5_CONFIG is read fresh.
        script = (
            "import krb5, sys\n"
            "ctx = krb5.init_context()\n"
            "who = krb5.parse_name_flags(ctx, sys.argv[1].encode())\n"
            "opt = krb5.get_init_creds_opt_alloc(ctx)\n"
            "if sys.argv[3]: krb5.get_init_creds_opt_set_tkt_life(opt, int(sys.argv[3]))\n"
            "keytab = krb5.kt_resolve(ctx, sys.argv[2].encode())\n"
            "creds = krb5.get_init_creds_keytab(ctx, who, opt, keytab=keytab)\n"
            "cache = krb5.cc_resolve(ctx, sys.argv[4].encode())\n"
            "krb5.cc_initialize(ctx, cache, who)\n"
            "krb5.cc_store_cred(ctx, cache, creds)\n"
        )
        subprocess.run(
            [
                os.environ.get("PYTHON", sys.executable),
                "-c",
                script,
                self.principal(user),
                f"FILE:{keytab or self.keytab(user)}",
                str(lifetime or ""),
                env["KRB5CCNAME"],
            ],
            check=True,
            capture_output=True,
            timeout=60,
            env={**os.environ, **env},
        )
        return env

    def client_conf(self) -> Path:
        """A Hadoop client configuration directory (HADOOP_CONF_DIR) for this cluster, as a
        Spark or hdfs client of a Kerberized estate has it: Kerberos, the NameNode's principal,
        SASL data transfer protection, HTTPS only with the ssl-client truststore."""
        conf = self.workdir / "client-conf"
        conf.mkdir(exist_ok=True)
        sites = {
            "core-site.xml": {"hadoop.security.authentication": "kerberos"},
            "hdfs-site.xml": {
                "dfs.namenode.kerberos.principal": f"hdfs/localhost@{self.realm}",
                "dfs.data.transfer.protection": "authentication",
                "dfs.http.policy": "HTTPS_ONLY",
                "dfs.client.https.keystore.resource": "ssl-client.xml",
            },
        }
        for name, properties in sites.items():
            (conf / name).write_text(_site(properties))
        ssl_client = (self.workdir / "tls" / "conf" / "ssl-client.xml").read_text()
        (conf / "ssl-client.xml").write_text(ssl_client)
        return conf

    def token_files(self, user: str, out: Path, renewer: str = "yarn") -> dict[str, Any]:
        """Hadoop token files for `user` in `out`, written by Hadoop's Credentials API
        (testbed/java/TokenFiles.java): ``tokens-v0`` (YARN's Writable format), ``tokens-v1``
        (protobuf, as `hadoop dtutil` writes), ``cancelled`` (a token cancelled at the
        NameNode). Returns, per file, the HDFS token's kind, service and URL string (Java's
        Token.encodeToUrlString) and password (hex); the URL strings and passwords are kept in
        :attr:`tokens` and :attr:`token_passwords` for the tests' leak checks."""
        out.mkdir(parents=True, exist_ok=True)
        argv = [
            *hadoop_jvm(out, "256m"),
            f"-Djava.security.krb5.conf={self.krb5_conf}",
            "-cp",
            classpath("hdfs"),
            str(REPO / "testbed" / "java" / "TokenFiles.java"),
            self.namenode_uri,
            self.principal(user),
            str(self.keytab(user)),
            str(out),
            renewer,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=out)
        if done.returncode != 0:
            raise RuntimeError(
                f"TokenFiles.java failed: {done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        written = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        self.tokens.extend(token["url"] for token in written)
        self.token_passwords.extend(bytes.fromhex(token["password"]) for token in written)
        return {token["file"]: token for token in written}

    def stop(self) -> None:
        if self.process:
            self.process.stop()
