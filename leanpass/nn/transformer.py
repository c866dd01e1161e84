"""``TransformerEncoderLayer`` and ``TransformerEncoder``, as ``torch.nn``'s.

The submodules and their names are PyTorch's (``self_attn``, ``linear1``, ``linear2``,
``norm1``, ``norm2``, ``dropout``, ``dropout1``, ``dropout2``; an encoder's ``layers.0``,
``layers.1``... and ``norm``), so a PyTorch ``state_dict`` loads as it is, and the
computation is PyTorch's, post-norm by default (``norm_first=False``)::

    x = norm1(x + dropout1(self_attn(x, x, x)))
    x = norm2(x + dropout2(linear2(dropout(activation(linear1(x))))))

and pre-norm with ``norm_first=True``::

    x = x + dropout1(self_attn(norm1(x), ...))
    x = x + dropout2(linear2(dropout(activation(linear1(norm2(x))))))
"""

from __future__ import annotations

import copy
import numbers

from ..tensor import Tensor
from . import functional as F
from .attention import MultiheadAttention
from .layers import Dropout, Linear
from .module import Module, ModuleList
from .norm import LayerNorm

__all__ = ["TransformerEncoderLayer", "TransformerEncoder"]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block of ``dim_feedforward`` units, each with a
    residual connection and a LayerNorm (``torch.nn.TransformerEncoderLayer``, its
    arguments in its order). ``activation``: ``"relu"`` (PyTorch's default), ``"gelu"``
    (the exact one, as PyTorch's string) or a function of a Tensor. Inputs ``(S, N, E)``,
    ``(N, S, E)`` with ``batch_first``, or unbatched ``(S, E)``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        for what, n in (("d_model", d_model), ("nhead", nhead), ("dim_feedforward", dim_feedforward)):
            if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
                raise ValueError(f"TransformerEncoderLayer: {what} must be a positive integer, got {n!r}")
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise ValueError(f"TransformerEncoderLayer: activation must be 'relu', 'gelu' or a function, "
                                 f"got {activation!r}")
            activation = _ACTIVATIONS[activation]
        elif not callable(activation):
            raise TypeError(f"TransformerEncoderLayer: activation must be 'relu', 'gelu' or a function, got "
                            f"{type(activation).__name__}")
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = activation
        self.batch_first = bool(batch_first)

    def forward(self, src: Tensor, src_mask=None, src_key_padding_mask=None, is_causal: bool = False) -> Tensor:
        """``src`` through the layer; ``src_mask`` ``(S, S)`` or ``(N * nhead, S, S)`` and
        ``src_key_padding_mask`` ``(N, S)``, bool (True where attention is NOT allowed)
        or float (added to the scores), as :class:`MultiheadAttention`'s masks."""
        x = src
        if self.norm_first:
            x = x + self._attention(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + self._attention(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._feed_forward(x))

    def _attention(self, x, mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _feed_forward(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` one after another (each its own
    parameters, copied from the one given, as PyTorch's), then ``norm`` where one is
    given (``torch.nn.TransformerEncoder``; ``enable_nested_tensor`` and ``mask_check``
    are accepted and change nothing: there are no nested tensors)."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        if not isinstance(encoder_layer, Module):
            raise TypeError(f"TransformerEncoder: encoder_layer must be a Module, got {type(encoder_layer).__name__}")
        if not isinstance(num_layers, numbers.Integral) or isinstance(num_layers, bool) or num_layers < 1:
            raise ValueError(f"TransformerEncoder: num_layers must be a positive integer, got {num_layers!r}")
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(int(num_layers))])
        self.num_layers = int(num_layers)
        self.norm = norm

    def forward(self, src: Tensor, mask=None, src_key_padding_mask=None, is_causal=None) -> Tensor:
        """``src`` through every layer (``mask`` and ``src_key_padding_mask`` given to each),
        then ``norm``."""
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return x if self.norm is None else self.norm(x)
