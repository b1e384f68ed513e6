"""storage/hadoop_conf.py: Hadoop's client configuration as Hadoop clients read it, and the
site files as untrusted input (malformed, huge, entities, XInclude). The real Kerberized
cluster read through it: tests/integration/test_kerberos_hdfs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_sparklag.errors import HadoopConfigInvalid, UnsupportedStorageURL, UsageError
from airflow_sparklag.storage.hadoop_conf import (
    MAX_FILE_BYTES,
    HadoopConf,
    read_site_file,
)


def _site(properties: dict[str, str]) -> str:
    rows = "".join(
        f"  <property><name>{k}</name><value>{v}</value></property>\n"
        for k, v in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


def _conf(tmp_path: Path, core: dict[str, str], hdfs: dict[str, str] | None = None) -> HadoopConf:
    (tmp_path / "core-site.xml").write_text(_site(core))
    (tmp_path / "hdfs-site.xml").write_text(_site(hdfs or {}))
    return HadoopConf.from_environment({"HADOOP_CONF_DIR": str(tmp_path)})


HA = {
    "dfs.nameservices": "prod,other",
    "dfs.ha.namenodes.prod": "nn1, nn2",
    "dfs.namenode.http-address.prod.nn1": "nn1.example.com:9870",
    "dfs.namenode.http-address.prod.nn2": "nn2.example.com:9870",
    "dfs.namenode.https-address.prod.nn1": "nn1.example.com:9871",
    "dfs.namenode.https-address.prod.nn2": "nn2.example.com:9871",
}

# -- hostile and malformed files: (file content, what the message says) -----------------------

LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE configuration [<!ENTITY a "aaaaaaaaaa">'
    + "".join(f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9))
    + "]><configuration><property><name>x</name><value>&j;</value></property></configuration>"
)
HOSTILE = [
    pytest.param("<configuration><property>", "not well-formed XML", id="cut-short"),
    pytest.param("", "not well-formed XML", id="empty"),
    pytest.param("\x00\xff garbage", "not well-formed XML", id="binary"),
    pytest.param(LAUGHS, "has a DOCTYPE", id="billion-laughs"),
    pytest.param(
        '<?xml version="1.0"?><!DOCTYPE c [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        "<configuration><property><name>a</name><value>&x;</value></property></configuration>",
        "has a DOCTYPE",
        id="external-entity",
    ),
    pytest.param(
        '<!DOCTYPE configuration SYSTEM "http://127.0.0.1:1/conf.dtd"><configuration/>',
        "has a DOCTYPE",
        id="external-dtd",
    ),
    pytest.param(
        "<configuration><property><name>a</name><value>&undeclared;</value></property>"
        "</configuration>",
        "undefined entity",
        id="undeclared-entity",
    ),
    pytest.param("<properties><property/></properties>", "top element is <properties>", id="root"),
    pytest.param(
        '<configuration xmlns:xi="http://www.w3.org/2001/XInclude">'
        '<xi:include href="/etc/passwd"/></configuration>',
        "uses XInclude",
        id="xinclude",
    ),
]


@pytest.mark.parametrize(("content", "said"), HOSTILE)
def test_a_hostile_or_malformed_site_file_is_refused_naming_it(
    tmp_path: Path, content: str, said: str
) -> None:
    path = tmp_path / "core-site.xml"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(HadoopConfigInvalid, match=said) as caught:
        HadoopConf.from_environment({"HADOOP_CONF_DIR": str(tmp_path)})
    assert f"Hadoop configuration {path}: " in str(caught.value)
    assert "root:" not in str(caught.value)  # no file content (/etc/passwd) echoed
    assert isinstance(caught.value, UsageError)  # the CLI's exit 64, no traceback


def test_a_huge_site_file_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "hdfs-site.xml"
    path.write_text("<configuration>" + " " * MAX_FILE_BYTES + "</configuration>")
    with pytest.raises(HadoopConfigInvalid, match=rf"{path}: over 4 MiB, not a Hadoop site"):
        read_site_file(path)


def test_an_unreadable_site_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "core-site.xml").mkdir()
    with pytest.raises(HadoopConfigInvalid, match=r"core-site.xml: cannot be read"):
        HadoopConf.from_environment({"HADOOP_CONF_DIR": str(tmp_path)})


def test_a_missing_configuration_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(HadoopConfigInvalid, match=r"nope \(from HADOOP_CONF_DIR\) is not a dir"):
        HadoopConf.from_environment({"HADOOP_CONF_DIR": str(tmp_path / "nope")})


# -- reading as Hadoop does ---------------------------------------------------------------------


def test_where_the_configuration_is_found(tmp_path: Path) -> None:
    home = tmp_path / "hadoop"
    (home / "etc" / "hadoop").mkdir(parents=True)
    (home / "etc" / "hadoop" / "core-site.xml").write_text(
        _site({"hadoop.security.authentication": "kerberos"})
    )
    assert HadoopConf.from_environment({}) == HadoopConf()
    assert not HadoopConf().kerberos and HadoopConf().http_scheme == "http"
    assert HadoopConf.from_environment({"HADOOP_HOME": str(home)}).kerberos
    # HADOOP_CONF_DIR first; a directory without site files is Hadoop's defaults
    empty = HadoopConf.from_environment(
        {"HADOOP_CONF_DIR": str(tmp_path), "HADOOP_HOME": str(home)}
    )
    assert not empty.kerberos and empty.directory == str(tmp_path)


def test_hdfs_site_over_core_site_unless_final_and_attribute_properties(tmp_path: Path) -> None:
    (tmp_path / "core-site.xml").write_text(
        "<configuration>"
        "<property><name>a</name><value>core</value><final>true</final></property>"
        "<property><name>b</name><value>core</value></property>"
        '<property name="c" value="attribute"/>'
        "<property><value>no name: skipped</value></property>"
        "</configuration>"
    )
    (tmp_path / "hdfs-site.xml").write_text(_site({"a": "hdfs", "b": "hdfs"}))
    conf = HadoopConf.from_environment({"HADOOP_CONF_DIR": str(tmp_path)})
    assert dict(conf.properties) == {"a": "core", "b": "hdfs", "c": "attribute"}
    assert conf.source("b") == str(tmp_path / "hdfs-site.xml")


@pytest.mark.parametrize(
    ("core", "hdfs", "location", "urls"),
    [
        ({}, {}, "hdfs://nn.example.com:8020/ck", ["http://nn.example.com:9870"]),
        ({}, HA, "hdfs://prod/ck", ["http://nn1.example.com:9870", "http://nn2.example.com:9870"]),
        (
            {},
            {**HA, "dfs.http.policy": "HTTPS_ONLY"},
            "hdfs://prod/ck",
            ["https://nn1.example.com:9871", "https://nn2.example.com:9871"],
        ),
        # HTTP_AND_HTTPS: clients speak HTTP
        (
            {},
            {**HA, "dfs.http.policy": "HTTP_AND_HTTPS"},
            "hdfs://prod/ck",
            ["http://nn1.example.com:9870", "http://nn2.example.com:9870"],
        ),
        # webhdfs:// is HTTP, as Hadoop's webhdfs file system is
        (
            {},
            {**HA, "dfs.http.policy": "HTTPS_ONLY"},
            "webhdfs://prod/ck",
            ["http://nn1.example.com:9870", "http://nn2.example.com:9870"],
        ),
        # a bare path: fs.defaultFS
        (
            {"fs.defaultFS": "hdfs://prod"},
            HA,
            "hdfs:///ck",
            ["http://nn1.example.com:9870", "http://nn2.example.com:9870"],
        ),
        # a federated nameservice that is not HA
        (
            {},
            {"dfs.nameservices": "fed", "dfs.namenode.http-address.fed": "f.example:50070"},
            "hdfs://fed/ck",
            ["http://f.example:50070"],
        ),
        # one NameNode: its configured port, for its own host or a wildcard address
        (
            {},
            {"dfs.http.policy": "HTTPS_ONLY", "dfs.namenode.https-address": "nn:9443"},
            "hdfs://nn:8020/ck",
            ["https://nn:9443"],
        ),
        (
            {},
            {"dfs.namenode.http-address": "0.0.0.0:50070"},
            "hdfs://nn:8020/ck",
            ["http://nn:50070"],
        ),
        (
            {},
            {"dfs.namenode.http-address": "other:50070"},
            "hdfs://nn:8020/ck",
            ["http://nn:9870"],
        ),
        ({}, {}, "webhdfs://nn:50070/ck", ["http://nn:50070"]),
    ],
)
def test_namenode_urls(
    tmp_path: Path, core: dict[str, str], hdfs: dict[str, str], location: str, urls: list[str]
) -> None:
    conf = _conf(tmp_path, core, hdfs)
    assert conf.namenode_urls(conf.qualify(location)) == urls


def test_qualify_uses_fs_default_fs_for_a_bare_path_only(tmp_path: Path) -> None:
    conf = _conf(tmp_path, {"fs.defaultFS": "hdfs://prod:8020"})
    assert conf.qualify("hdfs:///ck/orders") == "hdfs://prod:8020/ck/orders"
    assert conf.qualify("hdfs://nn/ck") == "hdfs://nn/ck"
    assert conf.qualify("s3a://b/ck") == "s3a://b/ck"
    s3_default = _conf(tmp_path, {"fs.defaultFS": "s3a://lake"})
    with pytest.raises(UnsupportedStorageURL, match=r"no NameNode host.*fs.defaultFS"):
        s3_default.namenode_urls(s3_default.qualify("hdfs:///ck"))


def test_a_nameservice_without_its_addresses_is_named(tmp_path: Path) -> None:
    hdfs = {key: value for key, value in HA.items() if not key.endswith("prod.nn2")}
    conf = _conf(tmp_path, {}, hdfs)
    with pytest.raises(
        HadoopConfigInvalid, match=r"'prod' has no dfs.namenode.http-address.prod.nn2"
    ):
        conf.namenode_urls("hdfs://prod/ck")


@pytest.mark.parametrize("address", ["${dfs.nn.host}:9870", "nn1", "nn1:port", "http://nn1:9870"])
def test_an_address_that_is_not_host_port_is_named(tmp_path: Path, address: str) -> None:
    conf = _conf(tmp_path, {}, {**HA, "dfs.namenode.http-address.prod.nn1": address})
    with pytest.raises(
        HadoopConfigInvalid,
        match=r"hdfs-site.xml: dfs.namenode.http-address.prod.nn1 is .* not host:port",
    ):
        conf.namenode_urls("hdfs://prod/ck")


def test_kerberos_is_read_as_hadoop_spells_it(tmp_path: Path) -> None:
    assert _conf(tmp_path, {"hadoop.security.authentication": " Kerberos "}).kerberos
    assert not _conf(tmp_path, {"hadoop.security.authentication": "simple"}).kerberos


# -- the HTTPS client's truststore (ssl-client.xml); a real one: the Kerberized cluster's ---------


def _ssl_client(tmp_path: Path, truststore: Path, kind: str = "jks") -> HadoopConf:
    (tmp_path / "ssl-client.xml").write_text(
        _site(
            {"ssl.client.truststore.location": str(truststore), "ssl.client.truststore.type": kind}
        )
    )
    return _conf(tmp_path, {}, {"dfs.http.policy": "HTTPS_ONLY"})


JKS_HEAD = b"\xfe\xed\xfe\xed\x00\x00\x00\x02"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        pytest.param(b"0\x82\x05\x00 a PKCS12 file", "not a JKS file", id="pkcs12-bytes"),
        pytest.param(b"\xce\xce\xce\xce\x00\x00\x00\x02", "not a JKS file", id="jceks"),
        pytest.param(JKS_HEAD, "damaged", id="no-count"),
        pytest.param(
            JKS_HEAD + b"\x00\x00\x00\x01\x00\x00\x00\x02\x00\x05ali", "damaged", id="cut"
        ),
        pytest.param(
            JKS_HEAD + b"\x00\x00\x00\x01\x00\x00\x00\x07\x00\x01a" + b"\x00" * 8,
            "an entry of unknown kind 7",
            id="unknown-entry",
        ),
        pytest.param(
            JKS_HEAD
            + b"\x7f\xff\xff\xff"
            + b"\x00\x00\x00\x02\x00\x00"
            + b"\x00" * 8
            + b"\x00\x05X.509\xff\xff\xff\xff",
            "damaged",
            id="huge-count-and-length",
        ),
    ],
)
def test_a_damaged_truststore_is_named(tmp_path: Path, content: bytes, said: str) -> None:
    truststore = tmp_path / "trust.jks"
    truststore.write_bytes(content)
    with pytest.raises(HadoopConfigInvalid, match=rf"truststore {truststore}: .*{said}"):
        _ssl_client(tmp_path, truststore).ca_bundle()


def test_truststores_that_are_not_read(tmp_path: Path) -> None:
    assert _conf(tmp_path, {}).ca_bundle() is None  # no ssl-client.xml: requests' own CAs
    assert HadoopConf().ca_bundle() is None
    with pytest.raises(HadoopConfigInvalid, match=r"ssl-client.xml: a pkcs12 truststore, and only"):
        _ssl_client(tmp_path, tmp_path / "trust.p12", "pkcs12").ca_bundle()
    with pytest.raises(HadoopConfigInvalid, match=r"truststore .*missing.jks cannot be read"):
        _ssl_client(tmp_path, tmp_path / "missing.jks").ca_bundle()
