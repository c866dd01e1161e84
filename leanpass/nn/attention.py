"""``MultiheadAttention``, as ``torch.nn.MultiheadAttention``."""

from __future__ import annotations

import math
import numbers

from .._dtypes import dtype_name
from .._namespace import permute_dims, reshape, unstack, where, zeros
from ..backends import get_backend, host_array
from ..tensor import Tensor, as_tensor
from . import functional as F
from .layers import Linear, _parameter_dtype
from .module import Module, Parameter

__all__ = ["MultiheadAttention", "multi_head_attention_forward"]


class MultiheadAttention(Module):
    """Attention of ``num_heads`` heads of ``embed_dim // num_heads`` features each:
    ``out_proj(concat_h(softmax(q_h k_h^T / sqrt(d) + mask) v_h))`` with ``q, k, v``
    the input projections of ``query``, ``key`` and ``value``.

    Parameters with PyTorch's names: ``in_proj_weight`` (Xavier uniform) and
    ``in_proj_bias`` (zeros) for the three projections together, and ``out_proj``, a
    :class:`Linear` whose bias is zeros. ``in_proj_weight`` is stored as ``(E, 3E)``
    (LeanPass's Linear layout, one product for the three projections); PyTorch's is
    the transpose, ``(3E, E)``, which ``state_dict(layout="torch")`` gives and
    ``load_state_dict(..., layout="torch")`` takes. The arguments are PyTorch's, in
    its order; ``add_bias_kv``, ``add_zero_attn`` and ``kdim``/``vdim`` other than
    ``embed_dim`` are not supported (``NotImplementedError``)."""

    _torch_transposed = ("in_proj_weight",)

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        for what, n in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:  # a NumPy integer too
                raise ValueError(f"MultiheadAttention: {what} must be a positive integer, got {n!r}")
        embed_dim, num_heads = int(embed_dim), int(num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        for what, given in (("add_bias_kv", add_bias_kv), ("add_zero_attn", add_zero_attn)):
            if given:
                raise NotImplementedError(f"MultiheadAttention: {what}=True is not supported")
        for what, n in (("kdim", kdim), ("vdim", vdim)):
            if n is not None and n != embed_dim:
                raise NotImplementedError(f"MultiheadAttention: {what}={n} other than embed_dim={embed_dim} "
                                          "is not supported")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1), got {dropout}")
        dtype = _parameter_dtype(dtype, "MultiheadAttention")
        backend = get_backend(device)
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = self.vdim = embed_dim
        self.dropout = float(dropout)
        self.batch_first = bool(batch_first)
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))  # xavier_uniform of (3E, E), either layout
        weight = backend.init_uniform((embed_dim, 3 * embed_dim), -bound, bound, dtype)
        self.in_proj_weight = Parameter(weight, name="in_proj_weight", device=backend.device)
        self.in_proj_bias = (Parameter(backend.zeros((3 * embed_dim,), backend.dtype(dtype)), name="in_proj_bias",
                                       device=backend.device) if bias else None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=backend.device, dtype=dtype)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        """``(output, weights)``: ``output`` of the query's shape -- ``(L, N, E)``,
        ``(N, L, E)`` with ``batch_first``, or unbatched ``(L, E)`` -- and, with
        ``need_weights``, the attention weights ``(N, L, S)`` averaged over the heads
        (``(N, H, L, S)`` without ``average_attn_weights``; no ``N`` unbatched), else
        None. Masks are bool, True where attention is NOT allowed (the opposite of
        :func:`functional.scaled_dot_product_attention`'s), or float, added to the
        scores: ``key_padding_mask`` ``(N, S)`` (``(S,)`` unbatched), ``attn_mask``
        ``(L, S)`` or ``(N * num_heads, L, S)``. ``is_causal`` is a hint that
        ``attn_mask`` is the causal mask, which must then be given (as PyTorch)."""
        return multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias, None, None,
            False, self.dropout, self.out_proj.weight, self.out_proj.bias, training=self.training,
            key_padding_mask=key_padding_mask, need_weights=need_weights, attn_mask=attn_mask,
            average_attn_weights=average_attn_weights, is_causal=is_causal, batch_first=self.batch_first,
            _op="MultiheadAttention")


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
    unbatched), the same masks, ``(output, weights)``. The weights have LeanPass's
    layout: ``in_proj_weight`` ``(E, 3E)`` and ``out_proj_weight`` ``(E, E)`` as
    ``(in, out)``, the transposes of PyTorch's. ``bias_k``/``bias_v``,
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
        F._tensor(t, _op, what)
        if t.device != in_proj_weight.device:
            raise ValueError(f"{_op}: {what} is on {t.device} but in_proj_weight is on {in_proj_weight.device}")
    if in_proj_weight.shape != (E, 3 * E) or out_proj_weight.shape != (E, E):
        raise ValueError(f"{_op}: in_proj_weight of shape {in_proj_weight.shape} and out_proj_weight of shape "
                         f"{out_proj_weight.shape} must be ({E}, {3 * E}) and ({E}, {E}) (LeanPass's (in, out))")
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
    mask = _mask(key_padding_mask, (batch, source) if batched else (source,), "key_padding_mask", query,
                 (batch, 1, 1, source), op=_op)
    attn = _mask(attn_mask, (length, source), "attn_mask", query, None, (batch * H, length, source),
                 (batch, H, length, source), op=_op)
    if attn is not None:
        mask = attn if mask is None else mask + attn

    def heads(t, parts=1):  # (N, L, parts * E) from the input's layout, then parts x (N, H, L, D): views
        if not batched:
            t = reshape(t, (1,) + t.shape)
        elif not batch_first:
            t = permute_dims(t, (1, 0, 2))
        return unstack(permute_dims(reshape(t, t.shape[:2] + (parts, H, head_dim)), (2, 0, 3, 1, 4)))

    weight, bias = in_proj_weight, in_proj_bias
    if query is key and key is value:  # self-attention: one product for q, k and v
        q, k, v = heads(F.linear(query, weight, bias), 3)
    else:
        (q,), (k,), (v,) = (heads(F.linear(t, weight[:, i * E:(i + 1) * E],
                                           None if bias is None else bias[i * E:(i + 1) * E]))
                            for i, t in enumerate((query, key, value)))
    p = dropout_p if training else 0.0
    weights = None
    if need_weights:
        scores = (q * (1.0 / math.sqrt(head_dim))) @ k.mT
        if mask is not None:
            scores = scores + mask
        weights = scores.softmax(-1)
        if p > 0.0:
            weights = F.dropout(weights, p)
        out = weights @ v
        if average_attn_weights:
            weights = weights.mean(axis=1)
        if not batched:
            weights = reshape(weights, weights.shape[1:])
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    out = F.linear(reshape(permute_dims(out, (0, 2, 1, 3)), (batch, length, E)), out_proj_weight, out_proj_bias)
    if not batched:
        out = reshape(out, (length, E))
    elif not batch_first:
        out = permute_dims(out, (1, 0, 2))
    return out, weights


