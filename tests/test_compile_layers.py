"""``lp.compile`` over every layer ``leanpass.nn`` exports: a training step through each
one (wrapped where it needs a layer with parameters before it, or takes more than one
argument), run eagerly on one copy and compiled on its twin, gives the same losses,
parameters, gradients (of the parameters and of the input), buffers and optimizer
state: bit for bit with ``fuse=False``, within a few ulp with fusion (on the CPU with
Numba, its runs compiled from the third call). Each run is seeded alike, so a layer
that draws (dropout) draws the same masks in both runs.

Every step replays after its trace, with no warning.
"""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
from helpers import host

import leanpass as lp
from leanpass import Tensor, nn
from leanpass._fusion import fusion_enabled
from leanpass.backends import _numba, get_backend

F64 = "float64"
STEPS = 4  # fuse=False: a trace and three replays
FUSED_STEPS = 6  # fuse=True: planned at the second call, compiled by Numba from the third on
# fuse=True: each array within RTOL of eager's, or within ATOL times its largest magnitude (an element near
# zero, where rounding the others gave it, is compared on the array's scale). Measured: at most 3.6 eps of
# the array's scale over these cases, after six Adam or SGD steps (one case, said there, needs more).
FUSED_RTOL, FUSED_ATOL = 1e-12, 1e-14
# MultiheadAttention's key bias (in_proj_bias[E:2E]) gets a gradient that is zero in exact arithmetic (a
# softmax does not change with a constant added along the keys): its gradient is rounding noise, 1e-17, and
# Adam makes that noise steps of about lr * noise / eps, 1e-12, that differ wholly once the fused runs round
# otherwise (measured: 4e-13 apart in TransformerEncoderLayer-norm-first-gelu-causal). With fusion those
# rows are compared within KEY_BIAS_ATOL, the rest of the array as any other.
KEY_BIAS_ATOL = 1e-9


# ---- the cases -----------------------------------------------------------------------------------------------


class Case:
    """``build(kw)`` makes the model (``kw``: device and dtype); ``inputs(rng, device)`` a
    tuple of arguments (the first, where floating, requires grad); ``kwargs`` go to the
    model's call as they are."""

    def __init__(self, name, build, inputs, opt="sgd", kwargs=None, erf=False, fused_atol=None):
        self.name, self.build, self.inputs, self.opt, self.kwargs = name, build, inputs, opt, kwargs or {}
        self.erf = erf  # exact GELU: needs the device's special functions (strict has none)
        self.fused_atol = fused_atol  # FUSED_ATOL, where the step's own conditioning needs more (said where)


def _x(*shape):
    return lambda rng, device: (Tensor(rng.normal(size=shape), device=device),)


def _ids(high, *shape):
    return lambda rng, device: (lp.asarray(rng.integers(0, high, size=shape), device=device),)


def _after_linear(layer, n_in=4, n_out=6, batch=3):
    """``layer`` (no parameters of its own) after a Linear layer, on ``(batch, n_in)``."""
    return dict(build=lambda kw: nn.Sequential(nn.Linear(n_in, n_out, **kw), layer()), inputs=_x(batch, n_in))


def _after_conv(layer, size=6, channels=3):
    """``layer`` after a Conv2d of two input channels, on ``(2, 2, size, size)``."""
    return dict(build=lambda kw: nn.Sequential(nn.Conv2d(2, channels, 3, padding=1, **kw), layer()),
                inputs=_x(2, 2, size, size))


def _after_conv1d(layer, length=5, channels=3):
    return dict(build=lambda kw: nn.Sequential(nn.Conv1d(2, channels, 3, padding=1, **kw), layer()),
                inputs=_x(2, 2, length))


def _frozen(kw):
    model = nn.Sequential(nn.Linear(4, 5, **kw), nn.Tanh(), nn.Linear(5, 3, **kw))
    model[0].weight.requires_grad_(False)
    return model


class Twice(nn.Module):
    """One Linear layer applied twice (its gradient summed over both uses)."""

    def __init__(self, kw):
        self.linear = nn.Linear(4, 4, **kw)

    def forward(self, x):
        return self.linear(nn.functional.gelu(self.linear(x), approximate="tanh"))


def _eval(build):
    """A model in eval mode (batch norm's running statistics used, dropout off), trained."""
    return lambda kw: build(kw).eval()


class Head(nn.Module):
    """A Linear layer, then the loss module ``loss`` of its output and the target."""

    def __init__(self, loss, kw, n_out=3):
        self.linear = nn.Linear(4, n_out, **kw)
        self.loss = loss

    def forward(self, x, target):
        return self.loss(self.linear(x), target)


