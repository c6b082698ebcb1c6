"""A small document model (headings, text, tables, figures) rendered two ways: Markdown that links
its images (for the repository and ``dvc``), and one self-contained HTML file with the images
inside it (opens anywhere offline, and MLflow's artifact view shows it as a page).
"""

from __future__ import annotations

import base64
import html
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Text:
    text: str  # plain text: no markup is interpreted


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Figure:
    path: Path  # a PNG
    caption: str


Block = Heading | Text | Table | Figure


def _md_cell(value: str) -> str:
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block], base: Path) -> str:
    """Markdown with images linked relative to ``base`` (the folder the file is written to)."""
    lines: list[str] = []
    for block in blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + block.text, ""]
        elif isinstance(block, Text):
            lines += [block.text, ""]
        elif isinstance(block, Table):
            lines.append("| " + " | ".join(_md_cell(h) for h in block.header) + " |")
            lines.append("|" + "|".join("---" for _ in block.header) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows]
            lines.append("")
        else:
            link = Path(os.path.relpath(block.path.resolve(), base.resolve())).as_posix()
            lines += [f"![{_md_cell(block.caption)}]({link})", "", f"*{block.caption}*", ""]
    return "\n".join(lines)


STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}figure{margin:1.5em 0}img{max-width:100%}figcaption{color:#555;font-style:italic}"""


def to_html(blocks: list[Block], title: str) -> str:
    """One HTML page, images embedded as data URIs."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body>"]
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Text):
            parts.append(f"<p>{html.escape(block.text)}</p>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in block.header)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in block.rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        else:
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            parts.append(f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(block.caption)}'>"
                         f"<figcaption>{html.escape(block.caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)
