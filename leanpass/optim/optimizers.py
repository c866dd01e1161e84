"""Optimizers: SGD (momentum, Nesterov, weight decay), Adam, AdamW, RMSprop and
Adagrad (``leanpass.optim``; the learning-rate schedulers are ``optim.lr_scheduler``).

The update rules are PyTorch's, step for step. Updates run in place on each
parameter's own array (bumping its version counter, so a graph that saved the old
values raises instead of backpropagating a wrong gradient), on its own device, in its own dtype (hyper-parameters
stay Python floats, so float32 stays float32); no value goes to the host.
State (momentum buffers, moments) is created lazily, on the parameter's device
at the first step, so ``Adam(model.parameters())`` then ``model.to("cuda")``
then ``step()`` works; it follows the parameter's device and dtype when they change.

Errors at the boundary: hyper-parameters are checked by the constructor and by
``load_state_dict`` as ``torch.optim`` checks them; ``step`` checks every parameter
(gradient against data, writable data, state of the data's shape) before it changes
any, so an error leaves all parameters and all state as they were.
"""

from __future__ import annotations

import functools
import math
import numbers

from .._graph.modes import enable_grad
from .._graph.trace import TRACER, action, closure_first, idempotent, read_option, read_state, watch, wrote
from .._graph.versions import increment_versions
from ..backends import GRAD_DTYPES, backend_of_array, dtype_name, get_backend
from ..backends._base import NO_FUSED
from ..serialization import TORCH_LAYOUTS, transposed_copy, was_transposed
from ..tensor import Tensor, as_tensor, clear_gradients, with_gradients

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]


def _params_error(name: str, params) -> TypeError:
    return TypeError(
        f"{name}: params argument given to the optimizer should be an iterable of Tensors or dicts, "
        f"but got {type(params).__name__}"
    )


class _State(dict):
    """An optimizer's ``state``, ``{id(parameter): {name: array or number}}``: a dict
    whose reads in a traced call (:func:`leanpass._graph.trace.read_state`) make the
    call run eagerly where it holds arrays or numbers, as a replay would give the
    trace's (the built-in optimizers' own reads, in their ``step``, are untraced; a
    hand-written ``step`` that keeps Tensors there replays)."""

    __slots__ = ()
    __hash__ = None  # (a dict's: none)


def _reported(name):
    """``dict``'s method ``name``, reporting the read first in a traced call."""
    method = getattr(dict, name)

    @functools.wraps(method)
    def read(self, *args, **kwargs):
        if TRACER[0] is not None:
            read_state(self)
        return method(self, *args, **kwargs)

    return read


for _name in ("__getitem__", "get", "items", "values", "keys", "__iter__", "__len__", "__contains__", "setdefault",
              "pop", "popitem", "copy", "__reversed__", "__eq__", "__ne__", "__repr__"):
    setattr(_State, _name, _reported(_name))  # (``if opt.state:`` reads __len__: a path a replay would not take)


class _Group(dict):
    """A parameter group: a dict that reports its writes (:func:`leanpass._graph.trace.wrote`),
    so that a compiled step that sets an option itself (``group["lr"] = lr``) is traced
    again at every call, as a replay would not set it; and, in a traced call, its reads
    (:func:`leanpass._graph.trace.read_option`), so that a replay of a step that uses an
    option as a number (``p -= group["lr"] * p.grad``) checks it still holds."""

    __slots__ = ()

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        if TRACER[0] is not None:
            read_option(self, key, value)
        return value

    def get(self, key, default=None):
        value = dict.get(self, key, default)
        if TRACER[0] is not None and key in self:
            read_option(self, key, value)
        return value

    def __setitem__(self, key, value):
        wrote()
        super().__setitem__(key, value)

    def __delitem__(self, key):
        wrote()
        super().__delitem__(key)

    def update(self, *args, **kwargs):
        wrote()
        super().update(*args, **kwargs)

    def __ior__(self, other):
        wrote()
        return super().__ior__(other)

    def setdefault(self, key, default=None):
        if key not in self:
            wrote()
        return super().setdefault(key, default)

    def pop(self, *args):
        wrote()
        return super().pop(*args)

    def popitem(self):
        wrote()
        return super().popitem()

    def clear(self):
        wrote()
        super().clear()


