"""Label and field selectors, as list, watch and deletecollection take them.

The label selector grammar is apimachinery's ``labels.Parse`` (``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``,
``a notin (x)``, ``a``, ``!a``; a malformed one is a 400). Field selectors are the equality ones the API
server supports for every kind (``metadata.name``, ``metadata.namespace``) and for pods ``status.phase``.
"""

from __future__ import annotations

import re


def parse_selector(text: str) -> list:
    """'a=b,c!=d,e in (x,y),f notin (z),g,!h' -> [(op, key, values)]; ValueError when malformed."""
    terms, depth, current = [], 0, ""
    for char in text or "":
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    parsed = []
    for term in (t.strip() for t in terms):
        if not term:
            continue
        if match := re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", term):
            parsed.append((match[2], match[1], {v.strip() for v in match[3].split(",") if v.strip()}))
        elif match := re.fullmatch(r"([^!=\s]+)\s*(==|=|!=)\s*([^!=\s]*)", term):
            parsed.append(("!=" if match[2] == "!=" else "=", match[1], {match[3]}))
        elif match := re.fullmatch(r"!\s*([^!=\s(),]+)", term):
            parsed.append(("!", match[1], set()))
        elif re.fullmatch(r"[^!=\s(),]+", term):
            parsed.append(("exists", term, set()))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return parsed


def selector_matches(selector: list, labels: dict) -> bool:
    for op, key, values in selector:
        present, value = key in labels, labels.get(key)
        ok = {
            "=": present and value in values,
            "in": present and value in values,
            "!=": not present or value not in values,
            "notin": not present or value not in values,
            "exists": present,
            "!": not present,
        }[op]
        if not ok:
            return False
    return True


def _field(obj: dict, path: str):
    value: object = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def field_matches(selector: str, obj: dict) -> bool:
    for term in filter(None, (selector or "").split(",")):
        match = re.fullmatch(r"([^!=]+)(!=|==|=)(.*)", term)
        if match is None:
            raise ValueError(f"unable to parse field selector: {term!r}")
        key, op, value = match.groups()
        if (str(_field(obj, key) or "") == value) != (op != "!="):
            return False
    return True
