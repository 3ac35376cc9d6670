"""Named implementations of one seam, in the style of simonw/llm: one registry per kind of
plugin (`okgit.config.EVALUATORS`, `okgit.search.registry.PROPOSERS`).

The built-ins register themselves with the same decorator an extension uses. An installed
package adds its own through an entry point in the registry's group (`okgit.evaluators`,
`okgit.proposers`): the entry point's module registers on import. A registry declared below
the modules that fill it (the evaluators', in okgit.config, which checks `--eval` against it)
names its built-ins' module, imported as an entry point's is, when it is first read. Every choice the CLI
offers, every value `Config` accepts and every flag the sweep passes through is read from
these registries, so a new implementation is one registration, not five edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import Callable, Generic, TypeVar

from okgit.errors import UsageError

F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class Entry(Generic[F]):
    name: str
    factory: F
    order: int  # where it stands among its kind (proposers run in this order)


class Registry(Generic[F]):
    def __init__(self, noun: str, group: str, builtins: str | None = None) -> None:
        self.noun = noun  # what one implementation is called: "evaluator", "proposer", "template kind"
        self.group = group
        self.builtins = builtins
        self._entries: dict[str, Entry[F]] = {}
        self._plugins_loaded = False

    def register(self, name: str, *, order: int = 0) -> Callable[[F], F]:
        def add(factory: F) -> F:
            self._entries[name] = Entry(name, factory, order)
            return factory

        return add

    def entries(self) -> list[Entry[F]]:
        """Every registered implementation, by `order` (registration order among equals)."""
        self._load_plugins()
        return sorted(self._entries.values(), key=lambda e: e.order)

    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries())

    def get(self, name: str) -> Entry[F]:
        self._load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise UsageError(f"unknown {self.noun} {name!r} (known: {', '.join(self.names())})") from None

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True  # first, so a plugin that reads the registry does not recurse
        if self.builtins:
            import_module(self.builtins)
        for point in entry_points(group=self.group):
            point.load()
