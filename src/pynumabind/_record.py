"""Frozen value classes that every reader sees as dataclasses, made without dataclass()'s cost.

``@dataclass(frozen=True)`` writes each class's ``__init__``, ``__repr__``,
``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__`` as source text
and compiles it: about 0.7 ms a class, and the bind path's value classes
spent half of a first bind's time there.  ``@record(frozen=True)`` (and
``@record(frozen=True, eq=False)``), written where ``@dataclass`` was, gives
a class the same behaviour without writing or compiling any code:

* **Fields** are the class's annotations, in order (``ClassVar`` ones
  excepted); a field's default is the value the class body gives it, or
  :func:`field` (``dataclasses.field``'s keywords, with the same meaning)
  for a default factory, or for a field left out of the repr, the
  comparison, the hash or ``__init__``'s parameters (``init=False``).
* **``__init__`` is written by hand** in the class body: an honest
  signature, and faster than the generated one (one ``__dict__.update``).
  The decorator checks it when the class is made -- its parameters are the
  fields, in order, each with the field's default (:data:`FACTORY` where a
  factory makes it), the ``init=False`` ones left out (the ``__init__`` sets
  each to its default, as dataclass's does) -- and refuses the class
  otherwise, so the two cannot drift apart.  A ``__post_init__`` is the class's own business: its
  ``__init__`` calls it.
* ``__repr__``, ``__eq__`` and ``__hash__`` behave as dataclass writes them
  (``Name(a=1, b=2)``, recursion shown as ``...``; equal when of the same
  class and the compared fields are equal; the hash of the hashed fields),
  by functions shared by every record that read the class's field list; a
  ``__repr__`` or ``__eq__`` the body writes stays, as with dataclass, and
  ``repr=False`` leaves the repr to the body (or ``object``).
  ``eq=False`` keeps ``object``'s identity equality and hash.  Instances
  are frozen: assigning or deleting an attribute raises
  ``dataclasses.FrozenInstanceError`` (``dataclasses`` is imported then, on
  that error path only).
* ``__match_args__`` is the names of ``__init__``'s fields.  ``__dataclass_fields__`` and
  ``__dataclass_params__`` are made on first access, by running the real
  ``dataclass()`` on the record's twin (:func:`twin`: a class with the same
  annotations and defaults): ``dataclasses.fields``, ``replace``,
  ``asdict`` and ``is_dataclass`` treat a record exactly as a dataclass,
  and only a caller that asks pays for the dataclass machinery.  Code of
  the package that copies a record with changes calls :func:`replace`,
  which needs none of it.
* Instances keep a ``__dict__``, as a dataclass's do, so pickling and
  copying write and read the same thing.

Type checkers see ``dataclasses.dataclass`` and ``dataclasses.field``
themselves (the ``TYPE_CHECKING`` branch at the bottom), so they check a
record as the dataclass it stands for.  ``tests/values/test_value_records.py``
holds every record of the package against its twin: fields, signature,
repr, equality, hash, frozenness, pickling and ``dataclasses.replace``.

This module sits with the values at the top of the package and imports
nothing but ``sys`` and ``_thread`` (both loaded in any interpreter), so any
floor may use it for free.
"""

from __future__ import annotations

import sys
from _thread import get_ident

# Not ``from typing import TYPE_CHECKING``: this module must not load typing.
TYPE_CHECKING = False

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, Optional, Set, Tuple, TypeVar

    _T = TypeVar("_T")

__all__ = ["FACTORY", "field", "field_names", "record", "replace", "twin"]


class _Factory:
    """The type of :data:`FACTORY`."""

    def __repr__(self) -> str:
        return "<factory>"


#: The default a hand-written ``__init__`` gives a field made by a factory;
#: the ``__init__`` calls the factory when it sees it (``<factory>``, as a
#: dataclass's signature shows).
FACTORY: Any = _Factory()


class _Field:
    """What :func:`field` returns: a field's default and flags, read by :func:`record`."""

    __slots__ = ("compare", "default", "default_factory", "hash", "init", "repr")

    def __init__(  # noqa: PLR0917 - dataclasses.field's flags
        self,
        default: Any,
        default_factory: Any,
        repr: bool,
        hash: Optional[bool],
        compare: bool,
        init: bool = True,
    ) -> None:
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.hash = hash
        self.compare = compare
        self.init = init


_MISSING: Any = _Factory.__new__(_Factory)  # "no default": a distinct object nothing else holds


def _field(
    *,
    default: Any = _MISSING,
    default_factory: Any = _MISSING,
    init: bool = True,
    repr: bool = True,
    hash: Optional[bool] = None,
    compare: bool = True,
) -> Any:
    """:func:`field` at run time: the default or factory and flags, for :func:`record` to read."""
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory, repr, hash, compare, init)