class ProbabilityTargets(Head):
    """Cross-entropy against class probabilities (float targets), label smoothing."""

    def __init__(self, kw):
        super().__init__(nn.CrossEntropyLoss(label_smoothing=0.2), kw)


class PerPosition(nn.Module):
    """A 1x1 Conv1d's logits ``(N, C, L)`` and cross-entropy per position, unreduced."""

    def __init__(self, kw):
        self.conv = nn.Conv1d(2, 3, 1, **kw)
        self.loss = nn.CrossEntropyLoss(reduction="none")

    def forward(self, x, target):
        return self.loss(self.conv(x), target)


class LogSoftmaxHead(Head):
    def forward(self, x, target):
        return self.loss(nn.functional.log_softmax(self.linear(x), axis=-1), target)


def _classes(rng, device):
    return Tensor(rng.normal(size=(5, 4)), device=device), lp.asarray(rng.integers(0, 3, size=5), device=device)


def _classes_ignored(rng, device):
    x, _ = _classes(rng, device)
    y = rng.integers(0, 3, size=5)
    y[1] = -100
    return x, lp.asarray(y, device=device)


def _class_probabilities(rng, device):
    return Tensor(rng.normal(size=(5, 4)), device=device), Tensor(rng.dirichlet(np.ones(3), size=5), device=device)


def _positions(rng, device):
    return Tensor(rng.normal(size=(2, 2, 5)), device=device), lp.asarray(rng.integers(0, 3, size=(2, 5)),
                                                                          device=device)


def _regression(rng, device):
    return Tensor(rng.normal(size=(5, 4)), device=device), Tensor(rng.normal(size=(5, 3)), device=device)


def _probabilities(rng, device):
    return Tensor(rng.normal(size=(5, 4)), device=device), Tensor(rng.uniform(size=(5, 3)), device=device)


class Containers(nn.Module):
    """A ModuleList and a ModuleDict of layers."""

    def __init__(self, kw):
        self.blocks = nn.ModuleList([nn.Linear(4, 5, **kw), nn.Linear(5, 5, **kw)])
        self.heads = nn.ModuleDict({"a": nn.Linear(5, 2, **kw), "b": nn.Linear(5, 3, **kw)})

    def forward(self, x):
        for block in self.blocks:
            x = block(x).tanh()
        return self.heads["a"](x), self.heads["b"](x)


def _seq(rng, device, steps=4, batch=2, features=3):
    return (Tensor(rng.normal(size=(steps, batch, features)), device=device),)


def _seq_h(layers, directions=1, hidden=4):
    def inputs(rng, device):
        (x,) = _seq(rng, device)
        return x, Tensor(rng.normal(size=(layers * directions, 2, hidden)), device=device)
    return inputs


def _seq_hc(rng, device):
    (x,) = _seq(rng, device)
    h, c = (Tensor(rng.normal(size=(1, 2, 4)), device=device) for _ in range(2))
    return x, (h, c)


def _cell(rng, device):
    return (Tensor(rng.normal(size=(3, 3)), device=device),)


def _cell_h(rng, device):
    return Tensor(rng.normal(size=(3, 3)), device=device), Tensor(rng.normal(size=(3, 4)), device=device)


def _cell_hc(rng, device):
    x, h = _cell_h(rng, device)
    return x, (h, Tensor(rng.normal(size=(3, 4)), device=device))


def _tokens(rng, device, batch=2, length=5, width=8):
    return Tensor(rng.normal(size=(batch, length, width)), device=device)


def _self_attention(rng, device):
    x = _tokens(rng, device)
    return x, x, x


def _cross_attention(rng, device):
    return _tokens(rng, device, length=4), _tokens(rng, device), _tokens(rng, device)


def _tgt_memory(rng, device):
    return _tokens(rng, device, length=4), _tokens(rng, device)


def _float_mask(rng, device):
    """Self-attention with an additive float mask that changes at each call (an argument)."""
    x = _tokens(rng, device)
    return x, x, x, None, True, Tensor(rng.normal(size=(5, 5)), device=device)


def _unbatched_attention(rng, device):
    x = Tensor(rng.normal(size=(5, 8)), device=device)
    return x, x, x


CAUSAL = np.triu(np.ones((5, 5), dtype=bool), 1)
PADDED = np.array([[False] * 5, [False, False, False, True, True]])


def _layer(name, d=8, heads=2, ff=16, **more):
    return lambda kw: getattr(nn, name)(d, heads, dim_feedforward=ff, batch_first=True, **more, **kw)


def _stack(name, layer_name, layers=2, norm=True, **more):
    def build(kw):
        return getattr(nn, name)(_layer(layer_name, **more)(kw), layers, norm=nn.LayerNorm(8, **kw) if norm else None)
    return build


