"""A benchmark's Markdown section in its page under docs/notes/, rewritten
in place between its markers on each --write (appended the first time)."""
from __future__ import annotations

import re
from pathlib import Path

NOTES = Path(__file__).resolve().parents[2] / "docs" / "notes"


def write_section(page: str, begin: str, end: str, body: str) -> None:
    """Puts ``body`` between the lines ``begin`` and ``end`` of docs/notes/page."""
    doc = NOTES / page
    text = doc.read_text()
    block = f"{begin}\n{body}{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)
