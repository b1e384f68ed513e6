"""Hadoop token files (HADOOP_TOKEN_FILE_LOCATION): both versions, hand-written damaged ones,
the choice of the NameNode's token and the order of WebHDFS credentials. Files written by
Hadoop itself are read in tests/integration/test_kerberos_hdfs.py."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from airflow_sparklag.errors import InvalidParameter, TokenFileInvalid
from airflow_sparklag.storage.hadoop_tokens import Token, pick_hdfs_token, read_token_file
from airflow_sparklag.storage.webhdfs import WebHDFSOptions, WebHDFSStorage

HDFS = Token("HDFS_DELEGATION_TOKEN", "127.0.0.1:8020", b"\x00\x05alice" + b"i" * 300, b"pw" * 10)
AMRM = Token("YARN_AM_RM_TOKEN", "127.0.0.1:8030", b"amrm-id", b"\x01\x02")


def _vint(value: int) -> bytes:
    """WritableUtils.writeVInt for 0..65535, spelled out."""
    if value <= 127:
        return bytes([value])
    if value <= 0xFF:
        return bytes([0x8F, value])  # -113: one byte follows
    return bytes([0x8E, value >> 8, value & 0xFF])  # -114: two bytes follow


def _writable(*tokens: Token, secrets: int = 1) -> bytes:
    """Version 0, as Credentials.write lays it out."""
    body = _vint(len(tokens))
    for index, token in enumerate(tokens):
        body += _vint(6) + f"alias{index}".encode()
        for field in (
            token.identifier,
            token.password,
            token.kind.encode(),
            token.service.encode(),
        ):
            body += _vint(len(field)) + field
    body += _vint(secrets) + b"".join(
        _vint(3) + b"key" + _vint(2) + b"\x07\x07" for _ in range(secrets)
    )
    return b"HDTS\x00" + body


def _varint(value: int) -> bytes:
    out = b""
    while value > 0x7F:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _proto_token(token: Token, *, skip: int | None = None) -> bytes:
    fields = (token.identifier, token.password, token.kind.encode(), token.service.encode())
    return b"".join(_field(n, f) for n, f in enumerate(fields, 1) if n != skip)


def _protobuf(*tokens: Token, skip: int | None = None) -> bytes:
    """Version 1: a length-prefixed CredentialsProto, with a secret and a varint field too."""
    message = b"".join(
        _field(1, _field(1, b"alias") + _field(2, _proto_token(t, skip=skip))) for t in tokens
    )
    message += _field(2, _field(1, b"key") + _field(3, b"\x07")) + _varint(3 << 3) + _varint(300)
    return b"HDTS\x01" + _varint(len(message)) + message


def _file(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "container_tokens"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("write", [_writable, _protobuf], ids=["v0-writable", "v1-protobuf"])
def test_both_versions_read_every_token(tmp_path, write):
    assert read_token_file(_file(tmp_path, write(AMRM, HDFS))) == [AMRM, HDFS]


def test_url_string_is_the_writable_token_in_url_safe_base64():
    raw = base64.urlsafe_b64decode(HDFS.url_string() + "==")
    identifier = HDFS.identifier
    assert raw == (
        b"\x8e\x01\x33" + identifier + b"\x14" + HDFS.password + b"\x15HDFS_DELEGATION_TOKEN"
        b"\x0e127.0.0.1:8020"
    )
    assert "=" not in HDFS.url_string() and "+" not in HDFS.url_string()


def test_repr_shows_no_secret():
    assert repr(HDFS) == "Token(kind='HDFS_DELEGATION_TOKEN', service='127.0.0.1:8020')"


@pytest.mark.parametrize("write", [_writable, _protobuf], ids=["v0-writable", "v1-protobuf"])
def test_every_cut_short_file_names_the_file(tmp_path, write):
    whole = write(AMRM, HDFS)
    for end in range(len(whole)):
        path = _file(tmp_path, whole[:end])
        with pytest.raises(TokenFileInvalid, match=f"Hadoop token file {path}: "):
            read_token_file(path)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "does not start with HDTS"),
        (b"HDTX\x00\x00\x00", "does not start with HDTS"),
        (b"HDTS", "version None is unknown"),
        (b"HDTS\x02\x00\x00", "version 2 is unknown"),
        (_writable(HDFS) + b"\x00", "1 bytes after the last entry"),
        (b"HDTS\x00\x81\x00", r"cut short or damaged at byte 6 \(reading the token count\)"),
        (b"HDTS\x00\x01\x01a\x01i\x01p\x01\xff\x01s\x00", "a token kind before byte 14 is not"),
        (_protobuf(HDFS, skip=4), "a token without its identifier, password, kind or service"),
        (b"HDTS\x01\x02\x0b\x00", r"protobuf wire type 3 in a credentials entry"),
        (b"HDTS\x01" + b"\xff" * 11, "a varint longer than 10 bytes"),
    ],
)
def test_damaged_files_say_what_is_wrong(tmp_path, data, problem):
    path = _file(tmp_path, data)
    with pytest.raises(TokenFileInvalid, match=f"Hadoop token file {path}: .*{problem}"):
        read_token_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(TokenFileInvalid, match=r"/nope: cannot be read \(No such file"):
        read_token_file(str(tmp_path / "nope"))


def _hdfs(service: str) -> Token:
    return Token("HDFS_DELEGATION_TOKEN", service, b"id", b"pw")


def test_the_token_of_the_locations_namenode_is_picked():
    other, mine = _hdfs("10.255.0.1:8020"), _hdfs("127.0.0.1:9000")
    assert pick_hdfs_token([AMRM, other, mine], "hdfs://localhost:9000/ck") is mine
    assert pick_hdfs_token([AMRM, mine, other], "hdfs://127.0.0.1:9000/ck") is mine
    default = _hdfs("127.0.0.1:8020")
    assert pick_hdfs_token([other, default], "hdfs://localhost/ck") is default
    # webhdfs:// and http:// name an HTTP port: the address alone decides
    assert pick_hdfs_token([other, mine], "webhdfs://localhost:9870/ck") is mine
    assert pick_hdfs_token([other, mine], "https://localhost:9871") is mine


def test_an_ha_nameservice_token():
    ha = _hdfs("ha-hdfs:prod")
    assert pick_hdfs_token([_hdfs("10.255.0.1:8020"), ha], "hdfs://prod/checkpoints/a") is ha


def test_one_hdfs_token_is_used_whatever_its_service():
    one = _hdfs("10.255.0.1:8020")
    assert pick_hdfs_token([AMRM, one], "hdfs://localhost:9000/ck") is one
    assert pick_hdfs_token([AMRM], "hdfs://localhost:9000/ck") is None


def test_several_tokens_none_of_this_namenode():
    tokens = [_hdfs("10.255.0.1:8020"), _hdfs("ha-hdfs:other")]
    with pytest.raises(TokenFileInvalid, match=r"services 10\.255\.0\.1:8020, ha-hdfs:other"):
        pick_hdfs_token(tokens, "hdfs://localhost:9000/ck")


# -- the order of credentials ------------------------------------------------------------------


def _storage(**options: str) -> WebHDFSStorage:
    options_value = WebHDFSOptions(url="http://localhost:1", **options)
    return WebHDFSStorage.for_url("hdfs://localhost:9000/ck", options_value)


def test_the_environments_token_file_comes_after_a_keytab_or_a_user(tmp_path, monkeypatch):
    path = _file(tmp_path, _writable(AMRM, HDFS))
    monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", path)
    assert _storage().token_file == path
    assert _storage(kerberos="true").token_file == path  # before the ticket cache
    assert _storage(principal="a@R", keytab="/k").token_file is None
    assert _storage(user="spark").token_file is None
    assert _storage()._pick_token() == HDFS


def test_an_explicit_token_file_wins_over_the_environment_but_not_with_a_keytab(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", str(tmp_path / "elsewhere"))
    path = _file(tmp_path, _protobuf(HDFS))
    assert _storage(token_file=path)._pick_token() == HDFS
    with pytest.raises(InvalidParameter, match="token_file: give a token file or"):
        _storage(token_file=path, principal="a@R", keytab="/k")


def test_a_file_without_hdfs_token(tmp_path, monkeypatch):
    """The environment's (a YARN container without Kerberos): the other credentials decide;
    one given explicitly: an error naming it."""
    path = _file(tmp_path, _writable(AMRM))
    monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", path)
    assert _storage()._pick_token() is None
    with pytest.raises(TokenFileInvalid, match=f"{path}: holds no HDFS delegation token"):
        _storage(token_file=path)._pick_token()
