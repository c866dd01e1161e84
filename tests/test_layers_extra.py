"""LayerNorm, Embedding, scaled_dot_product_attention and leanpass.nn.functional:
PyTorch's values and gradients, second derivatives, seeds, and errors that change nothing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import close, host, torch_or_skip

import leanpass
from leanpass import Tensor, nn
from leanpass.nn import functional as F

RTOL = 1e-10



def pair(torch, array, device, requires_grad=True):
    return (Tensor(array, requires_grad=requires_grad, device=device),
            torch.tensor(array, requires_grad=requires_grad))


# ---- LayerNorm ----------------------------------------------------------------------------------


@pytest.mark.parametrize("normalized_shape", [4, (4,), (3, 4), (2, 3, 4)])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_torch(device, normalized_shape, affine):
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    x, tx = pair(torch, rng.normal(size=(2, 2, 3, 4)) * 3 + 1, device)
    ours = nn.LayerNorm(normalized_shape, eps=1e-4, elementwise_affine=affine, device=device, dtype="float64")
    theirs = torch.nn.LayerNorm(normalized_shape, eps=1e-4, elementwise_affine=affine, dtype=torch.float64)
    if affine:
        w, b = rng.normal(size=ours.weight.shape), rng.normal(size=ours.bias.shape)
        ours.load_state_dict({"weight": w, "bias": b})
        theirs.load_state_dict({"weight": torch.tensor(w), "bias": torch.tensor(b)})
    else:
        assert ours.weight is None and ours.bias is None and ours.parameters() == []
    g = rng.normal(size=x.shape)
    y, ty = ours(x), theirs(tx)
    close(y, ty)
    (y * Tensor(g, device=device)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    close(x.grad, tx.grad)
    if affine:
        close(ours.weight.grad, theirs.weight.grad)
        close(ours.bias.grad, theirs.bias.grad)


def test_layer_norm_parameters_and_bias_off(device):
    ln = nn.LayerNorm((2, 3), device=device)
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    assert np.all(host(ln.weight) == 1) and np.all(host(ln.bias) == 0)
    assert ln.weight.shape == (2, 3) and ln.weight.device == device
    no_bias = nn.LayerNorm(3, bias=False, device=device)
    assert no_bias.bias is None and [n for n, _ in no_bias.named_parameters()] == ["weight"]
    assert repr(no_bias) == "LayerNorm((3,), eps=1e-05, elementwise_affine=True, bias=False)"  # as PyTorch's


def test_layer_norm_functional_matches_torch(device):
    torch = torch_or_skip()
    rng = np.random.default_rng(1)
    x, tx = pair(torch, rng.normal(size=(3, 5)), device)
    w, tw = pair(torch, rng.normal(size=(5,)), device)
    y = F.layer_norm(x, (5,), w, eps=1e-3)
    ty = torch.nn.functional.layer_norm(tx, (5,), tw, eps=1e-3)
    close(y, ty)
    y.sum().backward()
    ty.sum().backward()
    close(w.grad, tw.grad)
    close(x.grad, tx.grad)


def test_layer_norm_second_derivatives(device):
    rng = np.random.default_rng(2)
    x = Tensor(rng.normal(size=(2, 3)), requires_grad=True, device=device)
    w = Tensor(rng.normal(size=(3,)), requires_grad=True, device=device)
    b = Tensor(rng.normal(size=(3,)), requires_grad=True, device=device)
    fn = lambda x, w, b: F.layer_norm(x, 3, w, b)  # noqa: E731
    assert leanpass.gradcheck(fn, (x, w, b))
    assert leanpass.gradgradcheck(fn, (x, w, b))


def test_layer_norm_bad_input_changes_nothing(device):
    ln = nn.LayerNorm((3, 4), device=device)
    before = host(ln.weight).copy()
    x = Tensor(np.ones((2, 4, 3)), requires_grad=True, device=device)
    with pytest.raises(ValueError, match=r"LayerNorm: input of shape \(2, 4, 3\) does not end in normalized_shape "
                                         r"\(3, 4\)"):
        ln(x)
    with pytest.raises(ValueError, match=r"layer_norm: input of shape \(4,\) does not end in normalized_shape"):
        F.layer_norm(Tensor(np.ones(4), device=device), (3, 4))
    with pytest.raises(ValueError, match=r"layer_norm: weight of shape \(3,\) is not normalized_shape \(4,\)"):
        F.layer_norm(Tensor(np.ones(4), device=device), 4, Tensor(np.ones(3), device=device))
    with pytest.raises(ValueError, match="LayerNorm: normalized_shape"):
        nn.LayerNorm(())
    with pytest.raises(TypeError, match="LayerNorm: expected a Tensor"):
        ln(np.ones((3, 4)))
    assert np.array_equal(host(ln.weight), before) and not ln.weight.has_grad and not x.has_grad


# ---- Embedding ----------------------------------------------------------------------------------


def test_embedding_weights_come_from_the_seed_on_every_device(device):
    leanpass.manual_seed(5)
    e = nn.Embedding(6, 3, device=device)
    assert e.weight.shape == (6, 3) and e.weight.device == device and e.weight.dtype == "float64"
    np.testing.assert_array_equal(host(e.weight), np.random.default_rng(5).normal(0.0, 1.0, (6, 3)))
    leanpass.manual_seed(5)
    padded = nn.Embedding(6, 3, padding_idx=-2, device=device)
    assert padded.padding_idx == 4 and np.all(host(padded.weight)[4] == 0)
    assert repr(padded) == "Embedding(6, 3, padding_idx=4)"


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("indices", [[3, 2, 3, 0, 3], [[0, 2, 2], [4, 1, 2]], 1])
def test_embedding_matches_torch(device, padding_idx, indices):
    torch = torch_or_skip()
    ours = nn.Embedding(5, 3, padding_idx=padding_idx, device=device)
    theirs = torch.nn.Embedding(5, 3, padding_idx=padding_idx, dtype=torch.float64)
    theirs.load_state_dict({"weight": torch.tensor(host(ours.weight))})
    y, ty = ours(indices), theirs(torch.tensor(indices))
    assert y.shape == tuple(ty.shape)
    close(y, ty)
    g = np.random.default_rng(3).normal(size=y.shape)
    (y * Tensor(g, device=device)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    close(ours.weight.grad, theirs.weight.grad)
    # a Tensor of int32 indices gives the same
    ours.weight.grad = None
    index = Tensor(np.asarray(indices), dtype="int32", device=device)
    (ours(index) * Tensor(g, device=device)).sum().backward()
    close(ours.weight.grad, theirs.weight.grad)


def test_embedding_repeated_indices_accumulate_and_padding_gets_none(device):
    e = nn.Embedding(4, 2, padding_idx=0, device=device)
    e([[1, 1, 0], [1, 3, 0]]).sum().backward()
    assert host(e.weight.grad).tolist() == [[0, 0], [3, 3], [0, 0], [1, 1]]


def test_embedding_functional_and_second_derivatives(device):
    rng = np.random.default_rng(4)
    w = Tensor(rng.normal(size=(4, 3)), requires_grad=True, device=device)
    fn = lambda w: F.embedding([[0, 3], [3, 1]], w) ** 2  # noqa: E731 (a padding row would fail the check)
    assert fn(w).shape == (2, 2, 3)
    assert leanpass.gradcheck(fn, (w,))
    assert leanpass.gradgradcheck(fn, (w,))


def test_embedding_bad_indices_change_nothing(device):
    e = nn.Embedding(4, 2, device=device)
    before = host(e.weight).copy()
    for bad in ([0, 4], [[-1, 2]]):
        with pytest.raises(IndexError, match=r"Embedding: indices must be in \[0, 4\) for a table of 4 rows"):
            e(bad)
    with pytest.raises(IndexError, match=r"embedding: indices must be in \[0, 4\)"):
        F.embedding(Tensor([7], dtype="int64", device=device), e.weight)
    with pytest.raises(TypeError, match="Embedding: indices must have an integer dtype"):
        e([0.0, 1.0])
    with pytest.raises(ValueError, match=r"Embedding: padding_idx must be within \[-4, 4\)"):
        nn.Embedding(4, 2, padding_idx=4)
    assert np.array_equal(host(e.weight), before) and not e.weight.has_grad


# ---- scaled_dot_product_attention -----------------------------------------------------------------


def _attention_case(torch, device, q_shape, k_shape, v_shape, seed=0):
    rng = np.random.default_rng(seed)
    return [pair(torch, rng.normal(size=s), device) for s in (q_shape, k_shape, v_shape)]


@pytest.mark.parametrize("mask", [None, "bool", "float", "causal", "scale"])
@pytest.mark.parametrize("shapes", [((4, 3), (5, 3), (5, 2)), ((2, 3, 4, 3), (2, 3, 6, 3), (2, 3, 6, 5)),
                                    ((2, 1, 4, 3), (3, 6, 3), (1, 6, 2))])
def test_attention_matches_torch(device, mask, shapes):
    torch = torch_or_skip()
    (q, tq), (k, tk), (v, tv) = _attention_case(torch, device, *shapes)
    length, source = shapes[0][-2], shapes[1][-2]
    kwargs, tkwargs = {}, {}
    rng = np.random.default_rng(1)
    if mask == "bool":
        m = rng.random((length, source)) < 0.6
        m[:, 0] = True  # every query sees a key
        kwargs["attn_mask"], tkwargs["attn_mask"] = leanpass.asarray(m, device=device), torch.tensor(m)
    elif mask == "float":
        m = rng.normal(size=(length, source))
        kwargs["attn_mask"], tkwargs["attn_mask"] = m, torch.tensor(m)  # host data is fine too
    elif mask == "causal":
        kwargs["is_causal"] = tkwargs["is_causal"] = True
    elif mask == "scale":
        kwargs["scale"] = tkwargs["scale"] = 0.3
    y = F.scaled_dot_product_attention(q, k, v, **kwargs)
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **tkwargs)
    assert y.shape == tuple(ty.shape)
    close(y, ty)
    g = rng.normal(size=y.shape)
    (y * Tensor(g, device=device)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    for ours, theirs in ((q, tq), (k, tk), (v, tv)):
        close(ours.grad, theirs.grad)


def test_attention_second_derivatives(device):
    rng = np.random.default_rng(6)
    q, k, v = (Tensor(rng.normal(size=s), requires_grad=True, device=device) for s in ((2, 3), (3, 3), (3, 2)))
    for kwargs in ({}, {"is_causal": True}, {"attn_mask": [[True, False, True]] * 2}):
        fn = lambda q, k, v, kwargs=kwargs: F.scaled_dot_product_attention(q, k, v, **kwargs)  # noqa: E731
        assert leanpass.gradcheck(fn, (q, k, v))
        assert leanpass.gradgradcheck(fn, (q, k, v))


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("dropout_p", [0.0, 0.5])
def test_attention_query_masked_everywhere_gets_zeros_as_torch(device, kind, dropout_p):
    """A query whose every key is masked gets weights 0 (PyTorch's safe softmax),
    not NaN, with and without dropout; the gradients stay finite (a NaN row would
    make every key's and value's gradient NaN), and with no dropout equal PyTorch's."""
    torch = torch_or_skip()
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=s) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 4))]
    allowed = rng.random((3, 5)) > 0.4
    allowed[:, 0] = True
    allowed[1] = False  # the second query may look nowhere
    mask = allowed if kind == "bool" else np.where(allowed, 0.0, -np.inf)
    ours = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    leanpass.manual_seed(0)
    y = F.scaled_dot_product_attention(*ours, attn_mask=leanpass.asarray(mask, device=device), dropout_p=dropout_p)
    y.sum().backward()
    assert np.all(host(y)[:, 1] == 0.0)
    assert all(np.isfinite(host(t.grad)).all() for t in ours)
    if dropout_p == 0.0:
        theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
        ty = torch.nn.functional.scaled_dot_product_attention(*theirs, attn_mask=torch.tensor(mask))
        ty.sum().backward()
        close(y, ty)
        for t, tt in zip(ours, theirs):
            close(t.grad, tt.grad)


