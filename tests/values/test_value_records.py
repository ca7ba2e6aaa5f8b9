"""Every record of the package behaves as the dataclass it stands for.

:mod:`pynumabind._record` makes frozen value classes without
``dataclass()``'s generated code (it is what a first bind spent half its
time on).  Here each record is held against its twin -- the class
``@dataclass(frozen=True)`` makes of the same annotations and defaults
(:func:`pynumabind._record.twin`) -- on instances built from sample values:
fields and their flags, the ``__init__`` signature, repr, equality and hash
between instances that differ in one field, frozenness, what pickling
writes, ``dataclasses.replace``, ``asdict`` and ``__match_args__``.  The
decorator's own refusals (an ``__init__`` that does not match the fields)
are tested on small classes of this file.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import pytest

from pynumabind import _record
from pynumabind._record import FACTORY, field, record

from ..support.import_scan import all_modules

#: The public value classes: each must be a record (the scan below finds them).
PUBLIC = {
    "model": ("NumaNode", "Cpu", "Gpu", "Topology", "Plan"),
    "options": ("Options",),
    "binding": ("Binding",),
    "binding._apply": ("Skipped",),
    "binding._verify": ("VerifyResult",),
    "_os.threads": ("ThreadResult",),
    "_os.libnuma": ("KernelPolicy",),
}


def _records() -> List[type]:
    """Every class of the package made by ``record``, found in the modules that use it."""
    found = []
    for name, path in sorted(all_modules().items()):
        if "record(frozen=True" not in path.read_text(encoding="utf-8") or name == "_record":
            continue
        dotted = "pynumabind" if name == "__init__" else f"pynumabind.{name}"
        module = importlib.import_module(dotted)
        for value in vars(module).values():
            if isinstance(value, type) and "_record_info" in vars(value):
                if value.__module__ == module.__name__:
                    found.append(value)
    return found


RECORDS = _records()


def test_every_public_value_class_is_a_record() -> None:
    names = {(c.__module__, c.__qualname__) for c in RECORDS}
    for module, classes in PUBLIC.items():
        for cls in classes:
            assert (f"pynumabind.{module}", cls) in names


# ------------------------------------------------------------ sample values

#: Values tried, in order, for a field that changes: the first a record accepts.
CANDIDATES: Tuple[Any, ...] = (
    ("changed",),
    3,
    True,
    "socket",
    "bind",
    "nearest",
    "all",  # tiers
    (0, 1),
    {0: 1},  # weights
)


def _base_values(cls: type) -> Dict[str, Any]:
    """A value for every field without a default (distinct ints); defaults for the rest."""
    out: Dict[str, Any] = {}
    for number, parameter in enumerate(inspect.signature(cls).parameters.values()):
        if parameter.default is inspect.Parameter.empty:
            out[parameter.name] = 1000 + number
    return out


def _changed(cls: type, base: Dict[str, Any], name: str) -> Optional[Any]:
    """An instance of ``cls`` differing from ``base`` in field ``name``, if one can be made."""
    for candidate in CANDIDATES:
        try:
            made = cls(**{**base, name: candidate})
        except (ValueError, TypeError):  # a record that checks its fields (Options)
            continue
        if vars(made)[name] != vars(cls(**base))[name]:
            return made
    return None


def _hash(value: Any) -> Any:
    """``hash(value)``, or the type of the error it raises (a dict field: TypeError)."""
    try:
        return hash(value)
    except TypeError as exc:
        return type(exc)


def _initial(cls: type) -> Tuple[str, ...]:
    """The fields ``__init__`` takes (not those made with ``init=False``)."""
    return tuple(f.name for f in dataclasses.fields(_record.twin(cls)) if f.init)


def _twin_of(cls: type, instance: Any) -> Any:
    """The twin dataclass's instance holding the same field values."""
    twin = _record.twin(cls)
    made = twin(**{name: vars(instance)[name] for name in _initial(cls)})
    for f in dataclasses.fields(twin):  # init=False ones: set as the record's own code does
        if not f.init:
            object.__setattr__(made, f.name, vars(instance)[f.name])
    return made


def _own_repr(cls: type) -> bool:
    """Whether ``cls`` writes its own repr (``repr=False``): the twin then has none to compare."""
    return not _record.twin(cls).__dataclass_params__.repr  # type: ignore[attr-defined]


