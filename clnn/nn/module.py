"""``Module``: the container every layer and model derives from, with PyTorch's interface.

A module holds parameters (:class:`Parameter`, trained), buffers (tensors saved with the model but not
trained, like BatchNorm's running statistics) and child modules, each registered by assigning an
attribute. ``state_dict`` names them with dotted paths exactly as PyTorch does, so weights map one to one.
The Keras-style methods (``compile``, ``fit``, ...) come from :class:`~clnn.nn.training.TrainingMixin`,
``save`` from :class:`~clnn.nn.saving.SavingMixin`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..device import Device
from ..device import device as _device
from ..io import to_numpy
from ..ops.creation import zeros_like
from ..tensor import FLOAT_DTYPES, Tensor
from .saving import SavingMixin
from .training import TrainingMixin, _calls

__all__ = ["Parameter", "Module", "Sequential", "IncompatibleKeys"]


class Parameter(Tensor):
    """A tensor a module trains: ``requires_grad`` is on, and assigning it to a module registers it.

    ``Parameter(t)`` shares ``t``'s device memory.
    """

    __slots__ = ()

    def __init__(self, data: Tensor, requires_grad: bool = True) -> None:
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: data expects a clnn.Tensor; got {type(data).__name__}")
        super().__init__(data.data, data.shape, data.dtype, data.device)
        self.requires_grad_(requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


def fusing() -> bool:
    """Whether a layer may apply the activation after it in its own store (``forward_fused``): not while a
    summary records every module's output."""
    return getattr(_calls, "log", None) is None


class Module(TrainingMixin, SavingMixin):
    """Base class for layers and models: subclass it, assign layers in ``__init__``, write ``forward``.

    Example:
        >>> class Net(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = nn.Linear(4, 2)
        ...     def forward(self, x):
        ...         return self.fc(x).relu()
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Module:
        obj = super().__new__(cls)
        # constructor arguments, kept so clnn.nn.load can rebuild a saved model
        object.__setattr__(obj, "_init_args", (args, kwargs))
        return obj

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- registration -----------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before assigning {name!r}")
        if isinstance(value, (Parameter, Module)):
            self._forget(name)
            (self._parameters if isinstance(value, Parameter) else self._modules)[name] = value
        elif name in self._parameters or name in self._modules:
            if value is not None:
                kind = "Parameter" if name in self._parameters else "Module"
                raise TypeError(f"{type(self).__name__}: {name!r} expects a {kind} or None; "
                                f"got {type(value).__name__}")
            (self._parameters if name in self._parameters else self._modules)[name] = None
        elif name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}: buffer {name!r} expects a Tensor or None; "
                                f"got {type(value).__name__}")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules, self.__dict__):
            table.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or ``None``: a declared but absent parameter, e.g. ``bias=False``)."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: param expects a Parameter or None; got {type(param).__name__}")
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register a tensor saved in ``state_dict`` (unless ``persistent=False``) but not trained."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: tensor expects a Tensor or None; got {type(tensor).__name__}")
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self.__dict__.setdefault("_non_persistent", set()).add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register a child module under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: module expects a Module or None; got {type(module).__name__}")
        self._forget(name)
        self._modules[name] = module

    # ---- traversal --------------------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        """``(name, child)`` for each direct child module."""
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        """The direct child modules."""
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every descendant, with dotted names (this one is ``prefix``)."""
        yield prefix, self
        for name, m in self.named_children():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator[Module]:
        """This module and every descendant."""
        for _, m in self.named_modules():
            yield m

    def _named(self, table: str, prefix: str, recurse: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for mod_prefix, m in mods:
            for name, t in getattr(m, table).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, parameter)`` pairs, each parameter once, in registration order."""
        yield from self._named("_parameters", prefix, recurse)  # type: ignore[misc]

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter (what an optimizer trains)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, buffer)`` pairs: saved state that is not trained (e.g. running statistics)."""
        yield from self._named("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every descendant, then on this module."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- modes and placement ----------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active, batch norm uses and updates batch statistics)."""
        if not isinstance(mode, bool):
            raise TypeError(f"train: mode expects a bool; got {type(mode).__name__}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode: the same as ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (False) or unfreeze every parameter."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient: to None, or to new zero tensors with ``set_to_none=False``."""
        for p in self.parameters():
            p.grad = None if set_to_none or p.grad is None else zeros_like(p.grad)

    def to(self, device: str | int | Device | None = None, dtype: Any = None) -> Module:
        """Move parameters and buffers to ``device`` and/or floating ``dtype``, in place (they keep identity)."""
        target = _device(device) if device is not None else None
        for m in self.modules():
            for table in (m._parameters, m._buffers):
                for t in table.values():
                    if t is None:
                        continue
                    dt = dtype if dtype is not None and t.dtype in FLOAT_DTYPES else None
                    moved = t.detach().to(target, dt)
                    if moved is not t:
                        t.data, t.shape, t.dtype, t.device = moved.data, moved.shape, moved.dtype, moved.device
                        t.grad = None
        return self

    @property
    def device(self) -> Device | None:
        """The device of the first parameter or buffer (None for a module without any)."""
        for t in (*self.parameters(), *self.buffers()):
            return t.device
        return None

    # ---- state ------------------------------------------------------------------------------------
    def _sync_state(self) -> None:
        """Hook: bring host-side state into buffers before ``state_dict`` reads them."""

    def _state_loaded(self) -> None:
        """Hook: update host-side state from buffers after ``load_state_dict`` wrote them."""

    def state_dict(self, prefix: str = "") -> OrderedDict[str, Tensor]:
        """Parameters and persistent buffers by dotted name (tensors share memory with the module)."""
        out: OrderedDict[str, Tensor] = OrderedDict()
        for mod_prefix, m in self.named_modules(prefix.rstrip(".")):
            m._sync_state()
            skip = m.__dict__.get("_non_persistent", set())
            for table in (m._parameters, m._buffers):
                for name, t in table.items():
                    if t is not None and name not in skip:
                        out[f"{mod_prefix}.{name}" if mod_prefix else name] = t.detach()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy ``state_dict`` (clnn tensors, NumPy arrays or torch tensors) into this module in place.

        Every key, shape and value is checked before anything is written, so on error the module is
        unchanged. With ``strict``, missing and unexpected keys are errors too.

        Raises:
            KeyError: strict and the keys differ (the message lists both sides' differences).
            ValueError: a shape differs, or a value is not numeric.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"load_state_dict: state_dict expects a mapping; got {type(state_dict).__name__}")
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(
                f"load_state_dict: keys do not match {type(self).__name__}: missing {missing}, unexpected "
                f"{unexpected}; pass strict=False to load the common keys"
            )
        staged: list[tuple[Tensor, np.ndarray]] = []
        for key, target in own.items():
            if key not in state_dict:
                continue
            host = _as_numpy(key, state_dict[key])
            if host.shape != target.shape:
                raise ValueError(
                    f"load_state_dict: {key} expects shape {target.shape}; got {host.shape}"
                )
            staged.append((target, np.ascontiguousarray(host, dtype=target.dtype)))
        for target, host in staged:
            target.device.upload(target.data, host)
        for m in self.modules():
            m._state_loaded()
        return IncompatibleKeys(missing, unexpected)

    # ---- calling ----------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses define it and callers use ``module(x)``."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self.forward(*args, **kwargs)
        calls = getattr(_calls, "log", None)
        if calls is not None:
            calls.append((self, out))
        return out

    # ---- printing ---------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The arguments shown between the parentheses of ``repr``."""
        return ""

    def __repr__(self) -> str:
        children = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        if not children:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = ([self.extra_repr()] if self.extra_repr() else []) + children
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))