class _Info:
    """One record class's fields, read once by :func:`record`."""

    __slots__ = (
        "cls",
        "compared",
        "eq",
        "fields",
        "hashed",
        "initial",
        "names",
        "repr",
        "shown",
        "twin",
    )

    def __init__(self, cls: type, fields: Dict[str, _Field], eq: bool, repr: bool) -> None:
        self.cls = cls
        self.fields = fields  # name -> default and flags, in order
        self.eq = eq
        self.repr = repr
        self.names = tuple(fields)
        self.initial = tuple(n for n, f in fields.items() if f.init)  # __init__'s parameters
        self.shown = tuple(n for n, f in fields.items() if f.repr)
        self.compared = tuple(n for n, f in fields.items() if f.compare)
        self.hashed = tuple(
            n for n, f in fields.items() if (f.compare if f.hash is None else f.hash)
        )
        self.twin: Optional[type] = None  # made on first use: see twin()


def _is_class_var(annotation: object) -> bool:
    """Whether a (string) annotation is ``ClassVar[...]``: not a field, as for a dataclass."""
    text = annotation if isinstance(annotation, str) else repr(annotation)
    for prefix in ("ClassVar", "typing.ClassVar"):
        if text == prefix or text.startswith(prefix + "["):
            return True
    return False


def _read_fields(cls: type) -> Dict[str, _Field]:
    """The fields of ``cls``'s own annotations; the class attributes become their defaults."""
    out: Dict[str, _Field] = {}
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 - own ones, as dataclasses reads them
        if _is_class_var(annotation):
            continue
        given = cls.__dict__.get(name, _MISSING)
        spec = given if isinstance(given, _Field) else _Field(given, _MISSING, True, None, True)
        out[name] = spec
        if isinstance(given, _Field):  # as dataclass: the default stays, a factory does not
            if spec.default is _MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
    return out


def _check_init(cls: type, info: _Info) -> None:
    """Refuse ``cls`` unless its own ``__init__`` takes exactly the fields, with their defaults.

    The fields made with ``init=False`` excepted: as dataclass's, the
    ``__init__`` takes no parameter for them and sets each to its default.
    """
    init = cls.__dict__.get("__init__")
    code = getattr(init, "__code__", None)
    if code is None:
        raise TypeError(f"record {cls.__qualname__} needs an __init__ of its own")
    count = code.co_argcount + code.co_kwonlyargcount
    params = code.co_varnames[1:count]
    if params != info.initial or code.co_flags & 0x0C:  # 0x04 *args, 0x08 **kwargs
        raise TypeError(
            f"record {cls.__qualname__}: __init__ takes {params}, not the fields {info.initial}"
        )
    defaults = dict(zip(params[::-1], (init.__defaults__ or ())[::-1]))  # type: ignore[union-attr]
    defaults.update(init.__kwdefaults__ or {})  # type: ignore[union-attr]
    for name, spec in info.fields.items():
        if not spec.init:
            continue
        wanted = FACTORY if spec.default_factory is not _MISSING else spec.default
        got = defaults.get(name, _MISSING)
        if got is not wanted and (type(got) is not type(wanted) or got != wanted):
            raise TypeError(
                f"record {cls.__qualname__}: __init__'s default for {name} is {got!r}, "
                f"the field's {wanted!r}"
            )


#: Methods a record's body may write itself; dataclass keeps them too.
_KEPT = frozenset({"__repr__", "__eq__", "__match_args__"})


def _record(*, frozen: bool, eq: bool = True, repr: bool = True) -> Any:
    """:func:`record` at run time: the decorator that makes a class a record."""
    if frozen is not True:
        raise TypeError("a record is frozen: record(frozen=True)")

    def make(cls: type) -> type:
        info = _Info(cls, _read_fields(cls), eq, repr)
        _check_init(cls, info)
        attributes: Dict[str, Any] = {
            "_record_info": info,
            "__setattr__": _setattr,
            "__delattr__": _delattr,
            "__dataclass_fields__": _Twin("__dataclass_fields__"),
            "__dataclass_params__": _Twin("__dataclass_params__"),
        }
        if repr:  # repr=False: the body's own, or object's, as dataclass leaves it
            attributes["__repr__"] = _repr
        if eq:
            attributes["__eq__"] = _eq
            if cls.__dict__.get("__hash__") is None:  # as dataclass: one the body wrote stays
                attributes["__hash__"] = _hash
        if "__match_args__" not in cls.__dict__:
            attributes["__match_args__"] = info.initial
        if sys.version_info >= (3, 13):
            attributes["__replace__"] = replace
        for name in ("__setattr__", "__delattr__"):
            if name in cls.__dict__:
                raise TypeError(f"cannot overwrite {name} in frozen record {cls.__qualname__}")
        for name, value in attributes.items():
            if name not in _KEPT or name not in cls.__dict__:  # as dataclass: the body's win
                setattr(cls, name, value)
        return cls

    return make