def _upsample(rank, **options):
    shape = (2, 2, 5) if rank == 3 else (2, 2, 3, 4)
    conv = nn.Conv1d if rank == 3 else nn.Conv2d
    return dict(build=lambda kw: nn.Sequential(conv(2, 2, 3, padding=1, **kw), nn.Upsample(**options)),
                inputs=_x(*shape))


CASES = [
    # dense layers and containers
    Case("Linear", lambda kw: nn.Linear(4, 3, **kw), _x(3, 4)),
    Case("Linear-no-bias", lambda kw: nn.Linear(4, 3, bias=False, **kw), _x(2, 5, 4), opt="adam"),
    Case("MLP", lambda kw: nn.MLP([4, 6, 5, 3], **kw), _x(3, 4), opt="adam"),
    Case("MLP-gelu", lambda kw: nn.MLP([4, 6, 3], activation="gelu", **kw), _x(3, 4), erf=True),
    Case("MLP-shared-activation-module", lambda kw: nn.MLP([4, 5, 5, 2], activation=nn.Tanh(), **kw), _x(3, 4)),
    Case("Sequential", lambda kw: nn.Sequential(nn.Linear(4, 5, **kw), nn.Tanh(), nn.Linear(5, 2, **kw)), _x(3, 4)),
    Case("Sequential-frozen-weight", _frozen, _x(3, 4), opt="adam"),
    Case("Linear-used-twice", Twice, _x(3, 4)),
    Case("ModuleList-ModuleDict", Containers, _x(3, 4), opt="adam"),
    Case("Identity", **_after_linear(nn.Identity)),
    Case("Flatten", **_after_conv(nn.Flatten, size=4), opt="adam"),
    Case("Flatten-1-2", **_after_conv(lambda: nn.Flatten(1, 2), size=4)),
    Case("Flatten-0", lambda kw: nn.Sequential(nn.Linear(4, 4, **kw), nn.Flatten(0)), _x(3, 4), opt="adam"),
    # activations
    Case("ReLU", **_after_linear(nn.ReLU)),
    Case("ReLU-inplace", **_after_linear(lambda: nn.ReLU(inplace=True))),
    Case("Sigmoid", **_after_linear(nn.Sigmoid), opt="adam"),
    Case("Tanh", **_after_linear(nn.Tanh)),
    Case("LeakyReLU", **_after_linear(lambda: nn.LeakyReLU(0.1))),
    Case("LeakyReLU-inplace", **_after_linear(lambda: nn.LeakyReLU(0.1, inplace=True)), opt="adam"),
    Case("LeakyReLU-negative-slope-inplace", **_after_linear(lambda: nn.LeakyReLU(-0.5, inplace=True))),
    Case("GELU", **_after_linear(nn.GELU), erf=True),
    Case("GELU-tanh", **_after_linear(lambda: nn.GELU(approximate="tanh")), opt="adam"),
    Case("Softmax", **_after_linear(lambda: nn.Softmax(dim=-1))),
    Case("Softmax-axis0", **_after_linear(lambda: nn.Softmax(axis=0)), opt="adam"),
    Case("Softmax-3d-dim1", lambda kw: nn.Sequential(nn.Linear(4, 4, **kw), nn.Softmax(dim=1)), _x(2, 3, 4)),
    Case("SiLU", **_after_linear(nn.SiLU)),
    Case("SiLU-inplace", **_after_linear(lambda: nn.SiLU(inplace=True))),
    Case("Mish", **_after_linear(nn.Mish), opt="adam"),
    Case("Mish-inplace", **_after_linear(lambda: nn.Mish(inplace=True))),
    Case("Softplus", **_after_linear(lambda: nn.Softplus(beta=2.0, threshold=1.0))),
    Case("ELU", **_after_linear(lambda: nn.ELU(0.5)), opt="adam"),
    Case("ELU-inplace", **_after_linear(lambda: nn.ELU(0.5, inplace=True))),
    Case("Hardtanh", **_after_linear(lambda: nn.Hardtanh(-0.5, 0.5))),
    Case("Hardtanh-inplace", **_after_linear(lambda: nn.Hardtanh(-0.5, 0.5, inplace=True)), opt="adam"),
    Case("Hardtanh-relu6-inplace", **_after_linear(lambda: nn.Hardtanh(0.0, 6.0, inplace=True))),
    # dropout: each run seeded alike
    Case("Dropout", **_after_linear(lambda: nn.Dropout(0.3))),
    Case("Dropout-inplace", **_after_linear(lambda: nn.Dropout(0.3, inplace=True)), opt="adam"),
    Case("Dropout-p0", **_after_linear(lambda: nn.Dropout(0.0))),
    Case("Dropout-eval", _eval(lambda kw: nn.Sequential(nn.Linear(4, 6, **kw), nn.Dropout(0.5))), _x(3, 4)),
    # convolutions
    Case("Conv1d", lambda kw: nn.Conv1d(2, 3, 3, padding=1, **kw), _x(2, 2, 6)),
    Case("Conv1d-stride-dilation", lambda kw: nn.Conv1d(2, 4, 3, stride=2, dilation=2, groups=2, **kw),
         _x(2, 2, 9), opt="adam"),
    Case("Conv2d", lambda kw: nn.Conv2d(2, 3, 3, padding=1, **kw), _x(2, 2, 5, 5)),
    Case("Conv2d-stride-groups", lambda kw: nn.Conv2d(2, 4, (3, 2), stride=2, padding=(1, 0), groups=2, **kw),
         _x(2, 2, 6, 5), opt="adam"),
    Case("Conv2d-no-bias-dilation", lambda kw: nn.Conv2d(2, 3, 3, dilation=2, bias=False, **kw), _x(2, 2, 7, 7)),
    Case("Conv2d-same-reflect", lambda kw: nn.Conv2d(2, 3, 3, padding="same", padding_mode="reflect", **kw),
         _x(2, 2, 5, 5), opt="adam"),
    Case("Conv2d-circular", lambda kw: nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular", **kw), _x(2, 2, 5, 5)),
    Case("Conv1d-replicate", lambda kw: nn.Conv1d(2, 3, 3, padding=2, padding_mode="replicate", **kw), _x(2, 2, 5)),
    Case("Conv2d-unbatched", lambda kw: nn.Conv2d(2, 3, 3, **kw), _x(2, 5, 5), opt="adam"),
    Case("ConvTranspose1d", lambda kw: nn.ConvTranspose1d(2, 3, 3, stride=2, padding=1, output_padding=1, **kw),
         _x(2, 2, 5)),
    Case("ConvTranspose2d", lambda kw: nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1, **kw),
         _x(2, 2, 3, 4), opt="adam"),
    Case("ConvTranspose2d-groups", lambda kw: nn.ConvTranspose2d(4, 2, 2, groups=2, **kw), _x(2, 4, 3, 3)),
    Case("ConvTranspose1d-dilation", lambda kw: nn.ConvTranspose1d(2, 2, 3, stride=3, dilation=2, padding=2, **kw),
         _x(2, 2, 4), opt="adam"),
    # normalisation
    Case("BatchNorm1d", **_after_linear(lambda: nn.BatchNorm1d(6, dtype=F64), batch=5)),
    Case("BatchNorm1d-3d-input", lambda kw: nn.Sequential(nn.Conv1d(2, 3, 3, **kw), nn.BatchNorm1d(3, **kw)),
         _x(3, 2, 6), opt="adam"),
    Case("BatchNorm1d-cumulative", **_after_linear(lambda: nn.BatchNorm1d(6, momentum=None, dtype=F64), batch=5)),
    Case("BatchNorm1d-no-stats", **_after_linear(lambda: nn.BatchNorm1d(6, track_running_stats=False, dtype=F64),
                                                 batch=5)),
    Case("BatchNorm2d", lambda kw: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, **kw), nn.BatchNorm2d(3, **kw),
                                                 nn.ReLU()), _x(2, 2, 4, 4), opt="adam"),
    Case("BatchNorm2d-no-affine", lambda kw: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, **kw),
                                                           nn.BatchNorm2d(3, affine=False, **kw)), _x(2, 2, 4, 4)),
    Case("BatchNorm2d-inplace-relu", lambda kw: nn.Sequential(nn.Conv2d(2, 3, 3, **kw), nn.BatchNorm2d(3, **kw),
                                                              nn.ReLU(inplace=True)), _x(2, 2, 4, 4)),
    Case("BatchNorm1d-cumulative-relu", lambda kw: nn.Sequential(nn.Linear(4, 3, **kw),
                                                                 nn.BatchNorm1d(3, momentum=None, **kw), nn.ReLU()),
         _x(4, 4), opt="adam"),
    Case("BatchNorm1d-eval", _eval(lambda kw: nn.Sequential(nn.Linear(4, 6, **kw), nn.BatchNorm1d(6, **kw))),
         _x(5, 4)),
    Case("BatchNorm2d-eval-relu", _eval(lambda kw: nn.Sequential(nn.Conv2d(2, 3, 3, **kw), nn.BatchNorm2d(3, **kw),
                                                                 nn.ReLU())), _x(2, 2, 4, 4), opt="adam"),
    Case("LayerNorm", lambda kw: nn.Sequential(nn.Linear(4, 5, **kw), nn.LayerNorm(5, **kw)), _x(3, 4)),
    Case("LayerNorm-2d-no-affine", lambda kw: nn.Sequential(nn.Linear(4, 5, **kw),
                                                            nn.LayerNorm((2, 5), elementwise_affine=False, **kw)),
         _x(3, 2, 4), opt="adam"),
    Case("LayerNorm-no-bias", lambda kw: nn.Sequential(nn.Linear(4, 5, **kw), nn.LayerNorm(5, bias=False, **kw)),
         _x(3, 4)),
    Case("GroupNorm", lambda kw: nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, **kw), nn.GroupNorm(2, 4, **kw)),
         _x(2, 2, 4, 4)),
    Case("GroupNorm-1d-no-affine", **_after_conv1d(lambda: nn.GroupNorm(3, 3, affine=False)), opt="adam"),
    Case("GroupNorm-2d-input", lambda kw: nn.Sequential(nn.Linear(4, 6, **kw), nn.GroupNorm(3, 6, **kw)), _x(3, 4)),
    # embeddings
    Case("Embedding", lambda kw: nn.Embedding(10, 4, **kw), _ids(10, 3, 5)),
    Case("Embedding-padding-idx", lambda kw: nn.Embedding(6, 4, padding_idx=0, **kw), _ids(6, 4, 5), opt="adam"),
    # recurrent layers
    Case("RNN", lambda kw: nn.RNN(3, 4, **kw), _seq),
    Case("RNN-relu-2-layers-hx", lambda kw: nn.RNN(3, 4, num_layers=2, nonlinearity="relu", **kw), _seq_h(2),
         opt="adam"),
    Case("RNN-bidirectional-batch-first", lambda kw: nn.RNN(3, 4, bidirectional=True, batch_first=True, **kw),
         _seq),
    Case("LSTM", lambda kw: nn.LSTM(3, 4, **kw), _seq, opt="adam"),
    Case("LSTM-hx", lambda kw: nn.LSTM(3, 4, **kw), _seq_hc),
    Case("LSTM-unbatched", lambda kw: nn.LSTM(3, 4, **kw), _x(4, 3), opt="adam"),
    Case("LSTM-2-layers-dropout-eval", _eval(lambda kw: nn.LSTM(3, 4, num_layers=2, dropout=0.5, **kw)), _seq),
    Case("LSTM-2-layers-dropout-bidirectional", lambda kw: nn.LSTM(3, 4, num_layers=2, dropout=0.3,
                                                                   bidirectional=True, **kw), _seq),
    Case("GRU", lambda kw: nn.GRU(3, 4, **kw), _seq),
    Case("GRU-2-layers-dropout-batch-first", lambda kw: nn.GRU(3, 4, num_layers=2, dropout=0.4, batch_first=True,
                                                               **kw), _seq),
    Case("GRU-2-layers-hx-no-bias", lambda kw: nn.GRU(3, 4, num_layers=2, bias=False, **kw), _seq_h(2),
         opt="adam"),
    Case("RNNCell", lambda kw: nn.RNNCell(3, 4, **kw), _cell),
    Case("RNNCell-relu-hx", lambda kw: nn.RNNCell(3, 4, nonlinearity="relu", **kw), _cell_h, opt="adam"),
    Case("LSTMCell", lambda kw: nn.LSTMCell(3, 4, **kw), _cell),
    Case("LSTMCell-hx", lambda kw: nn.LSTMCell(3, 4, **kw), _cell_hc, opt="adam"),
    Case("GRUCell", lambda kw: nn.GRUCell(3, 4, **kw), _cell),
    Case("GRUCell-hx", lambda kw: nn.GRUCell(3, 4, **kw), _cell_h, opt="adam"),
    Case("GRUCell-unbatched", lambda kw: nn.GRUCell(3, 4, **kw), _x(3)),
    # attention and transformers
    Case("MultiheadAttention", lambda kw: nn.MultiheadAttention(8, 2, batch_first=True, **kw), _self_attention),
    Case("MultiheadAttention-cross-per-head-weights",
         lambda kw: nn.MultiheadAttention(8, 2, batch_first=True, **kw), _cross_attention, opt="adam",
         kwargs=dict(average_attn_weights=False)),
    Case("MultiheadAttention-causal-padded-dropout",
         lambda kw: nn.MultiheadAttention(8, 2, dropout=0.2, batch_first=True, **kw), _self_attention,
         kwargs=dict(attn_mask=CAUSAL, key_padding_mask=PADDED, need_weights=False)),
    Case("MultiheadAttention-float-mask-argument", lambda kw: nn.MultiheadAttention(8, 2, batch_first=True, **kw),
         _float_mask),
    Case("MultiheadAttention-unbatched", lambda kw: nn.MultiheadAttention(8, 2, **kw), _unbatched_attention,
         opt="adam"),
    Case("MultiheadAttention-seq-first-no-bias", lambda kw: nn.MultiheadAttention(8, 4, bias=False, **kw),
         _self_attention, opt="adam"),
    Case("TransformerEncoderLayer", _layer("TransformerEncoderLayer"), lambda rng, device: (_tokens(rng, device),)),
    Case("TransformerEncoderLayer-norm-first-gelu-causal",
         _layer("TransformerEncoderLayer", norm_first=True, activation="gelu", dropout=0.0),
         lambda rng, device: (_tokens(rng, device),), opt="adam", kwargs=dict(src_mask=CAUSAL, is_causal=True),
         erf=True),
    Case("TransformerEncoder", _stack("TransformerEncoder", "TransformerEncoderLayer"),
         lambda rng, device: (_tokens(rng, device),), kwargs=dict(src_key_padding_mask=PADDED)),
    Case("TransformerEncoder-causal-found", _stack("TransformerEncoder", "TransformerEncoderLayer"),
         lambda rng, device: (_tokens(rng, device),), opt="adam", kwargs=dict(mask=CAUSAL)),
    Case("TransformerEncoder-float-padding-no-norm", _stack("TransformerEncoder", "TransformerEncoderLayer",
                                                            norm=False),
         lambda rng, device: (_tokens(rng, device),), kwargs=dict(src_key_padding_mask=np.where(PADDED, -np.inf, 0))),
    Case("TransformerDecoderLayer", _layer("TransformerDecoderLayer"), _tgt_memory, opt="adam"),
    Case("TransformerDecoder", _stack("TransformerDecoder", "TransformerDecoderLayer", norm_first=True),
         _tgt_memory, kwargs=dict(tgt_mask=CAUSAL[:4, :4])),
    Case("Transformer", lambda kw: nn.Transformer(8, 2, 1, 1, dim_feedforward=16, batch_first=True, **kw),
         lambda rng, device: (_tokens(rng, device), _tokens(rng, device, length=4)), opt="adam"),
    Case("TransformerDecoder-masks", _stack("TransformerDecoder", "TransformerDecoderLayer"), _tgt_memory,
         kwargs=dict(tgt_mask=CAUSAL[:4, :4], memory_key_padding_mask=PADDED, tgt_is_causal=True)),
    Case("Transformer-norm-first-gelu-masks",
         lambda kw: nn.Transformer(8, 2, 1, 1, dim_feedforward=16, batch_first=True, norm_first=True,
                                   activation="gelu", **kw),
         lambda rng, device: (_tokens(rng, device), _tokens(rng, device, length=4)), opt="adam",
         kwargs=dict(src_key_padding_mask=PADDED, tgt_mask=CAUSAL[:4, :4]), erf=True,
         # Ill-conditioned: eagerly, an input one ulp off moves its Adam state by 4e6 eps of the array's scale
         # (near-zero gradients of the decoder's norms, which Adam divides by their size). Fused: 258 eps.
         fused_atol=1e-12),
    Case("Transformer-eval", _eval(lambda kw: nn.Transformer(8, 2, 1, 1, dim_feedforward=16, batch_first=True, **kw)),
         lambda rng, device: (_tokens(rng, device), _tokens(rng, device, length=4))),
    # pooling
    Case("MaxPool2d", **_after_conv(lambda: nn.MaxPool2d(2))),
    Case("MaxPool2d-stride-padding", **_after_conv(lambda: nn.MaxPool2d(3, stride=2, padding=1), size=5), opt="adam"),
    Case("MaxPool2d-dilation-ceil", **_after_conv(lambda: nn.MaxPool2d(2, stride=2, dilation=2, ceil_mode=True),
                                                  size=7)),
    Case("MaxPool2d-return-indices", **_after_conv(lambda: nn.MaxPool2d(2, return_indices=True), size=4)),
    Case("AvgPool2d", **_after_conv(lambda: nn.AvgPool2d(2)), opt="adam"),
    Case("AvgPool2d-padding-no-pad-count", **_after_conv(lambda: nn.AvgPool2d(3, 1, 1, count_include_pad=False),
                                                         size=4)),
    Case("AvgPool2d-ceil-divisor", **_after_conv(lambda: nn.AvgPool2d(2, ceil_mode=True, divisor_override=3),
                                                 size=5)),
    Case("AdaptiveAvgPool2d", **_after_conv(lambda: nn.AdaptiveAvgPool2d((2, 3))), opt="adam"),
    Case("AdaptiveAvgPool2d-global", **_after_conv(lambda: nn.AdaptiveAvgPool2d(1))),
    Case("AdaptiveAvgPool2d-uneven", **_after_conv(lambda: nn.AdaptiveAvgPool2d((3, 4)), size=5)),
    Case("AdaptiveAvgPool2d-None", **_after_conv(lambda: nn.AdaptiveAvgPool2d((None, 2))), opt="adam"),
    # upsampling
    Case("Upsample-nearest-2d", **_upsample(4, scale_factor=2)),
    Case("Upsample-nearest-1d-size", **_upsample(3, size=8), opt="adam"),
    Case("Upsample-linear", **_upsample(3, scale_factor=2, mode="linear")),
    Case("Upsample-linear-align-corners", **_upsample(3, size=7, mode="linear", align_corners=True)),
    Case("Upsample-bilinear", **_upsample(4, scale_factor=(2, 1.5), mode="bilinear"), opt="adam"),
    Case("Upsample-nearest-1.5", **_upsample(4, scale_factor=1.5)),
    Case("Upsample-bilinear-down", **_upsample(4, size=(2, 3), mode="bilinear"), opt="adam"),
    Case("Upsample-bilinear-align-corners", **_upsample(4, size=(5, 5), mode="bilinear", align_corners=True)),
    # loss modules (their value squared is the loss)
    Case("CrossEntropyLoss", lambda kw: Head(nn.CrossEntropyLoss(), kw), _classes),
    Case("CrossEntropyLoss-smoothing-ignore-weight",
         lambda kw: Head(nn.CrossEntropyLoss(weight=Tensor(np.array([1.0, 2.0, 0.5])), label_smoothing=0.1), kw),
         _classes_ignored, opt="adam"),
    Case("NLLLoss", lambda kw: LogSoftmaxHead(nn.NLLLoss(), kw), _classes),
    Case("NLLLoss-sum-ignore", lambda kw: LogSoftmaxHead(nn.NLLLoss(reduction="sum"), kw), _classes_ignored,
         opt="adam"),
    Case("CrossEntropyLoss-probabilities", ProbabilityTargets, _class_probabilities),
    Case("CrossEntropyLoss-per-position", PerPosition, _positions, opt="adam"),
    Case("MSELoss", lambda kw: Head(nn.MSELoss(), kw), _regression),
    Case("MSELoss-none", lambda kw: Head(nn.MSELoss(reduction="none"), kw), _regression, opt="adam"),
    Case("L1Loss", lambda kw: Head(nn.L1Loss(reduction="sum"), kw), _regression, opt="adam"),
    Case("BCEWithLogitsLoss", lambda kw: Head(nn.BCEWithLogitsLoss(pos_weight=Tensor(np.array([1.0, 2.0, 3.0]))),
                                              kw), _probabilities),
    Case("SmoothL1Loss", lambda kw: Head(nn.SmoothL1Loss(beta=0.5), kw), _regression, opt="adam"),
    Case("HuberLoss", lambda kw: Head(nn.HuberLoss(delta=0.5), kw), _regression),
]

