"""Jupyter notebooks: markdown cells as prose, code cells fenced in the notebook's language, text
outputs fenced and capped (images, HTML and other rich outputs dropped); each cell a part, cited as
`cell N`."""

from __future__ import annotations

import json
import re

from .document import Document, LoadError, decode_text, newlines, parts

MAX_OUTPUT_CHARS = 2_000  # of a code cell's text outputs: a training log is not worth 50 chunks
_TEXT_OUTPUTS = ("text/plain", "text/markdown")


def _source(value: object) -> str:
    """nbformat keeps multi-line strings as lists of lines."""
    if isinstance(value, list):
        return "".join(str(part) for part in value)
    return value if isinstance(value, str) else ""


def _outputs(outputs: object) -> str:
    """A code cell's text outputs, read only until MAX_OUTPUT_CHARS are held (a 98 MB output list was
    joined whole before being cut, and peaked over the per-file bound)."""
    texts, held = [], 0
    for output in outputs if isinstance(outputs, list) else []:
        if held > MAX_OUTPUT_CHARS:
            break
        if not isinstance(output, dict):
            continue
        kind, found = output.get("output_type"), []
        if kind == "stream":
            found = [_source(output.get("text"))]
        elif kind == "error":
            found = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        elif kind in ("execute_result", "display_data") and isinstance(output.get("data"), dict):
            found = [_source(output["data"][mime]) for mime in _TEXT_OUTPUTS if mime in output["data"]]
        texts += found
        held += sum(len(text) for text in found)
    text = newlines("\n".join(t.rstrip("\n") for t in texts if t.strip()))
    if len(text) > MAX_OUTPUT_CHARS:
        text = text[:MAX_OUTPUT_CHARS].rstrip() + "\n… (output cut)"
    return text


def read_notebook(data: bytes, kind: str) -> Document:
    try:
        notebook = json.loads(decode_text(data))
    except (ValueError, RecursionError) as exc:
        raise LoadError(f"not a notebook: invalid JSON ({str(exc)[:80]})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise LoadError("not a notebook: no list of cells (nbformat 4 writes one)")
    metadata = notebook.get("metadata") if isinstance(notebook.get("metadata"), dict) else {}
    info = metadata.get("language_info") if isinstance(metadata.get("language_info"), dict) else {}
    first_word = (str(info.get("name") or "").split() or [""])[0]
    language = re.sub(r"[^\w+#.-]", "", first_word)[:20] or "python"  # the fence's info word
    text = []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        source = newlines(_source(cell.get("source"))).strip("\n")
        if cell.get("cell_type") == "code":
            body = f"```{language}\n{source}\n```\n" if source.strip() else ""
            output = _outputs(cell.get("outputs"))
            if output:
                body += f"\nOutput:\n```text\n{output.replace('```', '` ` `')}\n```\n"
        else:
            body = source + "\n" if source.strip() else ""
        if not body:
            continue
        text.append(body)
    return parts(text, kind)

