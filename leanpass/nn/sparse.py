"""``Embedding``: a lookup table of rows, as ``torch.nn.Embedding``."""

from __future__ import annotations

from ..autograd import no_grad
from ..backends import get_backend
from ..tensor import Tensor
from . import functional as F
from .layers import _parameter_dtype
from .module import Module, Parameter

__all__ = ["Embedding"]


class Embedding(Module):
    """``weight`` of shape ``(num_embeddings, embedding_dim)``, drawn from N(0, 1) on
    the host (one seed, the same weights on every device); calling it with integer
    indices of any shape (a Tensor or array-like) gives their rows, of shape
    ``indices.shape + (embedding_dim,)``. The row ``padding_idx`` (negative counts
    from the end) starts at zeros and gets no gradient."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, *, device=None,
                 dtype=None):
        if num_embeddings < 1 or embedding_dim < 1:
            raise ValueError(f"Embedding: sizes must be positive, got ({num_embeddings}, {embedding_dim})")
        if padding_idx is not None:
            padding_idx = F._padding_index(padding_idx, num_embeddings, "Embedding")
        dtype = _parameter_dtype(dtype, "Embedding")
        backend = get_backend(device)
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.padding_idx = padding_idx
        weight = backend.init_normal((num_embeddings, embedding_dim), 0.0, 1.0, dtype)
        self.weight = Parameter(weight, name="weight", device=backend.device)
        if padding_idx is not None:
            with no_grad():
                self.weight[padding_idx] = 0.0

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx: int | None = None) -> Embedding:
        """An Embedding whose table is ``embeddings`` (a 2-D floating-point Tensor or
        array: one row per index), as ``torch.nn.Embedding.from_pretrained``: frozen
        (``requires_grad=False``) unless ``freeze=False``; the row ``padding_idx`` keeps
        its values and gets no gradient. The table is a copy on the tensor's device (a
        LeanPass Parameter owns its data)."""
        if not isinstance(embeddings, Tensor):
            embeddings = Tensor(embeddings)
        if embeddings.ndim != 2 or 0 in embeddings.shape:
            raise ValueError(f"Embedding.from_pretrained: embeddings must be a 2-D table with rows and columns, "
                             f"got shape {embeddings.shape}")
        if embeddings.dtype.kind != "f":
            raise TypeError(f"Embedding.from_pretrained: embeddings must be floating point, got {embeddings.dtype}")
        rows, dim = embeddings.shape
        # made by cls(...), as PyTorch's: a subclass's __init__ runs; then the given table
        module = cls(rows, dim, padding_idx, device=embeddings.device, dtype=str(embeddings.dtype))
        module.weight = Parameter(embeddings.detach(), requires_grad=not freeze, name="weight",
                                  device=embeddings.device)
        return module

    def forward(self, indices) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx, _op="Embedding")

    def extra_repr(self) -> str:
        extra = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{extra}"
