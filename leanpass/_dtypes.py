"""The data types of the array API standard, and its type promotion rules.

``leanpass.float32`` and the other twelve are :class:`DType` objects. A tensor's
``.dtype`` is one of them, whatever library holds its array. They compare equal
to the same type of any library and to its name, so ``t.dtype == lp.float32``,
``t.dtype == numpy.float32`` and ``t.dtype == "float32"`` all hold.

Pure Python: no array library is imported here.
"""

from __future__ import annotations

__all__ = [
    "DType", "DTYPES", "dtype_name", "as_dtype", "isdtype", "promote", "can_cast",
    "finfo", "iinfo", "KINDS",
]


class DType:
    """One data type of the standard: its ``name``, ``kind`` and size in ``bits``."""

    __slots__ = ("name", "kind", "bits")

    def __init__(self, name: str, kind: str, bits: int):
        self.name = name
        self.kind = kind  # "b" bool, "i" signed, "u" unsigned, "f" real floating, "c" complex
        self.bits = bits

    def __eq__(self, other):
        if other is self:
            return True
        if isinstance(other, DType):
            return False
        try:
            return dtype_name(other) == self.name
        except Exception:  # noqa: BLE001 - an object with no name is simply not equal
            return False

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return f"leanpass.{self.name}"

    def __str__(self):
        return self.name

    def __reduce__(self):
        return (as_dtype, (self.name,))

    @property
    def is_floating(self) -> bool:
        """Real or complex floating point: the types that can carry gradients."""
        return self.kind in "fc"


_SPECS = [
    ("bool", "b", 8),
    ("int8", "i", 8), ("int16", "i", 16), ("int32", "i", 32), ("int64", "i", 64),
    ("uint8", "u", 8), ("uint16", "u", 16), ("uint32", "u", 32), ("uint64", "u", 64),
    ("float32", "f", 32), ("float64", "f", 64),
    ("complex64", "c", 64), ("complex128", "c", 128),
]
DTYPES: dict[str, DType] = {name: DType(name, kind, bits) for name, kind, bits in _SPECS}

_NAMES: dict = {}  # (type, library dtype) -> plain name; NumPy's dtype.name is slow


def dtype_name(dtype) -> str:
    """The plain name (``"float32"``) of a dtype: a :class:`DType`, a string, or any
    library's dtype object or scalar type."""
    if isinstance(dtype, str):
        return dtype
    if isinstance(dtype, DType):
        return dtype.name
    key = (type(dtype), dtype)  # the type first: strict and NumPy dtypes must not meet in ==
    try:
        return _NAMES[key]
    except (KeyError, TypeError):
        pass
    name = getattr(dtype, "__name__", None)  # NumPy scalar types, such as numpy.float32
    if not isinstance(name, str):
        name = getattr(dtype, "name", None)  # NumPy dtype objects
    if not isinstance(name, str):
        name = str(dtype)  # array_api_strict: "array_api_strict.float32"
    name = name.rsplit(".", 1)[-1]
    if name == "bool_":
        name = "bool"
    try:
        _NAMES[key] = name
    except TypeError:  # unhashable
        pass
    return name


def as_dtype(dtype, op: str = "dtype") -> DType:
    """The :class:`DType` of a dtype given in any form; ``TypeError`` for one the
    standard does not have."""
    if isinstance(dtype, DType):
        return dtype
    try:
        name = dtype_name(dtype)
    except Exception:  # noqa: BLE001
        name = None
    found = DTYPES.get(name) if isinstance(name, str) else None
    if found is None:
        if dtype is float:
            return DTYPES["float64"]
        if dtype is int:
            return DTYPES["int64"]
        if dtype is complex:
            return DTYPES["complex128"]
        raise TypeError(
            f"{op}: {dtype!r} is not a data type of the array API standard; use one of "
            f"{', '.join(DTYPES)}"
        )
    return found


# ---- kinds (isdtype) -------------------------------------------------------------

KINDS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}


