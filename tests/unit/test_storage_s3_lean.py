"""The lean read path of S3Storage (storage/s3_lean.py) against a real (moto) S3 server and
canned hostile answers: the same listings, bodies, checkpoint states and typed errors as
boto3's; signatures equal to botocore's; credentials (session tokens, an assumed role's) sign
every request; secrets never in a message; writes stay on boto3."""

from __future__ import annotations

import calendar
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_sparklag.checkpoint import CheckpointReader
from airflow_sparklag.errors import (
    BucketNotFound,
    CheckpointNotFound,
    StorageAccessDenied,
    StorageError,
    StorageNotFound,
)
from airflow_sparklag.session import Session
from airflow_sparklag.storage.s3 import S3Storage
from airflow_sparklag.storage.s3_lean import (
    LeanReader,
    NotS3,
    StaticCredentials,
    canonical_query,
    parse_listing,
)
from testbed.s3_server import MOTO_CREDENTIALS, checkpoint_files, moto_client, moto_with_objects
from tests.unit.test_storage_hostile import S3_ANSWERS, CannedServer, server
from tests.unit.test_storage_hostile import _s3 as hostile_s3

__all__ = ["server"]  # the canned server fixture, shared with test_storage_hostile

DATA = Path(__file__).resolve().parent.parent / "data" / "checkpoints"
BUCKET = "lean-reads"
CREDENTIALS = MOTO_CREDENTIALS
ODD = "odd & <keys> + ü %41"
EXTRA_KEYS = (
    [f"ck43/state/0/{i % 200}/{i}.delta" for i in range(1500)]  # past one 1,000-key page
    + ["ck43/offsets/", "ck43/commits/", "ck43/metadata.crc"]  # s3a markers, a stray file
    + [f"wide/offsets/{i}" for i in range(1005)]
    + [f"wide/commits/{i}" for i in range(1005)]
    + ["ck1/offsets/0", "ck1/commits/0", "ck1-old/offsets/9", "ck10/offsets/3"]
    + [f"{ODD}/offsets/0", f"{ODD}/commits/0", f"{ODD}/offsets/1 x", f"{ODD}/state/a&b"]
)
LOCATIONS = ["ck43", "ck35", "wide", "ck1", "ck10", ODD, "missing", ""]


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    files = checkpoint_files(DATA, "ck43", "ck35") + [(k, k.encode()) for k in EXTRA_KEYS]
    with moto_with_objects(BUCKET, files) as url:
        yield url


def _both(endpoint: str, **options: Any) -> tuple[S3Storage, S3Storage]:
    return (
        S3Storage(endpoint_url=endpoint, reader="boto3", **CREDENTIALS, **options),
        S3Storage(endpoint_url=endpoint, reader="lean", **CREDENTIALS, **options),
    )


def _listed(storage: S3Storage, location: str, first_page: int) -> dict[str, list[Any]]:
    found = storage.list_checkpoint(location, first_page=first_page)
    return {
        directory: [(o.name, o.size, o.content_md5, o.modified) for o in entries]
        for directory, entries in found.items()
    }


@pytest.mark.parametrize("location", LOCATIONS)
@pytest.mark.parametrize("first_page", [1, 7, 320, 1000])
def test_checkpoint_listing_equals_boto3(endpoint: str, location: str, first_page: int) -> None:
    boto, lean = _both(endpoint)
    url = f"s3a://{BUCKET}/{location}"
    assert _listed(lean, url, first_page) == _listed(boto, url, first_page)
    # the same pages: the same ListObjectsV2 requests, counted the same way
    assert lean.requests.by_operation == boto.requests.by_operation
    assert lean._client is None  # static keys and an endpoint: no boto3 client was built


def test_reads_and_states_equal_boto3(endpoint: str) -> None:
    boto, lean = _both(endpoint)
    listed = lean.list_checkpoint(f"s3a://{BUCKET}/ck43")
    assert listed["commits"] and all(o.content_md5 for o in listed["commits"])
    for entry in listed["offsets"] + [*lean.list_checkpoint(f"s3a://{BUCKET}/{ODD}")["offsets"]]:
        for root in ("ck43", ODD):
            path = f"s3a://{BUCKET}/{root}/offsets/{entry.name}"
            try:
                expected: Any = boto.read(path)
            except StorageNotFound as exc:
                expected = type(exc)
            try:
                got: Any = lean.read(path)
            except StorageNotFound as exc:
                got = type(exc)
            assert got == expected, path
    lean.requests.reset()
    boto.requests.reset()
    for history in (1, 3):
        location = f"s3a://{BUCKET}/ck43"
        assert CheckpointReader(lean, location).read(history=history) == CheckpointReader(
            boto, location
        ).read(history=history)
    assert lean.requests.by_operation == boto.requests.by_operation