# Layers that must be reached by a case above: every layer class leanpass.nn exports.
NOT_LAYERS = {"Module", "Parameter"}


def test_every_layer_class_leanpass_nn_exports_has_a_case():
    exported = {name for name in nn.__all__ if isinstance(getattr(nn, name), type)
                and issubclass(getattr(nn, name), nn.Module)} - NOT_LAYERS
    covered = {part for case in CASES for part in case.name.split("-")}
    assert exported - covered == set()


# ---- the step and its comparison -----------------------------------------------------------------------------


def _floats(out):
    """The floating tensors among ``out`` (a Tensor, or tuples of them; None left out)."""
    if isinstance(out, Tensor):
        return [out] if out.dtype.kind == "f" else []
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _floats(item)]
    return []


def _square_mean(out):
    terms = [(t * t).mean() for t in _floats(out)]
    loss = terms[0]
    for term in terms[1:]:
        loss = loss + term
    return loss


def _stepper(model, opt, kwargs):
    def step(*args):
        opt.zero_grad()
        loss = _square_mean(model(*args, **kwargs))
        loss.backward()
        opt.step()
        return loss
    return step


OPTIMIZERS = {
    "sgd": lambda ps: lp.optim.SGD(ps, lr=0.05, momentum=0.9),
    "adam": lambda ps: lp.optim.Adam(ps, lr=1e-2),
}


