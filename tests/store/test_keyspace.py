"""One owner of the Redis keyspace: zerolayer.store.keyspace names every key, and no other module
under services/ spells one (the `zl:` root). The check is run here on a planted violation too, so
it is known to catch one."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import zerolayer
from zerolayer.billing import ledger
from zerolayer.store import keyspace

ROOT = Path(zerolayer.__file__).parent
OWNER = ROOT / "store" / "keyspace.py"


def spelled_keys(root: Path, owner: Path) -> list[str]:
    """Every `zl:` spelled in a Python file under root other than the owner, as path:line."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if path == owner:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if keyspace.ROOT in line:
                out.append(f"{path.relative_to(root)}:{n}")
    return out


def test_no_module_but_the_keyspace_spells_a_key() -> None:
    assert spelled_keys(ROOT, OWNER) == []


def test_the_check_finds_a_planted_key(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "keyspace.py").write_text('ROOT = "zl:"\n')
    (tmp_path / "gateway.py").write_text('import os\n\nNAME = f"zl:new:{os.getpid()}"\n')
    assert spelled_keys(tmp_path, tmp_path / "store" / "keyspace.py") == ["gateway.py:3"]


def _shape(name: str) -> str:
    """A key or a table pattern with every variable part written `<>`."""
    return re.sub(r"<[^>]*>|§\d+|4242|\*", "<>", name)


def _sample(name: str) -> str:
    """What a namer gives for marked arguments (§0, §1 ... for text, 4242 for numbers)."""
    fn = getattr(keyspace, name)
    params = inspect.signature(fn).parameters.values()
    return str(
        fn(*[4242 if p.annotation in ("int", int) else f"§{i}" for i, p in enumerate(params)])
    )


NAMERS = [n for n in keyspace.__all__ if inspect.isfunction(getattr(keyspace, n)) and n != "text"]
SHAPES = [_shape(k.pattern) for k in keyspace.KEYSPACE]


def test_every_name_is_a_row_of_the_table() -> None:
    """A namer gives a whole row's key, or the start of one (a prefix, a SCAN pattern)."""
    stray = [
        f"{n} -> {_sample(n)}"
        for n in NAMERS
        if not any(s.startswith(_shape(_sample(n))) for s in SHAPES)
    ]
    assert stray == []
    assert len(NAMERS) > 25


def test_every_row_has_a_namer() -> None:
    made = [_shape(_sample(n)) for n in NAMERS]
    assert [s for s in SHAPES if not any(s.startswith(m) for m in made)] == []


def test_names_of_one_owner_share_a_hash_slot() -> None:
    conv = [
        keyspace.conversation("c1"),
        keyspace.conversation_order("c1"),
        keyspace.conversation_items("c1"),
        keyspace.conversation_lock("c1"),
    ]
    assert {re.search(r"\{(.*?)\}", k).group(1) for k in conv} == {"c1"}  # type: ignore[union-attr]
    assert keyspace.rate_limit("k1").endswith("{k1}")
    assert "{t1}" in keyspace.bill_tenant("t1")


def test_lua_scripts_get_their_names_from_the_keyspace() -> None:
    assert "@" not in ledger.COUNT_LUA
    assert keyspace.bill_rejected() in ledger.COUNT_LUA
    assert keyspace.bill_tenants() in ledger.COUNT_LUA
    assert keyspace.text(b"zl:x") == keyspace.text("zl:x") == "zl:x"
