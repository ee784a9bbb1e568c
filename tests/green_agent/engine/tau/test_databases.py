"""Template databases, copy-on-access copies of them and their hash: the same data and the same hash as tau2's.

Everything here compares with what tau2 itself does: a database validated from the file (``DB.load``), and
``get_dict_hash(db.model_dump())``.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from green_agent.engine.tau.databases import (
    CopyOnAccessDict,
    database_hash,
    lazy_database,
    lazy_environment,
    template,
    validated,
)
from green_agent.engine.tau.quiet import quiet_tau2
from green_agent.engine.tau.tasks import load_tasks

quiet_tau2()
from tau2.domains.airline.data_model import Certificate  # noqa: E402
from tau2.utils import load_file  # noqa: E402
from tau2.utils.utils import get_dict_hash  # noqa: E402

LAZY = ("retail", "airline", "mock")


def tau2_hash(database: Any) -> str:
    return str(get_dict_hash(database.model_dump()))


def tau2_loaded(domain: str) -> Any:
    """The database exactly as tau2's ``get_environment()`` loads it (``DB.load``: read the file, validate)."""
    from green_agent.engine.tau.databases import DB_SOURCES, _attribute

    model, path = DB_SOURCES[domain]["db"]
    return _attribute(model).model_validate(load_file(_attribute(path)))


@pytest.mark.parametrize("domain", LAZY)
def test_a_lazy_copy_holds_what_tau2_loads_record_for_record(domain: str) -> None:
    lazy, loaded = lazy_database(domain), tau2_loaded(domain)
    assert type(lazy) is type(loaded)
    assert tau2_hash(lazy) == database_hash(lazy) == tau2_hash(loaded)
    for name in type(loaded).model_fields:
        records, expected = getattr(lazy, name), getattr(loaded, name)
        assert type(records) is CopyOnAccessDict
        assert list(records) == list(expected)  # same order: tools that search return the first match
        for key, record in records.items():  # every record copied: exact object state, types included
            assert pickle.dumps(record) == pickle.dumps(expected[key]), (name, key)
    assert database_hash(lazy) == tau2_hash(loaded)  # all of it reached, nothing changed


def test_non_record_databases_are_validated_whole() -> None:
    for keyword in ("db", "user_db"):
        database = lazy_database("telecom", keyword)
        assert template("telecom", keyword).maps is None
        assert not any(type(value) is CopyOnAccessDict for value in database.__dict__.values())
        assert database is not template("telecom", keyword).database
        assert database_hash(database) == tau2_hash(validated("telecom", keyword))


REACHES: dict[str, Callable[[CopyOnAccessDict, str], Any]] = {
    "getitem": lambda m, k: m[k],
    "get": lambda m, k: m.get(k),
    "values": lambda m, k: next(v for v in m.values() if v is m[k]),
    "items": lambda m, k: next(v for key, v in m.items() if key == k),
    "reversed values": lambda m, k: next(v for v in reversed(m.values()) if v is m[k]),
    "setdefault": lambda m, k: m.setdefault(k, None),
    "pop": lambda m, k: m.pop(k),
    "popitem": lambda m, k: m.popitem()[1],
    "copy": lambda m, k: m.copy()[k],
    "dict()": lambda m, k: dict(m)[k],
    "unpacking": lambda m, k: {**m}[k],
    "update": lambda m, k: _updated(m)[k],
    "or": lambda m, k: (m | {})[k],
    "ror": lambda m, k: ({} | m)[k],
    "copy.copy": lambda m, k: copy.copy(m)[k],
    "deepcopy": lambda m, k: copy.deepcopy(m)[k],
    "pickle": lambda m, k: pickle.loads(pickle.dumps(m))[k],
}


def _updated(records: CopyOnAccessDict) -> dict[str, Any]:
    target: dict[str, Any] = {}
    target.update(records)
    return target