def test_errors_are_typed(endpoint: str) -> None:
    _, lean = _both(endpoint)
    with pytest.raises(StorageNotFound, match=r"^s3a://lean-reads/ck43/offsets/999: no such"):
        lean.read(f"s3a://{BUCKET}/ck43/offsets/999")
    with pytest.raises(BucketNotFound, match="'no-such-bucket' does not exist"):
        lean.list_checkpoint("s3a://no-such-bucket/ck")
    with pytest.raises(BucketNotFound, match="'no-such-bucket' does not exist"):
        lean.read("s3a://no-such-bucket/ck/metadata")
    with pytest.raises(CheckpointNotFound):
        CheckpointReader(lean, f"s3a://{BUCKET}/missing").read()


def test_refused_connection_is_a_storage_error_after_every_attempt() -> None:
    refused = S3Storage(
        endpoint_url="http://127.0.0.1:9", reader="lean", max_attempts=2, **CREDENTIALS
    )
    with pytest.raises(StorageError, match=r"read failed after 2 attempt\(s\): could not talk"):
        refused.read(f"s3a://{BUCKET}/ck43/metadata")
    with pytest.raises(StorageError, match=r"^s3a://lean-reads/ck: list failed after 2"):
        refused.list_checkpoint(f"s3a://{BUCKET}/ck")


def test_writes_stay_on_boto3_and_the_session_uses_lean(endpoint: str) -> None:
    _, lean = _both(endpoint)
    lean.write_atomic(f"s3a://{BUCKET}/written/x", b"body")  # builds the boto3 client
    sent: list[str] = []
    lean.client.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.method)
    )
    lean.write_atomic(f"s3a://{BUCKET}/written/x", b"again", overwrite=True)
    assert lean.read(f"s3a://{BUCKET}/written/x") == b"again"
    assert sent == ["PUT"]  # the read went through the lean path
    with Session(s3_options={"endpoint_url": endpoint, "reader": "lean", **CREDENTIALS}) as s:
        state = s.read(f"s3a://{BUCKET}/ck35", history=1, query_id=False)
        assert state.committed_batch_id is not None
        assert s.storage_requests == 2


def test_a_handed_in_client_gives_its_credentials_endpoint_and_region(endpoint: str) -> None:
    client = moto_client(endpoint)
    lean = S3Storage(client=client, reader="lean")
    boto = S3Storage(client=client, reader="boto3")
    url = f"s3a://{BUCKET}/ck43"
    assert _listed(lean, url, 320) == _listed(boto, url, 320)
    assert lean._obstore().endpoint == endpoint


def test_aws_itself_is_addressed_virtual_hosted_and_a_wrong_region_named() -> None:
    lean = S3Storage(reader="lean", **CREDENTIALS)._obstore()  # no endpoint: AWS
    assert lean.endpoint is None and lean.region == "us-east-1"
    assert lean._address("my-bucket", "ck/offsets/1") == (
        "https",
        "my-bucket.s3.us-east-1.amazonaws.com",
        443,
        "my-bucket.s3.us-east-1.amazonaws.com",
        "/ck/offsets/1",
    )
    assert lean._address("my.bucket", "k")[1:] == (
        "s3.us-east-1.amazonaws.com",
        443,
        "s3.us-east-1.amazonaws.com",
        "/my.bucket/k",
    )
    moved = ERROR_XML.format("PermanentRedirect").encode()
    scripted = ScriptedServer([_raw("301 Moved Permanently", moved)])
    try:
        storage = S3Storage(endpoint_url=scripted.url, reader="lean", **CREDENTIALS)
        with pytest.raises(StorageError, match="in another region than 'us-east-1'; set region"):
            storage.read("s3a://b/ck/metadata")
        assert len(scripted.requests) == 1
    finally:
        scripted.httpd.shutdown()