@pytest.fixture(params=RECORDS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def cls(request: pytest.FixtureRequest) -> type:
    return request.param


# ------------------------------------------------------------------ tests


def test_fields_and_their_flags_are_the_twins(cls: type) -> None:
    twin_fields = dataclasses.fields(_record.twin(cls))
    info = cls._record_info  # type: ignore[attr-defined]
    assert _record.field_names(cls) == tuple(f.name for f in twin_fields)
    assert info.shown == tuple(f.name for f in twin_fields if f.repr)
    assert info.compared == tuple(f.name for f in twin_fields if f.compare)
    assert info.hashed == tuple(
        f.name for f in twin_fields if (f.compare if f.hash is None else f.hash)
    )
    assert dataclasses.is_dataclass(cls)
    assert [(f.name, f.type, f.default, f.default_factory) for f in dataclasses.fields(cls)] == [
        (f.name, f.type, f.default, f.default_factory) for f in twin_fields
    ]
    for f in twin_fields:  # a class attribute where dataclass leaves one, and none elsewhere
        assert (f.name in vars(cls)) == (f.name in vars(_record.twin(cls)))
    assert cls.__match_args__ == _record.twin(cls).__match_args__  # type: ignore[attr-defined]


def _parameters(callable_: Any) -> List[Tuple[str, Any, Any, str]]:
    return [
        (p.name, p.kind, p.annotation, repr(p.default))
        for p in inspect.signature(callable_).parameters.values()
    ]


def test_the_hand_written_init_has_the_twins_signature(cls: type) -> None:
    # <factory> on both sides: FACTORY's repr and dataclass's own marker's.
    assert _parameters(cls) == _parameters(_record.twin(cls))


def test_repr_equality_and_hash_are_the_twins(cls: type) -> None:
    base = _base_values(cls)
    first, second = cls(**base), cls(**base)
    twin_first, twin_second = _twin_of(cls, first), _twin_of(cls, second)
    own_repr = _own_repr(cls)
    if own_repr:  # as dataclass(repr=False): the body's __repr__ is the class's, not ours
        assert vars(cls)["__repr__"] is not _record._repr
    else:
        assert repr(first) == repr(twin_first)
    assert (first == second) == (twin_first == twin_second)
    assert (first != second) == (twin_first != twin_second)
    eq = _record.twin(cls).__dataclass_params__.eq  # type: ignore[attr-defined]
    if eq:  # else both hash by identity
        assert _hash(first) == _hash(twin_first) == _hash(second)
    changed = 0
    for name in _initial(cls):
        other = _changed(cls, base, name)
        if other is None:
            continue
        changed += 1
        twin_other = _twin_of(cls, other)
        if not own_repr:
            assert repr(other) == repr(twin_other)
        assert (first == other) == (twin_first == twin_other), name
        if eq:
            assert _hash(other) == _hash(twin_other), name
    assert changed == len(_initial(cls))  # every field __init__ takes was tried
    assert first.__eq__(twin_first) is twin_first.__eq__(first)  # NotImplemented, or identity


def test_instances_are_frozen_as_the_twins(cls: type) -> None:
    instance = cls(**_base_values(cls))
    twin = _twin_of(cls, instance)
    for name in (*_record.field_names(cls)[:1], "not_a_field"):
        for target in (instance, twin):
            with pytest.raises(dataclasses.FrozenInstanceError) as caught:
                setattr(target, name, 1)
            message = str(caught.value)
            with pytest.raises(dataclasses.FrozenInstanceError):
                delattr(target, name)
        assert message == f"cannot assign to field {name!r}"


def test_pickling_writes_what_it_writes_for_the_twin(cls: type) -> None:
    instance = cls(**_base_values(cls))
    twin = _twin_of(cls, instance)
    assert instance.__reduce_ex__(4)[2] == twin.__reduce_ex__(4)[2]  # the state: the fields
    assert list(vars(instance)) == list(vars(twin))  # in the same order
    loaded = pickle.loads(pickle.dumps(instance))
    assert type(loaded) is cls and vars(loaded) == vars(instance)


def test_replace_and_asdict_work_as_on_the_twin(cls: type) -> None:
    base = _base_values(cls)
    instance = cls(**base)
    assert dataclasses.asdict(instance) == dataclasses.asdict(_twin_of(cls, instance))
    for name in _record.field_names(cls):
        if name not in _initial(cls):  # init=False: neither replace may change it
            for replace in (dataclasses.replace, _record.replace):
                with pytest.raises(ValueError, match=f"field {name} is declared with init=False"):
                    replace(instance, **{name: None})
            continue
        other = _changed(cls, base, name)
        if other is None:
            continue
        changes = {name: vars(other)[name]}
        replaced = dataclasses.replace(instance, **changes)
        assert type(replaced) is cls and vars(replaced) == vars(other)
        assert vars(_record.replace(instance, **changes)) == vars(other)
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_field'"):
        _record.replace(instance, no_such_field=1)


# ------------------------------------------------------ the decorator itself


@record(frozen=True)
class _Point:
    """A record with every kind of field."""

    x: int
    label: ClassVar[str] = "point"
    y: int = 0
    tags: Tuple[str, ...] = field(default=())
    extra: Dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __init__(
        self, x: int, y: int = 0, tags: Tuple[str, ...] = (), extra: Dict[str, int] = FACTORY
    ) -> None:
        self.__dict__.update(x=x, y=y, tags=tags, extra={} if extra is FACTORY else extra)


@record(frozen=True, eq=False, repr=False)
class _Handle:
    """A record with a field ``__init__`` does not take, and a repr of its own."""

    name: str
    _secret: Optional[int] = field(default=None, init=False, repr=False, compare=False)

    def __init__(self, name: str) -> None:
        self.__dict__.update(name=name, _secret=None)

    def __repr__(self) -> str:
        return f"<handle {self.name}>"


@record(frozen=True)
class _Nested:
    """Holds itself, through a list: its repr must not recurse for ever."""

    items: List[Any]

    def __init__(self, items: List[Any]) -> None:
        self.__dict__.update(items=items)


def test_class_vars_factories_and_flags_as_dataclass_reads_them() -> None:
    assert _record.field_names(_Point) == ("x", "y", "tags", "extra")
    assert _Point.label == "point" and _Point.tags == () and "extra" not in vars(_Point)
    point = _Point(1, extra={"a": 1})
    assert repr(point) == "_Point(x=1, y=0, tags=())"
    assert point == _Point(1, extra={"b": 2})  # extra is not compared
    assert _Point(1).extra == {} and _Point(1).extra is not _Point(1).extra


def test_init_false_fields_and_a_repr_of_its_own_as_dataclass_reads_them() -> None:
    handle = _Handle("a")
    assert repr(handle) == "<handle a>" and handle._secret is None
    assert _Handle.__match_args__ == ("name",)  # as dataclass: only __init__'s fields
    assert [p.name for p in inspect.signature(_Handle).parameters.values()] == ["name"]
    assert dataclasses.fields(_Handle)[1].init is False
    assert _record.replace(handle, name="b")._secret is None  # starts again from its default
    assert handle != _Handle("a")  # eq=False: identity
    with pytest.raises(dataclasses.FrozenInstanceError):
        handle._secret = 1  # type: ignore[misc]


def test_a_repr_that_meets_itself_says_so() -> None:
    nested = _Nested([])
    nested.items.append(nested)
    assert repr(nested) == "_Nested(items=[...])"


def test_the_decorator_refuses_an_init_that_is_not_the_fields() -> None:
    def make(init: Any, annotations: Optional[Dict[str, str]] = None, **body: Any) -> type:
        namespace = {"__annotations__": annotations or {"a": "int", "b": "int"}, "b": 2, **body}
        if init is not None:
            namespace["__init__"] = init
        return record(frozen=True)(type("Made", (), namespace))

    def ok(self: Any, a: int, b: int = 2) -> None:
        self.__dict__.update(a=a, b=b)

    def swapped(self: Any, b: int, a: int = 2) -> None: ...

    def wrong_default(self: Any, a: int, b: int = 3) -> None: ...

    def swallows(self: Any, *args: Any, **kwargs: Any) -> None: ...

    assert make(ok)(1).b == 2
    for init in (swapped, wrong_default, swallows, None):
        with pytest.raises(TypeError, match="record Made"):
            make(init)
    with pytest.raises(TypeError, match="cannot overwrite __setattr__"):
        make(ok, __setattr__=lambda self, name, value: None)
    with pytest.raises(TypeError, match="frozen"):
        record(frozen=False)
    body_repr = make(ok, __repr__=lambda self: "mine")
    assert repr(body_repr(1)) == "mine"  # as dataclass: a method the body wrote stays
