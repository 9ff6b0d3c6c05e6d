"""The shapes a reader holds in their head: no abstract class asks a backend for more than a
dozen methods, and a store's primitives say by their type that they are operations."""

from __future__ import annotations

import abc
import importlib
import inspect
import pkgutil
from typing import Final

import ledger_bus
from ledger_bus.store.base import EventStore

MOST_ABSTRACT: Final = 12


def classes_of_the_package() -> list[type]:
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(ledger_bus.__path__, "ledger_bus."):
        if info.name.endswith(("__main__", ".migrations.env")):  # scripts, run when imported
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an adapter whose framework is not installed here
            continue
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return list(found.values())


def test_no_abstract_class_declares_more_than_a_dozen_methods() -> None:
    declared = {
        f"{cls.__module__}.{cls.__qualname__}": [
            name
            for name, value in vars(cls).items()
            if getattr(value, "__isabstractmethod__", False)
        ]
        for cls in classes_of_the_package()
        if isinstance(cls, abc.ABCMeta)
    }
    assert len(declared) > 10  # the capabilities, their halves, the families
    over = {
        name: len(methods) for name, methods in declared.items() if len(methods) > MOST_ABSTRACT
    }
    assert over == {}


def test_every_primitive_a_backend_supplies_is_typed_as_an_operation() -> None:
    primitives = sorted(EventStore.__abstractmethods__ - {"run_op"})
    assert len(primitives) > 30
    for name in primitives:
        returns = str(inspect.signature(getattr(EventStore, name)).return_annotation)
        assert returns.startswith("Op["), (name, returns)
