"""Hadoop delegation tokens from a token file (``HADOOP_TOKEN_FILE_LOCATION``: what a YARN
container has instead of a keytab or a ticket): Hadoop's ``Credentials`` storage, ``HDTS``, a
version byte, then version 0 (Writable, what YARN writes) or 1 (a length-prefixed protobuf
``CredentialsProto``, what ``hadoop dtutil`` writes). No Python library reads it.

>>> token = pick_hdfs_token(read_token_file("/path/container_tokens"), "hdfs://nn:8020/ck")
>>> token.kind, token.service  # token.url_string() is the secret: never print it
('HDFS_DELEGATION_TOKEN', '10.0.0.5:8020')
"""

from __future__ import annotations

import base64
import dataclasses
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from airflow_sparklag.errors import TokenFileInvalid

MAGIC = b"HDTS"
# Token kinds the NameNode accepts as `delegation=` (the same identifier, three names).
HDFS_TOKEN_KINDS = frozenset({"HDFS_DELEGATION_TOKEN", "WEBHDFS delegation", "SWEBHDFS delegation"})
DEFAULT_RPC_PORT = 8020


@dataclasses.dataclass(frozen=True)
class Token:
    """One delegation token; ``repr`` shows only its kind and service."""

    kind: str
    service: str
    identifier: bytes = dataclasses.field(repr=False)
    password: bytes = dataclasses.field(repr=False)

    def url_string(self) -> str:
        """Hadoop's ``Token.encodeToUrlString()``: the Writable form, URL-safe base64 without
        padding. It carries the password: a secret."""
        fields = (self.identifier, self.password, self.kind.encode(), self.service.encode())
        raw = b"".join(_vint(len(field)) + field for field in fields)
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_token_file(path: str) -> list[Token]:
    """The tokens in a Hadoop token file (secret keys skipped); :class:`TokenFileInvalid`
    naming the file and what is wrong for anything else."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise _invalid(path, f"cannot be read ({exc.strerror})") from None
    if data[:4] != MAGIC:
        raise _invalid(path, "not a token file (it does not start with HDTS)")
    version = data[4] if len(data) > 4 else None
    reader = _Reader(data, 5, path)
    if version == 0:
        tokens = _writable_tokens(reader)
    elif version == 1:
        tokens = _protobuf_tokens(reader)
    else:
        raise _invalid(
            path, f"version {version} is unknown (this reader knows 0, Writable, and 1, protobuf)"
        )
    if reader.at != len(data):
        raise _invalid(path, f"{len(data) - reader.at} bytes after the last entry")
    return tokens


def _invalid(path: str, problem: str) -> TokenFileInvalid:
    return TokenFileInvalid(f"Hadoop token file {path}: {problem}")


def pick_hdfs_token(tokens: list[Token], location: str) -> Token | None:
    """The HDFS delegation token for the NameNode of ``location``: its service is the
    NameNode's RPC address as Hadoop writes it (``IP:port``, or ``host:port``) or
    ``ha-hdfs:<nameservice>``; if none matches and there is exactly one HDFS token, that one.
    ``None`` when there is no HDFS token at all; :class:`TokenFileInvalid` when several are
    there and none is this NameNode's."""
    hdfs = [token for token in tokens if token.kind in HDFS_TOKEN_KINDS]
    services = _services(location)
    for token in hdfs:
        if token.service in services or _address(token.service) in services:
            return token
    if len(hdfs) <= 1:
        return hdfs[0] if hdfs else None
    found = ", ".join(sorted({token.service for token in hdfs}))
    raise TokenFileInvalid(
        f"no HDFS delegation token for the NameNode of {location} among {len(hdfs)} "
        f"(services {found}); name the NameNode as the token does (hdfs://<that address>)"
    )


def _services(location: str) -> set[str]:
    """The services a token of this NameNode may have: ``ha-hdfs:<host>``, ``host:port`` and
    ``IP:port`` for each address of the host; for other URLs (``webhdfs://``, a NameNode's
    ``http://``: an HTTP port) the bare addresses, matched against a token's address without
    its port."""
    parts = urlsplit(location)
    host = parts.hostname or ""
    port = (parts.port or DEFAULT_RPC_PORT) if parts.scheme.lower() == "hdfs" else None
    try:
        found = {
            str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        }
    except (OSError, UnicodeError):  # an HA nameservice is no host name
        found = set()
    found.add(host)
    if port is None:
        return found
    return {f"ha-hdfs:{host}"} | {f"{address}:{port}" for address in found}


def _address(service: str) -> str:
    return service.rpartition(":")[0].strip("[]")