if TYPE_CHECKING:  # what type checkers see: dataclass itself, so they check a dataclass
    from dataclasses import dataclass as record
    from dataclasses import field
else:
    record = _record
    field = _field


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of record ``obj`` with ``changes``: ``dataclasses.replace`` without its import.

    Like it, the copy is made by calling the class (so a ``__post_init__``
    checks it again; a field made with ``init=False`` starts again from its
    default, and changing one is a ValueError), and an unknown field is a
    TypeError.
    """
    info: _Info = type(obj)._record_info  # type: ignore[attr-defined]
    for name in changes:
        if name in info.fields and name not in info.initial:
            raise ValueError(
                f"field {name} is declared with init=False, it cannot be specified with replace()"
            )
    values = {name: changes.pop(name, obj.__dict__[name]) for name in info.initial}
    if changes:
        raise TypeError(
            f"{info.cls.__qualname__}.__init__() got an unexpected keyword argument "
            f"{next(iter(changes))!r}"
        )
    return obj.__class__(**values)


def field_names(cls: type) -> Tuple[str, ...]:
    """Record class ``cls``'s field names, in order (``dataclasses.fields`` without its import)."""
    names: Tuple[str, ...] = cls._record_info.names  # type: ignore[attr-defined]
    return names


# ------------------------------------------------------------ shared methods

_REPRS: Set[Tuple[int, int]] = set()  # (id, thread) of reprs under way: recursion


def _repr(self: Any) -> str:
    key = (id(self), get_ident())
    if key in _REPRS:
        return "..."
    _REPRS.add(key)
    try:
        values = self.__dict__
        shown = ", ".join(f"{n}={values[n]!r}" for n in self._record_info.shown)
        return f"{self.__class__.__qualname__}({shown})"
    finally:
        _REPRS.discard(key)


def _values(obj: Any, names: Tuple[str, ...]) -> Tuple[Any, ...]:
    values = obj.__dict__
    return tuple([values[n] for n in names])


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        names = self._record_info.compared
        return _values(self, names) == _values(other, names)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(_values(self, self._record_info.hashed))


def _frozen(self: Any, name: str) -> None:
    info: _Info = self._record_info
    if type(self) is info.cls or name in info.fields:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _setattr(self: Any, name: str, value: Any) -> None:
    _frozen(self, name)
    object.__setattr__(self, name, value)


def _delattr(self: Any, name: str) -> None:
    _frozen(self, name)
    object.__delattr__(self, name)


# ------------------------------------------------------- the dataclass twin


class _Twin:
    """A record's ``__dataclass_fields__``/``__dataclass_params__``, made on first access.

    A non-data descriptor on the record class: the first lookup, on the
    class or an instance, runs ``dataclass()`` on :func:`twin` and puts
    its two attributes on the record class in place of the descriptors.
    """

    def __init__(self, attribute: str) -> None:
        self.attribute = attribute

    def __get__(self, instance: Any, owner: Any) -> Any:
        cls: type = owner._record_info.cls
        made = twin(cls)
        for attribute in ("__dataclass_fields__", "__dataclass_params__"):
            setattr(cls, attribute, getattr(made, attribute))
        return getattr(cls, self.attribute)


def twin(cls: type) -> type:
    """The dataclass ``@dataclass(frozen=True)`` would have made of record ``cls``'s body.

    Built from the class's own annotations (all of them: dataclass itself
    tells the ``ClassVar`` ones apart) and the defaults and flags its body
    gave, with the same name, module and qualified name.  Made once per record.
    """
    info: _Info = cls._record_info  # type: ignore[attr-defined]
    if info.twin is not None:
        return info.twin
    import dataclasses

    namespace: Dict[str, Any] = {
        "__annotations__": dict(cls.__dict__.get("__annotations__", {})),  # noqa: RUF063 - own ones
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    for name, spec in info.fields.items():
        flags: Dict[str, Any] = {
            "init": spec.init,
            "repr": spec.repr,
            "hash": spec.hash,
            "compare": spec.compare,
        }
        if spec.default_factory is not _MISSING:
            namespace[name] = dataclasses.field(default_factory=spec.default_factory, **flags)
        elif spec.default is not _MISSING:
            namespace[name] = dataclasses.field(default=spec.default, **flags)
        elif flags != {"init": True, "repr": True, "hash": None, "compare": True}:
            namespace[name] = dataclasses.field(**flags)
    made: type = dataclasses.dataclass(frozen=True, eq=info.eq, repr=info.repr)(
        type(cls.__name__, (), namespace)
    )
    info.twin = made
    return made
