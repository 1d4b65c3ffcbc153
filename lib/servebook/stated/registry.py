"""The registry core: what a quantity the book states is, and where each is registered. It knows no chapter: each
chapter declares its own quantities beside the code that computes them (``servebook.<chapter>.quantities``) and
registers them here; ``servebook.quantities`` imports every chapter's and gathers the whole registry.

    register(Quantity("single_tok_s", "single-stream decode tok/s", compute, ("05", "06"), tables=("bench_summary",)))
    QUANTITIES["single_tok_s"].compute(store)             # {label: tok/s} for every served configuration of the run
    expected(store, "single_tok_s", "transformers/default")
    pick(quantity, values, of)                            # one subject's value among values computed once, or MISSING
    per_run(fn)                                           # fn(store) computed once per run and state of its tables
    per_run(fn, files=lambda store: [...])                # ... and of other files it reads
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .tags import _KNOWN
from .text import MISSING, plain

__all__ = ["Quantity", "QUANTITIES", "register", "gather", "gathered", "expected", "pick", "per_run", "per", "pairs", "pct"]


@dataclass(frozen=True)
class Quantity:
    """A quantity the book states: how to recompute it, for which subjects, and on which chapter pages it must appear.

    ``compute(store)`` returns ``{of: value}`` (``of`` is None for a quantity with one subject); ``lookup(of)``, where
    given, computes a subject that the run does not list (a reference figure named by its subject); ``lookup_in(store,
    of)`` one that needs the run too (this run's figure against another run's). ``tables``: the run's tables
    (``<name>.jsonl``) ``compute`` reads, the ones a stated value derives from; ``files``: the run's files other than its
    tables that it is computed from (a table may hold a copy of the same text; changing the copy changes nothing)."""

    name: str
    what: str
    compute: Callable[[Any], dict]
    chapters: tuple[str, ...] = ()
    lookup: Callable[[str], Any] | None = None
    lookup_in: Callable[[Any, str], Any] | None = None  # a subject computed from the run and ``of`` (another run named in it)
    files: tuple[str, ...] = ()  # run files other than its tables that ``compute`` reads (e.g. probe.json): where it derives from
    tables: tuple[str, ...] = ()  # the run's tables ``compute`` reads (names without .jsonl)


# Every quantity registered so far, by name. Complete once ``servebook.quantities`` has imported every chapter's
# (``gathered()``); before that it holds the quantities of the chapters imported so far.
QUANTITIES: dict[str, Quantity] = {}
_GATHERED: list[bool] = [False]


def register(*quantities: Quantity) -> None:
    """Add quantities to the registry; a name is registered once (two chapters cannot state one name two ways)."""
    for x in quantities:
        if x.name in QUANTITIES and QUANTITIES[x.name] is not x:
            raise ValueError(f"quantity {x.name!r} is registered twice: rename one (servebook.stated.registry)")
        QUANTITIES[x.name] = x
        if _GATHERED[0]:
            _KNOWN.add(x.name)


def gather() -> dict[str, Quantity]:
    """The registry, said to be whole (``servebook.quantities`` calls it once every chapter's quantities are imported):
    from now on ``q`` refuses a name that none of them recomputes."""
    _GATHERED[0] = True
    _KNOWN.update(QUANTITIES)
    return QUANTITIES


def gathered() -> bool:
    """Whether every chapter's quantities are registered (``servebook.quantities`` imported)."""
    return _GATHERED[0]


def expected(store, name: str, of: str | None = None) -> Any:
    """The quantity ``name`` (of ``of``) recomputed from the run's tables, or ``MISSING``."""
    if name not in QUANTITIES and not gathered():
        raise KeyError(f"{name!r} is not registered yet: import servebook.quantities (every chapter's quantities) first")
    return pick(QUANTITIES[name], QUANTITIES[name].compute(store), of, store)


def pick(quantity: Quantity, values: dict, of: str | None, store=None) -> Any:
    """``of``'s value among a quantity's computed ``values`` (or its lookup), or ``MISSING``."""
    if of in values and plain(values[of]) is not None:
        return plain(values[of])
    if quantity.lookup is not None or (quantity.lookup_in is not None and store is not None):
        value = quantity.lookup(of) if quantity.lookup is not None else quantity.lookup_in(store, of)
        return MISSING if value is MISSING or value is None else plain(value)
    return MISSING


# -- what the chapters' declarations share ---------------------------------------------------------------------------
def _tables_now(store) -> tuple:
    """What a run's tables are now (name, size, modification time of each): a computation over them stays valid while
    this is unchanged."""
    path = Path(store.path)
    return (str(path.resolve()),) + tuple((p.name, st.st_size, st.st_mtime_ns) for p in sorted(path.glob("*.jsonl"))
                                          for st in [p.stat()])


def per_run(fn: Callable[[Any], Any], files: Callable[[Any], Any] | None = None) -> Callable[[Any], Any]:
    """``fn(store)`` computed once per run and state of its tables (several quantities read one finding; the chapter 04
    one takes seconds). One entry per run (its resolved path): a run's tables changed replace its own entry only, so
    the checked run and a reference run read beside it keep theirs. ``files(store)``: other files ``fn`` reads (kept
    kernel tables, say), each one's modification time part of the state (a missing one too)."""
    memo: dict = {}

    def wrapper(store):
        key = _tables_now(store)
        if files is not None:
            key += tuple((str(p), p.stat().st_mtime_ns if p.is_file() else None) for p in map(Path, files(store)))
        held = memo.get(key[0])
        if held is None or held[0] != key:
            memo[key[0]] = held = (key, fn(store))
        return held[1]

    wrapper.__doc__ = fn.__doc__
    return wrapper


def per(getter: Callable[[Any], dict], field_: str | Callable[[dict], Any]) -> Callable[[Any], dict]:
    """``{subject: field}`` of every item ``getter(store)`` gives by subject (``field_`` a key, or a function of the item)."""
    pick_ = field_ if callable(field_) else (lambda d, k=field_: d.get(k))
    return lambda store: {k: pick_(d) for k, d in getter(store).items()}


def pairs(values: dict, fn: Callable[[Any, Any], Any]) -> dict:
    """``fn(a, b)`` for every ordered pair of subjects, by ``"<a> vs <b>"``."""
    return {f"{ka} vs {kb}": fn(va, vb) for ka, va in values.items() for kb, vb in values.items() if ka != kb}


def pct(a, b):
    """``a`` against ``b``, signed %."""
    return 100 * (a - b) / b if a is not None and b else None