def test_signature_equals_botocores() -> None:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    params = {
        "list-type": "2",
        "prefix": "ck/team a/job+1/",
        "encoding-type": "url",
        "start-after": "ck/team a/job+1/commits",
        "max-keys": "320",
    }
    for token in (None, "session/token+=="):
        credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
        for endpoint, base in [
            ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
            ("https://minio.example:443/sub", "https://minio.example:443"),
            (None, None),
        ]:
            for bucket, key, query in [("fleet-0", "", params), ("a.b", "ck/o/1 ü~*", {})]:
                reader = LeanReader(
                    credentials=credentials,
                    region="eu-west-1",
                    endpoint_url=endpoint,
                    connect_timeout=1,
                    read_timeout=1,
                    max_attempts=1,
                )
                scheme, _, _, host, path = reader._address(bucket, key)
                encoded = canonical_query(query)
                url = f"{base or f'{scheme}://{host}'}{path}" + (f"?{encoded}" if encoded else "")
                request = AWSRequest(method="GET", url=url, headers={})
                S3SigV4Auth(credentials, "s3", "eu-west-1").add_auth(request)
                now = calendar.timegm(
                    time.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
                )
                ours = reader.signer.headers(host, path, encoded, now=now)
                assert ours["Authorization"] == request.headers["Authorization"], url
                assert ours.get("x-amz-security-token") == token


# -- hostile answers ----------------------------------------------------------------------------


def _lean(server: CannedServer, **options: Any) -> S3Storage:
    storage = hostile_s3(server)
    storage.reader = "lean"
    for name, value in options.items():
        storage._config[name] = value
    return storage


@pytest.mark.parametrize(
    ("case", "status", "content_type", "body"),
    [c[:4] for c in S3_ANSWERS],
    ids=[c[0] for c in S3_ANSWERS],
)
def test_a_listing_that_is_not_s3s_is_a_storage_error(
    server: CannedServer, case: str, status: int, content_type: str, body: bytes
) -> None:
    server.answer = (status, content_type, body)
    with pytest.raises(StorageError) as raised:
        CheckpointReader(_lean(server), "s3a://b/ck", query_id=False).read()
    assert str(raised.value).startswith("s3a://b/ck: list failed"), raised.value
    assert server.url in str(raised.value)
    assert type(raised.value) is StorageError


ERROR_XML = '<?xml version="1.0"?><Error><Code>{}</Code><Message>m &amp; n</Message></Error>'
TYPED = [
    ("access denied", 403, "AccessDenied", StorageAccessDenied),
    ("bad signature", 403, "SignatureDoesNotMatch", StorageAccessDenied),
    ("no such bucket", 404, "NoSuchBucket", BucketNotFound),
    ("no such key", 404, "NoSuchKey", StorageNotFound),
]


@pytest.mark.parametrize(("case", "status", "code", "error"), TYPED, ids=[c[0] for c in TYPED])
def test_typed_s3_errors_are_the_same_as_boto3s(
    server: CannedServer, case: str, status: int, code: str, error: type[Exception]
) -> None:
    server.answer = (status, "application/xml", ERROR_XML.format(code).encode())
    for storage in (hostile_s3(server), _lean(server)):
        with pytest.raises(error, match=r"^s3a://b/ck/offsets/1: "):
            storage.read("s3a://b/ck/offsets/1")
        if error is not StorageNotFound:
            with pytest.raises(error, match=r"^s3a://b/ck: "):
                CheckpointReader(storage, "s3a://b/ck").read()


def test_a_proxy_error_page_is_retried_then_a_storage_error(server: CannedServer) -> None:
    server.answer = (502, "text/html", b"<html>Bad Gateway</html>")
    with pytest.raises(StorageError) as raised:
        _lean(server, retries={"total_max_attempts": 2}).read("s3a://b/ck/offsets/1")
    message = str(raised.value)
    assert message.startswith("s3a://b/ck/offsets/1: read failed after 2 attempt(s): ")
    assert "did not answer like S3 (HTTP 502, Content-Type text/html" in message


