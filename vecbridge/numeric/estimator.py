"""The estimator protocol every fitted method of the package follows (scikit-learn's conventions, our code).

* Parameters are exactly the keyword arguments of ``__init__``, stored unchanged under their own names: so
  :meth:`Estimator.get_params`, :meth:`Estimator.set_params`, :func:`clone` and the ``repr`` are derived from the
  signature and never hand-copied.
* ``__init__`` does no validation; ``fit`` calls :meth:`Estimator._validate_params` before any work, against the
  class-level ``_parameter_constraints`` (declared once per class), and returns ``self``. Fitted state ends in ``_``.
* Parameter groups: a parameter whose default is a frozen dataclass bundles related options (GEH's views, votes...).
  Each field of a group can also be read and set by its own name (field names are unique within an estimator), so
  ``set_params(shortlist=32)`` replaces the group holding ``shortlist`` with that one field changed, and
  ``get_params(deep=True)`` lists every field under that flat name. That one rule is the whole mapping.

Lives in the bottom layer because both ``align`` (estimators) and ``linking`` (GEH, a lower layer) use it.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import numbers
from typing import Any, ClassVar

import numpy as np

from ..errors import InputError


# --- constraints: what a parameter may be, checked by Estimator._validate_params ------------------------------------
class Constraint:
    """One accepted kind of value; ``describe`` completes "must be ..."."""

    def accepts(self, value) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


class _Range(Constraint):
    kind = "number"

    def __init__(self, low=None, high=None, *, low_open: bool = False, high_open: bool = False):
        self.low, self.high, self.low_open, self.high_open = low, high, low_open, high_open

    def _type_ok(self, value) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def accepts(self, value) -> bool:
        if isinstance(value, (bool, np.bool_)) or not self._type_ok(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"{self.kind} in {left}{self.low}, {self.high}{right}"
        if self.low is not None:
            return f"{self.kind} {'>' if self.low_open else '>='} {self.low}"
        if self.high is not None:
            return f"{self.kind} {'<' if self.high_open else '<='} {self.high}"
        return self.kind


class Integer(_Range):
    """An int (not a bool, not a float), optionally within bounds."""

    kind = "an integer"

    def _type_ok(self, value) -> bool:
        return isinstance(value, numbers.Integral)


class Real(_Range):
    """A real number (int or float, not a bool; NaN refused), optionally within bounds."""

    kind = "a number"

    def _type_ok(self, value) -> bool:
        return isinstance(value, numbers.Real) and value == value


class OneOf(Constraint):
    """One of a fixed set of values (``None`` included when listed)."""

    def __init__(self, *choices):
        self.choices = choices

    def accepts(self, value) -> bool:
        return any(value is c or (type(value) is type(c) and value == c) for c in self.choices)

    def describe(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.choices)


class Boolean(Constraint):
    def accepts(self, value) -> bool:
        return isinstance(value, (bool, np.bool_))

    def describe(self) -> str:
        return "True or False"


class InstanceOf(Constraint):
    def __init__(self, cls: type, what: str | None = None):
        self.cls, self.what = cls, what

    def accepts(self, value) -> bool:
        return isinstance(value, self.cls)

    def describe(self) -> str:
        return self.what or f"a {self.cls.__name__}"


class ArrayLike(Constraint):
    def accepts(self, value) -> bool:
        return isinstance(value, (np.ndarray, list, tuple)) or hasattr(value, "__array__")

    def describe(self) -> str:
        return "an array"


class RandomState(Constraint):
    """What ``numpy.random.default_rng`` takes as a seed: None, an int >= 0, a Generator, a SeedSequence."""

    def accepts(self, value) -> bool:
        if value is None or isinstance(value, (np.random.Generator, np.random.SeedSequence, np.random.BitGenerator)):
            return True
        return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) and value >= 0

    def describe(self) -> str:
        return "None, an integer >= 0 or a numpy Generator"


def optional(constraint: Constraint) -> tuple:
    """``None`` or ``constraint``."""
    return (OneOf(None), constraint)


def _describe(rule) -> str:
    rules = rule if isinstance(rule, tuple) else (rule,)
    none = any(isinstance(r, OneOf) and r.choices == (None,) for r in rules)
    parts = [r.describe() for r in rules if not (isinstance(r, OneOf) and r.choices == (None,))]
    return ("None or " if none else "") + " or ".join(parts)


def _accepts(rule, value) -> bool:
    return any(r.accepts(value) for r in (rule if isinstance(rule, tuple) else (rule,)))


# --- the base class ------------------------------------------------------------------------------------------------
class UnknownParameter(InputError):
    """``set_params`` got a name the estimator does not have; ``unknown`` and ``valid`` let a caller reword it."""

    def __init__(self, estimator: str, unknown: list[str], valid: list[str]):
        self.estimator, self.unknown, self.valid = estimator, unknown, valid
        super().__init__(f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for {estimator}; "
                         f"valid: {', '.join(valid)}")


def _is_group(value) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _same(a, b) -> bool:
    """Equal for the repr's purpose (never compares arrays elementwise)."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) or type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # an exotic __eq__ (or one that returns an array): treat as different
        return False


