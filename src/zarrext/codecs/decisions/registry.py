"""The built-in decisions' registry: each one's name, parameters and spelling.

A built-in decision is one class: a :class:`BuiltinDecision` subclass that declares
its ``name`` and ``parameters``, registered with :func:`builtin` (the built-ins are
in :mod:`zarrext.codecs.decisions.builtins`). Its spelling, what ``decision=``, the
CLI's ``--decision`` and the attribute record take, is its name alone or followed by
its arguments in parentheses, by position or as ``parameter=value``, each a Python
literal (a number): ``"compress_if_smaller"``, ``"ratio_at_most(0.9)"``,
``"ratio_at_most(r=0.9)"``. The canonical spelling (:meth:`BuiltinDecision.spelling`,
the one recorded) is the name alone, or every argument as ``parameter=value``.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any, ClassVar

from zarrext.codecs.decisions.base import Decision, DecisionError, DecisionLike

__all__ = [
    "BUILTIN_DECISIONS",
    "BuiltinDecision",
    "builtin",
    "builtin_choices",
    "builtin_spelling",
    "from_spelling",
]


class BuiltinDecision(Decision):
    """A decision zarrext knows by its spelling: ``decision="<spelling>"``, the CLI's
    ``--decision``, and the record from which a reopened array takes it again.

    A subclass declares its ``name`` and its ``parameters`` (its constructor's
    arguments, in order, each kept as the attribute of the same name, and an
    ``example`` spelling of them) and is registered with :func:`builtin`.
    :meth:`spelling` gives the canonical spelling, which :func:`from_spelling` turns
    into an equal decision.
    """

    parameters: ClassVar[tuple[str, ...]] = ()
    example: ClassVar[str | None] = None
    """A spelling with arguments, for one with parameters: the one the tests round-trip."""
    keeps_chunk_bytes = False

    @classmethod
    def from_arguments(cls, *args: Any, **kwargs: Any) -> Decision:
        """The decision a spelling's arguments give, the constructor's (a
        :class:`DecisionError` for values it refuses)."""
        return cls(*args, **kwargs)

    @classmethod
    def usage(cls) -> str:
        """The name and the parameters, as help lists them: ``ratio_at_most(r)``."""
        return f"{cls.name}({', '.join(cls.parameters)})" if cls.parameters else cls.name

    @classmethod
    def example_spelling(cls) -> str:
        """A spelling of this decision: its ``example``, else its name."""
        return cls.example or cls.name

    def spelling(self) -> str:
        """The canonical spelling: the name alone, or every argument as ``parameter=value``."""
        if not self.parameters:
            return self.name
        arguments = ", ".join(f"{p}={getattr(self, p)!r}" for p in self.parameters)
        return f"{self.name}({arguments})"

    def __repr__(self) -> str:
        return f"<decision {self.spelling()}>"


BUILTIN_DECISIONS: dict[str, type[BuiltinDecision]] = {}
"""Every built-in decision's class by its name, in the order declared (:func:`builtin`)."""


def builtin[B: type[BuiltinDecision]](cls: B) -> B:
    """Register a :class:`BuiltinDecision` subclass under its ``name``."""
    if cls.name in BUILTIN_DECISIONS:
        raise ValueError(f"two built-in decisions are named {cls.name!r}")
    BUILTIN_DECISIONS[cls.name] = cls
    return cls


def builtin_choices() -> str:
    """The built-in decisions as help and errors list them: ``compress_if_smaller, ...``."""
    return ", ".join(cls.usage() for cls in BUILTIN_DECISIONS.values())


def from_spelling(spelling: str) -> BuiltinDecision:
    """The built-in decision ``spelling`` names (see the module docstring's grammar).

    Raises
    ------
    DecisionError
        When ``spelling`` names no built-in decision, or gives it arguments it does
        not take or refuses.
    """
    try:
        expression: ast.expr | None = ast.parse(spelling.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):  # ValueError: a NUL byte
        expression = None
    call = expression if isinstance(expression, ast.Call) else None
    head = call.func if call is not None else expression
    if not isinstance(head, ast.Name) or head.id not in BUILTIN_DECISIONS:
        raise DecisionError(f"unknown decision {spelling!r}; built-ins are {builtin_choices()}")
    cls = BUILTIN_DECISIONS[head.id]
    positional, keywords = (call.args, call.keywords) if call is not None else ([], [])
    try:
        args = [ast.literal_eval(a) for a in positional]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in keywords if k.arg is not None}
        if len(kwargs) < len(keywords):  # **mapping
            raise ValueError
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise DecisionError(
            f"decision {spelling!r}: the arguments must be literals (numbers), as in "
            f"{cls.usage()}"
        ) from None
    try:
        inspect.signature(cls).bind(*args, **kwargs)
    except TypeError as e:
        raise DecisionError(f"decision {spelling!r}: {e}; spell it {cls.usage()}") from None
    decision = cls.from_arguments(*args, **kwargs)
    assert isinstance(decision, BuiltinDecision)
    return decision


def builtin_spelling(decision: DecisionLike) -> str | None:
    """The canonical spelling that recreates ``decision``, or ``None`` if there is none.

    Built-ins given by spelling or as the objects their spellings give have one;
    functions, fixed masks, plans and subclasses of a built-in (whose behaviour a
    spelling cannot carry) have none.
    """
    if isinstance(decision, str):
        try:
            return from_spelling(decision).spelling()
        except DecisionError:
            return None
    if isinstance(decision, BuiltinDecision) and type(decision) is BUILTIN_DECISIONS.get(
        decision.name
    ):
        return decision.spelling()
    return None
