"""``cupy.ElementwiseKernel`` on the CPU: a kernel's C++ statements, run on NumPy arrays.

LeanPass writes CUDA as the texts of ``cupy.ElementwiseKernel`` (its fused optimizer and
activation kernels, lp.compile's fused runs). Without a GPU nothing would ever run those
texts; this module runs them, with C's rules, so that the CPU stand-in of the ``cuda``
backend (tests/test_cuda_standin.py) computes with the very statements a GPU would
compile, and a wrong one fails in CI.

What it takes is the subset of C++ those kernels use: statements ``[const] TYPE name =
expr;``, ``name = expr;`` and ``name op= expr;``; expressions with C's operators and
precedence (the conditional ``?:`` included), casts ``(TYPE)expr``, calls of CUDA's
math functions, number literals with their suffixes (``1.5f``, ``0x7ffLL``), ``true``
and ``false``. Types are C's: ``bool``, ``int``, ``long long``, ``float``, ``double``,
and the kernel's placeholders (``T``, ``U``) bound from the arguments' dtypes as CuPy
binds them. C's usual arithmetic conversions decide every operation's type (a ``float``
times a ``double`` literal is a ``double``, rounded to ``float`` only where assigned),
not NumPy's. Each statement runs on whole arrays at once, which is what one thread per
element computes, since no element reads another. Anything else (a preamble, ``raw``
parameters, a loop) raises ``NotImplementedError``: the simulator never guesses.
"""

from __future__ import annotations

import re

import numpy as np

C_TYPES = {"bool": np.bool_, "int": np.int32, "long long": np.int64, "float": np.float32, "double": np.float64}
_RANK = [np.bool_, np.int32, np.int64, np.float32, np.float64]  # C's conversion order, as far as used here

_TOKEN = re.compile(r"""\s*(?:
    (?P<num>0[xX][0-9a-fA-F]+[uUlL]*|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFuUlL]*)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<op>\+=|-=|\*=|/=|<=|>=|==|!=|&&|\|\||[-+*/%<>=!?:;(),&|^~]))""", re.VERBOSE)


