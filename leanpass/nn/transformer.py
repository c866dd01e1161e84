"""PyTorch's transformer: ``TransformerEncoderLayer``, ``TransformerEncoder``,
``TransformerDecoderLayer``, ``TransformerDecoder`` and ``Transformer``.

The submodules and their names are PyTorch's (``self_attn``, ``multihead_attn``,
``linear1``, ``linear2``, ``norm1``... ``norm3``, ``dropout``, ``dropout1``...; a stack's
``layers.0``, ``layers.1``... and ``norm``; a ``Transformer``'s ``encoder`` and
``decoder``), so a PyTorch ``state_dict`` loads as it is, and the computation is
PyTorch's: each block (self-attention, the decoder's attention to the encoder's output,
the feed-forward block) adds to the input it was given, with a LayerNorm after the sum
(post-norm, ``norm_first=False``, PyTorch's default)::

    x = norm1(x + dropout1(self_attn(x, x, x)))
    x = norm2(x + dropout2(linear2(dropout(activation(linear1(x))))))

or before the block (pre-norm, ``norm_first=True``)::

    x = x + dropout1(self_attn(norm1(x), ...))
    x = x + dropout2(linear2(dropout(activation(linear1(norm2(x))))))
"""

from __future__ import annotations

import copy
import functools
import math
import numbers

from .._graph.trace import check
from .._namespace import full, triu
from ..backends import get_backend, get_default_dtype
from ..tensor import Tensor
from . import functional as F
from . import init
from .attention import MultiheadAttention
from .layers import Dropout, Linear
from .module import Module, ModuleList
from .norm import LayerNorm

__all__ = ["TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder",
           "Transformer"]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _sizes(op, **sizes):
    for what, n in sizes.items():
        if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
            raise ValueError(f"{op}: {what} must be a positive integer, got {n!r}")


def _activation(op, activation):
    """``"relu"``, ``"gelu"`` (the exact one) or a function of a Tensor."""
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"{op}: activation must be 'relu', 'gelu' or a function, got {activation!r}")
        return _ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(f"{op}: activation must be 'relu', 'gelu' or a function, got {type(activation).__name__}")
    return activation


