"""A tolerant parser for extractor output such as ``[["A", "r", "B"], ["C", "r"]]``.

Small extractor models wrap the list in chatter, use single quotes, stop mid-list or continue with the
next few-shot example; the parser takes the first plausible list and never raises.
"""

from __future__ import annotations

import ast
import json
import logging
import re

log = logging.getLogger(__name__)

_INNER_LIST = re.compile(r"\[([^\[\]]*)\]")
_SINGLE_SEP = re.compile(r"'\s*,\s*'")
_FANCY = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'"})


def parse_tuples(text: object) -> list[list[str]]:
    """Parse the first list of tuples in ``text``; [] for anything unusable. Never raises."""
    try:
        return _parse(text)
    except Exception as exc:  # a parser for model output must not take a run down
        log.debug("could not parse extractor output %r: %s", text, exc)
        return []


def _parse(text: object) -> list[list[str]]:
    if not isinstance(text, str) or "[" not in text:
        return []
    text = text.translate(_FANCY)
    blocks = list(_blocks(text))
    if not blocks:
        return []
    # Prefer a block that looks like an answer ("[]", nested, or quoted) over stray "[1]"-style brackets.
    chosen = next((b for b in blocks if _plausible(b[0])), blocks[0])
    block, balanced = chosen
    if balanced:
        for loader in (json.loads, ast.literal_eval):
            try:
                return _normalise(loader(block))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    return _fallback(block)


def _blocks(text: str):
    """Yield (block, balanced) for each top-level bracketed block; brackets inside "..." do not count."""
    i = text.find("[")
    while i >= 0:
        depth = 0
        in_string = False
        escaped = False
        end = -1
        for j in range(i, len(text)):
            ch = text[j]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
                continue
            if ch == '"':
                in_string = True
            elif ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
                if depth == 0:
                    end = j
                    break
        if end < 0:
            yield text[i:], False
            return
        yield text[i : end + 1], True
        i = text.find("[", end + 1)


def _plausible(block: str) -> bool:
    compact = re.sub(r"\s+", "", block)
    return compact == "[]" or compact.startswith("[[") or '"' in compact or "'" in compact


def _normalise(value: object) -> list[list[str]]:
    if not isinstance(value, list | tuple):
        return []
    # [[["A", "r", "B"]]] -> [["A", "r", "B"]]
    while (
        len(value) == 1
        and isinstance(value[0], list | tuple)
        and value[0]
        and all(isinstance(v, list | tuple) for v in value[0])
    ):
        value = value[0]
    if not value:
        return []
    if all(_scalar(v) for v in value):  # a flat list is one tuple
        item = _clean_items(value)
        return [item] if item else []
    out = []
    for v in value:
        if isinstance(v, list | tuple):
            item = _clean_items(_flatten(v))
        elif _scalar(v):
            item = _clean_items([v])
        else:
            continue
        if item:
            out.append(item)
    return out


def _scalar(v: object) -> bool:
    return isinstance(v, str | int | float) and not isinstance(v, bool)


def _flatten(v: list | tuple) -> list:
    out: list = []
    for x in v:
        if isinstance(x, list | tuple):
            out.extend(_flatten(x))
        else:
            out.append(x)
    return out


def _clean_items(items: list | tuple) -> list[str]:
    out = []
    for x in items:
        if not _scalar(x):
            continue
        if isinstance(x, float) and x.is_integer():
            x = int(x)
        s = str(x).strip().strip("\"'").strip()
        if s:
            out.append(s)
    return out


def _fallback(block: str) -> list[list[str]]:
    """Read each closed inner list on its own; an unclosed trailing list is dropped (it may be cut)."""
    out = []
    for m in _INNER_LIST.finditer(block):
        items = _split_items(m.group(1))
        if items:
            out.append(items)
    return out


def _split_items(content: str) -> list[str]:
    content = content.strip()
    if not content:
        return []
    if '"' in content:
        items = _scan_items(content)
    elif content.startswith("'"):
        items = _SINGLE_SEP.split(content.strip().strip("'"))
    else:
        items = content.split(",")
    return _clean_items(items)


def _scan_items(content: str) -> list[str]:
    """Comma-separated items, each quoted or not; a quote that closes an unquoted item is dropped.
    Small models often lose an opening quote: 'Greyia, "genus of", "plants"' or 'Updike", "wrote", "X"'."""
    items: list[str] = []
    buf: list[str] = []
    in_quote = escaped = False
    for ch in content:
        if in_quote:
            if escaped:
                buf.append(ch)
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_quote = False
            else:
                buf.append(ch)
        elif ch == '"':
            if not "".join(buf).strip():
                buf = []
                in_quote = True  # an opening quote; a quote after unquoted text only closes it
        elif ch == ",":
            items.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    items.append("".join(buf))
    return [item.strip() for item in items if item.strip()]
