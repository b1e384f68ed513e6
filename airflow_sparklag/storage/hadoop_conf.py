"""Hadoop's client configuration as Hadoop clients read it (``core-site.xml``, then
``hdfs-site.xml`` in ``HADOOP_CONF_DIR`` or ``$HADOOP_HOME/etc/hadoop``): what WebHDFS infers
from it, and how the files are read as untrusted input, is in docs/hdfs.md.

>>> HadoopConf.from_environment().namenode_urls("hdfs://prod/checkpoints/orders")
['https://nn1.example.com:9871', 'https://nn2.example.com:9871']
"""

from __future__ import annotations

import dataclasses
import functools
import os
import ssl
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow_sparklag.errors import HadoopConfigInvalid, UnsupportedStorageURL
from airflow_sparklag.storage.hadoop_tokens import Bytes

SITE_FILES = ("core-site.xml", "hdfs-site.xml")  # in this order: the second's values win
MAX_FILE_BYTES = 4 * 1024 * 1024  # real site files are tens of KB
DEFAULT_PORTS = {"http": 9870, "https": 9871}  # dfs.namenode.http(s)-address since Hadoop 3
FIELDS = ("name", "value", "final")
# Every way to say where the NameNodes' HTTP servers are, in the words of each entry point.
NAMENODES_HINT = (
    "give their HTTP addresses: --webhdfs-url http://namenode:9870 (repeat it for HA "
    "NameNodes), a webhdfs connection, webhdfs_options={'url': ...}, or the cluster's Hadoop "
    "configuration (HADOOP_CONF_DIR: dfs.namenode.http-address, HA nameservices)"
)
_XINCLUDE = "{http://www.w3.org/2001/XInclude}include"