def test_attention_dropout_uses_the_seeded_dropout_masks(device):
    rng = np.random.default_rng(7)
    q, k, v = (Tensor(rng.normal(size=(3, 4)), device=device) for _ in range(3))
    leanpass.manual_seed(3)
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    leanpass.manual_seed(3)
    weights = F.dropout((q @ k.mT * 0.5).softmax(-1), 0.5)
    np.testing.assert_allclose(host(y), host((weights @ v).data), rtol=RTOL)
    assert not np.allclose(host(y), host(F.scaled_dot_product_attention(q, k, v).data))


def test_attention_bad_input_raises_naming_shapes(device):
    q = Tensor(np.ones((2, 4, 3)), requires_grad=True, device=device)
    k = Tensor(np.ones((2, 5, 3)), device=device)
    v = Tensor(np.ones((2, 5, 2)), device=device)
    name = "scaled_dot_product_attention"
    with pytest.raises(ValueError, match=rf"{name}: q of shape \(2, 4, 3\), k of shape \(2, 5, 2\) and v of shape "
                                         r"\(2, 5, 2\) do not fit"):
        F.scaled_dot_product_attention(q, v, v)
    with pytest.raises(ValueError, match=rf"{name}: q of shape \(2, 4, 3\), k of shape \(2, 5, 3\) and v of shape "
                                         r"\(2, 4, 2\) do not fit"):
        F.scaled_dot_product_attention(q, k, Tensor(np.ones((2, 4, 2)), device=device))
    with pytest.raises(ValueError, match=rf"{name}: the leading axes of q of shape \(2, 4, 3\)"):
        F.scaled_dot_product_attention(q, Tensor(np.ones((3, 5, 3)), device=device), v)
    with pytest.raises(ValueError, match=rf"{name}: attn_mask of shape \(4, 4\) does not broadcast to the scores' "
                                         r"shape \(2, 4, 5\)"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 4), dtype=bool))
    with pytest.raises(ValueError, match=f"{name}: give attn_mask or is_causal, not both"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 5), dtype=bool), is_causal=True)
    with pytest.raises(ValueError, match=f"{name}: dropout_p must be in"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert not q.has_grad


# ---- the other functions -----------------------------------------------------------------------


def test_functional_wrappers_match_the_methods_and_losses(device):
    torch = torch_or_skip()
    rng = np.random.default_rng(8)
    x, tx = pair(torch, rng.normal(size=(3, 4)), device)
    w, b = rng.normal(size=(2, 4)), rng.normal(size=(2,))  # w (out, in), as PyTorch's
    close(F.linear(x, Tensor(w, device=device), Tensor(b, device=device)),
          torch.nn.functional.linear(tx, torch.tensor(w), torch.tensor(b)))
    close(F.linear(x, Tensor(w, device=device)), torch.nn.functional.linear(tx, torch.tensor(w)))
    for ours, theirs in ((F.relu, torch.relu), (F.sigmoid, torch.sigmoid), (F.tanh, torch.tanh),
                         (F.softmax, lambda t: torch.softmax(t, -1)),
                         (F.log_softmax, lambda t: torch.log_softmax(t, -1)),
                         (lambda t: F.gelu(t, approximate="tanh"),
                          lambda t: torch.nn.functional.gelu(t, approximate="tanh"))):
        close(ours(x), theirs(tx))
    if leanpass.backends.get_backend(device).special.available:  # the exact GELU needs erf (not on strict)
        close(F.gelu(x), torch.nn.functional.gelu(tx))
    close(F.softmax(x, 0), torch.softmax(tx, 0))
    target = rng.normal(size=(3, 4))
    close(F.mse_loss(x, target), torch.nn.functional.mse_loss(tx, torch.tensor(target)))
    close(F.cross_entropy(x, [0, 3, 1]), torch.nn.functional.cross_entropy(tx, torch.tensor([0, 3, 1])))
    probabilities = rng.random((3, 4))
    close(F.binary_cross_entropy_with_logits(x, probabilities),
          torch.nn.functional.binary_cross_entropy_with_logits(tx, torch.tensor(probabilities)))
    assert F.dropout(x, 0.5, training=False) is x and F.dropout(x, 0.0) is x
    leanpass.manual_seed(2)
    dropped = F.dropout(x, 0.25)
    leanpass.manual_seed(2)
    np.testing.assert_array_equal(host(dropped), host(nn.Dropout(0.25)(x).data))


def test_functional_linear_bad_shapes(device):
    x = Tensor(np.ones((3, 4)), device=device)
    with pytest.raises(ValueError, match=r"linear: input of shape \(3, 4\) does not fit a weight of shape \(4, 2\) "
                                         r"\(out_features, in_features\)"):
        F.linear(x, Tensor(np.ones((4, 2)), device=device))
    with pytest.raises(ValueError, match=r"linear: bias of shape \(4,\) does not fit a weight of shape \(2, 4\)"):
        F.linear(x, Tensor(np.ones((2, 4)), device=device), Tensor(np.ones(4), device=device))
    with pytest.raises(ValueError, match=r"dropout: p must be in \[0, 1\)"):
        F.dropout(x, 1.0)
    with pytest.raises(ValueError, match=r"dropout: p must be in \[0, 1\)"):
        F.dropout(x, True)
    with pytest.raises(TypeError, match="Dropout: p must be a number"):
        F.dropout(x, False)
    for p in (np.array(0.25), Tensor(np.array(0.25)), np.float32(0.25)):  # as nn.Dropout takes them
        leanpass.manual_seed(3)
        a = F.dropout(x, p)
        leanpass.manual_seed(3)
        np.testing.assert_array_equal(host(a), host(F.dropout(x, 0.25)))
    with pytest.raises(TypeError, match="relu: expected a Tensor"):
        F.relu([1.0])


def test_gelu_takes_torchs_approximate_option():
    """``approximate="none"`` (the exact form, the default, as PyTorch's) or ``"tanh"``;
    anything else is refused by name."""
    x = leanpass.asarray([-2.0, -0.5, 0.0, 1.5])
    assert bool(leanpass.all(nn.GELU(approximate="tanh")(x) == x.gelu(approximate="tanh")))
    assert bool(leanpass.all(nn.GELU()(x) == x.gelu(approximate="none")))
    assert repr(nn.GELU()) == "GELU(approximate='none')"
    assert repr(nn.GELU(approximate="tanh")) == "GELU(approximate='tanh')"
    with pytest.raises(ValueError, match="GELU: approximate must be 'none' or 'tanh', got 'exact'"):
        nn.GELU(approximate="exact")
    assert bool(leanpass.all(F.gelu(x, approximate="tanh") == x.gelu(approximate="tanh")))
    assert bool(leanpass.all(F.gelu(x) == x.gelu()))
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh', got 'erf'"):
        F.gelu(x, approximate="erf")
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh'"):
        x.gelu(approximate=None)


def test_embedding_on_a_device_that_waits_for_reads_makes_bad_rows_nan(device, monkeypatch):
    """Where a host read would make the device wait (a GPU: ``syncs_cheaply`` False),
    a Tensor of indices is not read back: out-of-range ones are clipped and their rows
    are NaN (the others, and the gradient of the table, as usual). Host data is still
    checked, for free, before it moves."""
    monkeypatch.setattr(leanpass.backends.get_backend(device), "syncs_cheaply", False)
    e = nn.Embedding(4, 2, device=device)
    index = Tensor(np.array([1, 4, -1, 3]), dtype="int64", device=device)
    y = e(index)
    rows = host(y)
    table = host(e.weight)
    assert np.isnan(rows[1:3]).all() and np.array_equal(rows[[0, 3]], table[[1, 3]])
    y[[0, 3]].sum().backward()
    assert host(e.weight.grad).tolist() == [[0, 0], [1, 1], [0, 0], [1, 1]]
    with pytest.raises(IndexError, match=r"Embedding: indices must be in \[0, 4\)"):
        e([0, 4])


@pytest.mark.parametrize("freeze", [True, False])
def test_embedding_from_pretrained_matches_torch(device, freeze):
    """A given table (frozen unless freeze=False), its padding row kept and given no
    gradient, as torch.nn.Embedding.from_pretrained; the table is a copy."""
    torch = torch_or_skip()
    table = np.arange(12.0).reshape(4, 3)
    given = Tensor(table, device=device)
    ours = nn.Embedding.from_pretrained(given, freeze=freeze, padding_idx=1)
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(table), freeze=freeze, padding_idx=1)
    assert ours.weight.requires_grad is (not freeze) and ours.weight.device == given.device
    assert repr(ours) == "Embedding(4, 3, padding_idx=1)"
    y, ty = ours([1, 2, 2]), theirs(torch.tensor([1, 2, 2]))
    close(y, ty)
    if not freeze:
        y.sum().backward()
        ty.sum().backward()
        close(ours.weight.grad, theirs.weight.grad)
        given_before = host(given).copy()
        with leanpass.no_grad():
            ours.weight -= 1.0
        close(given, given_before)
    with pytest.raises(ValueError, match="Embedding.from_pretrained: embeddings must be a 2-D table"):
        nn.Embedding.from_pretrained(np.ones(3))
    with pytest.raises(TypeError, match="Embedding.from_pretrained: embeddings must be floating point"):
        nn.Embedding.from_pretrained(leanpass.asarray([[1, 2]], device=device))


def test_embedding_padding_idx_must_be_an_integer(device):
    for bad in (2.5, True, "1"):
        with pytest.raises(TypeError, match="Embedding: padding_idx must be an integer row"):
            nn.Embedding(4, 3, padding_idx=bad, device=device)
    assert nn.Embedding(4, 3, padding_idx=np.int64(-1), device=device).padding_idx == 3


def test_embedding_from_pretrained_builds_subclasses_through_their_constructor(device):
    class Tagged(nn.Embedding):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.tag = "made by __init__"

    e = Tagged.from_pretrained(Tensor(np.ones((3, 2)), device=device), padding_idx=1)
    assert e.tag == "made by __init__" and type(e) is Tagged and e.weight.tolist() == [[1.0, 1.0]] * 3