@pytest.mark.parametrize("reach", sorted(REACHES))
def test_every_way_to_reach_a_record_hands_out_a_private_copy(reach: str) -> None:
    pristine = template("retail")
    before = pickle.dumps(pristine.database)
    database = lazy_database("retail")
    orders = database.__dict__["orders"]
    key = next(reversed(orders))  # the one popitem() takes
    record = REACHES[reach](orders, key)
    assert record is not pristine.database.__dict__["orders"][key]
    record.status = "changed by the attempt"
    record.items.clear()
    assert pickle.dumps(pristine.database) == before  # the template never changes
    assert database_hash(database) == tau2_hash(database)


def test_membership_and_length_copy_nothing() -> None:
    database = lazy_database("retail")
    orders = database.__dict__["orders"]
    originals = template("retail").database.__dict__["orders"]
    assert len(orders) == len(originals) and next(iter(orders)) in orders
    assert all(dict.__getitem__(orders, key) is originals[key] for key in originals)


def _run_gold_actions(env: Any, domain: str) -> int:
    writes = 0
    for task in load_tasks(domain, "test"):
        for action in task.evaluation_criteria.actions or []:
            try:
                env.make_tool_call(tool_name=action.name, requestor=action.requestor, **copy.deepcopy(action.arguments))
                writes += 1
            except Exception:
                continue
    return writes


@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_the_hash_follows_tau2_through_every_gold_action_of_the_test_split(domain: str) -> None:
    """Every gold action of the split on one lazy environment and on one tau2-loaded one: same hash, and the
    template is as tau2 loads it afterwards."""
    from tau2.registry import registry

    lazy, loaded = lazy_environment(domain), registry.get_env_constructor(domain)()
    assert _run_gold_actions(lazy, domain) == _run_gold_actions(loaded, domain) > 0
    assert database_hash(lazy.tools.db) == loaded.get_db_hash() == tau2_hash(lazy.tools.db)
    assert loaded.get_db_hash() != tau2_hash(tau2_loaded(domain))  # the actions did change it
    assert tau2_hash(template(domain).database) == tau2_hash(tau2_loaded(domain))


def test_records_added_removed_or_replaced_are_hashed_as_tau2_hashes_them() -> None:
    database = lazy_database("airline")
    users, reservations = database.__dict__["users"], database.__dict__["reservations"]
    user_id, reservation_id = next(iter(users)), next(iter(reservations))
    reservations["NEW001"] = copy.deepcopy(reservations[reservation_id]).model_copy(update={"reservation_id": "NEW001"})
    removed = reservations.pop(next(reversed(reservations)))
    assert removed is not None
    users[user_id].payment_methods["certificate_x"] = Certificate(id="certificate_x", amount=10, source="certificate")
    assert database_hash(database) == tau2_hash(database)
    unchanged = lazy_database("airline")
    key = next(iter(unchanged.__dict__["flights"]))
    unchanged.__dict__["flights"][key] = copy.deepcopy(unchanged.__dict__["flights"][key])  # equal, not the same
    assert database_hash(unchanged) == tau2_hash(unchanged) == tau2_hash(template("airline").database)


def _integral_gift_card(database: Any) -> Any:
    for user in database.__dict__["users"].values():
        for method in user.payment_methods.values():
            balance = getattr(method, "balance", None)
            if isinstance(balance, float) and balance.is_integer() and balance != 0:
                return method
    raise AssertionError("no gift card with a whole balance in retail")


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # a str where a float belongs: tau2 warns too
@pytest.mark.parametrize("change", ["int", "bool", "negative zero", "nan", "string"])
def test_values_equal_in_python_but_not_in_json_change_the_hash(change: str) -> None:
    """1 == 1.0 and -0.0 == 0.0 in Python but not in tau2's JSON: a record changed only that way is re-serialised."""
    database = lazy_database("retail")
    card = _integral_gift_card(database)
    balance = card.balance
    new = {"int": int(balance), "bool": True, "negative zero": -0.0, "nan": math.nan, "string": str(balance)}[change]
    object.__setattr__(card, "balance", new)  # no validation: as a tool assigning a value would
    assert database_hash(database) == tau2_hash(database) != tau2_hash(template("retail").database)


def test_the_template_is_untouched_by_everything_above() -> None:
    for domain in LAZY:
        assert tau2_hash(template(domain).database) == tau2_hash(tau2_loaded(domain))
