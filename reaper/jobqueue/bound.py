"""A concern module's ``function(db, ...)`` as a method of whatever holds a
:class:`~reaper.jobqueue.database.Database` as ``database``: the store's methods
(:class:`~reaper.jobqueue.postgres.PostgresStore`) and the desk's
(:class:`~reaper.desk.postgres.PostgresDesk`) are their modules' functions, bound, with the
port's parameters, and nothing is forwarded by hand."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

from reaper.jobqueue.database import Database

__all__ = ["HoldsDatabase", "OnDatabase"]

P = ParamSpec("P")
R = TypeVar("R")


class HoldsDatabase(Protocol):
    database: Database


class OnDatabase(Generic[P, R]):
    """``function(db, ...)`` as a method: called on its holder, it is called with the holder's
    :class:`Database` first."""

    def __init__(self, function: Callable[Concatenate[Database, P], Coroutine[Any, Any, R]]):
        self._function = function
        self.__doc__ = function.__doc__

    @overload
    def __get__(self, holder: None, owner: type[object]) -> OnDatabase[P, R]: ...

    @overload
    def __get__(
        self, holder: HoldsDatabase, owner: type[object]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(
        self, holder: HoldsDatabase | None, owner: type[object]
    ) -> OnDatabase[P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if holder is None:
            return self
        return functools.partial(self._function, holder.database)