def _copy(a):
    return np.array(host(a), copy=True)  # the live array changes in place at the next step


def _snapshot(loss, model, opt, args):
    """What a step leaves, copied to the host: the loss, each parameter and its gradient,
    each buffer, the optimizer's state and the input's gradient."""
    record = {"loss": _copy(loss)}
    for name, p in model.named_parameters():
        record[f"param {name}"] = _copy(p)
        record[f"grad {name}"] = None if p.grad is None else _copy(p.grad)
    for name, b in model.named_buffers():
        record[f"buffer {name}"] = _copy(b)
    names = {id(p): name for name, p in model.named_parameters()}
    for i, (ident, state) in enumerate(opt.state.items()):
        for key, value in state.items():
            copied = value if isinstance(value, (int, float)) else _copy(value)
            record[f"opt state {key} {names.get(ident, i)}"] = copied
    first = args[0]
    if isinstance(first, Tensor) and first.requires_grad:
        record["input grad"] = None if first.grad is None else _copy(first.grad)
    return record


def _run(step, model, opt, case, device, seeds):
    """``step`` over the inputs of ``seeds``, the random stream seeded first: each step's
    snapshot."""
    records = []
    lp.manual_seed(1234)
    for seed in seeds:
        args = case.inputs(np.random.default_rng(seed), device)
        if isinstance(args[0], Tensor) and args[0].dtype.kind == "f":
            args[0].requires_grad_()
        records.append(_snapshot(step(*args), model, opt, args))
    return records


