"""Learning-rate schedulers, ``leanpass.optim.lr_scheduler``: PyTorch's
``torch.optim.lr_scheduler``, step for step.

A scheduler changes ``group["lr"]`` of each of its optimizer's parameter groups
when ``step()`` is called (after ``optimizer.step()``). As in PyTorch, the
constructor records ``group["initial_lr"]`` (``base_lrs``) and makes a first step
(to ``last_epoch`` 0); the chainable schedulers (``StepLR``, ``MultiStepLR``,
``ExponentialLR``, ``CosineAnnealingLR``, ``LinearLR``) compute the next rate from
the group's current one, so two schedulers on one optimizer compose; the
deprecated ``step(epoch)`` uses the closed form where there is one.

Errors at the boundary: options are checked by the constructor and by
``load_state_dict`` (``TypeError`` for a value of the wrong type, ``ValueError``
for one out of range, naming the scheduler and the option); a constructor, a step
or a load that raises leaves the optimizer and the scheduler as they were.
"""

from __future__ import annotations

import math
import numbers
import types
import warnings
from bisect import bisect_right
from collections import Counter

from .._graph.trace import action, made, sets_options
from .optimizers import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "LinearLR", "ExponentialLR", "SequentialLR",
           "CosineAnnealingLR", "OneCycleLR"]

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where possible. "
    "Please use `scheduler.step()` to step the scheduler. During the deprecation, if epoch is different from "
    "None, the closed form is used instead of the new chainable form, where available."
)


# ---- checks -------------------------------------------------------------------------------
def _int(owner, key: str, value, minimum: int) -> int:
    name = owner if isinstance(owner, str) else type(owner).__name__
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: {key} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name}: {key} must be an int >= {minimum}, got {value}")
    return int(value)


def _real(owner, key: str, value, low: float = 0.0, high: float = math.inf, open_low: bool = False) -> float:
    """``value`` as a float in [low, high] (or (low, high] when ``open_low``), finite."""
    name = owner if isinstance(owner, str) else type(owner).__name__
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: {key} must be a real number, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not (low < value if open_low else low <= value) or not value <= high or not math.isfinite(value):
        if high < math.inf:
            span = f"in {'(' if open_low else '['}{low:g}, {high:g}]"
        else:
            span = f"{'>' if open_low else '>='} {low:g} and finite"
        raise ValueError(f"{name}: {key} must be {span}, got {value}")
    return value


def _per_group(owner, key: str, value, groups: int, check) -> list:
    """One value per parameter group: a list or tuple of that length, or one value for all."""
    if isinstance(value, (list, tuple)):
        if len(value) != groups:
            raise ValueError(f"{type(owner).__name__}: {key} must have the same length as optimizer.param_groups. "
                             f"{key} has {len(value)} values, param_groups has {groups}.")
        return [check(owner, f"{key}[{i}]", v) for i, v in enumerate(value)]
    return [check(owner, key, value)] * groups


def _flag(owner, key: str, value) -> bool:
    if not isinstance(value, numbers.Integral) or value not in (0, 1):
        raise TypeError(f"{type(owner).__name__}: {key} must be a bool, got {value!r}")
    return bool(value)


def _check_optimizer(owner, optimizer) -> None:
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"{type(owner).__name__}: {type(optimizer).__name__} is not an Optimizer")


def _restore(groups: list, saved: list) -> None:
    for group, before in zip(groups, saved):
        group.clear()
        group.update(before)