class Optimizer:
    """Base class: parameter groups, ``zero_grad``, ``step`` and state dicts.

    ``params`` is an iterable of Tensors, or of dicts ``{"params": [...], **options}``
    whose options override the defaults for that group.
    """

    # Options that must be finite real numbers >= 0 (not NaN, not bool), when a group has them.
    _non_negative: tuple = ("lr", "weight_decay")
    # The per-parameter state: field -> int (a count >= 0) or "array" (of the parameter's shape).
    _state_fields: dict = {}
    _state_required: tuple = ()  # the fields a non-empty state must have
    # Bool options and their defaults, PyTorch's names (``maximize``, Adam's ``amsgrad``);
    # a group saved or pickled before one existed takes its default.
    _flags: dict = {}
    _stepped = False  # set by each step (a scheduler stepped before it warns, as PyTorch's does)
    _scheduled = False  # a scheduler was made for it (its steps count from then on)

    def __init__(self, params, defaults: dict):
        name = type(self).__name__
        if isinstance(params, (Tensor, dict, set)):
            raise _params_error(name, params)
        try:
            params = list(params)
        except TypeError:
            raise _params_error(name, params) from None
        if not params:
            raise ValueError(f"{name}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.defaults = self._check(dict(defaults))
        self.param_groups: list[dict] = []
        self.state: dict[int, dict] = _State()  # keyed by id(parameter)
        # id(parameter) -> (backend, shape, dtype) its state was last made or checked for
        self._layouts: dict = {}
        for group in groups:
            self.add_param_group(group)
        watch(self)

    # the attributes the base class keeps, which its actions (step, zero_grad) change and
    # lp.compile checks apart (read_state, read_option, _traced_state): not compared as an
    # object's where a subclass of the user's is (its own attributes are)
    _leanpass_attributes = ("state", "_layouts", "_stepped", "_scheduled", "param_groups")

    def _traced_state(self) -> tuple:
        """What lp.compile compares around a traced call: each group's parameters and
        options (one set by hand inside a compiled step, not by a scheduler's ``step``,
        is not replayed: the step is traced again), the numbers in the state (a
        hand-written ``step``, traced as the call's code, that counts its steps there:
        a replay would not count) and, of a class written outside LeanPass, the
        instance's own numbers and strings (``self.t += 1`` in such a ``step``). The
        built-in steps change theirs as actions, which a replay runs again."""
        groups = tuple((tuple(map(id, dict.__getitem__(g, "params"))),  # (read as the group's own, not reported)
                        tuple((k, v) for k, v in g.items() if k != "params")) for g in self.param_groups)
        state = self.__dict__.get("state")
        counts = tuple((key, name, v) for key, entries in (dict.items(state) if isinstance(state, dict) else ())
                       if isinstance(entries, dict) for name, v in dict.items(entries)
                       if isinstance(v, (numbers.Number, str)))
        own = () if type(self).__module__.startswith("leanpass.") else tuple(
            (k, v) for k, v in vars(self).items() if isinstance(v, (numbers.Number, str)))
        return groups, counts, own

    def add_param_group(self, param_group: dict) -> None:
        """Add a group ``{"params": [...], **options}`` whose missing options are the
        defaults, as PyTorch's (say, layers unfrozen while fine-tuning). Every
        parameter is checked first: a non-Tensor, a non-leaf or a parameter that is
        already in a group raises, and nothing is added."""
        name = type(self).__name__
        k = len(self.param_groups)
        if not isinstance(param_group, dict):
            raise TypeError(f"{name}: parameter group {k} is a {type(param_group).__name__}, not a dict; give "
                            "either Tensors or dicts {'params': [...], **options}")
        if "params" not in param_group:
            raise ValueError(f"{name}: parameter group {k} has no 'params' entry (keys: {sorted(param_group)})")
        members = param_group["params"]
        if isinstance(members, Tensor):
            members = [members]  # PyTorch too
        elif isinstance(members, (dict, set)) or not hasattr(members, "__iter__"):
            raise TypeError(f"{name}: the 'params' of parameter group {k} must be a Tensor or a list of "
                            f"Tensors, got {type(members).__name__}")
        members = list(members)
        named = bool(members) and all(type(m) is tuple and len(m) == 2 and isinstance(m[0], str) for m in members)
        if named:  # module.named_parameters(): the names are kept in the group, as PyTorch keeps them
            param_group = {**param_group, "param_names": [m[0] for m in members]}
            members = [m[1] for m in members]
        if self.param_groups and (named or "param_names" in param_group) != ("param_names" in self.param_groups[0]):
            raise ValueError(f"{name}: all parameter groups should be with names or without (named_parameters() "
                             "or parameters()), as PyTorch's")
        group = self._check({**self.defaults, **param_group, "params": members})
        seen = {id(p) for p in self._params()}
        for p in group["params"]:
            where = f"parameter {len(seen)}"
            if not isinstance(p, Tensor):
                raise TypeError(f"{name}: parameters must be Tensors, got {type(p).__name__} ({where})")
            if not p.is_leaf:
                raise ValueError(f"{name}: can't optimize a non-leaf Tensor ({where}, shape {p.shape}); "
                                 "optimize the leaves it was computed from")
            if id(p) in seen:
                raise ValueError(f"{name}: a parameter appears in more than one place ({where})")
            seen.add(id(p))
        self.param_groups.append(_Group(group))

    # ---- copies and pickles -----------------------------------------------------------
    def __getstate__(self) -> dict:
        """``copy.deepcopy`` and ``pickle`` key the state by parameter position, as
        :meth:`state_dict` does: ``id(parameter)`` means nothing in the copy."""
        state = dict(self.__dict__)
        index = {id(p): i for i, p in enumerate(self._params())}
        state["state"] = {index[k]: v for k, v in dict.items(self.state) if k in index}
        state["_layouts"] = {}  # checked again at the next step
        state.pop("_stepped", None)  # as PyTorch's pickles, which hold no record of steps for schedulers
        state.pop("_scheduled", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.param_groups = [_Group(g) for g in self.param_groups]  # (plain dicts in an older pickle)
        watch(self)
        params = list(self._params())
        self.state = _State((id(params[i]), v) for i, v in state["state"].items())
        for group in (self.defaults, *self.param_groups):  # pickled before an option existed
            for key, default in self._flags.items():
                group.setdefault(key, default)

    # ---- options --------------------------------------------------------------------
    def _real(self, key: str, value, below_one: bool = False) -> float:
        """``value`` as a float: a real number (not a bool, not a string) >= 0, and < 1
        when ``below_one``. NaN and infinity are refused (PyTorch takes infinity, which
        only turns the parameters into NaN)."""
        name = type(self).__name__
        if not isinstance(value, numbers.Number) and getattr(value, "shape", None) == () \
                and getattr(getattr(value, "dtype", None), "kind", "f") in "iuf":
            value = float(value)  # a 0-d array or tensor (a learning rate PyTorch users keep as one)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name}: {key} must be a real number, got {value!r} ({type(value).__name__})")
        value = float(value)
        if below_one and not 0.0 <= value < 1.0:
            raise ValueError(f"{name}: {key} must be in [0, 1), got {value}")
        if not 0.0 <= value < math.inf:
            raise ValueError(f"{name}: {key} must be >= 0 and finite, got {value}")
        return value

    def _flag(self, key: str, value) -> bool:
        """``value`` as a bool: True, False, 1 or 0 (``TypeError`` for anything else)."""
        if not isinstance(value, numbers.Integral) or value not in (0, 1):
            raise TypeError(f"{type(self).__name__}: {key} must be a bool, got {value!r}")
        return bool(value)

    def _check(self, group: dict) -> dict:
        """A copy of ``group`` with its options checked and numbers made Python floats;
        ``TypeError``/``ValueError`` naming the optimizer, the option and the value."""
        group = dict(group)
        for key in self._non_negative:
            if key in group:
                group[key] = self._real(key, group[key])
        for key, default in self._flags.items():
            group[key] = self._flag(key, group.get(key, default))
        return group

    def _required(self, group: dict) -> tuple:
        """The state fields a non-empty state must have under ``group``'s options."""
        return self._state_required

    def _params(self):
        for group in self.param_groups:
            yield from group["params"]

    @action
    @idempotent
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient; it reads as zeros until the next backward.
        With ``set_to_none=False`` (PyTorch's option), gradients that exist are set to
        zeros in place, and ``step`` still updates those parameters."""
        for group in self.param_groups:
            clear_gradients(group["params"], set_to_none)

    # ---- step -----------------------------------------------------------------------
    @action
    @closure_first
    def step(self, closure=None):
        """One update of every parameter that has a gradient; with ``closure`` (a
        function that zeroes the gradients, computes the loss, calls ``backward`` and
        returns the loss, as PyTorch's), it is called first, with grad mode on, and
        its loss returned.

        Every parameter is checked before any changes: its gradient has the data's
        shape, device and dtype, its data is writable and floating-point, and its state
        has the data's shape (state moves to the data's device and dtype when they
        changed, as after ``model.to``)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        self._stepped = True
        layouts, states = self._layouts, self.state
        work = []
        relaid = []  # (key, layout, state, moved): state to change once every parameter is checked
        for group in self.param_groups:  # (dict's own reads: a step runs untraced, and _Group's cost a call each)
            for key in self._non_negative:  # options set since (a NumPy lr, as PyTorch allows): checked floats
                value = dict.get(group, key)
                if value is not None and type(value) is not float:
                    group[key] = self._real(key, value)
            items = []
            # only the parameters with a gradient since zero_grad (PyTorch skips the others too)
            for p, data, grad, backend in with_gradients(dict.__getitem__(group, "params")):
                shape, dtype = data.shape, data.dtype
                if (grad.shape != shape or grad.dtype != dtype or backend.read_only(data)
                        or (not isinstance(grad, backend.array_type) if backend.one_device
                            else getattr(grad, "device", None) != getattr(data, "device", None))):
                    self._refuse(p, data, grad)
                key = id(p)
                layout = (backend, shape, dtype)
                state = dict.get(states, key)
                if state is None or layouts.get(key) != layout:
                    # first step, or the data changed device, dtype or shape since the last
                    state = {} if state is None else state
                    relaid.append((key, layout, state, self._relayout(p, data, backend)))
                items.append((p, data, grad, state, backend))
            if items:
                work.append((group, items))
        for key, layout, state, moved in relaid:  # everything is checked: now change
            state.update(moved)
            states[key] = state
            layouts[key] = layout
        for group, items in work:
            # a graph that saved the old values can no longer backpropagate (counted
            # before the update: the tensors are at hand now, not after a large one)
            increment_versions([item[0] for item in items])
            real, complex_ = [], []
            for item in items:
                (complex_ if dtype_name(item[1].dtype).startswith("complex") else real).append(item)
            if complex_:
                self._update_complex(complex_, group)
            if real:
                self._update_group(real, group)
        return loss

    def _update_complex(self, items: list, group: dict) -> None:
        """Update complex parameters as PyTorch's optimizers do: each one's real and
        imaginary parts as two real parameters (``view_as_real``), so that Adam's second
        moment is that of each part, not ``|g|**2``. The state stays complex, of the
        parameter's shape (a PyTorch state dict's); the rule runs on real views of the
        C-ordered arrays (copies of the others, written back)."""
        real_items, back = [], []
        for p, data, grad, state, backend in items:
            view = backend.real_view
            ordered = backend.c_order(data)
            real_state = {k: view(backend.c_order(v)) if hasattr(v, "shape") else v for k, v in state.items()}
            real_items.append((p, view(ordered), view(backend.c_order(grad)), real_state, backend))
            back.append((data, ordered, state, real_state, backend))
        self._update_group(real_items, group)
        for data, ordered, state, real_state, backend in back:
            if ordered is not data and not backend.shares_memory(ordered, data):
                data[...] = ordered
            state.update((k, backend.complex_view(v) if hasattr(v, "shape") else v) for k, v in real_state.items())

    def _update_group(self, items: list, group: dict) -> None:
        """Update the parameters ``items`` of ``group``: ``(tensor, data, gradient,
        state, backend)`` each, all checked; one :meth:`_update` each, on its device."""
        for _, data, grad, state, backend in items:
            if backend.guard is None:
                self._update(backend, data, grad, state, group)
            else:  # cuda:N on a machine of several GPUs: run where the data is
                with backend.guard:
                    self._update(backend, data, grad, state, group)

    def _where(self, p) -> str:
        index = next(i for i, q in enumerate(self._params()) if q is p)
        return f"{type(self).__name__}.step: parameter {index}"

    def _refuse(self, p, data, grad) -> None:
        """Raise the error that says what is wrong between ``p``'s data and gradient."""
        where = self._where(p)
        shape = tuple(data.shape)
        if tuple(grad.shape) != shape:
            raise ValueError(f"{where} has shape {shape}, its gradient {tuple(grad.shape)}: the data changed "
                             "shape after the gradient was computed; set .grad again (or zero_grad())")
        grad_device = (backend_of_array(grad) or get_backend("cpu")).device
        if grad_device != p.device:
            raise ValueError(f"{where} (shape {shape}) is on {p.device}, its gradient on {grad_device}; "
                             "set .grad again (or zero_grad())")
        if grad.dtype != data.dtype:
            raise TypeError(f"{where} (shape {shape}) has dtype {dtype_name(data.dtype)}, its gradient "
                            f"{dtype_name(grad.dtype)}; set .grad again (or zero_grad())")
        if get_backend(p.device).read_only(data):
            raise ValueError(f"{where} (shape {shape}) is read-only: its array cannot be updated in place "
                             "(set p.data to a writable copy)")
        raise ValueError(f"{where} (shape {shape}) is on device {getattr(data, 'device', None)!r}, its gradient "
                         f"on {getattr(grad, 'device', None)!r}")

    def _relayout(self, p, data, backend) -> dict:
        """``p``'s state arrays on ``backend`` in the data's dtype (not stored yet), after
        checking that the data is floating-point and the state has its shape."""
        kind = dtype_name(data.dtype)
        if kind not in GRAD_DTYPES:
            raise TypeError(f"{self._where(p)} has dtype {kind}: only floating-point and complex parameters can "
                            "be optimized")
        moved = {}
        for field, value in dict.get(self.state, id(p), {}).items():
            if hasattr(value, "shape"):
                if tuple(value.shape) != tuple(data.shape):
                    raise ValueError(
                        f"{self._where(p)} has shape {tuple(data.shape)}, its state {field!r} {tuple(value.shape)}: "
                        "the data changed shape since the last step; make a new optimizer for it"
                    )
                moved[field] = as_tensor(value, device=backend.device, dtype=kind).data
        return moved

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
        Everything is checked (option values, state fields, their types and shapes)
        before anything changes. A state that ``leanpass.load`` read from a file of
        LeanPass 0.3 holds the state of ``Linear`` weights ``(in, out)``: it is
        transposed for the parameters that ``Module.load_state_dict`` turned from that
        layout, so load the model's state first."""
        name = f"{type(self).__name__}.load_state_dict"
        old = getattr(state_dict, "format_version", TORCH_LAYOUTS) < TORCH_LAYOUTS  # set by leanpass.load
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
        for k, (group, saved) in enumerate(zip(self.param_groups, groups)):
            try:
                merged.append(self._check({**group, **{o: v for o, v in saved.items() if o != "params"}}))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{name}: invalid options for parameter group {k}: {exc}") from None
        params = list(self._params())
        group_of = [g for g in merged for _ in g["params"]]  # the options each parameter steps with
        restored = {}
        for key, entries in state.items():
            try:
                i = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"{name}: state keys are parameter numbers, got {key!r}") from None
            if not 0 <= i < len(params) or not isinstance(entries, dict):
                raise ValueError(f"{name}: bad state entry for parameter {key!r} (of {len(params)})")
            p = params[i]
            turned = old and was_transposed(p)
            restored[id(p)] = {field: self._load_field(name, i, p, field, value, turned)
                               for field, value in entries.items()}
            required = self._required(group_of[i])
            missing = [f for f in required if f not in entries]
            if entries and missing:
                raise ValueError(f"{name}: the state of parameter {i} lacks {missing[0]!r} "
                                 f"({type(self).__name__} needs {', '.join(required)}, or nothing)")
        for group, candidate in zip(self.param_groups, merged):
            group.update(candidate)
        self.state = _State(restored)
        self._layouts = {
            key: (get_backend(p.device), p.data.shape, p.data.dtype) for p in params if (key := id(p)) in restored
        }

    def _load_field(self, name: str, i: int, p, field: str, value, transposed: bool = False):
        """One saved state value, checked and made the optimizer's own (arrays copied to
        the parameter's device and dtype; ``transposed``: a 2-D array holds the
        parameter's transpose, LeanPass 0.3's layout)."""
        kind = self._state_fields.get(field)
        if kind is None:
            raise ValueError(f"{name}: unknown state {field!r} for parameter {i} "
                             f"({type(self).__name__} keeps {', '.join(self._state_fields) or 'none'})")
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise (ValueError if isinstance(value, numbers.Integral) and not isinstance(value, bool)
                       else TypeError)(f"{name}: {field!r} of parameter {i} must be an int >= 0, got {value!r}")
            return int(value)
        if not (hasattr(value, "shape") and hasattr(value, "dtype")):
            raise TypeError(f"{name}: {field!r} of parameter {i} must be an array of shape {p.shape}, "
                            f"got {type(value).__name__}")
        transposed = transposed and len(value.shape) == 2
        if tuple(value.shape) != (p.shape[::-1] if transposed else p.shape):
            raise ValueError(
                f"{name}: {field!r} of parameter {i} has shape {tuple(value.shape)}, the parameter {p.shape}"
                + (" (LeanPass 0.3's layout: the transpose)" if transposed else "")
            )
        try:
            value = as_tensor(value, device=p.device, dtype=dtype_name(p.dtype)).data
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{name}: {field!r} of parameter {i}: {exc}") from None
        backend = get_backend(p.device)
        return transposed_copy(value, backend) if transposed else backend.copy(value)


def _torch_implementation(name, foreach, fused, capturable, differentiable) -> None:
    """PyTorch's options that choose how its optimizers run, not what they compute
    (``foreach``, ``fused``, ``capturable``): accepted, as code written for PyTorch
    passes them (nanoGPT's ``fused=True``), and changing nothing, as LeanPass runs its
    own kernels (one pass per parameter where Numba is installed). ``differentiable=True``
    (autograd through the step) is not supported: ``NotImplementedError``."""
    for option, value in (("foreach", foreach), ("fused", fused), ("capturable", capturable),
                          ("differentiable", differentiable)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"{name}: {option} must be True, False or None, got {value!r}")
    if differentiable:
        raise NotImplementedError(f"{name}: differentiable=True (autograd through the optimizer's step) is not "
                                  "supported; the step runs outside the graph")


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (and its dampening),
    Nesterov momentum and L2 weight decay: PyTorch's ``torch.optim.SGD`` rule, and
    its arguments in its order. ``maximize=True`` (keyword only, as PyTorch's) ascends:
    the rule runs on the negated gradient."""

    _non_negative = ("lr", "momentum", "dampening", "weight_decay")
    _state_fields = {"momentum_buffer": "array"}
    _flags = {"maximize": False}

    def __init__(self, params, lr=0.01, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
                 maximize=False, foreach=None, fused=None, differentiable=False):
        _torch_implementation("SGD", foreach, fused, False, differentiable)
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:  # pickled before SGD had dampening
            group.setdefault("dampening", 0.0)

    def _check(self, group):
        group = super()._check(group)
        group.setdefault("dampening", 0.0)  # a state dict saved before SGD had it
        group["nesterov"] = nesterov = self._flag("nesterov", group["nesterov"])
        if nesterov and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov momentum needs momentum > 0 and dampening 0")
        return group

    def _update_group(self, items, group):
        options = dict(group)  # (one copy: _Group's reads cost a call each)
        if options["momentum"] or options["weight_decay"] or options["maximize"]:
            return super()._update_group(items, group)
        lr = options["lr"]
        for p, data, grad, state, backend in items:  # plain SGD: data -= lr * grad (a fused kernel where there is one)
            if backend.guard is not None:
                super()._update_group([(p, data, grad, state, backend)], group)
            elif (sgd := backend.fused.sgd) is None or sgd(grad, lr, 0.0, data) is False:  # False: arrays it does
                backend.add_scaled(data, -lr, grad)  # not take

    def _update(self, backend, data, grad, state, group):
        wd, momentum, dampening = group["weight_decay"], group["momentum"], group["dampening"]
        fused = backend.fused
        if group["maximize"]:  # PyTorch's: the rule on -grad (the generic path: the kernels descend)
            grad, fused = -grad, NO_FUSED
        if momentum and fused.sgd_momentum is not None and not dampening:
            first = "momentum_buffer" not in state
            if first:
                state["momentum_buffer"] = backend.xp.zeros_like(data)
            if fused.sgd_momentum(grad, group["lr"], momentum, wd, group["nesterov"], first,
                                  data, state["momentum_buffer"]) is not False:  # False: arrays it does not take
                return
            if first:
                del state["momentum_buffer"]
        if not momentum and fused.sgd is not None:
            if fused.sgd(grad, group["lr"], wd, data) is not False:  # False: arrays it does not take
                return
        if wd:
            grad = grad + wd * data
        if momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = backend.copy(grad)
            else:
                buf *= momentum
                if dampening:
                    backend.add_scaled(buf, 1.0 - dampening, grad)
                else:
                    buf += grad
            grad = grad + momentum * buf if group["nesterov"] else buf
        backend.add_scaled(data, -group["lr"], grad)


class Adam(Optimizer):
    """Adam (PyTorch's ``torch.optim.Adam`` rule; ``weight_decay`` is L2, added to the gradient).

    ``amsgrad=True`` divides by the running maximum of ``exp_avg_sq`` (state
    ``max_exp_avg_sq``, PyTorch's name; made as zeros at the first step, or at the
    first step with ``amsgrad`` on); ``maximize=True`` (keyword only, as PyTorch's)
    ascends: the rule runs on the negated gradient. Either one takes the generic path
    instead of a backend's fused kernel."""

    _non_negative = ("lr", "eps", "weight_decay")
    _state_fields = {"step": int, "exp_avg": "array", "exp_avg_sq": "array", "max_exp_avg_sq": "array"}
    _state_required = ("step", "exp_avg", "exp_avg_sq")
    _flags = {"amsgrad": False, "maximize": False}

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, *,
                 maximize=False, foreach=None, fused=None, capturable=False, differentiable=False):
        _torch_implementation(type(self).__name__, foreach, fused, capturable, differentiable)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    def _required(self, group):
        return self._state_required + (("max_exp_avg_sq",) if group["amsgrad"] else ())

    def _check(self, group):
        group = super()._check(group)
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)):
            raise TypeError(f"{type(self).__name__}: betas must be a pair of numbers in [0, 1), got {betas!r}")
        if len(betas) != 2:
            raise ValueError(f"{type(self).__name__}: betas must be a pair of numbers in [0, 1), got {betas!r}")
        group["betas"] = tuple(self._real(f"betas[{j}]", b, below_one=True) for j, b in enumerate(betas))
        return group

    _decoupled = False

    def _update(self, backend, data, grad, state, group):
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        amsgrad, xp = group["amsgrad"], backend.xp
        if not state:
            state["step"] = 0
            state["exp_avg"] = backend.xp.zeros_like(data)
            state["exp_avg_sq"] = backend.xp.zeros_like(data)
        if amsgrad and "max_exp_avg_sq" not in state:  # the first step (or the first with amsgrad on)
            state["max_exp_avg_sq"] = xp.zeros_like(data)
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        step_size, bc2_sqrt = lr / (1.0 - b1**t), math.sqrt(1.0 - b2**t)
        l2, decay = (0.0, 1.0 - lr * wd) if self._decoupled else (wd, 1.0)
        # the kernel has neither amsgrad's maximum nor maximize's sign: those take the generic path
        fused = None if amsgrad or group["maximize"] else backend.fused.adam
        if fused is not None and fused(grad, step_size, 1.0 - b1, b2, 1.0 - b2, eps, bc2_sqrt, l2, decay,
                                       data, m, v) is not False:  # one kernel (False: arrays it does not take)
            return
        if l2:
            grad = grad + l2 * data
        if decay != 1.0:
            data *= decay
        m += (1.0 - b1) * (grad - m)  # PyTorch's lerp
        v *= b2
        v += ((1.0 - b2) * grad) * grad  # scaled first (PyTorch's addcmul): finite for larger gradients
        if amsgrad:  # divide by the largest second moment so far (PyTorch's torch.maximum, in place)
            v_max = state["max_exp_avg_sq"]
            v_max[...] = xp.maximum(v_max, v)
            v = v_max
        backend.add_scaled(data, -step_size, m / (backend.xp.sqrt(v) / bc2_sqrt + eps))


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's ``torch.optim.AdamW`` rule), with
    Adam's ``amsgrad`` and ``maximize``."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False, *,
                 maximize=False, foreach=None, fused=None, capturable=False, differentiable=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         maximize=maximize, foreach=foreach, fused=fused, capturable=capturable,
                         differentiable=differentiable)


class RMSprop(Optimizer):
    """RMSprop (PyTorch's ``torch.optim.RMSprop`` rule): a running average of the
    squared gradient divides the step; ``centered`` also subtracts the squared running
    average of the gradient, ``momentum`` keeps a buffer of the divided steps;
    ``maximize=True`` (keyword only here: PyTorch's positional order has options
    LeanPass lacks before it) ascends."""

    _non_negative = ("lr", "alpha", "eps", "weight_decay", "momentum")
    _state_fields = {"step": int, "square_avg": "array", "momentum_buffer": "array", "grad_avg": "array"}
    _state_required = ("step", "square_avg")
    _flags = {"maximize": False}

    def __init__(self, params, lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False):
        _torch_implementation("RMSprop", foreach, None, capturable, differentiable)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize))

    def _check(self, group):
        group = super()._check(group)
        group["centered"] = self._flag("centered", group["centered"])
        return group

    def _update(self, backend, data, grad, state, group):
        xp, alpha, wd, momentum = backend.xp, group["alpha"], group["weight_decay"], group["momentum"]
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(data)
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        if wd:
            grad = grad + wd * data
        square_avg = state["square_avg"]
        square_avg *= alpha
        square_avg += ((1.0 - alpha) * grad) * grad
        if group["centered"]:
            grad_avg = state.get("grad_avg")
            if grad_avg is None:
                grad_avg = state["grad_avg"] = xp.zeros_like(data)
            grad_avg += (1.0 - alpha) * (grad - grad_avg)  # PyTorch's lerp
            avg = xp.sqrt(square_avg - grad_avg * grad_avg)
        else:
            avg = xp.sqrt(square_avg)
        avg += group["eps"]
        if momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = xp.zeros_like(data)
            buf *= momentum
            buf += grad / avg
            backend.add_scaled(data, -group["lr"], buf)
        else:
            backend.add_scaled(data, -group["lr"], grad / avg)