class _Layer(Module):
    """What PyTorch's encoder and decoder layers share: their submodules, made in
    PyTorch's order (so ``state_dict``'s order is PyTorch's; ``cross``: the decoder's
    attention to the encoder's output, ``multihead_attn``, and a third norm and
    dropout), the feed-forward block (``linear1``, ``activation``, ``dropout``,
    ``linear2``, then ``dropout{k}``) and an attention block (an attention module's
    output, then a dropout)."""

    def __init__(self, op, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
                 norm_first, bias, device, dtype, cross):
        _sizes(op, d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward)
        activation = _activation(op, activation)
        kw = {"device": device, "dtype": dtype}
        attention = {"dropout": dropout, "bias": bias, "batch_first": batch_first, **kw}
        self.self_attn = MultiheadAttention(d_model, nhead, **attention)
        if cross:
            self.multihead_attn = MultiheadAttention(d_model, nhead, **attention)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = bool(norm_first)
        blocks = range(1, 4 if cross else 3)
        for k in blocks:
            setattr(self, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        for k in blocks:
            setattr(self, f"dropout{k}", Dropout(dropout))
        self.activation = activation
        self.batch_first = bool(batch_first)

    def _feed_forward(self, x, dropout):
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    @staticmethod
    def _attend(attention, dropout, x, memory, mask, key_padding_mask, is_causal):
        return dropout(attention(x, memory, memory, attn_mask=mask, key_padding_mask=key_padding_mask,
                                 need_weights=False, is_causal=is_causal)[0])

    def _blocks(self, x, blocks):
        """``x`` through ``blocks`` (``(norm, block)`` pairs), each added to its input,
        post-norm or pre-norm as the layer was made."""
        for norm, block in blocks:
            x = x + block(norm(x)) if self.norm_first else norm(x + block(x))
        return x


def _is_causal_mask(backend, mask) -> bool:
    """Whether the square array ``mask`` is the causal mask (PyTorch's
    ``generate_square_subsequent_mask`` in its dtype: True or -inf above the diagonal,
    False or 0 on and below it), read on the host."""
    xp = backend.xp
    index = backend.arange(mask.shape[-1], xp.int64)
    above = index[None, :] > index[:, None]
    if mask.dtype != xp.bool:
        above = xp.where(above, xp.asarray(-math.inf, dtype=mask.dtype, device=backend.xp_device),
                         xp.asarray(0.0, dtype=mask.dtype, device=backend.xp_device))
    return bool(xp.all(mask == above))


def _still_causal(backend, causal: bool, mask) -> None:
    """A compiled step's check at each replay: the mask is (or is not) causal as at its trace."""
    if _is_causal_mask(backend, mask) != causal:
        raise ValueError("the mask is " + ("no longer" if causal else "now") + " the causal mask")


def _detect_causal(mask, is_causal, src, batch_first: bool) -> bool:
    """PyTorch's ``_detect_is_causal_mask``: ``is_causal`` where given; where None,
    whether ``mask`` is the causal mask of the sequence's length (then the layers'
    attention skips, as PyTorch's, what a query may not look at). A compiled step
    checks the mask again at each replay."""
    if is_causal is not None or not isinstance(mask, Tensor):
        return bool(is_causal)
    length = src.shape[0 if src.ndim == 2 or not batch_first else 1]
    if tuple(mask.shape) != (length, length) or (mask.dtype != "bool" and mask.dtype.kind != "f"):
        return False
    backend = mask._backend
    causal = _is_causal_mask(backend, mask._data)  # (the array itself: not a read a compiled step must follow)
    check(functools.partial(_still_causal, backend, causal), mask, branch=True)
    return causal


class _Stack(Module):
    """``num_layers`` copies of a layer (each its own parameters, as PyTorch's), then an
    optional ``norm``."""

    def __init__(self, op, layer, num_layers, norm):
        if not isinstance(layer, Module):
            raise TypeError(f"{op}: the layer must be a Module, got {type(layer).__name__}")
        _sizes(op, num_layers=num_layers)
        self.layers = ModuleList([copy.deepcopy(layer) for _ in range(int(num_layers))])
        self.num_layers = int(num_layers)
        self.norm = norm

    def _end(self, x):
        return x if self.norm is None else self.norm(x)


class TransformerEncoderLayer(_Layer):
    """Self-attention and a feed-forward block of ``dim_feedforward`` units, each with a
    residual connection and a LayerNorm (``torch.nn.TransformerEncoderLayer``, its
    arguments in its order). ``activation``: ``"relu"`` (PyTorch's default), ``"gelu"``
    (the exact one, as PyTorch's string) or a function of a Tensor. Inputs ``(S, N, E)``,
    ``(N, S, E)`` with ``batch_first``, or unbatched ``(S, E)``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__("TransformerEncoderLayer", d_model, nhead, dim_feedforward, dropout, activation,
                         layer_norm_eps, batch_first, norm_first, bias, device, dtype, cross=False)

    def forward(self, src: Tensor, src_mask=None, src_key_padding_mask=None, is_causal: bool = False) -> Tensor:
        """``src`` through the layer; ``src_mask`` ``(S, S)`` or ``(N * nhead, S, S)`` and
        ``src_key_padding_mask`` ``(N, S)``, bool (True where attention is NOT allowed)
        or float (added to the scores), as :class:`MultiheadAttention`'s masks."""
        return self._blocks(src, (
            (self.norm1, lambda x: self._attend(self.self_attn, self.dropout1, x, x, src_mask, src_key_padding_mask,
                                                is_causal)),
            (self.norm2, lambda x: self._feed_forward(x, self.dropout2)),
        ))


class TransformerEncoder(_Stack):
    """``num_layers`` copies of ``encoder_layer`` one after another (each its own
    parameters, copied from the one given, as PyTorch's), then ``norm`` where one is
    given (``torch.nn.TransformerEncoder``; ``enable_nested_tensor`` and ``mask_check``
    are accepted and change nothing: there are no nested tensors)."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__("TransformerEncoder", encoder_layer, num_layers, norm)

    def forward(self, src: Tensor, mask=None, src_key_padding_mask=None, is_causal=None) -> Tensor:
        """``src`` through every layer (``mask`` and ``src_key_padding_mask`` given to each),
        then ``norm``."""
        x = src
        is_causal = _detect_causal(mask, is_causal, src, self.layers[0].batch_first if len(self.layers) else False)
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        return self._end(x)


class TransformerDecoderLayer(_Layer):
    """Self-attention, attention to the encoder's output (``memory``: ``multihead_attn``)
    and a feed-forward block, each with a residual connection and a LayerNorm
    (``torch.nn.TransformerDecoderLayer``, its arguments in its order; see
    :class:`TransformerEncoderLayer`)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation="relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__("TransformerDecoderLayer", d_model, nhead, dim_feedforward, dropout, activation,
                         layer_norm_eps, batch_first, norm_first, bias, device, dtype, cross=True)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Tensor:
        """``tgt`` through the layer, attending to ``memory`` (the encoder's output);
        the masks are :class:`MultiheadAttention`'s (``memory_mask`` ``(T, S)``)."""
        return self._blocks(tgt, (
            (self.norm1, lambda x: self._attend(self.self_attn, self.dropout1, x, x, tgt_mask, tgt_key_padding_mask,
                                                tgt_is_causal)),
            (self.norm2, lambda x: self._attend(self.multihead_attn, self.dropout2, x, memory, memory_mask,
                                                memory_key_padding_mask, memory_is_causal)),
            (self.norm3, lambda x: self._feed_forward(x, self.dropout3)),
        ))


