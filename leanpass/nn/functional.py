"""``leanpass.nn.functional``: the layers as functions, as ``torch.nn.functional``.

Thin wrappers over Tensor operations, so each is differentiable (twice too) on
every device. :func:`linear` takes PyTorch's weight layout ``(out_features,
in_features)``; :func:`gelu` is PyTorch's, exact by default (``approximate="none"``,
which needs erf: ``cpu`` and ``cuda``; ``approximate="tanh"`` runs on every device).
"""

from __future__ import annotations

import math
import numbers

from .. import ops
from .._checks import broadcast_shapes
from .._dtypes import dtype_name
from .._graph.trace import action, check, raised
from .._namespace import (
    asarray,
    logical_not,
    ones,
    permute_dims,
    positive,
    reshape,
    sqrt,
    take,
    tril,
    unstack,
    where,
    zeros,
)
from .._namespace._util import floating
from ..autograd import no_grad
from ..backends import get_backend, host_array
from ..tensor import Tensor, apply, as_tensor
from .activations import elu, hardtanh, leaky_relu, mish, silu, softplus
from .conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d, fold, unfold
from .layers import _gelu_form, dropout_probability, dropped
from .losses import (
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .padding import one_hot, pad
from .pooling import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from .upsampling import interpolate

__all__ = [
    "linear", "relu", "gelu", "sigmoid", "tanh", "softmax", "log_softmax", "dropout",
    "layer_norm", "embedding", "scaled_dot_product_attention", "conv1d", "conv2d",
    "unfold", "fold", "conv_transpose1d", "conv_transpose2d",
    "mse_loss", "cross_entropy", "binary_cross_entropy_with_logits",
    "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
    "batch_norm", "multi_head_attention_forward",
    "silu", "softplus", "elu", "leaky_relu", "mish", "hardtanh", "nll_loss", "l1_loss", "smooth_l1_loss",
    "huber_loss", "pad", "one_hot", "group_norm", "interpolate",
]


def _tensor(x, op: str, what: str = "input") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: expected a Tensor as {what}, got {type(x).__name__}; wrap it with leanpass.Tensor(...)")
    return x


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` in one graph node, as ``torch.nn.functional.linear``:
    ``weight`` of shape ``(out_features, in_features)``, or ``(in_features,)`` without
    a bias (as PyTorch's: ``x @ weight``, the output feature's axis dropped)."""
    _tensor(x, "linear")
    _tensor(weight, "linear", "weight")
    if weight.ndim == 1 and x.ndim >= 1 and x.shape[-1:] == weight.shape:
        if bias is not None:
            raise ValueError(f"linear: a weight of shape {weight.shape} (1-D) takes no bias, as PyTorch's; got one "
                             f"of shape {_tensor(bias, 'linear', 'bias').shape}")
        return x @ weight
    if weight.ndim != 2 or x.shape[-1:] != weight.shape[1:]:
        raise ValueError(f"linear: input of shape {x.shape} does not fit a weight of shape {weight.shape} "
                         "(out_features, in_features)")
    if bias is None:
        return apply(ops.linear, x, weight)
    if _tensor(bias, "linear", "bias").shape != weight.shape[:1]:
        raise ValueError(f"linear: bias of shape {bias.shape} does not fit a weight of shape {weight.shape}")
    return apply(ops.linear, x, weight, bias)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``."""
    return _tensor(x, "relu").relu()


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU, as PyTorch's ``gelu(x, approximate=...)``: the exact ``x * ndtr(x)`` by
    default (``approximate="none"``; it needs erf, which ``strict`` lacks: there it raises
    ``NotImplementedError`` naming ``approximate="tanh"``), or the tanh approximation."""
    _tensor(x, "gelu")
    return x.gelu(_gelu_form(approximate, "gelu"))


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    return _tensor(x, "sigmoid").sigmoid()


def tanh(x: Tensor) -> Tensor:
    """``tanh(x)``."""
    return _tensor(x, "tanh").tanh()


def softmax(x: Tensor, axis: int | None = None, *, dim=None, dtype=None) -> Tensor:
    """Softmax along ``axis`` (or PyTorch's ``dim=``), shifted by the max; with
    ``dtype`` (PyTorch's option), of ``x`` cast to it first."""
    return _cast(_tensor(x, "softmax"), dtype).softmax(axis, dim=dim)


def log_softmax(x: Tensor, axis: int | None = None, *, dim=None, dtype=None) -> Tensor:
    """``log(softmax(x))`` along ``axis`` (or PyTorch's ``dim=``), computed stably; with
    ``dtype`` (PyTorch's option), of ``x`` cast to it first."""
    return _cast(_tensor(x, "log_softmax"), dtype).log_softmax(axis, dim=dim)


def _cast(x: Tensor, dtype) -> Tensor:
    """``x`` as ``dtype`` (a differentiable cast), or itself for None."""
    return x if dtype is None else x.astype(dtype)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Inverted dropout (:class:`leanpass.nn.Dropout`'s masks, seeded by
    ``leanpass.manual_seed``); ``x`` itself when not ``training`` or ``p == 0``."""
    _tensor(x, "dropout")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    p = dropout_probability(p)  # Dropout's own checks (a 0-d array or tensor becomes a float)
    if not training or p == 0.0:
        return x
    return dropped(x, p)


def _normalized_shape(normalized_shape, op: str) -> tuple:
    single = isinstance(normalized_shape, numbers.Integral)  # a NumPy integer too
    shape = (normalized_shape,) if single else tuple(normalized_shape)
    if not shape or any(not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1 for n in shape):
        raise ValueError(f"{op}: normalized_shape must be positive integers (at least one), got {normalized_shape!r}")
    return tuple(int(n) for n in shape)


def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias``, the mean and the biased
    variance taken over the last ``len(normalized_shape)`` axes, which must be
    ``normalized_shape``; ``weight`` and ``bias`` (optional) have that shape. One graph
    node, with a closed-form backward."""
    x = floating(_tensor(x, "layer_norm"), "layer_norm")
    shape = _normalized_shape(normalized_shape, "layer_norm")
    if x.shape[max(x.ndim - len(shape), 0):] != shape or x.ndim < len(shape):
        raise ValueError(f"layer_norm: input of shape {x.shape} does not end in normalized_shape {shape}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and floating(_tensor(t, "layer_norm", name), "layer_norm").shape != shape:
            raise ValueError(f"layer_norm: {name} of shape {t.shape} is not normalized_shape {shape}")
    if weight is None and bias is not None:
        weight = ones(shape, dtype=dtype_name(bias.dtype), device=bias.device)
    inputs = (x,) if weight is None else (x, weight) if bias is None else (x, weight, bias)
    return apply(ops.layer_norm, *inputs, count=len(shape), eps=float(eps))


def _index_tensor(indices, weight: Tensor, op: str):
    """``(indices, bad)``: ``indices`` as an integer Tensor on ``weight``'s device, in
    ``[0, rows)``. Host data, and a Tensor where a host read costs little, are checked
    (IndexError naming ``op``) and ``bad`` is None; on a device where the check would
    make it wait (a GPU) the indices are clipped into range and ``bad`` is a bool
    Tensor, True where one was out of range (its row is then NaN)."""
    rows = weight.shape[0]
    host = not isinstance(indices, Tensor)
    if host:
        data = host_array(indices, op)
        dtype = data.dtype
    elif indices.device != weight.device:
        raise ValueError(f"{op}: indices are on {indices.device} but the weight is on {weight.device}")
    else:
        data, dtype = indices._data, indices.dtype
    if dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must have an integer dtype, got {dtype}")
    backend = get_backend(weight.device)
    xp = backend.xp if not host else get_backend("cpu").xp
    if host or backend.syncs_cheaply:
        shape = weight.shape
        _rows_in_range(xp, data, rows, shape, op)
        if host:  # host data the caller gave: a constant of a compiled call, as lp.asarray's
            indices = asarray(data, device=weight.device, dtype=dtype_name(data.dtype))
        else:  # (a replay checks them again)
            check(lambda values: _rows_in_range(xp, values, rows, shape, op), indices)
        return indices, None
    with backend.context():
        bad = (data < 0) | (data >= rows)
        clipped = xp.clip(data, 0, rows - 1)
    return (as_tensor(clipped, device=weight.device, dtype=dtype_name(dtype)),
            as_tensor(bad, device=weight.device, dtype="bool"))


def _rows_in_range(xp, data, rows: int, shape, op: str) -> None:
    """IndexError naming ``op`` unless the integer array ``data`` lies in ``[0, rows)``."""
    if math.prod(data.shape):
        low, high = int(xp.min(data)), int(xp.max(data))
        if low < 0 or high >= rows:
            raise raised(IndexError(f"{op}: indices must be in [0, {rows}) for a table of {rows} rows (shape "
                                    f"{shape}), got values from {low} to {high}"))


def embedding(indices, weight: Tensor, padding_idx: int | None = None, *, _op: str = "embedding") -> Tensor:
    """The rows of the 2-D ``weight`` at integer ``indices`` of any shape (a Tensor or
    array-like): shape ``indices.shape + (weight.shape[1],)``. Repeated indices
    accumulate their gradients; the row ``padding_idx`` (if given) gets none.
    Indices out of range raise IndexError, except for a Tensor of them on a device
    where checking would make it wait (a GPU): their rows are NaN there."""
    _tensor(weight, _op, "weight")
    if weight.ndim != 2:
        raise ValueError(f"{_op}: weight must be 2-D (num_embeddings, embedding_dim), got shape {weight.shape}")
    indices, bad = _index_tensor(indices, weight, _op)
    flat = reshape(indices, (-1,))
    rows = take(weight, flat, axis=0)
    if padding_idx is not None:
        padding_idx = _padding_index(padding_idx, weight.shape[0], _op)
        rows = where(reshape(flat == padding_idx, (-1, 1)), rows.detach(), rows)
    if bad is not None:
        rows = where(reshape(bad, (-1, 1)), math.nan, rows)
    return reshape(rows, indices.shape + weight.shape[1:])


def _padding_index(padding_idx, rows: int, op: str) -> int:
    """``padding_idx`` in ``[0, rows)`` (a negative one counts from the end, as PyTorch)."""
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral):
        raise TypeError(f"{op}: padding_idx must be an integer row, got {padding_idx!r}")
    if not -rows <= padding_idx < rows:
        raise ValueError(f"{op}: padding_idx must be within [{-rows}, {rows}), got {padding_idx}")
    return int(padding_idx) % rows


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None) -> Tensor:
    """``softmax(q @ k^T * scale + mask) @ v``, as PyTorch's: ``q`` of shape
    ``(..., L, E)``, ``k`` of ``(..., S, E)``, ``v`` of ``(..., S, Ev)``, leading axes
    broadcasting; the result is ``(..., L, Ev)``. ``scale`` defaults to
    ``1 / sqrt(E)``. ``attn_mask`` (broadcasting to ``(..., L, S)``) is bool, True
    where a query may attend to a key, or float, added to the scores;
    ``is_causal=True`` is the lower-triangular bool mask (not with ``attn_mask``).
    ``dropout_p > 0`` drops attention weights as :func:`dropout` (always, as PyTorch)."""
    op = "scaled_dot_product_attention"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if _tensor(t, op, name).ndim < 2:
            raise ValueError(f"{op}: {name} must have at least 2 axes (..., length, features), got shape {t.shape}")
    q, k, v = floating(q, op), floating(k, op), floating(v, op)
    shapes = f"q of shape {q.shape}, k of shape {k.shape} and v of shape {v.shape}"
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{op}: {shapes} do not fit (..., L, E), (..., S, E), (..., S, Ev)")
    try:
        batch = broadcast_shapes(op, q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"{op}: the leading axes of {shapes} do not broadcast") from None
    if is_causal and attn_mask is not None:
        raise ValueError(f"{op}: give attn_mask or is_causal, not both")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p}")
    length, source = q.shape[-2], k.shape[-2]
    if is_causal and dropout_p == 0.0:  # one node, which skips the keys a block of queries may not look at
        return apply(ops.attention, q, k, v, scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale),
                     causal=True)
    if is_causal:
        attn_mask = tril(ones((length, source), dtype="bool", device=q.device))
    elif attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            data = host_array(attn_mask, op)
            attn_mask = as_tensor(data, device=q.device, dtype=dtype_name(data.dtype))
        if attn_mask.device != q.device:
            raise ValueError(f"{op}: attn_mask is on {attn_mask.device} but q is on {q.device}")
        if attn_mask.dtype.kind not in "bf":
            raise TypeError(f"{op}: attn_mask must be bool (True where a query may look) or floating (added to "
                            f"the scores), got dtype {attn_mask.dtype} (an integer mask would be added, not masked)")
        scores_shape = tuple(batch) + (length, source)
        try:
            if broadcast_shapes(op, attn_mask.shape, scores_shape) != scores_shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"{op}: attn_mask of shape {attn_mask.shape} does not broadcast to the scores' "
                             f"shape {scores_shape}") from None
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if dropout_p == 0.0:  # one node, with a closed-form backward
        if attn_mask is not None and attn_mask.dtype != "bool":
            attn_mask = attn_mask.astype(q.dtype)
        inputs = (q, k, v) if attn_mask is None else (q, k, v, attn_mask)
        return apply(ops.attention, *inputs, scale=scale)
    scores = (q @ k.mT) * scale
    if attn_mask is None:
        return dropout(scores.softmax(-1), dropout_p) @ v
    if attn_mask.dtype == "bool":
        scores = where(attn_mask, scores, -math.inf)
    else:
        scores = scores + attn_mask.astype(scores.dtype)
    live = scores.detach().max(axis=-1, keepdims=True) > -math.inf  # rows with a key to look at
    weights = where(live, where(live, scores, 0.0).softmax(-1), 0.0)  # a fully masked row: zeros, as PyTorch's
    return dropout(weights, dropout_p) @ v


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum=0.1, eps: float = 1e-5, *,
               _op: str = "batch_norm", _relu: bool = False) -> Tensor:
    """Batch normalisation of ``x`` of shape ``(N, C, ...)`` per channel (axis 1), as
    ``torch.nn.functional.batch_norm``: ``(x - mean) / sqrt(var + eps) * weight + bias``.
    ``training``: the batch's mean and biased variance (one graph node), and the
    running statistics given are updated in place, outside the graph:
    ``running = (1 - momentum) * running + momentum * batch`` with the *unbiased*
    variance (``momentum`` may be a 0-d Tensor). Otherwise ``running_mean`` and
    ``running_var`` are used. ``_relu`` (``nn.Sequential``'s BatchNorm then ReLU): ReLU
    on the result, in the same node in training (``batch_norm_relu``)."""
    floating(_tensor(x, _op), _op)  # complex: refused, as PyTorch
    if x.ndim < 2:
        raise ValueError(f"{_op}: input must have at least 2 axes (N, C, ...), got shape {x.shape}")
    channels = x.shape[1]
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is None:
            continue
        if _tensor(t, _op, name).shape != (channels,):
            raise ValueError(f"{_op}: {name} of shape {t.shape} does not fit an input of shape {x.shape} "
                             f"({channels} channels on axis 1)")
        if t.device != x.device:
            raise ValueError(f"{_op}: {name} is on {t.device} but the input is on {x.device}")
        if name.startswith("running") and t.dtype.kind != "f":  # before either is updated in place
            raise TypeError(f"{_op}: {name} must be floating-point to hold the running statistic, got {t.dtype}")
    axes = (0,) + tuple(range(2, x.ndim))
    count = math.prod(x.shape[a] for a in axes)
    shape = (1, channels) + (1,) * (x.ndim - 2)
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError(f"{_op}: running_mean and running_var are needed when not training")
        scale = 1.0 / sqrt(running_var + eps)
        if weight is not None:
            scale = scale * weight
        shift = -running_mean * scale
        if bias is not None:
            shift = shift + bias
        y = x * reshape(scale, shape) + reshape(shift, shape)
        return y.relu() if _relu else y
    if count == 1:
        raise ValueError(f"{_op}: Expected more than 1 value per channel when training, got input of shape {x.shape}")
    if weight is None and bias is not None:
        weight = ones((channels,), dtype=dtype_name(bias.dtype), device=x.device)
    if count == 0:  # an empty batch: nothing to normalise, and the running statistics stay (PyTorch)
        y = positive(x) if weight is None else x * reshape(weight, shape)
        y = y if bias is None else y + reshape(bias, shape)
        return y.relu() if _relu else y
    stats = ops.norm.Statistics() if running_mean is not None or running_var is not None else None
    inputs = (x,) if weight is None else (x, weight) if bias is None else (x, weight, bias)
    y = apply(ops.batch_norm_relu if _relu else ops.batch_norm, *inputs, axes=axes, eps=float(eps), stats=stats)
    if stats:
        _update_running(stats, running_mean, running_var, momentum, count, x.device)
    return y


class _Cumulative:
    """``batch_norm``'s momentum for ``BatchNorm(momentum=None)``: ``1 / (n + 1)`` of the
    ``n`` batches counted so far (``tracked``, the layer's 0-d ``num_batches_tracked``),
    computed in the update step itself, so that a replay of lp.compile's computes it
    from each call's count (a momentum Tensor computed in the call would run it eagerly)."""

    __slots__ = ("tracked",)

    def __init__(self, tracked):
        self.tracked = tracked


@action
def _update_running(stats, running_mean, running_var, momentum, count, device) -> None:
    """The running statistics moved toward the batch's (``stats``: the mean and the biased
    variance the op put in it), in place, outside the graph. A step of its own, so that
    lp.compile replays it after the op has put the replay's statistics in ``stats``."""
    with no_grad():
        if isinstance(momentum, _Cumulative):
            dtype = (running_mean if running_mean is not None else running_var).dtype
            momentum = 1.0 / (momentum.tracked.astype(dtype) + 1)
        mean, var = (as_tensor(a, device=device) for a in stats)
        if running_mean is not None:
            running_mean *= 1 - momentum
            running_mean += mean * momentum
        if running_var is not None:
            running_var *= 1 - momentum
            running_var += var * (momentum * (count / (count - 1)))


def multi_head_attention_forward(query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int, num_heads: int,
                                 in_proj_weight: Tensor, in_proj_bias, bias_k, bias_v, add_zero_attn: bool,
                                 dropout_p: float, out_proj_weight: Tensor, out_proj_bias, training: bool = True,
                                 key_padding_mask=None, need_weights: bool = True, attn_mask=None,
                                 use_separate_proj_weight: bool = False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights: bool = True,
                                 is_causal: bool = False, *, batch_first: bool = False,
                                 _op: str = "multi_head_attention_forward"):
    """:class:`MultiheadAttention`'s forward as a function, with
    ``torch.nn.functional.multi_head_attention_forward``'s signature: ``(L, N, E)``
    inputs (``(N, L, E)`` with the LeanPass-only ``batch_first=True``; ``(L, E)``
    unbatched), the same masks, ``(output, weights)``. The weights have PyTorch's
    layouts: ``in_proj_weight`` ``(3E, E)`` and ``out_proj_weight`` ``(E, E)``, each
    ``(out, in)``. ``bias_k``/``bias_v``,
    ``add_zero_attn``, separate projection weights and ``static_k``/``static_v`` are
    not supported (``NotImplementedError``)."""
    unsupported = {"bias_k": bias_k is not None, "bias_v": bias_v is not None, "add_zero_attn": add_zero_attn,
                   "use_separate_proj_weight": use_separate_proj_weight, "static_k": static_k is not None,
                   "static_v": static_v is not None}
    for what, given in unsupported.items():
        if given:
            raise NotImplementedError(f"{_op}: {what} is not supported")
    E, H = embed_dim_to_check, num_heads
    if E % H:
        raise ValueError(f"{_op}: embed_dim {E} is not divisible by num_heads {H}")
    for what, t in (("query", query), ("key", key), ("value", value), ("in_proj_weight", in_proj_weight),
                    ("out_proj_weight", out_proj_weight)):
        _tensor(t, _op, what)
        if t.device != in_proj_weight.device:
            raise ValueError(f"{_op}: {what} is on {t.device} but in_proj_weight is on {in_proj_weight.device}")
    if in_proj_weight.shape != (3 * E, E) or out_proj_weight.shape != (E, E):
        raise ValueError(f"{_op}: in_proj_weight of shape {in_proj_weight.shape} and out_proj_weight of shape "
                         f"{out_proj_weight.shape} must be ({3 * E}, {E}) and ({E}, {E}) (PyTorch's (out, in))")
    shapes = f"query of shape {query.shape}, key of shape {key.shape} and value of shape {value.shape}"
    batched = query.ndim == 3
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ValueError(f"{_op}: {shapes} must all be 3-D (batched) or all 2-D (unbatched)")
    if query.shape[-1] != E or key.shape[-1] != E or value.shape[-1] != E:
        raise ValueError(f"{_op}: {shapes} must end in embed_dim {E}")
    seq = 1 if batch_first and batched else 0  # the axis of the sequence
    if key.shape != value.shape or (batched and key.shape[1 - seq] != query.shape[1 - seq]):
        raise ValueError(f"{_op}: {shapes} do not fit (key and value alike, one batch size)")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{_op}: dropout_p must be in [0, 1), got {dropout_p}")
    length, source = query.shape[seq], key.shape[seq]
    batch = query.shape[1 - seq] if batched else 1
    head_dim = E // H
    if is_causal and attn_mask is None:
        raise RuntimeError(f"{_op}: is_causal is a hint that attn_mask is the causal mask; give attn_mask too")
    # the hint as PyTorch takes it: without key padding or weights, the causal mask (attn_mask checked, not read)
    causal = is_causal and key_padding_mask is None and not need_weights
    mask = _mask(key_padding_mask, (batch, source) if batched else (source,), "key_padding_mask", query,
                 (batch, 1, 1, source), op=_op)
    attn = _mask(attn_mask, (length, source), "attn_mask", query, None, (batch * H, length, source),
                 (batch, H, length, source), op=_op, allowed=mask is None and not need_weights, unread=causal)
    if attn is not None:
        mask = attn if mask is None else mask + attn

    def heads(t, parts=1):  # (N, L, parts * E) from the input's layout, then parts x (N, H, L, D): views
        if not batched:
            t = reshape(t, (1,) + t.shape)
        elif not batch_first:
            t = permute_dims(t, (1, 0, 2))
        return unstack(permute_dims(reshape(t, t.shape[:2] + (parts, H, head_dim)), (2, 0, 3, 1, 4)))

    weight, bias = in_proj_weight, in_proj_bias
    p = dropout_p if training else 0.0
    if query is key and key is value and not need_weights and p == 0.0:  # one product for q, k and v; one node
        packed = linear(query, weight, bias)
        if not batched:
            packed = reshape(packed, (1,) + packed.shape)
        elif not batch_first:
            packed = permute_dims(packed, (1, 0, 2))
        inputs = (packed,) if mask is None else (packed, mask)
        out = apply(ops.self_attention, *inputs, heads=H, scale=1.0 / math.sqrt(head_dim), causal=causal)
        return _out_projection(out, out_proj_weight, out_proj_bias, batched, batch_first, length), None
    if query is key and key is value:  # self-attention: one product for q, k and v
        q, k, v = heads(linear(query, weight, bias), 3)
    else:
        (q,), (k,), (v,) = (heads(linear(t, weight[i * E:(i + 1) * E],
                                           None if bias is None else bias[i * E:(i + 1) * E]))
                            for i, t in enumerate((query, key, value)))
    weights = None
    if need_weights:
        scores = (q * (1.0 / math.sqrt(head_dim))) @ k.mT
        if mask is not None:
            scores = scores + mask
        weights = scores.softmax(-1)
        if p > 0.0:
            weights = dropout(weights, p)
        out = weights @ v
        if average_attn_weights:
            weights = weights.mean(axis=1)
        if not batched:
            weights = reshape(weights, weights.shape[1:])
    else:
        out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
    out = reshape(permute_dims(out, (0, 2, 1, 3)), (batch, length, E))
    return _out_projection(out, out_proj_weight, out_proj_bias, batched, batch_first, length), weights


def _out_projection(out, weight, bias, batched, batch_first, length):
    """The heads' outputs ``(N, L, E)`` side by side, projected, in the query's layout."""
    out = linear(out, weight, bias)
    if not batched:
        return reshape(out, (length, out.shape[-1]))
    return out if batch_first else permute_dims(out, (1, 0, 2))


def _mask(mask, shape, what, query, target, shape3=None, target3=None, *, op, allowed=False, unread=False):
    """``mask`` as a float Tensor to add to the scores ``(N, H, L, S)``: reshaped to
    ``target`` (``target3`` for a 3-D one of ``shape3``), bool True made -inf. With
    ``allowed``, a bool mask of ``shape`` comes back as the bool mask of where a query
    may look (its negation), which attention takes as it is: no float mask to make and
    add to the scores. With ``unread`` (a mask the causal hint replaces), it is checked
    alike, and None comes back."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        data = host_array(mask, f"{op} {what}")
        mask = asarray(data, device=query.device, dtype=dtype_name(data.dtype))  # a constant (lp.compile)
    if mask.device != query.device:
        raise ValueError(f"{op}: {what} is on {mask.device} but the query is on {query.device}")
    if mask.dtype != "bool" and mask.dtype.kind != "f":
        raise TypeError(f"{op}: {what} must be bool or floating, got dtype {mask.dtype}")
    if mask.shape != shape and (shape3 is None or mask.shape != shape3):
        want = f"{shape}" + ("" if shape3 is None else f" or {shape3}")
        raise ValueError(f"{op}: {what} of shape {mask.shape} does not fit a query of shape "
                         f"{query.shape} (expected {want})")
    if unread:
        return None
    if mask.dtype == "bool" and allowed and mask.shape == shape:
        return logical_not(mask)
    if mask.dtype == "bool":
        mask = where(mask, -math.inf, zeros(mask.shape, dtype=query.dtype, device=query.device))
    else:
        mask = mask.astype(query.dtype)
    if mask.shape == shape3:
        return reshape(mask, target3)
    return mask if target is None else reshape(mask, target)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    """PyTorch's ``F.group_norm``: the channels (axis 1) of ``input`` of shape ``(N, C,
    ...)`` split into ``num_groups`` groups of ``C / num_groups``; each group of each
    sample is normalised by its mean and biased variance, ``(x - mean) / sqrt(var +
    eps)``, then multiplied by ``weight`` and shifted by ``bias`` (optional, shape
    ``(C,)``) per channel. One graph node, with a closed-form backward."""
    op = "group_norm"
    x = floating(_tensor(input, op), op)
    if x.ndim < 2:
        raise ValueError(f"{op}: input must have at least 2 axes (N, C, ...), got shape {x.shape}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral) or num_groups < 1:
        raise ValueError(f"{op}: num_groups must be a positive integer, got {num_groups!r}")
    channels = x.shape[1]
    if channels % num_groups:
        raise ValueError(f"{op}: the {channels} channels of an input of shape {x.shape} do not split into "
                         f"num_groups={num_groups} groups")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if floating(_tensor(t, op, name), op).shape != (channels,):
            raise ValueError(f"{op}: {name} of shape {t.shape} does not fit an input of shape {x.shape} "
                             f"({channels} channels on axis 1)")
        if t.device != x.device:
            raise ValueError(f"{op}: {name} is on {t.device} but the input is on {x.device}")
    if weight is None and bias is not None:
        weight = ones((channels,), dtype=dtype_name(bias.dtype), device=x.device)
    shape = (channels,) + (1,) * (x.ndim - 2)
    if x.size == 0:  # nothing to normalise: the affine map of nothing
        y = positive(x) if weight is None else x * reshape(weight, shape)
        return y if bias is None else y + reshape(bias, shape)
    inputs = (x,) if weight is None else (x, weight) if bias is None else (x, weight, bias)
    return apply(ops.group_norm, *inputs, groups=int(num_groups), eps=float(eps))
