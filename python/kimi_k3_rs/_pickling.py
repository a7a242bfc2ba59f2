"""Pickling and copying through the constructor: the mixin of every class of the package
that holds state (:class:`ByConstructor`)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, cast

__all__ = ["ByConstructor"]


class ByConstructor:
    """Pickling and copying through the constructor, for every class of the package that
    holds state (the configs, the options, the processor, the deferred inputs).

    An object pickles, and copies (``copy.copy``, ``copy.deepcopy``), as the keyword
    arguments of its constructor (:meth:`__getstate__`); loading calls that constructor on
    them and takes the attributes of the object it builds (:meth:`__setstate__`). So a
    loaded object has passed every check a new one passes, and a pickle holding anything
    else (crafted, damaged, or another layout) raises the constructor's own error.

    A class gives :meth:`_constructor_kwargs` (default: a dataclass's init fields) and,
    when it validates through another constructor than the class, :meth:`_construct`.
    """

    __slots__ = ()

    def _constructor_kwargs(self) -> dict[str, Any]:
        """The keyword arguments :meth:`_construct` rebuilds this object from."""
        return {f.name: getattr(self, f.name) for f in fields(cast(Any, self)) if f.init}

    @classmethod
    def _construct(cls, **kwargs: Any) -> Any:
        """The validating constructor a load goes through: the class itself."""
        return cls(**kwargs)

    def __getstate__(self) -> dict[str, Any]:
        """The pickled state: :meth:`_constructor_kwargs`."""
        return self._constructor_kwargs()

    def __setstate__(self, state: Any) -> None:
        """Load ``state`` through :meth:`_construct` (its errors, e.g. ``TypeError`` for an
        unknown or missing argument, or a state that is not a dict)."""
        built = type(self)._construct(**state)
        self.__dict__.update(built.__dict__)
