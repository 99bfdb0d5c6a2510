"""The API's JSON parser (REST_FRAMEWORK DEFAULT_PARSER_CLASSES): DRF's, with two refusals before any view.

- Nesting deeper than PORTAL_JSON_MAX_DEPTH (arrays and objects inside one another) is a 400 naming the
  limit. The depth is measured without recursion and before ``json.loads`` sees the document (whose C scanner
  recurses and raises RecursionError, a 500, at about a thousand levels): strings are blanked, everything but
  brackets dropped, then innermost pairs removed level by level, at most the limit's number of passes. Each
  step is one regular-expression pass over the text, linear in its length.
- A NUL character (``\\u0000``) in a string, key or value, is a 400 naming where: PostgreSQL cannot store it,
  and no field of the portal means it. (A raw control character in a string is invalid JSON already.)
"""

from __future__ import annotations

import json
import re

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.utils.json import strict_constant

# A string, or an unterminated one up to the end (so that a failed match never restarts inside it: linear).
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


def too_deep(text: str, limit: int) -> bool | None:
    """True when ``text`` nests arrays and objects deeper than ``limit``; None when its brackets do not pair
    (not JSON: the parser says why); False otherwise."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not brackets:
            return False
        brackets, removed = _INNERMOST.subn("", brackets)
        if not removed:
            return None
    if not brackets:
        return False
    return True if _INNERMOST.search(brackets) else None


def nul_at(data) -> str | None:
    """Where the first NUL character of a parsed document is (``'env.FOO'``, ``'instances[3]'``, ``''`` for
    the document itself), or None. Iterative: any depth the parser let through."""
    stack: list[tuple[object, str]] = [(data, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return where
        elif isinstance(value, dict):
            for key, item in value.items():
                inner = f"{where}.{key}" if where else str(key)
                if "\x00" in key:
                    return inner.replace("\x00", "\\u0000")
                stack.append((item, inner))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(value))
    return None


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = parsers.get_encoding(parser_context or {})
        limit = settings.PORTAL_JSON_MAX_DEPTH
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - the body is not {encoding}: {exc.reason}.") from None
        deep = too_deep(text, limit)
        if deep:
            raise ParseError(
                f"The JSON body nests arrays and objects more than {limit} levels deep; the portal accepts at "
                f"most {limit} (PORTAL_JSON_MAX_DEPTH). Send a flatter document."
            )
        try:
            data = json.loads(text, parse_constant=strict_constant if self.strict else None)
        except RecursionError:  # not reached with a sane limit; never a 500
            raise ParseError(
                f"JSON parse error - the document is nested too deeply (at most {limit} levels)."
            ) from None
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        where = nul_at(data)
        if where is not None:
            field = f"The JSON field '{where}'" if where else "The JSON body"
            raise ParseError(
                f"{field} contains a NUL character (\\u0000), which the portal does not accept. Remove it."
            )
        return data
