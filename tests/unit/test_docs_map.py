"""The docs that are maps stay true: every file, folder and module that docs/ARCHITECTURE.md and
the decision records in docs/adr/ name exists, and every relative link resolves.

A map that names a file which has moved sends the next reader to nothing; files move often
(issue 27 split half the big modules), so this is checked rather than trusted to review.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
MAPS = [ROOT / "docs" / "ARCHITECTURE.md", *sorted((ROOT / "docs" / "adr").glob("*.md"))]

_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_PATH_END = (".py", ".md", ".sh", ".toml", ".yml", ".yaml", ".cfg", ".ini", "/")
_DOTTED = re.compile(r"gpufleet(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def _path_candidates(text: str) -> set[str]:
    """Backticked tokens that are repository paths: `src/gpufleet/core/driver.py`,
    `core/driver.py: Driver` (a name after the path), `tests/x.py::test_y`, `scheduler/plugins/`.
    Absolute paths, paths outside the repository (`../shared/…`) and patterns are not files."""
    found = set()
    for token in _CODE.findall(text):
        head = re.split(r"[\s:]", token.strip(), maxsplit=1)[0]
        if "/" not in head or not head.endswith(_PATH_END):
            continue
        if head.startswith(("/", "../", "http", "~")) or any(c in head for c in "*…<>$%{}|"):
            continue
        found.add(head)
    return found


def _exists(path: str, doc: Path) -> bool:
    bases = (ROOT, SRC, SRC / "gpufleet", doc.parent)
    return any((base / path).exists() for base in bases)


def _module_exists(dotted: str) -> bool:
    """`gpufleet.core.driver` is a module or package; `gpufleet.cli.entry.main` may end in a
    name that the module before it defines."""
    parts = dotted.split(".")
    path = SRC.joinpath(*parts)
    if path.is_dir() or path.with_suffix(".py").is_file():
        return True
    parent = SRC.joinpath(*parts[:-1])
    source = (
        parent.with_suffix(".py") if parent.with_suffix(".py").is_file() else parent / "__init__.py"
    )
    name = re.compile(rf"\b{re.escape(parts[-1])}\b")
    return len(parts) > 2 and source.is_file() and bool(name.search(source.read_text()))


def test_the_maps_exist() -> None:
    assert (ROOT / "docs" / "ARCHITECTURE.md").is_file()
    assert (ROOT / "docs" / "adr" / "README.md").is_file()


@pytest.mark.parametrize("doc", MAPS, ids=lambda p: p.name)
def test_every_path_a_map_names_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = sorted(p for p in _path_candidates(text) if not _exists(p, doc))
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", MAPS, ids=lambda p: p.name)
def test_every_module_a_map_names_exists(doc: Path) -> None:
    names = {m.group(0) for t in _CODE.findall(doc.read_text()) for m in _DOTTED.finditer(t)}
    missing = sorted(n for n in names if not _module_exists(n))
    assert not missing, f"{doc.relative_to(ROOT)} names modules that do not exist: {missing}"


@pytest.mark.parametrize("doc", MAPS, ids=lambda p: p.name)
def test_every_relative_link_resolves(doc: Path) -> None:
    targets = [t.split("#", 1)[0] for t in _LINK.findall(doc.read_text())]
    local = [t for t in targets if t and not t.startswith(("http:", "https:", "mailto:", "../../"))]
    missing = sorted(t for t in local if not (doc.parent / t).exists())
    assert not missing, f"{doc.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_path_reader_finds_what_maps_write() -> None:
    """The reader must see the forms the maps use, or the checks above check nothing."""
    text = (
        "`src/gpufleet/core/driver.py` `core/jobmaster.py: _batch_rank_exited` "
        "`tests/chaos/test_agent_freeze.py::test_x` `scheduler/plugins/` `lease.json` "
        "`../shared/DESIGN.md` `/proc/PID/cmdline` `GET …/commands?ack=SEQ`"
    )
    assert _path_candidates(text) == {
        "src/gpufleet/core/driver.py",
        "core/jobmaster.py",
        "tests/chaos/test_agent_freeze.py",
        "scheduler/plugins/",
    }
    assert not _exists("core/no_such_module.py", ROOT / "docs" / "ARCHITECTURE.md")
    assert _module_exists("gpufleet.core") and not _module_exists("gpufleet.no_such_package")


def test_the_adr_index_lists_every_record_once_by_its_own_number() -> None:
    adr = ROOT / "docs" / "adr"
    records = sorted(p.name for p in adr.glob("[0-9][0-9][0-9][0-9]-*.md"))
    numbers = [name[:4] for name in records]
    assert len(numbers) == len(set(numbers)), f"two records share a number: {records}"
    listed = _LINK.findall((adr / "README.md").read_text())
    assert sorted(set(listed) & set(records)) == records, "records missing from docs/adr/README.md"
    for name in records:
        title = (adr / name).read_text().splitlines()[0]
        assert title.startswith(f"# {name[:4]}. "), f"{name} opens with {title!r}"
