"""``MultiheadAttention``, as ``torch.nn.MultiheadAttention``."""

from __future__ import annotations

import math
import numbers

from ..backends import get_backend
from ..serialization import transposed_copy
from ..tensor import Tensor
from .functional import multi_head_attention_forward
from .layers import Linear, _parameter_dtype
from .module import Module, Parameter

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """Attention of ``num_heads`` heads of ``embed_dim // num_heads`` features each:
    ``out_proj(concat_h(softmax(q_h k_h^T / sqrt(d) + mask) v_h))`` with ``q, k, v``
    the input projections of ``query``, ``key`` and ``value``.

    Parameters with PyTorch's names: ``in_proj_weight`` (Xavier uniform) and
    ``in_proj_bias`` (zeros) for the three projections together, and ``out_proj``, a
    :class:`Linear` whose bias is zeros. ``in_proj_weight`` is ``(3E, E)``, PyTorch's
    layout (0.3 stored its transpose, ``(E, 3E)``: its files and pickles load
    transposed). The arguments are PyTorch's, in
    its order; ``add_bias_kv``, ``add_zero_attn`` and ``kdim``/``vdim`` other than
    ``embed_dim`` are not supported (``NotImplementedError``)."""

    _v03_transposed = ("in_proj_weight",)

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
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))  # xavier_uniform of (3E, E)
        # drawn as 0.3 drew its (E, 3E) weight, then transposed: one seed gives the layer it gave
        weight = transposed_copy(backend.init_uniform((embed_dim, 3 * embed_dim), -bound, bound, dtype), backend)
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
