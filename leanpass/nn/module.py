"""``Module``: parameters found by walking attributes, train/eval, devices, state dicts."""

from __future__ import annotations

from typing import NamedTuple

from ..autograd import increment_version
from ..backends import dtype_name, get_backend
from ..tensor import Tensor, as_tensor

__all__ = ["Module"]


class IncompatibleKeys(NamedTuple):
    """What :meth:`Module.load_state_dict` returns, as in PyTorch: the model's keys
    the state lacked, and the state's keys the model does not have."""

    missing_keys: list
    unexpected_keys: list


class Module:
    """Base class of layers and models.

    A subclass sets its parameters (Tensors) and sub-modules as attributes --
    directly or inside lists, tuples and dicts -- and defines ``forward``.
    Attributes whose names start with ``_`` are private and not walked.
    """

    training: bool = True

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---- walking the tree ----------------------------------------------------------
    def _children(self):
        """(name, value) pairs of the public attributes, in the order they were set."""
        return ((k, v) for k, v in vars(self).items() if not k.startswith("_"))

    def named_parameters(self, prefix: str = "") -> list[tuple[str, Tensor]]:
        """``[(dotted.name, tensor), ...]``: every parameter once, in a stable order
        (attribute order, then list/tuple position, then dict insertion order)."""
        found: list[tuple[str, Tensor]] = []
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, value = stack.pop()
            if isinstance(value, Tensor):
                if id(value) not in seen:
                    seen.add(id(value))
                    found.append((name, value))
                continue
            if isinstance(value, Module):
                if id(value) in seen:
                    continue
                seen.add(id(value))
                items = list(value._children())
            elif isinstance(value, (list, tuple)):
                items = [(str(i), v) for i, v in enumerate(value)]
            elif isinstance(value, dict):
                items = [(str(k), v) for k, v in value.items()]
            else:
                continue
            for key, child in reversed(items):  # reversed: the stack pops them in order
                stack.append((f"{name}.{key}" if name else key, child))
        return found

    def parameters(self) -> list[Tensor]:
        """Every parameter once, in a stable order."""
        return [p for _, p in self.named_parameters()]

    def modules(self) -> list[Module]:
        """This module and every sub-module, each once, depth first."""
        found, seen, stack = [], set(), [self]
        while stack:
            value = stack.pop()
            if isinstance(value, Module):
                if id(value) in seen:
                    continue
                seen.add(id(value))
                found.append(value)
                stack.extend(reversed([v for _, v in value._children()]))
            elif isinstance(value, (list, tuple)):
                stack.extend(reversed(value))
            elif isinstance(value, dict):
                stack.extend(reversed(list(value.values())))
        return found

    # ---- modes and devices -------------------------------------------------------
    def zero_grad(self) -> None:
        """Reset every parameter's gradient (it reads as zeros until the next backward)."""
        for p in self.parameters():
            p.grad = None

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = bool(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def to(self, device) -> Module:
        """Move every parameter (and its gradient) to ``device`` in place: the same
        Tensor objects, so an optimizer made before keeps working."""
        target = get_backend(device)
        for p in self.parameters():
            if p.device != target.device:
                grad = p.grad if p.has_grad else None
                moved = p.to(target.device).detach()
                p.data = moved.data
                p.grad = None if grad is None else Tensor(grad, device=target.device).data
        return self

    # ---- state -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{name: array}`` for every parameter (the arrays themselves, not copies)."""
        return {name: p.data for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict, strict: bool = True) -> IncompatibleKeys:
        """Copy ``state``'s values into the existing parameters (so an optimizer holding
        them keeps working). Every key, shape and dtype is checked before anything
        is copied; ``strict=False`` loads the keys both have and ignores missing and
        unexpected ones. Returns ``(missing_keys, unexpected_keys)``, as PyTorch."""
        if not isinstance(state, dict):
            raise TypeError(f"load_state_dict: expected a dict of arrays, got {type(state).__name__}")
        params = dict(self.named_parameters())
        missing = [k for k in params if k not in state]
        unexpected = [k for k in state if k not in params]
        if strict and (missing or unexpected):
            raise ValueError(
                f"load_state_dict into {type(self).__name__}: missing keys {missing}, unexpected keys {unexpected}"
            )
        updates = []
        for name, p in params.items():
            if name not in state:
                continue
            value = state[name]
            value = value.data if isinstance(value, Tensor) else value
            shape = tuple(getattr(value, "shape", ()))
            if shape != p.shape:
                raise ValueError(
                    f"load_state_dict: {name!r} has shape {shape} in the state but {p.shape} in the model"
                )
            have, want = dtype_name(getattr(value, "dtype", "?")), dtype_name(p.dtype)
            if have != want:
                raise ValueError(f"load_state_dict: {name!r} has dtype {have} in the state but {want} in the model")
            updates.append((p, as_tensor(value, device=p.device).data))
        for p, array in updates:  # copies: training must not write into the state's arrays
            p.data = get_backend(p.device).copy(array)
            increment_version(p)
        return IncompatibleKeys(missing, unexpected)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for name, value in self._children():
            if isinstance(value, Module):
                inner = repr(value).replace("\n", "\n  ")
                lines.append(f"  ({name}): {inner}")
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, Module) for v in value):
                for i, v in enumerate(value):
                    inner = repr(v).replace("\n", "\n  ")
                    lines.append(f"  ({name}.{i}): {inner}")
        if len(lines) == 1:
            return f"{type(self).__name__}({self.extra_repr()})"
        return "\n".join(lines) + "\n)"

    def extra_repr(self) -> str:
        return ""
