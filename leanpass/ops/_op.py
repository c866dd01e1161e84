"""``Op``: an operation and what the engine needs to know about it, in one object.

An operation is a forward function ``fn(be, *arrays, **params) -> (out, backward)``:
it computes with the backend's namespace ``be.xp`` on raw arrays and returns the
output array and ``backward(grad_out) -> one gradient per array input`` (an array of
the output's broadcast shape, or ``None`` for an input that needs none; the engine
sums a broadcast gradient back to the input's shape). ``backward`` captures the
arrays it needs, never a Tensor, so a graph has no reference cycles.

The ``Op`` wrapping it *is* its name (a ``str``: ``t._op == "+"``) and carries:

- ``saves``: the positions of the inputs whose arrays ``backward`` reads (``None``:
  all of them), and ``saves_out``: whether it reads the output. An in-place change
  of a saved array after the forward makes backward raise, naming the operation.
- ``fresh``: ``backward`` returns new arrays, never an incoming gradient or a view
  of one, so the engine may keep them as a leaf's ``.grad`` without a copy.
- ``needs``: the forward takes ``needs=``, a tuple saying which inputs require a
  gradient (none under ``no_grad``), so it can skip work (and saving) for the others.
- ``view``: the output may share memory with the first input (reshape, slicing):
  they then share one version counter, as an in-place change of one changes both.
  ``copies``: it may also be a copy (a ``reshape`` the data's strides do not allow
  as a view); then it is marked as a view only where it does share memory.
- ``differentiable``: ``False`` for operations whose outputs never carry gradients
  (comparisons, integer results).
- ``rule``: the backward rule on saved values, ``rule(xp, inputs, out, g, *params)
  -> one gradient per input``, where it can be written apart from the forward. A
  ``create_graph`` backward runs it on Tensors (``xp`` LeanPass's namespace, ``out``
  the node itself) where an input the rule does not read has changed in place since
  the forward, instead of running the forward again on the changed values (PyTorch's
  ``SavedVariable`` rule: a backward reads what the node saved, never a re-computed
  value). An op with several outputs (a decomposition: its forward returns the
  outputs and one ``backward(*grads)`` for all of them, see
  :func:`leanpass._node.several`) has ``rule(be, outs, *params) -> backward``, its
  backward made from its outputs, which a ``create_graph`` backward runs on the
  saved outputs as Tensors.
- ``saved_rule``: a ``create_graph`` backward runs ``rule`` always, never the forward
  again: for an operation whose forward, run again on a graph backend, may round
  otherwise than the backend's kernels did (BatchNorm then ReLU: a ReLU mask made
  again from an output a few ulp off 0 would pass a gradient the forward stopped).
- ``exact``: the op's gradients have its inputs' shapes and dtypes, so the engine
  skips its broadcast and dtype checks (the element-wise ops of one tensor, marked by
  their table, and the outputs of a multi-output op, which only hand on theirs).
- ``complex``: how complex values are differentiated (PyTorch's convention:
  ``dL/dRe + i dL/dIm``): ``"holomorphic"`` (a rule written for real numbers runs as
  ``conj(rule(conj(g)))``), ``"own"`` (the rule handles complex values itself), or
  ``None`` (the backward raises ``TypeError`` naming the op where a complex value
  meets it).
"""

from __future__ import annotations

__all__ = ["Op", "op", "ALL"]

ALL = None  # ``saves=ALL``: backward may read every input


class Op(str):
    """An operation: its name (the string itself), its forward function and metadata."""

    def __new__(cls, name: str, fn, *, saves=ALL, saves_out: bool = True, fresh: bool = True,
                needs: bool = False, view: bool = False, copies: bool = False, differentiable: bool = True,
                doc: str | None = None, rule=None, exact: bool = False, complex: str | None = None,
                saved_rule: bool = False):
        self = super().__new__(cls, name)
        self.fn = fn
        self.saves = saves if saves is ALL else tuple(saves)
        self.saves_out = saves_out
        self.fresh = fresh
        self.needs = needs
        self.view = view
        self.copies = copies
        self.differentiable = differentiable
        self.rule = rule
        self.saved_rule = saved_rule
        self.exact = exact
        self.complex = complex
        self.__doc__ = doc or fn.__doc__
        return self

    def __call__(self, be, *args, **params):
        """Run the forward: ``(out, backward)``."""
        return self.fn(be, *args, **params)

    def saved(self, position: int) -> bool:
        """Whether backward reads the array of input ``position``."""
        return self.saves is ALL or position in self.saves

    def renamed(self, name: str) -> Op:
        """The same operation under another name (``"getitem"`` for a ``take``)."""
        return Op(name, self.fn, saves=self.saves, saves_out=self.saves_out, fresh=self.fresh,
                  needs=self.needs, view=self.view, copies=self.copies, differentiable=self.differentiable,
                  doc=self.__doc__, rule=self.rule, exact=self.exact, complex=self.complex, saved_rule=self.saved_rule)

    def __reduce__(self):
        return (str, (str(self),))


def op(name: str, **meta):
    """Decorator: ``@op("exp", saves=(), saves_out=True)`` makes ``fn`` an :class:`Op`."""

    def wrap(fn) -> Op:
        return Op(name, fn, **meta)

    return wrap