def _as_numpy(key: str, value: Any) -> np.ndarray:
    arr = to_numpy(value)
    if arr.dtype.kind not in "fiub" and arr.dtype not in FLOAT_DTYPES:
        raise ValueError(f"load_state_dict: {key} expects numeric values; got dtype {arr.dtype}")
    return arr


class Sequential(Module):
    """Modules applied one after another; children are named ``0``, ``1``, ... as in PyTorch.

    Example:
        >>> model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    """

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            items = list(modules[0].items())
        else:
            items = [(str(i), m) for i, m in enumerate(modules)]
        for name, m in items:
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: module {name} expects a Module; got {type(m).__name__}")
            self.add_module(name, m)

    def forward(self, x: Any) -> Any:
        """Each module in turn; a layer with ``forward_fused`` followed by an activation module naming its
        ``fused_activation`` runs as one fused call (not while a summary records every module's output)."""
        mods = list(self._modules.values())
        i = 0
        while i < len(mods):
            m, act = mods[i], getattr(mods[i + 1], "fused_activation", None) if i + 1 < len(mods) else None
            if act is not None and hasattr(m, "forward_fused") and fusing():
                x, i = m.forward_fused(x, act), i + 2
            else:
                x, i = m(x), i + 1
        return x

    def append(self, module: Module) -> Sequential:
        """Add ``module`` at the end."""
        self.add_module(str(len(self._modules)), module)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: int | slice) -> Any:
        mods = list(self._modules.values())
        if isinstance(index, slice):
            return Sequential(*mods[index])
        if not -len(mods) <= index < len(mods):
            raise IndexError(f"Sequential: index {index} is out of range for {len(mods)} modules")
        return mods[index]