class Adagrad(Optimizer):
    """Adagrad (PyTorch's ``torch.optim.Adagrad`` rule): the step is divided by the
    square root of the sum of all squared gradients so far (which starts at
    ``initial_accumulator_value``); the learning rate at step ``t`` is
    ``lr / (1 + (t - 1) * lr_decay)``; ``maximize=True`` (keyword only, as PyTorch's) ascends."""

    _non_negative = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")
    _state_fields = {"step": int, "sum": "array"}
    _state_required = ("step", "sum")
    _flags = {"maximize": False}

    def __init__(self, params, lr=0.01, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10, *,
                 maximize=False, foreach=None, fused=None, differentiable=False):
        _torch_implementation("Adagrad", foreach, fused, False, differentiable)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, eps=eps,
                                      maximize=maximize))

    def _update(self, backend, data, grad, state, group):
        xp, wd = backend.xp, group["weight_decay"]
        if not state:
            state["step"] = 0
            state["sum"] = xp.full_like(data, group["initial_accumulator_value"])
        if group["maximize"]:
            grad = -grad
        state["step"] += 1
        if wd:
            grad = grad + wd * data
        clr = group["lr"] / (1.0 + (state["step"] - 1) * group["lr_decay"])
        total = state["sum"]
        total += grad * grad
        backend.add_scaled(data, -clr, grad / (xp.sqrt(total) + group["eps"]))

