"""The memory layout of a fused run's outputs on NumPy's and CuPy's arrays: a
compiled run writes C-ordered outputs, where eager's operations lay theirs out as
their inputs are."""

from __future__ import annotations


def c_like(a) -> bool:
    """Whether the axes of ``a`` that step through memory (of more than one element,
    a stride not 0: not broadcast) do so in C's order, outer axes by larger steps: no
    axis order NumPy or CuPy would lay an operation's output out in other than C's."""
    steps = [abs(s) for n, s in zip(a.shape, a.strides) if n > 1 and s]
    return all(x >= y for x, y in zip(steps, steps[1:]))


def _c_laid(a) -> bool:
    """Whether ``a`` is C-contiguous or :func:`c_like`; an array that tells no layout
    (the CPU stand-in of ``cuda``'s, array_api_strict's) as the library lays it out: in
    C's order."""
    flags = getattr(a, "flags", None)
    return flags is None or flags.c_contiguous or c_like(a)


def flat_where_strided(program, computed):
    """A fused run's compiled kernel, ``run``, used where its inputs are laid out in C's
    order (:func:`c_like`: a broadcast or reversed one too): then the library's
    operations, which lay their outputs out as their inputs are (``x.T * 2`` is
    F-ordered), give C-ordered outputs, as the kernel does. Elsewhere the program's
    operations run one by one (``program.flat``), so that a later ``reshape`` is a view
    or a copy as eagerly, and an in-place change through it reaches what it reaches
    eagerly; each of the ``computed`` outputs an array of its own, as the kernel's are
    (two leaves' gradients of one value are stored without a copy)."""
    def wrap(run):
        ops = []

        def checked(arrays):
            if all(_c_laid(a) for a in arrays):
                return run(arrays)
            if not ops:
                ops.append(program.flat(program.backend))
            out, seen = list(ops[0](arrays)), set()
            for k in computed:
                if id(out[k]) in seen:
                    out[k] = out[k].copy()
                seen.add(id(out[k]))
            return tuple(out)

        return checked

    return wrap
