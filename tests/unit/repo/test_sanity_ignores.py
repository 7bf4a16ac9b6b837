"""ansible-test sanity ignore files (make sanity): every entry says why it is there."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_sanity_ignore_has_a_reason() -> None:
    files = sorted((ROOT / "tests" / "sanity").glob("ignore-*.txt"))
    assert [f.name for f in files] == ["ignore-2.19.txt", "ignore-2.21.txt"]
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            entry, _, reason = line.partition(" # ")
            assert len(entry.split(" ")) == 2 and reason.strip(), f"{path.name}:{number}: {line!r}"
            assert (ROOT / entry.split(" ")[0]).is_file(), f"{path.name}:{number}: no such file"