@dataclasses.dataclass(frozen=True)
class HadoopConf:
    """The properties of a Hadoop client configuration, and which file set each one.

    ``HadoopConf()`` is the empty configuration (Hadoop's defaults: simple authentication,
    HTTP, port 9870)."""

    directory: str | None = None
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> HadoopConf:
        """The configuration in ``HADOOP_CONF_DIR``, else ``$HADOOP_HOME/etc/hadoop``; empty when
        neither is set. A directory that is set but missing is an error naming it (a Hadoop
        client would run on defaults and fail later, further from the cause)."""
        env = os.environ if environ is None else environ
        if env.get("HADOOP_CONF_DIR"):
            directory, variable = Path(env["HADOOP_CONF_DIR"]), "HADOOP_CONF_DIR"
        elif env.get("HADOOP_HOME"):
            directory, variable = Path(env["HADOOP_HOME"]) / "etc" / "hadoop", "HADOOP_HOME"
        else:
            return cls()
        if not directory.is_dir():
            raise HadoopConfigInvalid(
                f"Hadoop configuration directory {directory} (from {variable}) is not a "
                f"directory; point {variable} at the cluster's client configuration, or unset it"
            )
        return cls.read(directory)

    @classmethod
    def read(cls, directory: Path) -> HadoopConf:
        properties: dict[str, str] = {}
        sources: dict[str, str] = {}
        final: set[str] = set()
        for name in SITE_FILES:
            path = directory / name
            for key, value, is_final in read_site_file(path):
                if key in final:
                    continue  # Hadoop keeps a final value and ignores later ones
                properties[key], sources[key] = value, str(path)
                if is_final:
                    final.add(key)
        return cls(str(directory), properties, sources)

    def get(self, key: str, default: str = "") -> str:
        return self.properties.get(key, default).strip()

    def source(self, key: str) -> str:
        """Where ``key`` was set (a file's path), for messages."""
        return self.sources.get(key, f"{self.directory} (Hadoop's default)")

    @property
    def kerberos(self) -> bool:
        return self.get("hadoop.security.authentication", "simple").lower() == "kerberos"

    @property
    def http_scheme(self) -> str:
        """``https`` under ``dfs.http.policy=HTTPS_ONLY``, else ``http`` (HTTP_AND_HTTPS too)."""
        return "https" if self.get("dfs.http.policy").upper() == "HTTPS_ONLY" else "http"

    def qualify(self, location: str) -> str:
        """``hdfs:///ck`` on the file system of ``fs.defaultFS`` (``hdfs://prod/ck``); any
        other location as it is."""
        scheme, _, rest = location.partition("://")
        if not rest.startswith("/") or scheme.lower() != "hdfs":
            return location
        default = self.get("fs.defaultFS")
        if urlsplit(default).scheme.lower() != "hdfs" or not _authority(default):
            return location  # no default (or another file system): namenode_urls says so
        return f"hdfs://{_authority(default)}{rest}"

    def namenode_urls(self, location: str) -> list[str]:
        """The WebHDFS URLs of the NameNodes serving ``location`` (``hdfs://`` or
        ``webhdfs://``): every NameNode of an HA nameservice, else the named host with the
        configured (or default) HTTP port. ``webhdfs://host:port`` names the HTTP port itself
        and speaks HTTP, as Hadoop's ``webhdfs`` file system does."""
        authority = _authority(location)
        if not authority:
            raise UnsupportedStorageURL(
                f"{location!r} has no NameNode host; name one (hdfs://namenode:8020/...), set "
                f"fs.defaultFS in core-site.xml (HADOOP_CONF_DIR), or {NAMENODES_HINT}"
            )
        webhdfs = location.partition("://")[0].lower() == "webhdfs"
        scheme = "http" if webhdfs else self.http_scheme
        if authority in self._nameservices():
            return [f"{scheme}://{address}" for address in self._ha_addresses(authority, scheme)]
        parts = urlsplit(f"//{authority}")
        if webhdfs:
            return [f"http://{parts.hostname}:{parts.port or DEFAULT_PORTS['http']}"]
        key = f"dfs.namenode.{scheme}-address"
        port = DEFAULT_PORTS[scheme]
        if self.get(key):
            host, port = self._address(key)
            # Another host's address (a gateway's copy of the configuration) keeps its port only
            port = port if host in (parts.hostname, "0.0.0.0") else DEFAULT_PORTS[scheme]
        return [f"{scheme}://{parts.hostname}:{port}"]

    def ca_bundle(self) -> str | None:
        """A PEM file of the certificates Hadoop's HTTPS client trusts: the JKS truststore
        that ``ssl-client.xml`` (``dfs.client.https.keystore.resource``) names, for requests'
        ``verify``; ``None`` when the configuration names none."""
        if not self.directory:
            return None
        resource = self.get("dfs.client.https.keystore.resource", "ssl-client.xml")
        ssl_client = Path(self.directory) / resource
        settings = {key: value.strip() for key, value, _ in read_site_file(ssl_client)}
        location = settings.get("ssl.client.truststore.location")
        if not location:
            return None
        kind = settings.get("ssl.client.truststore.type") or "jks"
        if kind.lower() != "jks":
            raise _invalid(
                ssl_client,
                f"a {kind} truststore, and only JKS ones are read; give the CA as a PEM file "
                "(webhdfs_options['verify'])",
            )
        found = Path(location)
        try:
            stat = found.stat()
        except OSError as exc:
            raise _invalid(
                ssl_client, f"truststore {found} cannot be read ({exc.strerror})"
            ) from None
        return _pem_bundle(str(found), stat.st_mtime_ns, stat.st_size)

    def _nameservices(self) -> set[str]:
        listed = self.get("dfs.nameservices") + "," + self.get("dfs.internal.nameservices")
        return {name.strip() for name in listed.split(",") if name.strip()}

    def _ha_addresses(self, nameservice: str, scheme: str) -> list[str]:
        """``host:port`` of each NameNode of ``nameservice`` (one, unnamed, when it is not HA)."""
        namenodes = [n.strip() for n in self.get(f"dfs.ha.namenodes.{nameservice}").split(",")]
        keys = [
            f"dfs.namenode.{scheme}-address.{nameservice}" + (f".{nn}" if nn else "")
            for nn in [n for n in namenodes if n] or [""]
        ]
        missing = [key for key in keys if not self.get(key)]
        if missing:
            raise _invalid(
                self.directory,
                f"nameservice {nameservice!r} has no {', '.join(missing)} (hdfs-site.xml); add "
                "it, or give the NameNodes' WebHDFS URLs (--webhdfs-url, repeated for HA)",
            )
        return ["{}:{}".format(*self._address(key)) for key in keys]

    def _address(self, key: str) -> tuple[str, int]:
        value = self.get(key)
        parts = urlsplit(f"//{value}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None or "/" in value or "$" in value:
            raise _invalid(
                self.source(key),
                f"{key} is {value[:100]!r}, not host:port (${{...}} substitution is not followed)",
            )
        return parts.hostname, port


def _authority(url: str) -> str:
    """``host:port`` (or a nameservice) of ``scheme://authority/path``, credentials dropped;
    read as Hadoop's ``Path`` does (storage.url_parts: the path is not split at ``?`` or ``#``)."""
    return url.partition("://")[2].partition("/")[0].rpartition("@")[2]


@functools.lru_cache(maxsize=8)
def _pem_bundle(truststore: str, mtime_ns: int, size: int) -> str:
    """The trusted certificates of a JKS truststore as a PEM file of this process (certificates
    are public; written once per truststore version)."""
    pem = "".join(ssl.DER_cert_to_PEM_cert(der) for der in jks_certificates(Path(truststore)))
    with tempfile.NamedTemporaryFile("w", prefix="sparklag-ca-", suffix=".pem", delete=False) as f:
        f.write(pem)
    return f.name


def jks_certificates(path: Path) -> list[bytes]:
    """The DER certificates of a Java KeyStore's trusted-certificate entries (versions 1 and
    2; private-key entries skipped). The keyed digest at the end is not checked: like a PEM
    bundle, the file is trusted for where it is."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise HadoopConfigInvalid(f"truststore {path}: cannot be read ({exc.strerror})") from None

    def damaged(at: int, what: str) -> HadoopConfigInvalid:
        return HadoopConfigInvalid(
            f"truststore {path}: damaged ({what or f'cut short at byte {at}'})"
        )

    def certificate() -> bytes:
        if version == 2:
            entries.sized(2)  # its type, X.509
        return entries.sized(4)

    version = int.from_bytes(data[4:8], "big")
    if data[:4] != b"\xfe\xed\xfe\xed" or version not in (1, 2) or len(data) > MAX_FILE_BYTES:
        raise HadoopConfigInvalid(
            f"truststore {path}: not a JKS file (JCEKS and PKCS12 are not read); give the CA as "
            "a PEM file (webhdfs_options['verify'])"
        )
    entries = Bytes(data, damaged, at=8)  # after the magic number and the version
    found = []
    for _ in range(entries.number(4)):
        tag = entries.number(4)
        entries.take(entries.number(2) + 8)  # the alias, the date
        if tag == 1:  # a private key and its chain
            entries.sized(4)
            for _ in range(entries.number(4)):
                certificate()
        elif tag == 2:
            found.append(certificate())
        else:
            raise damaged(0, f"an entry of unknown kind {tag} at byte {entries.at - 4}")
    return found


class _NoDoctype(ElementTree.TreeBuilder):
    """Refuses a DTD as soon as it starts: no entity is ever declared, so none is expanded
    (a Hadoop configuration has no use for one)."""

    def doctype(self, name: Any, pubid: Any, system: Any) -> None:
        raise _DoctypeRefused


class _DoctypeRefused(Exception):
    pass


def _invalid(where: object, problem: str) -> HadoopConfigInvalid:
    return HadoopConfigInvalid(f"Hadoop configuration {where}: {problem}")


def read_site_file(path: Path) -> list[tuple[str, str, bool]]:
    """(name, value, final) of each ``<property>`` of a Hadoop ``*-site.xml``; ``[]`` when the
    file is not there. Anything else wrong is :class:`HadoopConfigInvalid` naming the file."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _invalid(path, f"cannot be read ({exc.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        size = MAX_FILE_BYTES // 1024 // 1024
        raise _invalid(path, f"over {size} MiB, not a Hadoop site file; refused")
    parser = ElementTree.XMLParser(target=_NoDoctype())
    try:
        parser.feed(data)
        root = parser.close()
    except _DoctypeRefused:
        problem = "has a DOCTYPE (a DTD, which may declare entities); a Hadoop site file needs none"
        raise _invalid(path, f"{problem}: remove it") from None
    except ElementTree.ParseError as exc:
        raise _invalid(path, f"not well-formed XML ({exc})") from None
    if root.tag != "configuration":
        top = str(root.tag)[:40]
        raise _invalid(path, f"the top element is <{top}>, not <configuration>")
    if root.find(f".//{_XINCLUDE}") is not None:
        raise _invalid(
            path,
            "uses XInclude, which this reader does not follow; give the NameNodes' URLs and the "
            "credentials as flags or options instead",
        )
    found = []
    for prop in root.iter("property"):
        # <name>/<value>/<final> elements, or (Hadoop 3) attributes of the same names
        name, value, final = (prop.findtext(key) or prop.get(key) or "" for key in FIELDS)
        if name.strip():  # Hadoop skips a property without a name too
            found.append((name.strip(), value, final.strip().lower() == "true"))
    return found