def _close(got, expected, what, atol):
    """``got`` within a few ulp of ``expected`` (fuse=True), on the array's scale."""
    got, expected = np.asarray(got), np.asarray(expected)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    if what.endswith("in_proj_bias") and expected.ndim == 1:  # its key rows: see KEY_BIAS_ATOL
        third = expected.shape[0] // 3
        keys = slice(third, 2 * third)
        np.testing.assert_allclose(got[keys], expected[keys], rtol=0, atol=KEY_BIAS_ATOL, err_msg=what)
        got, expected = np.delete(got, np.arange(third, 2 * third)), np.delete(expected, np.arange(third, 2 * third))
    np.testing.assert_allclose(got, expected, rtol=FUSED_RTOL, atol=atol * scale, err_msg=what)


def _compare(eager, compiled, exact, atol=FUSED_ATOL):
    for i, (a, b) in enumerate(zip(eager, compiled)):
        assert a.keys() == b.keys(), f"step {i}: what the runs left differs"
        for key in a:
            if a[key] is None or b[key] is None:
                assert a[key] is None and b[key] is None, f"step {i}: {key}: {a[key]} eagerly, {b[key]} compiled"
            elif exact:
                np.testing.assert_array_equal(b[key], a[key], err_msg=f"step {i}: {key}")
            else:
                _close(b[key], a[key], f"step {i}: {key}", atol)


