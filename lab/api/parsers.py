"""The API's JSON parser (the ``REST_FRAMEWORK`` default): a body nested deeper than
``lab.jsontext.MAX_DEPTH``, or holding a string no database can store (a NUL character, a lone
surrogate), is a 400 naming the problem and where, not a RecursionError or a database error (500)."""
from __future__ import annotations

import codecs

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.settings import api_settings

from lab.jsontext import load_json


class DepthLimitedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(stream).read()
            options = {"parse_constant": _refuse_constant} if api_settings.STRICT_JSON else {}
            return load_json(text, **options)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")
