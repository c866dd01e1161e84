"""Values read on the host that a compiled function returns as they are (``return
loss.item()``): where in its own ``return`` statement such a read stands, read from
the source; a replay reads them again."""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import itertools
import linecache
import sys

from ..tensor import host_number

# ---- values read on the host that the function returns ---------------------------------------


def _is_host_read(node) -> bool:
    """Whether ``node`` is ``<expr>.item()`` or ``float(<expr>)``."""
    if not isinstance(node, ast.Call) or node.keywords:
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr == "item" and not node.args
    return isinstance(func, ast.Name) and func.id == "float" and len(node.args) == 1


def _placed_reads(value):
    """The host reads in the expression ``value`` that give the result as they are: the
    expression itself, or items of tuple and list displays, values of dict displays,
    from the top down (``return loss.item()``, ``return {"loss": loss.item(), "out":
    out}``): their numbers go into the result, and no code sees them. (A read elsewhere
    in ``value`` is not among them: Python 3.11 and later tell a read by its call's
    position.) On Python 3.10, None where any other read or call lies in ``value``
    outside them: 3.10 tells a read by its line alone, and a call there may read
    (``map(float, ...)``)."""
    placed = []

    def place(node):
        if _is_host_read(node):
            placed.append(node)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for item in node.elts:
                place(item)
        elif isinstance(node, ast.Dict):
            for item in node.values:
                place(item)

    place(value)
    if sys.version_info < (3, 11):
        ids = {id(node) for node in placed}
        if not all(id(node) in ids for node in ast.walk(value) if _is_host_read(node)):
            return None  # (a read inside a placed one: float(max(a.item(), b.item())))
        stack = [value]
        while stack:
            node = stack.pop()
            if id(node) in ids:
                continue
            if isinstance(node, ast.Call):
                return None
            stack.extend(ast.iter_child_nodes(node))
    return placed


_HEADERS = {ast.If: "test", ast.While: "test", ast.For: "iter", ast.AsyncFor: "iter"}


def _returned_reads(fn):
    """``(code, places)``: ``fn``'s code and where in its source (as :func:`_read_at` says)
    lie the host reads (``t.item()``, ``float(t)``) of its own return statements that only
    give the result (:func:`_placed_reads`), on lines where no other statement's code
    lies; None where the source cannot be read (a lambda, a callable object, code typed
    at a prompt)."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_name == "<lambda>" or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE):
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse("".join(lines) if lines[0][:1] not in " \t" else "if 1:\n" + "".join(lines))
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    shift = first - (1 if lines[0][:1] not in " \t" else 2)  # the tree's line numbers -> the file's
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs or defs[0].name != code.co_name or \
            min([defs[0].lineno] + [d.lineno for d in defs[0].decorator_list]) + shift != code.co_firstlineno \
            or not _compiles_to(lines, code):
        return None  # the source read is not this code's (a file changed since it was imported)
    taken: set = set()  # lines with code of a statement other than a return that qualifies
    returns = []

    def occupy(start, end):
        taken.update(range(start, end + 1))

    def visit(statements):
        for st in statements:
            placed = _placed_reads(st.value) if isinstance(st, ast.Return) and st.value is not None else None
            if placed is not None:
                returns.append((st, placed))
                continue
            bodies = [getattr(st, name) for name in ("body", "orelse", "finalbody")
                      if isinstance(getattr(st, name, None), list)]
            if not bodies or isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                occupy(st.lineno, st.end_lineno)  # a simple statement, a definition, a match: all its lines
                continue
            header = _HEADERS.get(type(st))  # the code before the first body: if's test, for's iterable
            end = getattr(st, header).end_lineno if header is not None else st.lineno
            for item in getattr(st, "items", ()):  # with
                end = max(end, item.context_expr.end_lineno, getattr(item.optional_vars, "end_lineno", 0) or 0)
            occupy(st.lineno, end)
            for handler in getattr(st, "handlers", ()):  # try: except ...:
                occupy(handler.lineno, handler.type.end_lineno if handler.type is not None else handler.lineno)
                visit(handler.body)
            for body in bodies:
                visit(body)

    visit(defs[0].body)
    allowed = set()
    for st, placed in returns:
        if set(range(st.lineno, st.end_lineno + 1)) & taken:
            continue
        if sys.version_info < (3, 11):  # the lines of the statement (whose only calls are its reads)
            allowed.update(range(st.lineno + shift, st.end_lineno + shift + 1))
        else:  # the reads themselves
            allowed.update((n.lineno + shift, n.end_lineno + shift, n.col_offset, n.end_col_offset) for n in placed)
    return code, frozenset(allowed)


def _compiles_to(lines, code) -> bool:
    """Whether the source file of ``code`` (``lines`` among it) still compiles to its
    bytecode and constants (a file edited after it was imported does not): the whole
    file, as the function was compiled (how a name is loaded depends on its imports)."""
    text = "".join(linecache.getlines(code.co_filename))
    if not text or "".join(lines) not in text:
        return False
    module = _compiled_file(code.co_filename, text)
    if module is None:
        return False
    stack = [module]
    while stack:
        const = stack.pop()
        if const.co_name == code.co_name and const.co_firstlineno == code.co_firstlineno:
            return const.co_code == code.co_code and _plain_constants(const) == _plain_constants(code)
        stack.extend(c for c in const.co_consts if isinstance(c, type(code)))
    return False


@functools.lru_cache(maxsize=16)
def _compiled_file(filename, text):
    """``text``, the source of ``filename``, compiled (once per text: 16 ms for 2000 lines)."""
    try:
        return builtins.compile(text, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None


def _plain_constants(code) -> tuple:
    return tuple(repr(c) for c in code.co_consts if not isinstance(c, type(code)))  # (repr: -0.0 is not 0.0)


def _read_at(frame) -> tuple:
    """Where in its source ``frame`` stands: ``(line, end line, column, end column)`` of the
    call it is making (Python 3.11 and later), or its line alone (3.10)."""
    if sys.version_info < (3, 11):
        return frame.f_lineno
    return next(itertools.islice(frame.f_code.co_positions(), frame.f_lasti // 2, None), None)


def _host_float(backend, array) -> float:
    """What ``Tensor.item()`` (or ``float(t)``) gives for a one-element float ``array``."""
    return float(host_number(backend, array))