def _mask(mask, shape, what, query, target, shape3=None, target3=None, *, op):
    """``mask`` as a float Tensor to add to the scores ``(N, H, L, S)``: reshaped to
    ``target`` (``target3`` for a 3-D one of ``shape3``), bool True made -inf."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        data = host_array(mask, f"{op} {what}")
        mask = as_tensor(data, device=query.device, dtype=dtype_name(data.dtype))
    if mask.device != query.device:
        raise ValueError(f"{op}: {what} is on {mask.device} but the query is on {query.device}")
    if mask.dtype != "bool" and mask.dtype.kind != "f":
        raise TypeError(f"{op}: {what} must be bool or floating, got dtype {mask.dtype}")
    if mask.shape != shape and (shape3 is None or mask.shape != shape3):
        want = f"{shape}" + ("" if shape3 is None else f" or {shape3}")
        raise ValueError(f"{op}: {what} of shape {mask.shape} does not fit a query of shape "
                         f"{query.shape} (expected {want})")
    if mask.dtype == "bool":
        mask = where(mask, -math.inf, zeros(mask.shape, dtype=query.dtype, device=query.device))
    else:
        mask = mask.astype(query.dtype)
    if mask.shape == shape3:
        return reshape(mask, target3)
    return mask if target is None else reshape(mask, target)
