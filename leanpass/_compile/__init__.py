"""``lp.compile``: trace a function once, then replay what it did without the Python
around it.

The first call with a given kind of arguments runs the function eagerly and records,
through the hooks of :mod:`leanpass._graph.trace`, what it did: each operation (the
op record and how to run it again: its parameters), where each operation's inputs
come from (an argument, an earlier operation, a tensor that existed before the call:
a parameter, a buffer, a constant), the in-place changes, each backward pass (its
schedule, read from the graph), and the steps that change state as a whole (an
optimizer's ``step`` and ``zero_grad``). Later calls with arguments of the same
shapes, dtypes, devices and ``requires_grad`` flags (and equal Python values) replay
the record: each operation's forward on arrays, each backward pass as a fixed
schedule of the saved backward rules, each step called again. No Tensor, no graph
node, no argument check and no engine walk is made on the way, and every result is
the one the eager call gives, bit for bit: the same kernels run in the same order.

What a replay could not reproduce makes the function run eagerly for those
arguments, with one warning naming what and where: a value read on the host
(``.item()``, ``bool(t)``, ``float(t)``, ``.numpy()``; a float the function's own
``return`` gives as it is, ``return loss.item()``, is read again at each replay:
:func:`_returned_reads`), an array that leaves the
recorded operations (``.data``; ``.grad`` reads as a Tensor whose value a replay reads
again), a shape that depends on values, a random
draw LeanPass does not record (``lp.manual_seed`` inside, a layer made inside: the
others, dropout, ``lp.rand``/``randn``/``randint``/``randperm``, ``t.uniform_()``,
``nn.init``, are drawn again at each replay), a recorded in-place change of a tensor
in the graph, ``backward(create_graph=True)`` inside the function (``autograd.grad``
with ``create_graph``, ``lp.func``'s transforms and ``opt.step(closure)`` are
replayed; so is ``retain_grad``). A
backward pass through complex values replays each rule by PyTorch's convention, as
the engine runs it (:class:`_Complex`). See docs/compile.md.
"""

from .compiled import Compiled, compile  # noqa: A004 - PyTorch's name

__all__ = ["compile", "Compiled"]