class LRScheduler:
    """Base class: ``step()``, ``get_last_lr()``, ``state_dict()``, ``load_state_dict()``.

    A subclass checks its options in ``_checked`` (used by the constructor and by
    ``load_state_dict``) and computes the next rates in ``_get_lr`` (and, if it has
    one, the closed form in ``_get_closed_form_lr``). A subclass written for PyTorch,
    which overrides ``get_lr`` instead, works too: ``step`` calls ``get_lr``."""

    _is_initial = False  # True during the constructor's first step
    _in_step = False  # True while step() computes the rates
    _transient = ("optimizer", "_is_initial", "_in_step")  # not part of the state

    def __init__(self, optimizer, last_epoch: int = -1):
        _check_optimizer(self, optimizer)
        last_epoch = _int(self, "last_epoch", last_epoch, -1)
        made(self)  # (lp.compile: one made in a traced call is a change a replay would not make)
        groups = optimizer.param_groups
        if last_epoch != -1:
            for i, group in enumerate(groups):
                if "initial_lr" not in group:
                    raise KeyError(f"{type(self).__name__}: param 'initial_lr' is not specified in param_groups[{i}] "
                                   "when resuming a scheduler with last_epoch >= 0 (load the optimizer's state "
                                   "first, or start with last_epoch=-1)")
        saved = [dict(group) for group in groups]
        for group in groups:
            group.setdefault("initial_lr", group["lr"])
        self.optimizer = optimizer
        self.base_lrs = [group["initial_lr"] for group in groups]
        self.last_epoch = last_epoch
        try:
            self._initial_step()
        except BaseException:
            _restore(groups, saved)
            raise
        if not getattr(optimizer, "_scheduled", False):
            # the optimizer's first scheduler: as PyTorch, "step() before optimizer.step()"
            # counts the optimizer's steps from here on, not those of an earlier phase
            optimizer._stepped = False
            optimizer._scheduled = True

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            del self._is_initial

    def get_last_lr(self) -> list:
        """The learning rates of the parameter groups, as the last step left them."""
        return self._last_lr

    def get_lr(self) -> list:
        """The rates the next step computes (from ``last_epoch``); to read the current
        rates, use ``get_last_lr()`` (calling this outside ``step`` warns, as in PyTorch)."""
        if not self._in_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
                          UserWarning, stacklevel=2)
        return self._get_lr()

    def _get_lr(self) -> list:
        raise NotImplementedError(
            f"{type(self).__name__}: a learning-rate scheduler must override get_lr() (or _get_lr()) to "
            "return the next rate of each parameter group"
        )

    @action
    @sets_options
    def step(self, epoch=None) -> None:
        """Advance one step (call it after ``optimizer.step()``) and set each group's ``lr``.
        ``step(epoch)`` is deprecated (as in PyTorch): it jumps to ``epoch``, with the
        closed form where there is one."""
        if self._step_count == 1 and not self.optimizer._stepped:
            warnings.warn(
                "Detected call of `lr_scheduler.step()` before `optimizer.step()`. You should call them in the "
                "opposite order: `optimizer.step()` before `lr_scheduler.step()`. Failure to do this will result "
                "in skipping the first value of the learning rate schedule.", UserWarning, stacklevel=2)
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
            epoch = _int(f"{type(self).__name__}.step", "epoch", epoch, 0)
        self._step_count += 1
        try:
            self._update_lr(epoch)
        except BaseException:
            self._step_count -= 1
            raise

    def _update_lr(self, epoch=None) -> None:
        groups = self.optimizer.param_groups
        previous = self.last_epoch
        self.last_epoch = previous + 1 if epoch is None else epoch
        self._in_step = True
        try:
            closed = epoch is not None and hasattr(self, "_get_closed_form_lr")
            values = [self._lr_value(i, v) for i, v in enumerate(self._get_closed_form_lr() if closed
                                                                  else self.get_lr())]
        except BaseException:
            self.last_epoch = previous
            raise
        finally:
            del self._in_step
        for group, lr in zip(groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in groups]

    def _lr_value(self, i: int, value) -> float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{type(self).__name__}.step: the learning rate of parameter group {i} must be a "
                            f"real number, got {value!r} ({type(value).__name__})")
        value = float(value)
        if not math.isfinite(value):  # a negative rate is taken, as PyTorch (OneCycleLR's step past the end)
            raise ValueError(f"{type(self).__name__}.step: the learning rate of parameter group {i} would be "
                             f"{value}")
        return value

    # ---- state dicts ----------------------------------------------------------------
    def state_dict(self) -> dict:
        """The scheduler's attributes (all but the optimizer), as in PyTorch; plain
        numbers, lists and dicts that ``leanpass.save`` can write."""
        return {k: v for k, v in self.__dict__.items() if k not in self._transient}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a state from ``state_dict()``, after checking all of it."""
        for target, values in self._loadable(state_dict):
            target.__dict__.update(values)

    def _loadable(self, state_dict) -> list:
        """``[(object, attributes)]`` that loading ``state_dict`` sets; raises before anything changes."""
        name = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, dict):
            raise TypeError(f"{name}: expected a dict from state_dict(), got {type(state_dict).__name__}")
        own = self.state_dict()
        unknown, missing = sorted(set(state_dict) - set(own), key=str), sorted(set(own) - set(state_dict), key=str)
        if unknown or missing:
            raise ValueError(f"{name}: the state does not fit this scheduler (unknown keys {unknown}, "
                             f"missing keys {missing})")
        values = dict(state_dict)
        groups = len(self.optimizer.param_groups)
        try:
            values["last_epoch"] = _int(name, "last_epoch", values["last_epoch"], -1)
            if "_step_count" in values:
                values["_step_count"] = _int(name, "_step_count", values["_step_count"], 0)
            for key in ("base_lrs", "_last_lr"):
                if key in values:
                    values[key] = _per_group(self, key, list(values[key]) if isinstance(values[key], (list, tuple))
                                             else values[key], groups, _real)
            values = self._checked(values)
        except (TypeError, ValueError) as exc:
            message = str(exc).partition(": ")[2]
            raise type(exc)(f"{name}: {message}") from None
        return [(self, values)]

    def _checked(self, values: dict) -> dict:
        """``values`` with this scheduler's options checked (and made Python numbers)."""
        return values


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(last_epoch)``, with one function, or one per group.
    ``state_dict`` saves no functions (as PyTorch: ``None`` for a function or lambda,
    its ``__dict__`` for a callable object)."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        _check_optimizer(self, optimizer)
        groups = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != groups:
                raise ValueError(f"LambdaLR: expected {groups} lr_lambdas, but got {len(lr_lambda)}")
            lambdas = list(lr_lambda)
        else:
            lambdas = [lr_lambda] * groups
        for i, fn in enumerate(lambdas):
            if not callable(fn):
                raise TypeError(f"LambdaLR: lr_lambda {i} must be callable, got {type(fn).__name__}")
        self.lr_lambdas = lambdas
        super().__init__(optimizer, last_epoch)

    def _get_lr(self):
        return [base_lr * fn(self.last_epoch) for fn, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self):
        state = super().state_dict()
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else dict(fn.__dict__)
                               for fn in self.lr_lambdas]
        return state

    def _loadable(self, state_dict):
        saved = state_dict.get("lr_lambdas") if isinstance(state_dict, dict) else None
        name = "LambdaLR.load_state_dict"
        if not isinstance(saved, (list, tuple)) or len(saved) != len(self.lr_lambdas):
            raise ValueError(f"{name}: lr_lambdas must be a list of {len(self.lr_lambdas)} entries, got {saved!r}")
        updates = []
        for i, (fn, entry) in enumerate(zip(self.lr_lambdas, saved)):
            if entry is not None:
                if not isinstance(entry, dict) or isinstance(fn, types.FunctionType):
                    raise ValueError(f"{name}: lr_lambdas[{i}] must be None (a function) or the attributes of a "
                                     f"callable object, got {type(entry).__name__}")
                updates.append((fn, entry))
        (target, values), = super()._loadable({k: v for k, v in state_dict.items()})
        values["lr_lambdas"] = self.lr_lambdas  # the functions stay
        return [(target, values), *updates]


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` steps."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.__dict__.update(self._checked(dict(step_size=step_size, gamma=gamma)))
        super().__init__(optimizer, last_epoch)

    def _checked(self, values):
        values["step_size"] = _int(self, "step_size", values["step_size"], 1)
        values["gamma"] = _real(self, "gamma", values["gamma"])
        return values

    def _get_lr(self):
        groups = self.optimizer.param_groups
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.gamma for group in groups]

    def _get_closed_form_lr(self):
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size) for base_lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the rate by ``gamma`` at each milestone (twice at one given twice)."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.__dict__.update(self._checked(dict(milestones=milestones, gamma=gamma)))
        super().__init__(optimizer, last_epoch)

    def _checked(self, values):
        try:
            milestones = Counter(values["milestones"])
        except TypeError:
            raise TypeError(f"MultiStepLR: milestones must be a list of ints, got {values['milestones']!r}") from None
        checked = Counter()
        for step, count in milestones.items():  # Python ints (NumPy's would not save)
            checked[_int(self, "each milestone", step, -math.inf)] += _int(self, f"the count of milestone {step}",
                                                                            count, 1)
        values["milestones"] = checked
        values["gamma"] = _real(self, "gamma", values["gamma"])
        return values

    def _get_lr(self):
        groups = self.optimizer.param_groups
        if self.last_epoch not in self.milestones:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.gamma ** self.milestones[self.last_epoch] for group in groups]

    def _get_closed_form_lr(self):
        milestones = sorted(self.milestones.elements())
        return [base_lr * self.gamma ** bisect_right(milestones, self.last_epoch) for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the rate linearly from ``start_factor`` to ``end_factor`` times
    ``initial_lr`` over ``total_iters`` steps, then keep it."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        self.__dict__.update(self._checked(dict(start_factor=start_factor, end_factor=end_factor,
                                                total_iters=total_iters)))
        super().__init__(optimizer, last_epoch)

    def _checked(self, values):
        values["start_factor"] = _real(self, "start_factor", values["start_factor"], 0.0, 1.0, open_low=True)
        values["end_factor"] = _real(self, "end_factor", values["end_factor"], 0.0, 1.0)
        values["total_iters"] = _int(self, "total_iters", values["total_iters"], 1)
        return values

    def _get_lr(self):
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return [group["lr"] for group in groups]
        delta = self.end_factor - self.start_factor
        factor = 1.0 + delta / (self.total_iters * self.start_factor + (self.last_epoch - 1) * delta)
        return [group["lr"] * factor for group in groups]

    def _get_closed_form_lr(self):
        return [base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                           * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the rate by ``gamma`` at every step."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.__dict__.update(self._checked(dict(gamma=gamma)))
        super().__init__(optimizer, last_epoch)

    def _checked(self, values):
        values["gamma"] = _real(self, "gamma", values["gamma"])
        return values

    def _get_lr(self):
        groups = self.optimizer.param_groups
        if self._is_initial:
            return [group["lr"] for group in groups]
        return [group["lr"] * self.gamma for group in groups]

    def _get_closed_form_lr(self):
        return [base_lr * self.gamma ** self.last_epoch for base_lr in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from ``initial_lr`` down to ``eta_min`` over ``T_max`` steps
    (and back up over the next ``T_max``: PyTorch's chainable form, not restarts)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.__dict__.update(self._checked(dict(T_max=T_max, eta_min=eta_min)))
        super().__init__(optimizer, last_epoch)

    def _checked(self, values):
        t_max = values["T_max"]
        if isinstance(t_max, float) and t_max.is_integer():
            t_max = int(t_max)  # 10.0, as PyTorch takes it
        values["T_max"] = _int(self, "T_max", t_max, 1)
        values["eta_min"] = _real(self, "eta_min", values["eta_min"])
        return values

    def _get_lr(self):
        groups, t, T, eta_min = self.optimizer.param_groups, self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return [group["lr"] for group in groups]
        if self._step_count == 1 and t > 0:
            return [eta_min + (base_lr - eta_min) * (1 + math.cos(t * math.pi / T)) / 2 for base_lr in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [group["lr"] + (base_lr - eta_min) * (1 - math.cos(math.pi / T)) / 2
                    for base_lr, group in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T)) * (group["lr"] - eta_min)
                + eta_min for group in groups]

    def _get_closed_form_lr(self):
        return [self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base_lr in self.base_lrs]


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at each of ``milestones``
    (a scheduler starts from its closed form at 0 when its turn comes)."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        _check_optimizer(self, optimizer)
        schedulers = list(schedulers) if isinstance(schedulers, (list, tuple)) else schedulers
        if not isinstance(schedulers, list):
            raise TypeError(f"SequentialLR: schedulers must be a list of schedulers, got {type(schedulers).__name__}")
        if not schedulers:
            raise ValueError("SequentialLR expects at least one scheduler, but got no scheduler.")
        for i, scheduler in enumerate(schedulers):
            if not isinstance(scheduler, LRScheduler):
                raise TypeError(f"SequentialLR: the scheduler at index {i} is a {type(scheduler).__name__}, "
                                "not an LRScheduler")
            if scheduler.optimizer is not optimizer:
                raise ValueError(f"SequentialLR expects all schedulers to belong to the same optimizer, but got "
                                 f"scheduler {type(scheduler).__name__} at index {i} with another optimizer")
        values = self._checked({"_milestones": milestones})
        if len(values["_milestones"]) != len(schedulers) - 1:
            raise ValueError(
                "SequentialLR expects number of schedulers provided to be one more than the number of milestone "
                f"points, but got number of schedulers {len(schedulers)} and the number of milestones to be equal "
                f"to {len(values['_milestones'])}")
        last_epoch = _int(self, "last_epoch", last_epoch, -1)
        for i, group in enumerate(optimizer.param_groups):
            if "initial_lr" not in group:
                raise KeyError(f"SequentialLR: param 'initial_lr' is not specified in param_groups[{i}]")
        self._schedulers = schedulers
        self._milestones = values["_milestones"]
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self._recursive_undo(self)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def _checked(self, values):
        milestones = values["_milestones"]
        if not isinstance(milestones, (list, tuple)):
            raise TypeError(f"SequentialLR: milestones must be a list of ints, got {type(milestones).__name__}")
        milestones = [_int(self, f"milestones[{i}]", m, -math.inf) for i, m in enumerate(milestones)]
        if milestones != sorted(milestones):
            raise ValueError(f"SequentialLR: milestones must be in increasing order, got {milestones}")
        values["_milestones"] = milestones
        return values

    @staticmethod
    def _recursive_undo(scheduler) -> None:
        if isinstance(scheduler, SequentialLR):
            for inner in scheduler._schedulers:
                SequentialLR._recursive_undo(inner)
        else:
            scheduler.last_epoch -= 1

    @action
    @sets_options
    def step(self) -> None:
        """Advance one step: the scheduler of the current stretch steps (or starts)."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        try:
            if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
                scheduler._update_lr(0)
            else:
                scheduler.step()
        except BaseException:
            self.last_epoch -= 1
            raise
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self):
        state = {k: v for k, v in self.__dict__.items() if k not in self._transient and k != "_schedulers"}
        state["_schedulers"] = [scheduler.state_dict() for scheduler in self._schedulers]
        return state

    def _loadable(self, state_dict):
        inner = state_dict.get("_schedulers") if isinstance(state_dict, dict) else None
        if not isinstance(inner, (list, tuple)) or len(inner) != len(self._schedulers):
            raise ValueError(f"SequentialLR.load_state_dict: _schedulers must be a list of {len(self._schedulers)} "
                             f"state dicts, got {inner!r:.80}")
        updates = []
        for i, (scheduler, state) in enumerate(zip(self._schedulers, inner)):
            try:
                updates += scheduler._loadable(state)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"SequentialLR.load_state_dict: scheduler {i}: {exc}") from None
        (target, values), = super()._loadable(state_dict)
        values["_schedulers"] = self._schedulers
        return [(target, values), *updates]


class OneCycleLR(LRScheduler):
    """The 1cycle policy: the rate goes from ``max_lr / div_factor`` up to ``max_lr``
    over ``pct_start`` of ``total_steps``, then down to ``initial_lr / final_div_factor``
    (``three_phase``: back to the initial rate first); with ``cycle_momentum`` the
    momentum (SGD's, RMSprop's ``momentum``, Adam's ``betas[0]``) goes the other way
    between ``max_momentum`` and ``base_momentum``. Not chainable."""

    _PHASE_KEYS = {"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"}

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        _check_optimizer(self, optimizer)
        if total_steps is not None:
            total_steps = _int(self, "total_steps", total_steps, 1)
        elif epochs is not None and steps_per_epoch is not None:
            total_steps = _int(self, "epochs", epochs, 1) * _int(self, "steps_per_epoch", steps_per_epoch, 1)
        else:
            raise ValueError("OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)")
        pct_start = _real(self, "pct_start", pct_start, 0.0, 1.0)
        if _flag(self, "three_phase", three_phase):
            phases = [
                {"end_step": float(pct_start * total_steps) - 1, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": "max_momentum", "end_momentum": "base_momentum"},
                {"end_step": float(2 * pct_start * total_steps) - 2, "start_lr": "max_lr", "end_lr": "initial_lr",
                 "start_momentum": "base_momentum", "end_momentum": "max_momentum"},
                {"end_step": total_steps - 1, "start_lr": "initial_lr", "end_lr": "min_lr",
                 "start_momentum": "max_momentum", "end_momentum": "max_momentum"},
            ]
        else:
            phases = [
                {"end_step": float(pct_start * total_steps) - 1, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": "max_momentum", "end_momentum": "base_momentum"},
                {"end_step": total_steps - 1, "start_lr": "max_lr", "end_lr": "min_lr",
                 "start_momentum": "base_momentum", "end_momentum": "max_momentum"},
            ]
        values = self._checked({"total_steps": total_steps, "_schedule_phases": phases,
                                "_anneal_func_type": anneal_strategy, "cycle_momentum": cycle_momentum})
        groups = optimizer.param_groups
        max_lrs = _per_group(self, "max_lr", max_lr, len(groups), _real)
        div_factor = _real(self, "div_factor", div_factor, open_low=True)
        final_div_factor = _real(self, "final_div_factor", final_div_factor, open_low=True)
        use_beta1 = False
        if values["cycle_momentum"]:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(f"OneCycleLR: optimizer must support momentum or beta1 with `cycle_momentum` "
                                 f"option enabled ({type(optimizer).__name__} has neither)")
            use_beta1 = "betas" in optimizer.defaults
            max_momentums = _per_group(self, "max_momentum", max_momentum, len(groups), _real)
            base_momentums = _per_group(self, "base_momentum", base_momentum, len(groups), _real)
        last_epoch = _int(self, "last_epoch", last_epoch, -1)
        if last_epoch != -1:
            needed = {"initial_lr", "max_lr", "min_lr"}
            if values["cycle_momentum"]:
                needed |= {"max_momentum", "base_momentum"}
            for i, group in enumerate(groups):
                if not needed <= set(group):
                    raise KeyError(f"OneCycleLR: param_groups[{i}] lacks {sorted(needed - set(group))} when "
                                   "resuming with last_epoch >= 0 (load the optimizer's state first)")
        saved = [dict(group) for group in groups]
        if last_epoch == -1:
            for i, group in enumerate(groups):
                group["initial_lr"] = max_lrs[i] / div_factor
                group["max_lr"] = max_lrs[i]
                group["min_lr"] = group["initial_lr"] / final_div_factor
                if values["cycle_momentum"]:
                    if use_beta1:
                        group["betas"] = (max_momentums[i], *group["betas"][1:])
                    else:
                        group["momentum"] = max_momentums[i]
                    group["max_momentum"] = max_momentums[i]
                    group["base_momentum"] = base_momentums[i]
        self.__dict__.update(values)
        self.use_beta1 = use_beta1
        try:
            super().__init__(optimizer, last_epoch)
        except BaseException:
            _restore(groups, saved)
            raise

    def _checked(self, values):
        values["total_steps"] = _int(self, "total_steps", values["total_steps"], 1)
        if values["_anneal_func_type"] not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{values['_anneal_func_type']!r}")
        values["cycle_momentum"] = _flag(self, "cycle_momentum", values["cycle_momentum"])
        if "use_beta1" in values:
            values["use_beta1"] = _flag(self, "use_beta1", values["use_beta1"])
        phases = values["_schedule_phases"]
        if not isinstance(phases, (list, tuple)) or len(phases) not in (2, 3):
            raise ValueError(f"OneCycleLR: _schedule_phases must be a list of 2 or 3 phases, got {phases!r:.80}")
        checked = []
        for phase in phases:
            keys = {"end_step", "start_lr", "end_lr", "start_momentum", "end_momentum"}
            if not isinstance(phase, dict) or set(phase) != keys or not all(
                    phase[k] in self._PHASE_KEYS for k in keys - {"end_step"}):
                raise ValueError(f"OneCycleLR: a phase must be a dict of {sorted(keys)}, got {phase!r:.120}")
            checked.append({**phase, "end_step": _real(self, "end_step", phase["end_step"], -math.inf)})
        values["_schedule_phases"] = checked
        return values

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _get_lr(self):
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise ValueError(f"OneCycleLR: tried to step {step_num} times. The specified number of total steps is "
                             f"{self.total_steps}")
        lrs, momentums = [], []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step_num <= end_step or i == len(self._schedule_phases) - 1:
                    if end_step == start_step:
                        raise ValueError(f"OneCycleLR: step {step_num} falls in phase {i} of no steps (from step "
                                         f"{start_step:g} to {end_step:g}); change pct_start or total_steps")
                    pct = (step_num - start_step) / (end_step - start_step)
                    lrs.append(self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct))
                    if self.cycle_momentum:
                        momentums.append(self._anneal(group[phase["start_momentum"]],
                                                      group[phase["end_momentum"]], pct))
                    break
                start_step = phase["end_step"]
        for group, momentum in zip(self.optimizer.param_groups, momentums):
            if self.use_beta1:
                group["betas"] = (momentum, *group["betas"][1:])
            else:
                group["momentum"] = momentum
        return lrs
