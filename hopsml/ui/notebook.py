"""The versioned notebook as HTML without nbconvert: code cells and text outputs in <pre>, markdown
through a small renderer that escapes everything first (headings, emphasis, inline code, fenced code,
lists, links only to http(s)), PNG outputs as images; HTML and JavaScript outputs are never run, their
plain-text form is shown instead.

>>> html = render_notebook('{"cells": [{"cell_type": "markdown", "source": ["# Hi <b>"]}]}')
>>> "<h1>Hi &lt;b&gt;</h1>" in html
True
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from markupsafe import Markup, escape

_LINK = re.compile(r"\[([^\]]+)\]\((https?://[^)\s\"'<>]+)\)")
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_ITALIC = re.compile(r"(?<![*\w])\*([^*]+)\*(?!\w)")


def _source(value: object) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _inline(text: str) -> str:
    """Escape, then turn back the few inline marks we support (on escaped text, so no tag survives)."""
    out = str(escape(text))
    out = _CODE.sub(r"<code>\1</code>", out)
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    out = _ITALIC.sub(r"<em>\1</em>", out)
    return _LINK.sub(lambda m: f'<a href="{m.group(2)}" rel="noopener noreferrer">{m.group(1)}</a>', out)


def render_markdown(text: str) -> Markup:
    """A safe subset of Markdown: every character is escaped before any tag is added."""
    html: list[str] = []
    para: list[str] = []
    items: list[str] = []
    fence: list[str] | None = None

    def flush() -> None:
        if para:
            html.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if items:
            html.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for line in text.splitlines():
        if line.strip().startswith("```"):
            if fence is None:
                flush()
                fence = []
            else:
                html.append(f"<pre>{escape(chr(10).join(fence))}</pre>")
                fence = None
            continue
        if fence is not None:
            fence.append(line)
            continue
        heading = re.match(r"^(#{1,6})\s+(.*)$", line)
        bullet = re.match(r"^\s*[-*+]\s+(.*)$", line)
        if heading:
            flush()
            level = len(heading.group(1))
            html.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif bullet:
            if para:
                flush()
            items.append(bullet.group(1))
        elif not line.strip():
            flush()
        else:
            if items:
                flush()
            para.append(line.strip())
    if fence is not None:
        html.append(f"<pre>{escape(chr(10).join(fence))}</pre>")
    flush()
    return Markup("".join(html))


def _png(data: object) -> str | None:
    """The base64 text of a PNG output, only if it decodes to a PNG."""
    text = _source(data).replace("\n", "")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return text if raw.startswith(b"\x89PNG\r\n\x1a\n") else None


def _output(out: dict[str, Any]) -> str:
    kind = out.get("output_type")
    if kind == "stream":
        return f'<pre class="out {escape(out.get("name", ""))}">{escape(_source(out.get("text")))}</pre>'
    if kind == "error":
        trace = "\n".join(_source(t) for t in out.get("traceback", []))
        trace = re.sub(r"\x1b\[[0-9;]*m", "", trace)  # ANSI colours
        return f'<pre class="out stderr">{escape(trace or out.get("evalue", ""))}</pre>'
    data = out.get("data") or {}
    if "image/png" in data and (png := _png(data["image/png"])):
        return f'<img class="out" alt="cell output" src="data:image/png;base64,{png}">'
    if "text/plain" in data:
        return f'<pre class="out">{escape(_source(data["text/plain"]))}</pre>'
    return ""


def render_notebook(text: str) -> Markup:
    """The cells of a .ipynb as HTML; a notebook that is not valid JSON shows as its raw text."""
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return Markup(f'<p class="warn">not a readable notebook; its text:</p><pre>{escape(text)}</pre>')
    parts = []
    for cell in cells if isinstance(cells, list) else []:
        if not isinstance(cell, dict):
            continue
        source = _source(cell.get("source"))
        if cell.get("cell_type") == "markdown":
            parts.append(f'<div class="cell md">{render_markdown(source)}</div>')
        elif cell.get("cell_type") == "code":
            count = cell.get("execution_count")
            label = f"[{int(count)}]" if isinstance(count, int) else "[ ]"
            outs = "".join(_output(o) for o in cell.get("outputs", []) if isinstance(o, dict))
            parts.append(f'<div class="cell code"><span class="prompt">{label}</span>'
                         f"<pre>{escape(source)}</pre>{outs}</div>")
        else:
            parts.append(f'<div class="cell raw"><pre>{escape(source)}</pre></div>')
    return Markup("".join(parts))
