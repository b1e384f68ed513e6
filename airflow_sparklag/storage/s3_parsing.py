"""A faster parser for S3 ListObjectsV2 responses, plugged into botocore.

botocore parses a listing through its generic, model-driven XML parser: about 45 microseconds
per listed key. A checkpoint listing holds ~200 keys at Spark's default retention (100 batches
of offsets/ and commits/), so that parse was most of a fleet check's client CPU. This parser
reads the same XML with one ElementTree pass and builds the same dictionary botocore would
(the same keys, types and nesting; botocore's own handlers, such as the URL-decoding of keys,
still run on it afterwards).

It only takes successful ListObjectsV2 responses whose elements it knows; anything else
(errors, an element it has not seen, malformed XML) goes to botocore's own parser, so the
worst case is botocore's speed, never a different answer. ``tests/unit/test_s3_parsing.py``
compares both parsers on the moto server's real responses.
"""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree

from botocore.parsers import ResponseParserFactory, RestXMLParser

# botocore's private parser hooks (_do_parse, _timestamp_parser, ...) are not in its stubs.
_RestXMLParser: Any = RestXMLParser
_ParserFactory: Any = ResponseParserFactory

_TOP_STRINGS = frozenset(
    {
        "Name",
        "Prefix",
        "Delimiter",
        "ContinuationToken",
        "NextContinuationToken",
        "StartAfter",
        "EncodingType",
    }
)
_TOP_INTS = frozenset({"KeyCount", "MaxKeys"})
_OBJECT_STRINGS = frozenset({"Key", "ETag", "StorageClass", "ChecksumType"})
_OWNER_STRINGS = frozenset({"ID", "DisplayName"})


class _Unknown(Exception):
    """An element the fast path does not know: let botocore parse the whole response."""


def _tag(element: ElementTree.Element) -> str:
    # Any namespace, like botocore: S3 says http://s3.amazonaws.com/doc/2006-03-01/, some
    # S3-compatible servers say something else or nothing.
    return element.tag.rpartition("}")[2]


def _text(element: ElementTree.Element) -> str:
    return element.text or ""


class FastListParser(_RestXMLParser):
    """botocore's rest-xml parser, with a fast path for ListObjectsV2 results."""

    def _do_parse(self, response: dict[str, Any], shape: Any) -> Any:
        if shape is not None and shape.name == "ListObjectsV2Output":
            try:
                return self._parse_list_v2(response, shape)
            except (_Unknown, ElementTree.ParseError, ValueError):
                pass
        return super()._do_parse(response, shape)

    def _parse_list_v2(self, response: dict[str, Any], shape: Any) -> dict[str, Any]:
        root = ElementTree.fromstring(response["body"])
        if _tag(root) != "ListBucketResult":
            raise _Unknown(_tag(root))
        parsed: dict[str, Any] = {"ResponseMetadata": self._populate_response_metadata(response)}
        # Header members (RequestCharged): botocore's own code, a handful of lookups.
        self._parse_non_payload_attrs(response, shape, shape.members, parsed)
        contents: list[dict[str, Any]] = []
        prefixes: list[dict[str, str]] = []
        for child in root:
            name = _tag(child)
            if name == "Contents":
                contents.append(self._object(child))
            elif name == "CommonPrefixes":
                entry: dict[str, str] = {}
                for part in child:
                    if _tag(part) != "Prefix":
                        raise _Unknown(_tag(part))
                    entry["Prefix"] = _text(part)
                prefixes.append(entry)
            elif name in _TOP_STRINGS:
                parsed[name] = _text(child)
            elif name in _TOP_INTS:
                parsed[name] = int(_text(child))
            elif name == "IsTruncated":
                parsed[name] = _text(child) == "true"
            else:
                raise _Unknown(name)
        if contents:
            parsed["Contents"] = contents
        if prefixes:
            parsed["CommonPrefixes"] = prefixes
        return parsed

    def _object(self, element: ElementTree.Element) -> dict[str, Any]:
        item: dict[str, Any] = {}
        for part in element:
            name = _tag(part)
            if name in _OBJECT_STRINGS:
                item[name] = _text(part)
            elif name == "Size":
                item[name] = int(_text(part))
            elif name == "LastModified":
                item[name] = self._timestamp_parser(_text(part))
            elif name == "ChecksumAlgorithm":
                item.setdefault(name, []).append(_text(part))
            elif name == "Owner":
                owner: dict[str, str] = {}
                for field in part:
                    if _tag(field) not in _OWNER_STRINGS:
                        raise _Unknown(_tag(field))
                    owner[_tag(field)] = _text(field)
                item[name] = owner
            else:
                raise _Unknown(name)
        return item


class FastListParserFactory(_ParserFactory):
    """Makes :class:`FastListParser` for rest-xml (S3); every other protocol as botocore."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "rest-xml":
            return FastListParser(**self._defaults)
        return super().create_parser(protocol_name)