_SIGNATURES: dict[type, dict[str, inspect.Parameter]] = {}


class Estimator:
    """Base class: parameters from the ``__init__`` signature (keyword arguments, no ``*args``/``**kwargs``)."""

    #: name -> Constraint, or a tuple of Constraints (any may accept); group fields under their flat names
    _parameter_constraints: ClassVar[dict[str, Any]] = {}

    @classmethod
    def _signature(cls) -> dict[str, inspect.Parameter]:
        params = _SIGNATURES.get(cls)
        if params is None:
            params = {}
            init = cls.__init__
            for name, p in (() if init is object.__init__ else inspect.signature(init).parameters.items()):
                if name == "self":
                    continue
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    raise TypeError(f"{cls.__name__}.__init__ takes *args/**kwargs: parameters must be named")
                params[name] = p
            _SIGNATURES[cls] = params
        return params

    @classmethod
    def _group_fields(cls) -> dict[str, str]:
        """Flat field name -> name of the group parameter that holds it (from the groups' default values)."""
        out = {}
        for name, p in cls._signature().items():
            if _is_group(p.default):
                for f in dataclasses.fields(p.default):
                    out[f.name] = name
        return out

    def get_params(self, deep: bool = False) -> dict[str, Any]:
        """The constructor parameters; ``deep=True`` also lists every field of a parameter group by its flat name."""
        out = {}
        for name in self._signature():
            value = getattr(self, name)
            out[name] = value
            if deep and _is_group(value):
                out.update({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
        return out

    def set_params(self, **params):
        """Set parameters by name: a constructor parameter (a whole group included), or a group's field by its flat
        name (applied after the whole groups of the same call). Unknown names raise :class:`UnknownParameter`
        listing the valid ones. Returns self."""
        names, fields = self._signature(), self._group_fields()
        unknown = sorted(set(params) - set(names) - set(fields))
        if unknown:
            raise UnknownParameter(type(self).__name__, unknown, sorted(set(names) | set(fields)))
        for key, value in params.items():
            if key in names:
                setattr(self, key, value)
        by_group: dict[str, dict] = {}
        for key, value in params.items():
            if key not in names:
                by_group.setdefault(fields[key], {})[key] = value
        for group, changes in by_group.items():
            current = getattr(self, group)
            if not _is_group(current):
                raise InputError(f"{type(self).__name__}: cannot set {', '.join(changes)} because {group} is "
                                 f"{current!r}, not a {type(names[group].default).__name__}")
            setattr(self, group, dataclasses.replace(current, **changes))
        return self

    def _validate_params(self):
        """Check every parameter against ``_parameter_constraints``; the first violation is a one-line InputError."""
        rules = self._parameter_constraints
        for name, value in self.get_params(deep=True).items():
            rule = rules.get(name)
            if rule is not None and not _accepts(rule, value):
                raise InputError(f"{type(self).__name__}: {name} must be {_describe(rule)}, got {value!r}")

    def __repr__(self) -> str:
        parts = []
        for name, p in self._signature().items():
            value = getattr(self, name, p.default)
            if _is_group(value) and _is_group(p.default) and type(value) is type(p.default):
                changed = [f"{f.name}={getattr(value, f.name)!r}" for f in dataclasses.fields(value)
                           if not _same(getattr(value, f.name), getattr(p.default, f.name))]
                if changed:
                    parts.append(f"{name}={type(value).__name__}({', '.join(changed)})")
            elif not _same(value, p.default):
                text = f"array(shape={value.shape})" if isinstance(value, np.ndarray) else repr(value)
                parts.append(f"{name}={text}")
        return f"{type(self).__name__}({', '.join(parts)})"


def clone(estimator: Estimator) -> Estimator:
    """A new, unfitted estimator with deep copies of the same parameters (a seeded Generator is copied with its
    state, so the clone draws what the original would have)."""
    if not isinstance(estimator, Estimator):
        raise InputError(f"clone expects an estimator, got {type(estimator).__name__}")
    return type(estimator)(**{k: copy.deepcopy(v) for k, v in estimator.get_params(deep=False).items()})
