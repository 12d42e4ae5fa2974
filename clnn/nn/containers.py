"""``ModuleList`` and ``ModuleDict``: children held by index or by key, with PyTorch's interface.

They register what they hold as child modules, so ``parameters()``, ``state_dict()`` keys
(``"layers.0.weight"``, ``"heads.cls.bias"``), ``.to()``, ``train()`` and ``load_state_dict`` reach it.
Neither has a ``forward``: the module that owns one calls its children. (``Sequential`` is in
:mod:`clnn.nn.module`, beside ``Module``.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .module import Module

__all__ = ["ModuleList", "ModuleDict"]


def _module(owner: str, name: str, value: Any) -> Module:
    if not isinstance(value, Module):
        raise TypeError(f"{owner}: {name} expects a Module; got {type(value).__name__}")
    return value


class ModuleList(Module):
    """Modules in a list, named ``"0"``, ``"1"``, ... as their positions (renumbered after insert/delete).

    Example:
        >>> self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        >>> for layer in self.layers: x = layer(x).relu()
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, index: Any) -> int:
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"ModuleList: indices must be integers or slices; got {type(index).__name__}")
        n = len(self._modules)
        if not -n <= index < n:
            raise IndexError(f"ModuleList: index {index} is out of range for {n} modules")
        return index % n

    def _renumber(self, mods: list[Module]) -> None:
        self._modules.clear()
        for i, m in enumerate(mods):
            self._modules[str(i)] = m

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return self._modules[str(self._index(index))]

    def __setitem__(self, index: int, module: Module) -> None:
        self._modules[str(self._index(index))] = _module("ModuleList", f"item {index}", module)

    def __delitem__(self, index: int | slice) -> None:
        mods = list(self._modules.values())
        del mods[index if isinstance(index, slice) else self._index(index)]
        self._renumber(mods)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> ModuleList:
        return ModuleList([*self, *other])

    def append(self, module: Module) -> ModuleList:
        """Add ``module`` at the end."""
        self._modules[str(len(self._modules))] = _module("ModuleList", "append", module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Append each of ``modules`` in order."""
        if not isinstance(modules, Iterable):
            raise TypeError(f"ModuleList: extend expects an iterable of Modules; got {type(modules).__name__}")
        new = [_module("ModuleList", f"item {i}", m) for i, m in enumerate(modules)]
        for m in new:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index`` (as ``list.insert``)."""
        mods = list(self._modules.values())
        mods.insert(index, _module("ModuleList", "insert", module))
        self._renumber(mods)


class ModuleDict(Module):
    """Modules by string key, in insertion order; the keys are the children's names in ``state_dict``.

    Example:
        >>> self.heads = nn.ModuleDict({"cls": nn.Linear(64, 10), "box": nn.Linear(64, 4)})
        >>> y = self.heads["cls"](features)
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def _key(self, key: Any) -> str:
        if not isinstance(key, str):
            raise TypeError(f"ModuleDict: keys must be strings; got {type(key).__name__}")
        if not key or "." in key:
            raise KeyError(f"ModuleDict: key {key!r} must be non-empty and contain no '.'")
        if key not in self._modules and hasattr(type(self), key):
            raise KeyError(f"ModuleDict: key {key!r} would hide the ModuleDict attribute of that name")
        return key

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise KeyError(f"ModuleDict: no module under key {key!r}; keys are {list(self._modules)}")
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self._modules[self._key(key)] = _module("ModuleDict", f"key {key!r}", module)

    def __delitem__(self, key: str) -> None:
        self[key]  # noqa: B018  (raises the KeyError that names the keys)
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> Iterable[str]:
        """The keys, in insertion order."""
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        """``(key, module)`` pairs, in insertion order."""
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        """The modules, in insertion order."""
        return self._modules.values()

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module."""
        module = self[key]
        del self._modules[key]
        return module

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add or replace modules from a mapping or from ``(key, module)`` pairs."""
        pairs = list(modules.items()) if isinstance(modules, Mapping) else list(modules)
        for i, pair in enumerate(pairs):
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise TypeError(f"ModuleDict: update expects a mapping or (key, module) pairs; item {i} is {pair!r}")
        for key, module in pairs:
            self[key] = module