class TransformerDecoder(_Stack):
    """``num_layers`` copies of ``decoder_layer``, then ``norm`` where one is given
    (``torch.nn.TransformerDecoder``)."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm=None):
        super().__init__("TransformerDecoder", decoder_layer, num_layers, norm)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal: bool = False) -> Tensor:
        """``tgt`` through every layer, each attending to ``memory``, then ``norm``."""
        x = tgt
        tgt_is_causal = _detect_causal(tgt_mask, tgt_is_causal, tgt,
                                       self.layers[0].batch_first if len(self.layers) else False)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                      memory_is_causal=memory_is_causal)
        return self._end(x)


class Transformer(Module):
    """An encoder of ``num_encoder_layers`` and a decoder of ``num_decoder_layers``
    layers, each stack ending in a LayerNorm (``torch.nn.Transformer``, its arguments
    in its order; ``custom_encoder``/``custom_decoder`` replace a stack). Its weight
    matrices start Xavier-uniform, as PyTorch's."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation="relu", custom_encoder=None,
                 custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        kw = {"device": device, "dtype": dtype}
        layer = {"dim_feedforward": dim_feedforward, "dropout": dropout, "activation": activation,
                 "layer_norm_eps": layer_norm_eps, "batch_first": batch_first, "norm_first": norm_first, "bias": bias}
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **layer, **kw), num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **layer, **kw), num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        for p in self.parameters():  # PyTorch's _reset_parameters
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = int(d_model), int(nhead), bool(batch_first)

    def forward(self, src: Tensor, tgt: Tensor, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
                src_is_causal=None, tgt_is_causal=None, memory_is_causal: bool = False) -> Tensor:
        """The decoder's output for ``tgt``, attending to the encoder's output for
        ``src``; ``ValueError`` where their batch sizes or feature sizes differ."""
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise ValueError(f"Transformer: the batch size of src {src.shape} and tgt {tgt.shape} must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(f"Transformer: the feature size of src {src.shape} and tgt {tgt.shape} must be d_model "
                             f"{self.d_model}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """The ``(sz, sz)`` causal mask as floats: 0 on and below the diagonal, -inf
        above (PyTorch's; a bool mask ``True`` above the diagonal does the same)."""
        if not isinstance(sz, numbers.Integral) or isinstance(sz, bool) or sz < 0:  # 0: an empty mask, as PyTorch's
            raise ValueError(f"generate_square_subsequent_mask: sz must be a non-negative integer, got {sz!r}")
        backend = get_backend(device)
        dtype = dtype if dtype is not None else get_default_dtype()  # (from creation functions: lp.compile
        return triu(full((int(sz), int(sz)), -math.inf, dtype=dtype, device=backend.device), k=1)  # replays them)