class ScriptedServer:
    """Answers GETs from a script of raw HTTP answers, one per request, then the last one
    again; counts the requests and keeps their headers."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers
        self.requests: list[dict[str, str]] = []
        scripted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                scripted.requests.append({k.lower(): v for k, v in self.headers.items()})
                index = min(len(scripted.requests), len(scripted.answers)) - 1
                self.wfile.write(scripted.answers[index])
                self.close_connection = b"Connection: close" in scripted.answers[index]

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def _raw(status: str, body: bytes, *headers: str, chunked: bool = False) -> bytes:
    head = [f"HTTP/1.1 {status}", *headers]
    if chunked:
        head.append("Transfer-Encoding: chunked")
        half = len(body) // 2
        body = (
            b"".join(
                b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:]) if part
            )
            + b"0\r\n\r\n"
        )
    else:
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="x"><Name>b</Name>'
    b"<Prefix>ck/</Prefix><KeyCount>2</KeyCount><MaxKeys>320</MaxKeys><IsTruncated>false"
    b"</IsTruncated><Contents><Key>ck/commits/0</Key><LastModified>2026-01-01T00:00:00.000Z"
    b"</LastModified><ETag>&quot;0123456789abcdef0123456789abcdef&quot;</ETag><Size>29</Size>"
    b"<StorageClass>STANDARD</StorageClass></Contents><Contents><LastModified>"
    b"2026-01-01T00:00:01.000Z</LastModified><Size>30</Size><Key>ck/offsets/0</Key>"
    b"<Owner><ID>o</ID></Owner></Contents></ListBucketResult>"
)


@pytest.mark.parametrize("chunked", [False, True])
def test_throttling_and_5xx_are_retried_and_chunked_answers_read(chunked: bool) -> None:
    slow_down = ERROR_XML.format("SlowDown").encode()
    scripted = ScriptedServer(
        [
            _raw("503 Slow Down", slow_down, "Content-Type: application/xml"),
            _raw("500 Internal Server Error", b"", "Connection: close"),
            _raw("200 OK", LISTING, "Content-Type: application/xml", chunked=chunked),
        ]
    )
    try:
        storage = S3Storage(endpoint_url=scripted.url, reader="lean", **CREDENTIALS)
        listed = storage.list_checkpoint("s3a://b/ck")
        assert [(o.name, o.size, o.modified) for o in listed["commits"]] == [
            ("0", 29, 1767225600.0)
        ]
        assert listed["commits"][0].content_md5 == "0123456789abcdef0123456789abcdef"
        assert [(o.name, o.size) for o in listed["offsets"]] == [("0", 30)]  # another order
        assert len(scripted.requests) == 3  # max_attempts: 3 in all
        assert all(r["authorization"].startswith("AWS4-HMAC-SHA256 ") for r in scripted.requests)
    finally:
        scripted.httpd.shutdown()


def test_secrets_never_appear_in_errors() -> None:
    secret, token = "s3cr3t-KEY-that-must-not-leak", "t0ken-that-must-not-leak"
    echo = ERROR_XML.replace("m &amp; n", f"bad {secret} / {token}").format("Weird")
    scripted = ScriptedServer([_raw("400 Bad Request", echo.encode())])
    try:
        storage = S3Storage(
            endpoint_url=scripted.url,
            reader="lean",
            aws_access_key_id="AKID",
            aws_secret_access_key=secret,
            aws_session_token=token,
        )
        with pytest.raises(StorageError) as raised:
            storage.read("s3a://b/ck/metadata")
        assert secret not in str(raised.value) and token not in str(raised.value)
        assert "Weird" in str(raised.value)
        assert scripted.requests[0]["x-amz-security-token"] == token
        assert repr(StaticCredentials("AKID", secret, token)) == "StaticCredentials(***)"
    finally:
        scripted.httpd.shutdown()


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (LISTING.replace(b"</ListBucketResult>", b""), "cut short"),
        (LISTING.replace(b"<IsTruncated>false</IsTruncated>", b""), "no IsTruncated"),
        (LISTING.replace(b"<Size>29</Size>", b"<Size>big</Size>"), "Size 'big'"),
        (LISTING.replace(b"<Key>ck/commits/0</Key>", b""), "without Key"),
        (LISTING.replace(b"2026-01-01T00:00:00.000Z", b"yesterday"), "'yesterday'"),
        (LISTING.replace(b"ck/commits/0", b"ck/&nbsp;"), "unknown entity"),
        (LISTING.replace(b"ck/commits/0", b"<![CDATA[x]]>"), "ListBucketResult"),
        (LISTING.replace(b"ListBucketResult", b"Result"), "ListBucketResult"),
        (LISTING.replace(b"</Contents><Contents>", b""), "twice"),
    ],
)
def test_parse_listing_refuses_what_is_not_s3s(body: bytes, problem: str) -> None:
    with pytest.raises(NotS3, match=problem):
        parse_listing(body, "ck/offsets0")


def test_parse_listing_stops_at_the_end_and_reads_entities() -> None:
    body = LISTING.replace(b"ck/commits/0", b"ck/commits/a%20b%26%2B &amp; &#252;+")
    page = parse_listing(body, "ck/commits0")  # ck/offsets/0 is past it
    assert page.entries[0][0] == "ck/commits/a b&+ & \u00fc "
    assert page.past_end and len(page.entries) == 1 and not page.truncated
    assert len(parse_listing(body).entries) == 2


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` and its key, made here (no CA trusts it)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_https_with_the_aws_ca_bundle_and_an_untrusted_certificate_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl

    from testbed.light_s3 import Bucket, make_server

    cert, key = _self_signed(tmp_path)
    light = make_server()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    light.socket = context.wrap_socket(light.socket, server_side=True)
    threading.Thread(target=light.serve_forever, daemon=True).start()
    bucket = Bucket()
    bucket.put_many([("ck/offsets/0", b"offsets"), ("ck/commits/0", b"commit")])
    light.RequestHandlerClass.store.buckets["b"] = bucket  # type: ignore[attr-defined]
    options = {**CREDENTIALS, "endpoint_url": f"https://localhost:{light.server_address[1]}"}
    try:
        monkeypatch.setenv("AWS_CA_BUNDLE", str(cert))
        lean = S3Storage(reader="lean", **options)
        assert lean.read("s3a://b/ck/offsets/0") == b"offsets"
        assert _listed(lean, "s3a://b/ck", 320) == _listed(S3Storage(**options), "s3a://b/ck", 320)
        monkeypatch.delenv("AWS_CA_BUNDLE")
        with pytest.raises(StorageError, match="CERTIFICATE_VERIFY_FAILED"):
            S3Storage(reader="lean", max_attempts=1, **options).read("s3a://b/ck/offsets/0")
    finally:
        light.shutdown()


def test_an_answer_without_length_is_read_to_the_end_and_a_huge_listing_refused() -> None:
    body = b"offsets file " * 1000
    scripted = ScriptedServer(
        [
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + body,
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n<ListBucketResult>",
        ]
    )
    try:
        storage = S3Storage(endpoint_url=scripted.url, reader="lean", max_attempts=1, **CREDENTIALS)
        assert storage.read("s3a://b/ck/offsets/1") == body
        with pytest.raises(StorageError, match=r"list failed after 1 attempt.*Content-Length"):
            storage.list_checkpoint("s3a://b/ck")
    finally:
        scripted.httpd.shutdown()


@pytest.mark.parametrize(
    ("key_id", "token"),
    [
        ("AKID", "tok\r\nX-Injected: 1"),
        ("AKID", "tok\nen"),
        ("AK\r\nID", None),
        ("AKID", "t\u00f6ken"),  # not ASCII: latin-1 would pass it, a header may not
        ("AKID", "tok\x00en"),
    ],
)
def test_credentials_that_cannot_be_a_header_are_refused_before_sending(
    key_id: str, token: str | None
) -> None:
    scripted = ScriptedServer([_raw("200 OK", b"never asked")])
    try:
        storage = S3Storage(
            endpoint_url=scripted.url,
            reader="lean",
            aws_access_key_id=key_id,
            aws_secret_access_key="secret",
            aws_session_token=token,
        )
        with pytest.raises(StorageError, match="HTTP header cannot carry") as raised:
            storage.read("s3a://b/ck/metadata")
        assert scripted.requests == []  # nothing was sent, nothing injected
        assert (token or key_id) not in str(raised.value)
    finally:
        scripted.httpd.shutdown()


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2026-11-23T20:47:59.000Z", 1795466879.0),  # S3's form; Python 3.10 refused the Z
        ("2026-11-23T20:47:59.500+00:00", 1795466879.5),
        ("2026-11-23T21:47:59+01:00", 1795466879.0),
    ],
)
def test_last_modified_forms_are_read_on_every_python(text: str, epoch: float) -> None:
    from airflow_sparklag.storage.s3_lean import _timestamp

    assert _timestamp(text) == epoch
    with pytest.raises(NotS3, match="has no time zone"):
        _timestamp("2026-11-23T20:47:59")