def isdtype(dtype, kind) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name, or a tuple of those."""
    dtype = as_dtype(dtype, "isdtype")
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        letters = KINDS.get(kind)
        if letters is None:
            raise ValueError(f"isdtype: unknown kind {kind!r}; kinds are {', '.join(map(repr, KINDS))}")
        return dtype.kind in letters
    return dtype == as_dtype(kind, "isdtype")


# ---- promotion -----------------------------------------------------------------------


def _promote_pair(a: DType, b: DType) -> DType | None:
    """The standard's promotion of two dtypes; ``None`` where it defines none."""
    if a is b:
        return a
    ka, kb = a.kind, b.kind
    if ka == kb:
        return a if a.bits >= b.bits else b
    if {ka, kb} == {"i", "u"}:
        signed, unsigned = (a, b) if ka == "i" else (b, a)
        if signed.bits > unsigned.bits:
            return signed
        bits = unsigned.bits * 2
        return DTYPES.get(f"int{bits}") if bits <= 64 else None
    if {ka, kb} == {"f", "c"}:
        real, cplx = (a, b) if ka == "f" else (b, a)
        bits = max(real.bits * 2, cplx.bits)
        return DTYPES[f"complex{bits}"]
    return None


def promote(*dtypes, op: str = "result_type") -> DType:
    """The result type of ``dtypes`` under the standard's promotion rules, or
    ``TypeError`` naming them where the standard defines none."""
    if not dtypes:
        raise ValueError(f"{op}: at least one array or dtype is required")
    result = as_dtype(dtypes[0], op)
    for other in dtypes[1:]:
        other = as_dtype(other, op)
        promoted = _promote_pair(result, other)
        if promoted is None:
            raise TypeError(
                f"{op}: the array API standard defines no promotion of {result.name} with "
                f"{other.name}; convert one with astype() first"
            )
        result = promoted
    return result


def can_cast(from_, to) -> bool:
    """Whether ``from_`` promotes to ``to`` under the standard's rules (a safe cast)."""
    a, b = as_dtype(from_, "can_cast"), as_dtype(to, "can_cast")
    return _promote_pair(a, b) is b


# ---- finfo and iinfo --------------------------------------------------------------


class finfo_object:
    """Machine limits of a floating-point type: ``bits``, ``eps``, ``max``, ``min``,
    ``smallest_normal`` and ``dtype`` (the real type: float32 for complex64)."""

    __slots__ = ("bits", "eps", "max", "min", "smallest_normal", "dtype")

    def __init__(self, bits, eps, max, min, smallest_normal, dtype):  # noqa: A002
        self.bits, self.eps, self.max, self.min = bits, eps, max, min
        self.smallest_normal, self.dtype = smallest_normal, dtype

    def __repr__(self):
        return (f"finfo(bits={self.bits}, eps={self.eps}, max={self.max}, min={self.min}, "
                f"smallest_normal={self.smallest_normal}, dtype={self.dtype.name})")


class iinfo_object:
    """Limits of an integer type: ``bits``, ``max``, ``min`` and ``dtype``."""

    __slots__ = ("bits", "max", "min", "dtype")

    def __init__(self, bits, max, min, dtype):  # noqa: A002
        self.bits, self.max, self.min, self.dtype = bits, max, min, dtype

    def __repr__(self):
        return f"iinfo(bits={self.bits}, max={self.max}, min={self.min}, dtype={self.dtype.name})"


def _float_limits(mantissa: int, max_exp: int):
    eps = 2.0 ** -mantissa
    biggest = (2.0 - eps) * 2.0 ** (max_exp - 1)
    return eps, biggest, 2.0 ** (2 - max_exp)


_FLOAT_LIMITS = {"float32": _float_limits(23, 128), "float64": _float_limits(52, 1024)}


def finfo(type_) -> finfo_object:
    """Limits of a floating-point dtype (or of a tensor's dtype)."""
    dtype = as_dtype(getattr(type_, "dtype", type_), "finfo")
    if dtype.kind not in "fc":
        raise TypeError(f"finfo: {dtype.name} is not a floating-point type; use iinfo for integers")
    real = DTYPES[f"float{dtype.bits // 2}"] if dtype.kind == "c" else dtype
    eps, biggest, tiny = _FLOAT_LIMITS[real.name]
    return finfo_object(real.bits, eps, biggest, -biggest, tiny, real)


def iinfo(type_) -> iinfo_object:
    """Limits of an integer dtype (or of a tensor's dtype)."""
    dtype = as_dtype(getattr(type_, "dtype", type_), "iinfo")
    if dtype.kind not in "iu":
        raise TypeError(f"iinfo: {dtype.name} is not an integer type; use finfo for floating point")
    if dtype.kind == "u":
        return iinfo_object(dtype.bits, 2**dtype.bits - 1, 0, dtype)
    return iinfo_object(dtype.bits, 2 ** (dtype.bits - 1) - 1, -(2 ** (dtype.bits - 1)), dtype)