def _tokens(text):
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise NotImplementedError(f"the simulator cannot read {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _number(text):
    hexadecimal = text.lower().startswith("0x")
    body = text.rstrip("uUlL" if hexadecimal else "uUlLfF")  # (f is a hex digit)
    suffix = text[len(body):].lower()
    if hexadecimal:
        return np.int64(int(body, 16)) if "l" in suffix else np.int32(int(body, 16))
    if any(c in body for c in ".eE"):
        if suffix not in ("", "f"):
            raise NotImplementedError(f"{text!r} is not a C++ floating literal")
        return np.float32(float(body)) if suffix == "f" else np.float64(float(body))
    if "f" in suffix:
        raise NotImplementedError(f"{text!r} is not a C++ literal (1.0f or 1.f, not 1f)")
    return np.int64(int(body)) if "l" in suffix else np.int32(int(body))


def _ctype(value):
    return np.dtype(getattr(value, "dtype", None) or type(value)).type


def _convert(a, b):
    """C's usual arithmetic conversions: both operands in the higher type (bool at least int)."""
    t = max(_RANK.index(_ctype(a)), _RANK.index(_ctype(b)), 1)
    return _cast(a, _RANK[t]), _cast(b, _RANK[t])


def _cast(value, t):
    return value.astype(t) if isinstance(value, np.ndarray) else t(value)


def _truth(value):
    return _cast(value, np.bool_) if _ctype(value) is not np.bool_ else value


def _divide(a, b):
    if _ctype(a) not in (np.float32, np.float64):
        raise NotImplementedError("integer division (C truncates) is not simulated")
    return np.true_divide(a, b)


def _arith(fn):
    return lambda a, b: fn(*_convert(a, b))


def _logical(fn):
    return lambda a, b: fn(_truth(a), _truth(b))


_BINARY = [  # C's binary operators, lowest precedence first
    {"||": _logical(np.logical_or)},
    {"&&": _logical(np.logical_and)},
    {"|": _arith(np.bitwise_or)},
    {"^": _arith(np.bitwise_xor)},
    {"&": _arith(np.bitwise_and)},
    {"==": _arith(np.equal), "!=": _arith(np.not_equal)},
    {"<": _arith(np.less), "<=": _arith(np.less_equal), ">": _arith(np.greater), ">=": _arith(np.greater_equal)},
    {"+": _arith(np.add), "-": _arith(np.subtract)},
    {"*": _arith(np.multiply), "/": _arith(_divide)},
]
_COMPOUND = {"+=": _BINARY[7]["+"], "-=": _BINARY[7]["-"], "*=": _BINARY[8]["*"], "/=": _BINARY[8]["/"]}


def _math(fn, arity=1):
    """A CUDA math function's C++ overloads: float in, float out; double in, double out
    (a float and a double: double). An integer or bool argument is refused: C++ finds
    the call ambiguous between the overloads (``sqrt(2)``)."""
    def call(*args):
        if len(args) != arity:
            raise NotImplementedError(f"{arity} arguments expected, got {len(args)}")
        if any(_ctype(a) not in (np.float32, np.float64) for a in args):
            raise NotImplementedError("a math function of an integer or bool: ambiguous in C++")
        t = np.float64 if any(_ctype(a) is np.float64 for a in args) else np.float32
        return fn(*(_cast(a, t) for a in args))
    return call


def _erf(name):
    def fn(x):
        import scipy.special

        return getattr(scipy.special, name)(x).astype(x.dtype if hasattr(x, "dtype") else type(x))
    return fn


FUNCTIONS = {
    **{name: _math(getattr(np, spelled)) for name, spelled in {
        "acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan",
        "atanh": "arctanh", "ceil": "ceil", "cos": "cos", "cosh": "cosh", "exp": "exp", "expm1": "expm1",
        "floor": "floor", "log": "log", "log1p": "log1p", "log2": "log2", "log10": "log10", "sin": "sin",
        "sinh": "sinh", "sqrt": "sqrt", "tan": "tan", "tanh": "tanh", "trunc": "trunc", "fabs": "abs",
        "rint": "rint", "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite", "signbit": "signbit"}.items()},
    **{name: _math(getattr(np, spelled), 2) for name, spelled in {
        "pow": "power", "atan2": "arctan2", "copysign": "copysign", "hypot": "hypot"}.items()},
    "erf": _math(_erf("erf")), "erfc": _math(_erf("erfc")),
    "__longlong_as_double": lambda bits: np.asarray(bits, dtype=np.int64).view(np.float64)[()],
}


class _Parser:
    """One statement's expression, evaluated as it is read (recursive descent)."""

    def __init__(self, tokens, types, env):
        self.tokens, self.pos, self.types, self.env = tokens, 0, types, env

    def peek(self, k=0):
        return self.tokens[self.pos + k] if self.pos + k < len(self.tokens) else (None, None)

    def take(self, value=None):
        token = self.peek()
        if value is not None and token[1] != value:
            raise NotImplementedError(f"expected {value!r}, found {token[1]!r}")
        self.pos += 1
        return token

    def type_at(self, k=0):
        """The C type that starts at token ``k`` from here, and its length in tokens."""
        kind, text = self.peek(k)
        if text == "long" and self.peek(k + 1)[1] == "long":
            return self.types["long long"], 2
        if kind == "name" and text in self.types:
            return self.types[text], 1
        return None, 0

    def expression(self):
        cond = self.binary(0)
        if self.peek()[1] != "?":
            return cond
        self.take("?")
        a = self.expression()
        self.take(":")
        b = self.expression()  # right-associative
        a, b = _convert(a, b) if _ctype(a) is not _ctype(b) else (a, b)
        return np.where(_truth(cond), a, b) if isinstance(cond, np.ndarray) or isinstance(a, np.ndarray) \
            or isinstance(b, np.ndarray) else (a if cond else b)

    def binary(self, level):
        if level == len(_BINARY):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek()[1] in _BINARY[level]:
            op = self.take()[1]
            left = _BINARY[level][op](left, self.binary(level + 1))
        return left

    def unary(self):
        kind, text = self.peek()
        if text == "-":
            self.take()
            x = self.unary()
            return -_cast(x, np.int32) if _ctype(x) is np.bool_ else -x
        if text == "+":
            self.take()
            x = self.unary()
            return _cast(x, np.int32) if _ctype(x) is np.bool_ else x
        if text == "!":
            self.take()
            return np.logical_not(_truth(self.unary()))
        if text == "(":
            t, n = self.type_at(1)
            if t is not None and self.peek(1 + n)[1] == ")":
                self.pos += 2 + n
                return _cast(self.unary(), t)
        return self.primary()

    def primary(self):
        kind, text = self.take()
        if kind == "num":
            return _number(text)
        if text == "(":
            value = self.expression()
            self.take(")")
            return value
        if text in ("true", "false"):
            return np.bool_(text == "true")
        if kind == "name" and self.peek()[1] == "(":
            if text not in FUNCTIONS:
                raise NotImplementedError(f"the simulator has no function {text}")
            self.take("(")
            args = [self.expression()]
            while self.peek()[1] == ",":
                self.take(",")
                args.append(self.expression())
            self.take(")")
            return FUNCTIONS[text](*args)
        if kind == "name" and text in self.env:
            return self.env[text]
        raise NotImplementedError(f"the simulator cannot read {text!r} here")


def _params(text):
    """``"T x, float32 y"`` -> ``[("T", "x"), ("float32", "y")]``."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        words = part.split()
        if len(words) != 2:
            raise NotImplementedError(f"the simulator takes parameters 'TYPE name' only, not {part!r}")
        out.append((words[0], words[1]))
    return out


def _host(array):
    return array if isinstance(array, np.ndarray) else np.from_dlpack(array)


def _like(host, reference):
    """``host`` in the library (and on the device) of ``reference``, an input array."""
    if reference is None or isinstance(reference, np.ndarray):
        return host
    import array_api_strict as xs

    return xs.asarray(host, device=reference.device)


class ElementwiseKernel:
    """``cupy.ElementwiseKernel(in_params, out_params, operation, name)``, run on the CPU."""

    def __init__(self, in_params, out_params, operation, name="kernel", *, preamble="", options=()):
        if preamble or set(options) - {"--fmad=false"}:  # (it rounds every operation: no FMA either)
            raise NotImplementedError(f"the simulator takes no preamble, and no option but --fmad=false ({name})")
        self.in_params, self.out_params = _params(in_params), _params(out_params)
        self.operation, self.name = operation, name
        self.calls = 0

    def __call__(self, *args):
        n_in = len(self.in_params)
        if len(args) not in (n_in, n_in + len(self.out_params)):
            raise TypeError(f"{self.name}: wrong number of arguments ({len(args)})")
        self.calls += 1
        inputs, given = args[:n_in], args[n_in:]
        types = dict(C_TYPES)
        for (t, _), a in zip(self.in_params + self.out_params, args):  # placeholders from the arrays
            if t not in C_TYPES and not hasattr(np, t) and hasattr(a, "dtype"):
                bound = types.setdefault(t, np.dtype(_host(a).dtype).type)
                if bound is not np.dtype(_host(a).dtype).type:
                    raise TypeError(f"{self.name}: Type is mismatched. {t} is bound to {np.dtype(bound).name} "
                                    f"and {np.dtype(_host(a).dtype).name}")
        for t, _ in self.in_params + self.out_params:
            if t not in types:
                types[t] = getattr(np, t) if hasattr(np, t) else None
            if types[t] is None:
                raise TypeError(f"{self.name}: the type {t} is bound by no array")
        env, arrays = {}, [a for a in args if hasattr(a, "dtype")]
        for (t, name), a in zip(self.in_params, inputs):
            env[name] = _host(a).astype(types[t], copy=False) if hasattr(a, "dtype") else types[t](a)
        shape = np.broadcast_shapes(*(_host(a).shape for a in arrays))
        outs = []
        for k, (t, name) in enumerate(self.out_params):
            if given:
                env[name] = _host(given[k]).copy()
            else:  # CuPy's outputs are not initialised: a read before a write reads garbage
                env[name] = np.full(shape, np.nan if np.dtype(types[t]).kind == "f" else 0, types[t])
            outs.append((name, types[t]))
        out_types = dict(outs)
        declared = dict(out_types)  # the inputs are const: CuPy declares them so
        inputs = {n for _, n in self.in_params}
        with np.errstate(all="ignore"):
            for statement in filter(None, (s.strip() for s in self.operation.split(";"))):
                self._run(statement, types, env, declared, inputs)
        results = []
        for k, (name, t) in enumerate(outs):
            value = np.broadcast_to(_cast(env[name], t), shape).copy()
            if given:
                given[k][...] = _like(value, given[k])
                results.append(given[k])
            else:
                results.append(_like(value, arrays[0] if arrays else None))
        return results[0] if len(results) == 1 else tuple(results)

    @staticmethod
    def _run(statement, types, env, declared, inputs):
        tokens = _tokens(statement)
        p = _Parser(tokens, types, env)
        if p.peek()[1] == "const":
            p.take()
        t, n = p.type_at()
        if t is not None:  # a declaration
            p.pos += n
            kind, name = p.take()
            if name in declared or name in inputs or name in types:
                raise NotImplementedError(f"{name} is declared already (a C++ error): {statement!r}")
            declared[name] = t
        else:
            kind, name = p.take()
        if kind != "name" or name not in declared:
            raise NotImplementedError(f"the simulator cannot run {statement!r} (an input is const)")
        op = p.take()[1]
        value = p.expression()
        if p.pos != len(tokens):
            raise NotImplementedError(f"the simulator cannot read the end of {statement!r}")
        if op in _COMPOUND:
            value = _COMPOUND[op](env[name], value)
        elif op != "=":
            raise NotImplementedError(f"the simulator cannot run {statement!r}")
        env[name] = _cast(value, declared[name])