class Bytes:
    """Bytes read in order: the one reader of the binary files here (Hadoop token files, JKS
    truststores, Kerberos ticket caches). Running out raises ``cut_short(at, what)``, the
    caller's error naming its file."""

    def __init__(self, data: bytes, cut_short: Callable[[int, str], Exception], at: int = 0):
        self.data, self.cut_short, self.at = data, cut_short, at

    def take(self, count: int, what: str = "") -> bytes:
        if count < 0 or self.at + count > len(self.data):
            raise self.cut_short(self.at, what)
        self.at += count
        return self.data[self.at - count : self.at]

    def number(self, size: int, what: str = "") -> int:  # big-endian, unsigned
        return int.from_bytes(self.take(size, what), "big")

    def sized(self, size: int, what: str = "") -> bytes:  # after their count, a number
        return self.take(self.number(size, what), what)


class _Reader(Bytes):
    """A token file's bytes (or a protobuf message in it): every error names the file."""

    def __init__(self, data: bytes, at: int, path: str) -> None:
        super().__init__(data, self._cut_short, at)
        self.path = path

    def _cut_short(self, at: int, what: str) -> TokenFileInvalid:
        return _invalid(self.path, f"cut short or damaged at byte {at} (reading {what})")

    def inner(self, message: bytes) -> _Reader:
        return _Reader(message, 0, self.path)

    def text(self, raw: bytes, what: str) -> str:
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise _invalid(self.path, f"{what} before byte {self.at} is not UTF-8") from None

    def vlong(self, what: str) -> int:
        """Hadoop's WritableUtils.readVLong."""
        first = int.from_bytes(self.take(1, what), "big", signed=True)
        if first >= -112:
            return first
        negative = first < -120
        value = int.from_bytes(self.take((-119 if negative else -111) - first - 1, what), "big")
        return ~value if negative else value

    def chunk(self, what: str) -> bytes:
        """A Writable byte string (a Text, a token's identifier or password)."""
        return self.take(self.vlong(what), what)

    def varint(self, what: str) -> int:
        """A protobuf varint."""
        value = shift = 0
        while True:
            byte = self.take(1, what)[0]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                problem = f"a varint longer than 10 bytes, reading {what}"
                raise _invalid(self.path, f"damaged at byte {self.at} ({problem})")


def _writable_tokens(reader: _Reader) -> list[Token]:
    """Version 0: Credentials.write (tokens, then secret keys), WritableUtils encoding."""
    tokens = []
    for _ in range(reader.vlong("the token count")):
        reader.chunk("a token alias")
        identifier = reader.chunk("a token identifier")
        password = reader.chunk("a token password")
        kind = reader.text(reader.chunk("a token kind"), "a token kind")
        service = reader.text(reader.chunk("a token service"), "a token service")
        tokens.append(Token(kind, service, identifier, password))
    for _ in range(reader.vlong("the secret key count")):
        reader.chunk("a secret key alias")
        reader.chunk("a secret key")
    return tokens


def _protobuf_tokens(reader: _Reader) -> list[Token]:
    """Version 1: one length-prefixed CredentialsProto (tokens = 1, secrets = 2, each a
    CredentialsKVProto: alias = 1, TokenProto token = 2, secret = 3; TokenProto: identifier
    = 1, password = 2, kind = 3, service = 4)."""
    end = reader.varint("the message length")
    body = reader.inner(reader.take(end, "the credentials message"))
    tokens = []
    for number, entry in _fields(body, "a credentials entry"):
        if number != 1:
            continue  # secrets, or a field of a newer Hadoop
        token = dict(_fields(reader.inner(entry), "a token entry")).get(2)
        if token is None:
            continue
        fields = dict(_fields(reader.inner(token), "a token"))
        if any(key not in fields for key in (1, 2, 3, 4)):
            raise _invalid(reader.path, "a token without its identifier, password, kind or service")
        kind = reader.text(fields[3], "a token kind")
        service = reader.text(fields[4], "a token service")
        tokens.append(Token(kind, service, fields[1], fields[2]))
    return tokens


def _fields(reader: _Reader, what: str) -> list[tuple[int, bytes]]:
    """A protobuf message's length-delimited fields as (number, bytes); numbers skipped."""
    found = []
    while reader.at < len(reader.data):
        key = reader.varint(what)
        number, wire = key >> 3, key & 7
        if wire == 2:
            found.append((number, reader.take(reader.varint(what), what)))
        elif wire == 0:
            reader.varint(what)
        elif wire in (1, 5):
            reader.take(8 if wire == 1 else 4, what)
        else:
            raise _invalid(reader.path, f"damaged (protobuf wire type {wire} in {what})")
    return found


def _vint(value: int) -> bytes:
    """Hadoop's WritableUtils.writeVInt, for the lengths (0 or more) of a token's fields."""
    if value <= 127:
        return bytes([value])
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return (-112 - len(body)).to_bytes(1, "big", signed=True) + body
