"""Optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW.

The update rules are PyTorch's, step for step. Updates run in place on each
parameter's own array (bumping its version counter, so a graph that saved the old
values raises instead of backpropagating a wrong gradient), on its own device, in its own dtype (hyper-parameters
stay Python floats, so float32 stays float32); no value goes to the host.
State (momentum buffers, moments) is created lazily, on the parameter's device
at the first step, so ``Adam(model.parameters())`` then ``model.to("cuda")``
then ``step()`` works.
"""

from __future__ import annotations

import math

from .autograd import increment_version
from .backends import dtype_name, get_backend
from .tensor import Tensor, as_tensor

__all__ = ["Optimizer", "SGD", "Adam", "AdamW"]


class Optimizer:
    """Base class: parameter groups, ``zero_grad``, ``step`` and state dicts.

    ``params`` is an iterable of Tensors, or of dicts ``{"params": [...], **options}``
    whose options override the defaults for that group.
    """

    def __init__(self, params, defaults: dict):
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        seen: set[int] = set()
        for group in groups:
            group = {**self.defaults, **group, "params": list(group["params"])}
            for p in group["params"]:
                if not isinstance(p, Tensor):
                    raise TypeError(f"{type(self).__name__}: parameters must be Tensors, got {type(p).__name__}")
                if id(p) in seen:
                    raise ValueError(f"{type(self).__name__}: a parameter appears in more than one place")
                seen.add(id(p))
            self._check(group)
            self.param_groups.append(group)
        self.state: dict[int, dict] = {}  # keyed by id(parameter)
        self._devices: dict = {}  # id(parameter) -> the backend its state lives on

    def _check(self, group: dict) -> None:
        if group["lr"] < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {group['lr']}")
        if group.get("weight_decay", 0.0) < 0:
            raise ValueError(f"{type(self).__name__}: weight_decay must be >= 0, got {group['weight_decay']}")

    def _params(self):
        for group in self.param_groups:
            yield from group["params"]

    def zero_grad(self) -> None:
        """Reset every parameter's gradient; it reads as zeros until the next backward."""
        for p in self._params():
            p.grad = None

    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        for group in self.param_groups:
            for p in group["params"]:
                if not p.has_grad:  # no gradient since zero_grad (PyTorch skips these too)
                    continue
                grad = p.grad
                key = id(p)
                state = self.state.setdefault(key, {})
                backend = get_backend(p.device)
                if self._devices.get(key) is not backend:  # new, or the model moved (model.to)
                    for name, value in state.items():
                        if hasattr(value, "shape"):
                            state[name] = as_tensor(value, device=backend.device).data
                    self._devices[key] = backend
                if backend.guard is None:
                    self._update(backend, p.data, grad, state, group)
                else:  # cuda:N on a machine of several GPUs: run where the data is
                    with backend.guard:
                        self._update(backend, p.data, grad, state, group)
                increment_version(p)  # a graph that saved the old values can no longer backpropagate

    def _update(self, backend, data, grad, state: dict, group: dict) -> None:
        """Update one parameter's array ``data`` in place, on ``backend``'s device."""
        raise NotImplementedError

    # ---- state dicts -----------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"state": {index: {name: value}}, "param_groups": [{options, "params": [index...]}]}``
        with parameters numbered in order, as PyTorch does. Arrays are references."""
        index = {id(p): i for i, p in enumerate(self._params())}
        state = {index[k]: dict(v) for k, v in self.state.items() if k in index}
        groups = [
            {**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
            for g in self.param_groups
        ]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore options and state; arrays move to each parameter's device and dtype.
        Everything is checked (shapes, option values) before anything changes."""
        name = f"{type(self).__name__}.load_state_dict"
        try:
            groups, state = list(state_dict["param_groups"]), dict(state_dict["state"])
            sizes = [len(g["params"]) for g in groups]
        except (KeyError, TypeError):
            raise ValueError(f"{name}: expected a dict with 'state' and 'param_groups' (a list of groups)") from None
        if sizes != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(
                f"{name}: the state has groups of sizes {sizes}, this optimizer "
                f"{[len(g['params']) for g in self.param_groups]}"
            )
        merged = []
        for group, saved in zip(self.param_groups, groups):
            options = {k: (tuple(v) if isinstance(v, list) else v) for k, v in saved.items() if k != "params"}
            candidate = {**group, **options}
            try:
                self._check(candidate)
            except (TypeError, ValueError, KeyError) as exc:
                raise ValueError(f"{name}: invalid options {options}: {exc}") from None
            merged.append(candidate)
        params = list(self._params())
        restored = {}
        for key, entries in state.items():
            try:
                i = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"{name}: state keys are parameter numbers, got {key!r}") from None
            if not 0 <= i < len(params) or not isinstance(entries, dict):
                raise ValueError(f"{name}: bad state entry for parameter {key!r} (of {len(params)})")
            p = params[i]
            entry = {}
            for field, value in entries.items():
                if hasattr(value, "shape") and hasattr(value, "dtype"):
                    if tuple(value.shape) != p.shape:
                        raise ValueError(
                            f"{name}: {field!r} of parameter {i} has shape {tuple(value.shape)}, "
                            f"the parameter {p.shape}"
                        )
                    value = as_tensor(value, device=p.device, dtype=dtype_name(p.dtype)).data
                    value = get_backend(p.device).copy(value)
                entry[field] = value
            restored[id(p)] = entry
        for group, candidate in zip(self.param_groups, merged):
            group.update(candidate)
        self.state = restored
        self._devices = {key: get_backend(p.device) for p in params if (key := id(p)) in restored}


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and
    L2 weight decay (PyTorch's ``torch.optim.SGD`` rule, dampening 0)."""

    def __init__(self, params, lr=0.01, momentum=0.0, weight_decay=0.0, nesterov=False):
        if nesterov and momentum <= 0:
            raise ValueError("SGD: nesterov momentum needs momentum > 0")
        super().__init__(params, dict(lr=float(lr), momentum=float(momentum),
                                      weight_decay=float(weight_decay), nesterov=bool(nesterov)))

    def _check(self, group):
        super()._check(group)
        if group["momentum"] < 0:
            raise ValueError(f"SGD: momentum must be >= 0, got {group['momentum']}")

    def _update(self, backend, data, grad, state, group):
        wd, momentum = group["weight_decay"], group["momentum"]
        fused = backend.fused
        if momentum and fused.sgd_momentum is not None:
            first = "momentum_buffer" not in state
            if first:
                state["momentum_buffer"] = backend.xp.zeros_like(data)
            fused.sgd_momentum(grad, group["lr"], momentum, wd, group["nesterov"], first,
                               data, state["momentum_buffer"])
            return
        if not momentum and fused.sgd is not None:
            fused.sgd(grad, group["lr"], wd, data)
            return
        if wd:
            grad = grad + wd * data
        if momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = backend.copy(grad)
            else:
                buf *= momentum
                buf += grad
            grad = grad + momentum * buf if group["nesterov"] else buf
        data -= group["lr"] * grad


class Adam(Optimizer):
    """Adam (PyTorch's ``torch.optim.Adam`` rule; ``weight_decay`` is L2, added to the gradient)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=float(lr), betas=(float(betas[0]), float(betas[1])),
                                      eps=float(eps), weight_decay=float(weight_decay)))

    def _check(self, group):
        super()._check(group)
        if not isinstance(group["betas"], tuple) or len(group["betas"]) != 2:
            raise ValueError(f"{type(self).__name__}: betas must be a pair, got {group['betas']!r}")
        b1, b2 = group["betas"]
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), got {group['betas']}")
        if group["eps"] < 0:
            raise ValueError(f"{type(self).__name__}: eps must be >= 0, got {group['eps']}")

    _decoupled = False

    def _update(self, backend, data, grad, state, group):
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = backend.xp.zeros_like(data)
            state["exp_avg_sq"] = backend.xp.zeros_like(data)
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        step_size, bc2_sqrt = lr / (1.0 - b1**t), math.sqrt(1.0 - b2**t)
        l2, decay = (0.0, 1.0 - lr * wd) if self._decoupled else (wd, 1.0)
        fused = backend.fused.adam
        if fused is not None:  # one kernel for the whole update
            fused(grad, step_size, 1.0 - b1, b2, 1.0 - b2, eps, bc2_sqrt, l2, decay, data, m, v)
            return
        if l2:
            grad = grad + l2 * data
        if decay != 1.0:
            data *= decay
        m += (1.0 - b1) * (grad - m)  # PyTorch's lerp
        v *= b2
        v += (1.0 - b2) * (grad * grad)
        data -= step_size * (m / (backend.xp.sqrt(v) / bc2_sqrt + eps))


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's ``torch.optim.AdamW`` rule)."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
