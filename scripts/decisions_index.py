"""Number the decisions in docs/decisions.md and keep its index (number, area, title, date,
status) in step with them.

Each decision is a top-level bullet (`- ...`). A bullet without a number gets the next one and
an index row dated today; a numbered one keeps the date its row already has (the first run took
each date from git: the oldest commit of the bullet's lines). A decision whose text says
"Superseded" is listed as superseded. Run it after editing decisions.md:

    .venv/bin/python scripts/decisions_index.py          # rewrite the file
    .venv/bin/python scripts/decisions_index.py --check  # exit 1 if the index is out of step
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "decisions.md"
START, END = "<!-- index: made by scripts/decisions_index.py -->", "<!-- /index -->"
NUMBER = re.compile(r'^- <a id="d(\d+)"></a>\*\*D\d+\.\*\* ')
ROW = re.compile(r"^\| \[D(\d+)\]\(#d\d+\) \| (.*?) \| (.*?) \| (\d{4}-\d{2}-\d{2}) \| (.*?) \|$")


def _title(text: str) -> str:
    bold = re.match(r"\*\*(.+?)\*\*", text)
    plain = bold.group(1) if bold else re.split(r"(?<=[.;:])\s", text, maxsplit=1)[0]
    plain = plain.replace("|", "/").rstrip(".:;")
    return plain if len(plain) <= 80 else plain[:77].rsplit(" ", 1)[0] + "..."


def _git_dates(doc: Path) -> dict[int, str]:
    """Line number (1-based) -> the date of the commit that last wrote it."""
    try:
        out = subprocess.run(
            ["git", "blame", "--line-porcelain", str(doc)],
            capture_output=True,
            text=True,
            check=True,
            cwd=doc.parent,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    dates, line = {}, 0
    for row in out.splitlines():
        if re.match(r"^[0-9a-f]{40} \d+ (\d+)", row):
            line = int(row.split()[2])
        elif row.startswith("author-time "):
            stamp = int(row.split()[1])
            dates[line] = dt.datetime.fromtimestamp(stamp, dt.timezone.utc).date().isoformat()
    return dates


def build(text: str, today: str, git: dict[int, str] | None = None) -> str:
    """decisions.md with every decision numbered and the index rewritten."""
    if START in text:
        head, rest = text.split(START, 1)
        old_index, body = rest.split(END, 1)
        body = body.lstrip("\n")
    else:
        lines = text.split("\n")
        at = next(i for i, line in enumerate(lines) if line.startswith("## "))
        head, old_index, body = "\n".join(lines[:at]) + "\n", "", "\n".join(lines[at:])
    dates = {int(m[1]): (m[4], m[5]) for m in map(ROW.match, old_index.splitlines()) if m}
    offset = head.count("\n") + 1  # body line i is file line offset + i (first run: no index)
    out, rows, area, n = [], [], "", max(dates, default=0)
    lines = body.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("## ") or line.startswith("### "):
            area = line.lstrip("#").strip()
        if not line.startswith("- "):
            out.append(line)
            continue
        m = NUMBER.match(line)
        if m:
            num, text_ = int(m[1]), line[m.end() :]
        else:
            n += 1
            num, text_ = n, line[2:]
        end = i + 1
        while end < len(lines) and lines[end].startswith("  "):
            end += 1
        whole = " ".join([text_, *(x.strip() for x in lines[i + 1 : end])])
        if num in dates:
            date = dates[num][0]
        elif git:
            date = min((git.get(offset + j, today) for j in range(i, end)), default=today)
        else:
            date = today
        status = "superseded" if "Superseded" in whole else "in force"
        anchor = re.sub(r"[^a-z0-9 -]", "", area.lower()).replace(" ", "-")
        rows.append(
            f"| [D{num}](#d{num}) | [{area}](#{anchor}) | {_title(text_)} | {date} | {status} |"
        )
        out.append(f'- <a id="d{num}"></a>**D{num}.** {text_}')
    index = "\n".join(
        [
            START,
            "## Index",
            "",
            "Every decision below, numbered; the date it was written down (the commit of its "
            "oldest line as it stands), and whether it still holds.",
            "",
            "| # | area | decision | date | status |",
            "|---|---|---|---|---|",
            *rows,
            END,
        ]
    )
    return head + index + "\n\n" + "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file would change")
    args = parser.parse_args()
    text = DOC.read_text()
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    new = build(text, today, None if START in text else _git_dates(DOC))
    if args.check:
        if new != text:
            print("docs/decisions.md: the index is out of step; run scripts/decisions_index.py")
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