def _check_layer(case, device, fuse, steps, exact=True):
    if case.erf and not get_backend(device).special.available:
        pytest.skip(f"exact GELU needs erf, which {device} has not got")
    kw = dict(device=device, dtype=F64)
    models = []
    for _ in range(2):
        lp.manual_seed(0)
        models.append(case.build(kw).to(device=device))
    models[1].load_state_dict(models[0].state_dict())
    opts = [OPTIMIZERS[case.opt](m.parameters()) for m in models]
    eager = _stepper(models[0], opts[0], case.kwargs)
    compiled = lp.compile(_stepper(models[1], opts[1], case.kwargs), fuse=fuse)
    seeds = [int(s) for s in np.random.default_rng(zlib.crc32(case.name.encode())).integers(0, 2**31, size=steps)]
    expected = _run(eager, models[0], opts[0], case, device, seeds)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _run(compiled, models[1], opts[1], case, device, seeds)
    _compare(expected, got, exact=exact, atol=case.fused_atol or FUSED_ATOL)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert compiled.calls == {"traced": 1, "replayed": steps - 1, "eager": 0}, (compiled.calls, said)
    assert not said, said
    return compiled


# ---- the sweeps ----------------------------------------------------------------------------------------------


def _params():
    return [pytest.param(case, id=case.name) for case in CASES]


@pytest.mark.parametrize("case", _params())
def test_a_compiled_step_through_each_layer_is_the_eager_step_bit_for_bit(case, device):
    _check_layer(case, device, fuse=False, steps=STEPS)


@pytest.mark.skipif(not fusion_enabled(), reason="LEANPASS_FUSE=0 turns fusion off")
@pytest.mark.parametrize("case", _params())
def test_a_fused_step_through_each_layer_is_the_eager_step_within_a_few_ulp(case, device):
    """Runs compiled into one loop (the cpu with Numba, cuda): a few ulp; flat runs (strict,
    or the cpu without Numba) call eager's kernels: bit for bit."""
    compiled_runs = device.startswith("cuda") or (device == "cpu" and _numba.enabled())
    _check_layer(case, device, fuse=True, steps=FUSED_STEPS, exact=not compiled_runs)
