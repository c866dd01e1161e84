"""The CNN and the transformer block the benchmarks time, written once for both
frameworks: ``torch.nn`` and ``leanpass.nn`` take the same layers, arguments and
parameter names here, so one class serves both and PyTorch's weights load into
LeanPass with ``load_state_dict(..., layout="torch")``.

- ``cnn(nn, ...)``: two blocks of 3x3 convolution, batch normalisation and ReLU
  (2x2 max-pooling after the first), a global average pool and a Linear head.
- ``transformer_block(nn, ...)``: pre-LayerNorm causal self-attention and a GELU
  MLP (4x wide), each with its residual connection (GPT-2's block).
- ``transformer(nn, ...)``: blocks of those, a final LayerNorm and a Linear head.
"""

from __future__ import annotations


def cnn(nn, channels=(32, 64), classes=10, *, device=None, dtype=None):
    """A ``Sequential`` CNN for ``(batch, 1, side, side)`` images."""
    layers, before = [], 1
    for i, width in enumerate(channels):
        layers += [nn.Conv2d(before, width, 3, padding=1, bias=False, device=device, dtype=dtype),
                   nn.BatchNorm2d(width, device=device, dtype=dtype), nn.ReLU()]
        if i == 0:
            layers.append(nn.MaxPool2d(2))
        before = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(before, classes, device=device, dtype=dtype)]
    return nn.Sequential(*layers)


def transformer_block(nn, width=128, heads=4, *, device=None, dtype=None):
    """A causal transformer block: call it with ``(x, mask)``, ``x`` of shape
    ``(batch, length, width)`` and ``mask`` the ``(length, length)`` bool mask that is
    True above the diagonal (where ``MultiheadAttention`` may not look)."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            kw = dict(device=device, dtype=dtype)
            self.ln1 = nn.LayerNorm(width, **kw)
            self.attn = nn.MultiheadAttention(width, heads, batch_first=True, **kw)
            self.ln2 = nn.LayerNorm(width, **kw)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width, **kw), nn.GELU(approximate="tanh"),
                                     nn.Linear(4 * width, width, **kw))

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False, is_causal=True)[0]
            return x + self.mlp(self.ln2(x))

    return Block()


def transformer(nn, width=128, heads=4, depth=2, classes=64, *, device=None, dtype=None):
    """``depth`` of :func:`transformer_block` then a final LayerNorm and a Linear head
    to ``classes`` logits per position: call it with ``(x, mask)`` as a block."""

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([transformer_block(nn, width, heads, device=device, dtype=dtype)
                                         for _ in range(depth)])
            self.norm = nn.LayerNorm(width, device=device, dtype=dtype)
            self.head = nn.Linear(width, classes, device=device, dtype=dtype)

        def forward(self, x, mask):
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.norm(x))

    return Transformer()
