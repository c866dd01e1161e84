"""BatchNorm1d/2d, functional.batch_norm and MultiheadAttention: PyTorch's values,
gradients and running statistics, state dicts in PyTorch's layout, second
derivatives, and errors that change nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import close, graph_nodes, host, torch_or_skip

import leanpass
from leanpass import Tensor, nn
from leanpass.nn import functional as F

RTOL = 1e-10



def snapshot(module):
    return {k: host(v).copy() for k, v in module.state_dict().items()}


def same_state(module, before):
    after = module.state_dict()
    return after.keys() == before.keys() and all(np.array_equal(host(after[k]), before[k]) for k in before)


# ---- BatchNorm ----------------------------------------------------------------------------------

BN_CASES = [("BatchNorm1d", (5, 3)), ("BatchNorm1d", (4, 3, 6)), ("BatchNorm2d", (4, 3, 5, 2))]


def bn_pair(torch, name, device, rng, **kwargs):
    ours = getattr(nn, name)(3, device=device, dtype="float64", **kwargs)
    theirs = getattr(torch.nn, name)(3, dtype=torch.float64, **kwargs)
    if ours.affine:
        state = {"weight": rng.normal(size=3), "bias": rng.normal(size=3)}
        ours.load_state_dict(state, strict=False)
        theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    return ours, theirs


def bn_step(torch, ours, theirs, shape, device, rng):
    """One forward and backward of both; checks outputs and gradients."""
    data, g = rng.normal(size=shape) * 2 + 1, rng.normal(size=shape)
    x, tx = Tensor(data, requires_grad=True, device=device), torch.tensor(data, requires_grad=True)
    y, ty = ours(x), theirs(tx)
    close(y, ty)
    (y * Tensor(g, device=device)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    close(x.grad, tx.grad)
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        close(p.grad, tp.grad)
    ours.zero_grad()
    theirs.zero_grad()


def close_buffers(ours, theirs):
    mine, torch_state = ours.state_dict(layout="torch"), theirs.state_dict()
    assert list(mine) == list(torch_state)
    for key in mine:
        close(mine[key], torch_state[key])


@pytest.mark.parametrize("name,shape", BN_CASES)
@pytest.mark.parametrize("momentum", [0.1, 0.3, None])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_matches_torch_in_training_then_eval(device, name, shape, momentum, affine):
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    ours, theirs = bn_pair(torch, name, device, rng, momentum=momentum, affine=affine, eps=1e-3)
    assert (ours.weight is None) == (not affine) and len(ours.parameters()) == (2 if affine else 0)
    for _ in range(3):
        bn_step(torch, ours, theirs, shape, device, rng)
        close_buffers(ours, theirs)
    assert int(ours.num_batches_tracked) == 3 and ours.num_batches_tracked.dtype == "int64"
    ours.eval()
    theirs.eval()
    bn_step(torch, ours, theirs, shape, device, rng)
    close_buffers(ours, theirs)  # eval changes no buffer
    assert int(ours.num_batches_tracked) == 3


@pytest.mark.parametrize("name,shape", BN_CASES)
def test_batch_norm_without_running_stats_uses_the_batch_always(device, name, shape):
    torch = torch_or_skip()
    rng = np.random.default_rng(1)
    ours, theirs = bn_pair(torch, name, device, rng, track_running_stats=False)
    assert ours.running_mean is None and ours.running_var is None and ours.num_batches_tracked is None
    assert ours.buffers() == [] and list(ours.state_dict()) == ["weight", "bias"]
    bn_step(torch, ours, theirs, shape, device, rng)
    ours.eval()
    theirs.eval()
    bn_step(torch, ours, theirs, shape, device, rng)


def test_batch_norm_buffers_update_in_place_and_are_not_parameters(device):
    bn = nn.BatchNorm2d(2, momentum=0.5, device=device)
    mean, var, count = bn.running_mean, bn.running_var, bn.num_batches_tracked
    assert [n for n, _ in bn.named_buffers()] == ["running_mean", "running_var", "num_batches_tracked"]
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    data = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2)
    bn(Tensor(data, device=device))
    assert bn.running_mean is mean and bn.running_var is var and bn.num_batches_tracked is count
    per_channel = data.transpose(1, 0, 2, 3).reshape(2, -1)
    np.testing.assert_allclose(host(mean), 0.5 * per_channel.mean(1), rtol=1e-6)
    np.testing.assert_allclose(host(var), 0.5 + 0.5 * per_channel.var(1, ddof=1), rtol=1e-6)
    assert int(count) == 1 and not mean.requires_grad
    assert repr(bn) == "BatchNorm2d(2, eps=1e-05, momentum=0.5, affine=True, track_running_stats=True)"


def test_batch_norm_functional_matches_torch(device):
    torch = torch_or_skip()
    rng = np.random.default_rng(2)
    data = rng.normal(size=(4, 3, 5))
    for weight, bias in ((True, True), (True, False), (False, True), (False, False)):
        x, tx = Tensor(data, requires_grad=True, device=device), torch.tensor(data, requires_grad=True)
        params = [(Tensor(v, requires_grad=True, device=device), torch.tensor(v, requires_grad=True)) if on
                  else (None, None) for on, v in ((weight, rng.normal(size=3)), (bias, rng.normal(size=3)))]
        mean, var = rng.normal(size=3), rng.uniform(0.5, 2, size=3)
        rm, rv = Tensor(mean, device=device), Tensor(var, device=device)
        trm, trv = torch.tensor(mean), torch.tensor(var)
        for training in (True, False):
            y = F.batch_norm(x, rm, rv, params[0][0], params[1][0], training=training, momentum=0.2, eps=1e-4)
            ty = torch.nn.functional.batch_norm(tx, trm, trv, params[0][1], params[1][1], training=training,
                                                momentum=0.2, eps=1e-4)
            close(y, ty)
            close(rm, trm)
            close(rv, trv)
            y.sum().backward()
            ty.sum().backward()
            close(x.grad, tx.grad)
            for p, tp in params:
                if p is not None:
                    close(p.grad, tp.grad)
        y = F.batch_norm(x, None, None, training=True)
        close(y, torch.nn.functional.batch_norm(tx, None, None, training=True))


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_state_dict_round_trip_with_torch(device, affine):
    torch = torch_or_skip()
    rng = np.random.default_rng(3)
    theirs = torch.nn.BatchNorm1d(4, affine=affine, dtype=torch.float64)
    theirs(torch.tensor(rng.normal(size=(6, 4))))  # running statistics that are not the initial ones
    ours = nn.BatchNorm1d(4, affine=affine, device=device, dtype="float64")
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()}, layout="torch")
    close_buffers(ours, theirs)
    back = torch.nn.BatchNorm1d(4, affine=affine, dtype=torch.float64)
    back.load_state_dict({k: torch.tensor(host(v)) for k, v in ours.state_dict(layout="torch").items()})
    data = rng.normal(size=(3, 4))
    ours.eval()
    back.eval()
    close(ours(Tensor(data, device=device)), back(torch.tensor(data)))


@pytest.mark.parametrize("shape", [(3, 2), (3, 2, 4), (2, 2, 2, 3)])
def test_batch_norm_training_second_derivatives(device, shape):
    rng = np.random.default_rng(4)
    x = Tensor(rng.normal(size=shape), requires_grad=True, device=device)
    w = Tensor(rng.normal(size=2), requires_grad=True, device=device)
    b = Tensor(rng.normal(size=2), requires_grad=True, device=device)
    fn = lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)  # noqa: E731
    assert leanpass.gradcheck(fn, (x, w, b))
    assert leanpass.gradgradcheck(fn, (x, w, b))
    only_bias = lambda x, b: F.batch_norm(x, None, None, None, b, training=True, eps=1e-3)  # noqa: E731
    assert leanpass.gradcheck(only_bias, (x, b))
    assert leanpass.gradgradcheck(only_bias, (x, b))
    bn = nn.BatchNorm1d(2, device=device, dtype="float64") if len(shape) < 4 else \
        nn.BatchNorm2d(2, device=device, dtype="float64")
    assert leanpass.gradgradcheck(lambda x: bn(x), (x,))


@pytest.mark.parametrize("shape", [(64, 4), (16, 4, 10), (8, 4, 12, 12)])
@pytest.mark.parametrize("input_grad", [True, False], ids=["all-grads", "parameter-grads"])
def test_batch_norm_float32_far_from_zero_matches_torch(device, shape, input_grad):
    """float32 values of mean 1000 and spread 1, within float32 rounding of PyTorch: the
    variance of the centred values (a one-pass E[x^2] - mean^2 loses it), the
    per-channel dot products of the backward, and the gradients of the parameters alone."""
    torch = torch_or_skip()
    rng = np.random.default_rng(6)
    data = (rng.normal(size=shape) + 1000).astype(np.float32)
    g = rng.normal(size=shape).astype(np.float32)
    w, b = rng.normal(size=4).astype(np.float32), rng.normal(size=4).astype(np.float32)
    mine = [Tensor(a, requires_grad=i > 0 or input_grad, device=device) for i, a in enumerate((data, w, b))]
    theirs = [torch.tensor(a, requires_grad=i > 0 or input_grad) for i, a in enumerate((data, w, b))]
    rm, trm = Tensor(np.zeros(4, np.float32), device=device), torch.zeros(4)
    rv, trv = Tensor(np.ones(4, np.float32), device=device), torch.ones(4)
    y = F.batch_norm(mine[0], rm, rv, mine[1], mine[2], training=True, momentum=1.0)
    ty = torch.nn.functional.batch_norm(theirs[0], trm, trv, theirs[1], theirs[2], training=True, momentum=1.0)
    (y * Tensor(g, device=device)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    grads = [(t.grad, tt.grad) for t, tt in zip(mine, theirs) if tt.requires_grad]
    for a, b in [(y, ty), (rm, trm), (rv, trv)] + grads:
        np.testing.assert_allclose(host(a), host(b), rtol=1e-3, atol=1e-3)
    assert mine[0].has_grad == input_grad


@pytest.mark.parametrize("name,shape", BN_CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_a_sequentials_batch_norm_then_relu_is_one_node_with_torchs_values(device, name, shape, affine):
    """A stock BatchNorm followed by a stock ReLU in a Sequential runs as one
    batch_norm_relu node in training (two nodes in eval): PyTorch's values, gradients
    and running statistics either way."""
    torch = torch_or_skip()
    rng = np.random.default_rng(7)
    ours, theirs = bn_pair(torch, name, device, rng, affine=affine)
    seq, tseq = nn.Sequential(ours, nn.ReLU()), torch.nn.Sequential(theirs, torch.nn.ReLU())
    for training in (True, True, False):
        seq.train(training)
        tseq.train(training)
        data, g = rng.normal(size=shape) * 2 + 0.5, rng.normal(size=shape)
        x, tx = Tensor(data, requires_grad=True, device=device), torch.tensor(data, requires_grad=True)
        y, ty = seq(x), tseq(tx)
        assert graph_nodes(y)[0].name() == ("batch_norm_relu" if training else "relu")
        close(y, ty)
        (y * Tensor(g, device=device)).sum().backward()
        (ty * torch.tensor(g)).sum().backward()
        for a, b in [(x, tx)] + list(zip(ours.parameters(), theirs.parameters())):
            close(a.grad, b.grad)
            a.grad = b.grad = None
        close_buffers(ours, theirs)


def test_only_a_stock_batch_norm_then_a_stock_relu_run_as_one_node(device):
    class Shifted(nn.BatchNorm2d):  # a subclass that changes forward
        def forward(self, x):
            return super().forward(x) + 1.0

    class Capped(nn.ReLU):
        pass

    x = Tensor(np.random.default_rng(8).normal(size=(2, 3, 2, 2)), requires_grad=True, device=device)

    def top(*layers):
        return graph_nodes(nn.Sequential(*layers)(x))[0].name()

    bn = nn.BatchNorm2d(3, device=device)
    assert top(bn, nn.ReLU()) == "batch_norm_relu"
    assert top(nn.ReLU(), bn) == "batch_norm" and top(bn) == "batch_norm"
    assert top(bn, Capped()) == "relu" and top(bn, nn.Sigmoid(), nn.ReLU()) == "relu"
    assert top(Shifted(3, device=device), nn.ReLU()) == "relu"
    patched = nn.BatchNorm2d(3, device=device)
    patched.forward = lambda t: t * 2.0  # an instance's own forward is called, not fused past
    assert top(patched, nn.ReLU()) == "relu"
    np.testing.assert_array_equal(host(nn.Sequential(patched, nn.ReLU())(x)), np.maximum(host(x) * 2.0, 0))


def test_changing_batch_norm_relus_output_in_place_makes_backward_raise(device):
    """The fused node saves its output (its gradient passes where the output is
    positive), as PyTorch's ReLU does (LeanPass's ReLU alone saves its input): changed
    in place, backward raises, as after PyTorch's Sequential(BatchNorm1d, ReLU)."""
    x = Tensor(np.random.default_rng(9).normal(size=(4, 2, 3)), requires_grad=True, device=device)
    y = nn.Sequential(nn.BatchNorm1d(2, device=device), nn.ReLU())(x)
    with leanpass.no_grad():
        y.mul_(2.0)
    with pytest.raises(RuntimeError, match="'batch_norm_relu': its output .* was changed in place"):
        y.sum().backward()


def test_batch_norm_relus_create_graph_backward_after_its_bias_changed(device):
    """The bias is not saved: changed in place after the forward, a create_graph
    backward still runs (on the node's rule), with the gradients of the values the
    forward saw, as two nodes (and PyTorch) give."""
    rng = np.random.default_rng(10)
    data = rng.normal(size=(4, 2, 3))
    grads = []
    for fused in (True, False):
        bn = nn.BatchNorm1d(2, device=device)
        x = Tensor(data, requires_grad=True, device=device)
        y = nn.Sequential(bn, nn.ReLU())(x) if fused else nn.ReLU()(bn(x))
        with leanpass.no_grad():
            bn.bias.add_(1.0)
        g, = leanpass.autograd.grad((y * y).sum(), x, create_graph=True)
        (h,) = leanpass.autograd.grad(g.sum(), x)
        grads.append((host(g), host(h)))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_a_layer_class_whose_forward_was_replaced_is_not_fused_past(device, monkeypatch):
    x = Tensor(np.random.default_rng(11).normal(size=(4, 2, 3)), device=device)
    pair = nn.Sequential(nn.BatchNorm1d(2, device=device), nn.ReLU())
    monkeypatch.setattr(nn.ReLU, "forward", lambda self, t: t.sigmoid())
    assert host(pair(x)).min() > 0  # the class's forward: a sigmoid, never 0
    monkeypatch.undo()
    monkeypatch.setattr(nn.BatchNorm1d, "forward", lambda self, t: t * 0.0 + 7.0)
    np.testing.assert_array_equal(host(pair(x)), np.full((4, 2, 3), 7.0))


def test_batch_norm_bad_input_changes_nothing(device):
    bn = nn.BatchNorm2d(3, device=device)
    bn(Tensor(np.random.default_rng(5).normal(size=(2, 3, 2, 2)), device=device))
    before = snapshot(bn)
    x = Tensor(np.ones((2, 4, 2, 2)), requires_grad=True, device=device)
    with pytest.raises(ValueError, match=r"BatchNorm2d\(3\): input of shape \(2, 4, 2, 2\) has 4 channels"):
        bn(x)
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected a 4-D \(N, C, H, W\) input, got shape \(2, 3, 2\)"):
        bn(Tensor(np.ones((2, 3, 2)), device=device))
    with pytest.raises(ValueError, match=r"BatchNorm2d: Expected more than 1 value per channel when training, "
                                         r"got input of shape \(1, 3, 1, 1\)"):
        bn(Tensor(np.ones((1, 3, 1, 1)), device=device))
    with pytest.raises(ValueError, match=r"BatchNorm1d: expected a 2-D \(N, C\) or 3-D \(N, C, L\) input"):
        nn.BatchNorm1d(3, device=device)(Tensor(np.ones((2, 3, 2, 2)), device=device))
    with pytest.raises(ValueError, match=r"batch_norm: weight of shape \(2,\) does not fit an input of shape"):
        F.batch_norm(x, None, None, Tensor(np.ones(2), device=device), training=True)
    with pytest.raises(ValueError, match="batch_norm: running_mean and running_var are needed when not training"):
        F.batch_norm(x, None, None)
    with pytest.raises(ValueError, match="BatchNorm1d: num_features must be a positive integer"):
        nn.BatchNorm1d(0)
    with pytest.raises(TypeError, match="BatchNorm2d: expected a Tensor"):
        bn(np.ones((2, 3, 2, 2)))
    assert same_state(bn, before) and not x.has_grad and not bn.weight.has_grad
    bn.eval()
    bn(Tensor(np.ones((1, 3, 1, 1)), device=device))  # one value per channel is fine in eval mode
    assert same_state(bn, before)


# ---- MultiheadAttention -------------------------------------------------------------------------

E, HEADS, L, S, N = 6, 2, 3, 4, 2


def mha_pair(torch, device, rng, **kwargs):
    """Ours and PyTorch's with the same random parameters, loaded from PyTorch's state dict."""
    theirs = torch.nn.MultiheadAttention(E, HEADS, dtype=torch.float64, **kwargs)
    theirs.load_state_dict({k: torch.tensor(rng.normal(size=tuple(v.shape))) for k, v in theirs.state_dict().items()})
    ours = nn.MultiheadAttention(E, HEADS, device=device, dtype="float64", **kwargs)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()}, layout="torch")
    return ours, theirs


def mask_case(kind, rng, batched, length, source):
    """``{argument: host array}`` of one kind of mask (bool: True where NOT allowed)."""
    kpm_shape = (N, source) if batched else (source,)
    padding = np.zeros(kpm_shape, bool)
    padding[..., -1] = True
    causal = np.triu(np.ones((length, source), bool), 1)
    scattered = rng.uniform(size=((N if batched else 1) * HEADS, length, source)) < 0.4
    scattered[..., 0] = False  # every query may attend to some key (else NaN rows, in PyTorch too)
    return {
        "none": {},
        "bool": {"attn_mask": causal},
        "float": {"attn_mask": rng.normal(size=(length, source))},
        "float 3-D": {"attn_mask": rng.normal(size=((N if batched else 1) * HEADS, length, source))},
        "bool 3-D": {"attn_mask": scattered},
        "padding": {"key_padding_mask": padding},
        "float padding": {"key_padding_mask": rng.normal(size=kpm_shape)},
        "both": {"attn_mask": causal, "key_padding_mask": padding},
    }[kind]


@pytest.mark.parametrize("layout,self_attention", [("seq first", True), ("seq first", False),
                                                   ("batch first", True), ("batch first", False),
                                                   ("unbatched", True)])
@pytest.mark.parametrize("mask", ["none", "bool", "float", "float 3-D", "bool 3-D", "padding", "float padding",
                                  "both"])
@pytest.mark.parametrize("weights", ["averaged", "per head", "none"])
def test_multihead_attention_matches_torch(device, layout, self_attention, mask, weights):
    torch = torch_or_skip()
    rng = np.random.default_rng(6)
    batch_first, batched = layout == "batch first", layout != "unbatched"
    ours, theirs = mha_pair(torch, device, rng, batch_first=batch_first)
    source = L if self_attention else S

    def shape(length):
        return ((N, length, E) if batch_first else (length, N, E)) if batched else (length, E)

    arrays = [rng.normal(size=shape(L))] if self_attention else [rng.normal(size=shape(n)) for n in (L, S, S)]
    xs = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    txs = [torch.tensor(a, requires_grad=True) for a in arrays]
    masks = mask_case(mask, rng, batched, L, source)
    kwargs = {"need_weights": weights != "none", "average_attn_weights": weights == "averaged"}
    y, w = ours(*(xs * 3 if self_attention else xs), **kwargs,
                **{k: leanpass.asarray(v, device=device) for k, v in masks.items()})
    ty, tw = theirs(*(txs * 3 if self_attention else txs), **kwargs, **{k: torch.tensor(v) for k, v in masks.items()})
    close(y, ty)
    if weights == "none":
        assert w is None and tw is None
    else:
        assert w.shape == tuple(tw.shape)
        close(w, tw)
    g = rng.normal(size=y.shape)
    (y * Tensor(g, device=device)).sum().backward()
    (ty * torch.tensor(g)).sum().backward()
    for x, tx in zip(xs, txs):
        close(x.grad, tx.grad)
    close(ours.in_proj_weight.grad, theirs.in_proj_weight.grad)
    close(ours.in_proj_bias.grad, theirs.in_proj_bias.grad)
    close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad)
    close(ours.out_proj.bias.grad, theirs.out_proj.bias.grad)


def test_multihead_attention_is_causal_is_a_hint_as_torch(device):
    torch = torch_or_skip()
    rng = np.random.default_rng(7)
    ours, theirs = mha_pair(torch, device, rng, batch_first=True)
    data = rng.normal(size=(N, L, E))
    causal = np.triu(np.ones((L, L), bool), 1)
    x, tx = Tensor(data, device=device), torch.tensor(data)
    for need_weights in (True, False):
        y, _ = ours(x, x, x, attn_mask=leanpass.asarray(causal, device=device), is_causal=True,
                    need_weights=need_weights)
        ty, _ = theirs(tx, tx, tx, attn_mask=torch.tensor(causal), is_causal=True, need_weights=need_weights)
        close(y, ty)
    with pytest.raises(RuntimeError, match="is_causal is a hint that attn_mask is the causal mask"):
        ours(x, x, x, is_causal=True)


@pytest.mark.parametrize("case", ["causal mask", "another mask", "key padding", "weights"])
def test_multihead_attention_takes_the_causal_hint_alone_as_torch(device, case, monkeypatch):
    """``is_causal=True`` without key padding and without weights asked for: PyTorch uses
    the causal mask and never reads ``attn_mask`` (a wrong hint, a wrong result, alike),
    and so does LeanPass, a block of queries at a time (blocks of 2 rows here). With key
    padding or weights, the mask given is used. The output and every gradient agree."""
    torch = torch_or_skip()
    monkeypatch.setattr(leanpass.backends._base.Backend, "causal_rows", 2)  # (cuda keeps its own)
    rng = np.random.default_rng(8)
    ours, theirs = mha_pair(torch, device, rng, batch_first=True)
    length = 7
    data = rng.normal(size=(N, length, E))
    mask = np.triu(np.ones((length, length), bool), 1)  # True: may not look
    if case == "another mask":
        mask = rng.uniform(size=(length, length)) < 0.5
    kwargs, tkwargs = {"need_weights": case == "weights"}, {"need_weights": case == "weights"}
    if case == "key padding":
        padding = np.zeros((N, length), bool)
        padding[:, 3] = True
        kwargs["key_padding_mask"], tkwargs["key_padding_mask"] = leanpass.asarray(padding, device=device), \
            torch.tensor(padding)
    x, tx = Tensor(data, requires_grad=True, device=device), torch.tensor(data, requires_grad=True)
    y, _ = ours(x, x, x, attn_mask=leanpass.asarray(mask, device=device), is_causal=True, **kwargs)
    ty, _ = theirs(tx, tx, tx, attn_mask=torch.tensor(mask), is_causal=True, **tkwargs)
    close(y, ty)
    g = rng.normal(size=y.shape)
    y.backward(Tensor(g, device=device))
    ty.backward(torch.tensor(g))
    close(x.grad, tx.grad)
    close(ours.in_proj_weight.grad, theirs.in_proj_weight.grad)
    close(ours.out_proj.weight.grad, theirs.out_proj.weight.grad)


def test_attention_op_takes_a_mask_or_causal_not_both():
    """The op itself refuses both (the functions never pass both: the mask would go unread)."""
    rng = np.random.default_rng(10)
    q, k, v = (Tensor(rng.normal(size=(3, 2)), requires_grad=True) for _ in range(3))
    mask = Tensor(rng.normal(size=(3, 3)))
    with pytest.raises(ValueError, match="attention: give a mask or causal=True, not both"):
        leanpass.tensor.apply(leanpass.ops.attention, q, k, v, mask, scale=1.0, causal=True)


def test_multihead_attention_checks_the_mask_the_causal_hint_replaces(device):
    """The mask that ``is_causal`` makes unread is still checked, as PyTorch checks it."""
    rng = np.random.default_rng(9)
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True, device=device, dtype="float64")
    x = Tensor(rng.normal(size=(N, L, E)), device=device)
    causal = np.triu(np.ones((L, L), bool), 1)
    with pytest.raises(TypeError, match="attn_mask must be bool or floating"):
        mha(x, x, x, attn_mask=leanpass.asarray(causal.astype(np.int64), device=device), is_causal=True,
            need_weights=False)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(1, 1, 3, 3\) does not fit"):
        mha(x, x, x, attn_mask=leanpass.asarray(causal[None, None], device=device), is_causal=True,
            need_weights=False)


@pytest.mark.parametrize("bias", [True, False])
def test_multihead_attention_parameters_and_torch_state_dict(device, bias):
    torch = torch_or_skip()
    leanpass.manual_seed(8)
    torch.manual_seed(8)
    ours = nn.MultiheadAttention(8, 2, bias=bias, device=device, dtype="float32")
    theirs = torch.nn.MultiheadAttention(8, 2, bias=bias)
    names = ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"] if bias else \
        ["in_proj_weight", "out_proj.weight"]
    assert [n for n, _ in ours.named_parameters()] == names
    assert list(ours.state_dict(layout="torch")) == list(theirs.state_dict()) == names
    assert ours.in_proj_weight.shape == (24, 8)  # PyTorch's layout
    assert ours.state_dict(layout="torch")["in_proj_weight"].shape == (24, 8)
    assert ours.state_dict(layout="leanpass-0.3")["in_proj_weight"].shape == (8, 24)  # 0.3's
    bound = math.sqrt(6 / (8 + 24))
    w = host(ours.in_proj_weight)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound and abs(w.std() - bound / math.sqrt(3)) < 0.03
    if bias:
        assert not host(ours.in_proj_bias).any() and not host(ours.out_proj.bias).any()
    # PyTorch -> ours -> PyTorch gives the same arrays and the same outputs
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()}, layout="torch")
    back = torch.nn.MultiheadAttention(8, 2, bias=bias)
    back.load_state_dict({k: torch.tensor(host(v)) for k, v in ours.state_dict(layout="torch").items()})
    for key, value in theirs.state_dict().items():
        assert np.array_equal(value.numpy(), back.state_dict()[key].numpy())
    data = np.random.default_rng(8).normal(size=(3, 2, 8)).astype(np.float32)
    np.testing.assert_allclose(host(ours(*[Tensor(data, device=device)] * 3)[0]),
                               host(back(*[torch.tensor(data)] * 3)[0]), rtol=1e-5, atol=1e-6)


def test_multihead_attention_dropout_only_in_training(device):
    leanpass.manual_seed(9)
    mha = nn.MultiheadAttention(E, HEADS, dropout=0.5, batch_first=True, device=device, dtype="float64")
    x = Tensor(np.random.default_rng(9).normal(size=(N, L, E)), device=device)
    mha.eval()
    plain = nn.MultiheadAttention(E, HEADS, batch_first=True, device=device, dtype="float64")
    plain.load_state_dict(mha.state_dict())
    close(mha(x, x, x)[0], plain(x, x, x)[0])
    mha.train()
    _, weights = mha(x, x, x, average_attn_weights=False)
    dropped = host(weights)
    assert (dropped == 0).any() and np.all((dropped == 0) | (dropped > 0))
    assert not np.allclose(dropped.sum(-1), 1.0)  # the weights returned are the dropped ones, as PyTorch's


def test_multihead_attention_second_derivatives(device):
    rng = np.random.default_rng(10)
    mha = nn.MultiheadAttention(4, 2, batch_first=True, device=device, dtype="float64")
    q = Tensor(rng.normal(size=(1, 2, 4)), requires_grad=True, device=device)
    kv = Tensor(rng.normal(size=(1, 3, 4)), requires_grad=True, device=device)
    mask = leanpass.asarray(np.array([[False, False, True], [False, True, False]]), device=device)
    fn = lambda q, kv: mha(q, kv, kv, attn_mask=mask)[0]  # noqa: E731
    assert leanpass.gradcheck(fn, (q, kv))
    assert leanpass.gradgradcheck(fn, (q, kv))


@pytest.mark.parametrize("mask", ["bool", "float", "padding", "none"])
@pytest.mark.parametrize("layout", ["batch first", "seq first", "unbatched"])
def test_multihead_self_attention_second_derivatives(device, mask, layout):
    # self-attention without weights is one node on the packed projections: its rule twice
    rng = np.random.default_rng(12)
    batch_first, batched = layout == "batch first", layout != "unbatched"
    mha = nn.MultiheadAttention(4, 2, batch_first=batch_first, device=device, dtype="float64")
    shape = ((2, 3, 4) if batch_first else (3, 2, 4)) if batched else (3, 4)
    x = Tensor(rng.normal(size=shape), requires_grad=True, device=device)
    masks = {k: leanpass.asarray(v, device=device) for k, v in {
        "bool": {"attn_mask": np.triu(np.ones((3, 3), bool), 1)},
        "float": {"attn_mask": rng.normal(size=(3, 3))},
        "padding": {"key_padding_mask": np.array([[False, False, True], [False, True, False]])[:2 if batched else 1]
                    .reshape((2, 3) if batched else (3,))},
        "none": {}}[mask].items()}
    fn = lambda x: mha(x, x, x, need_weights=False, **masks)[0]  # noqa: E731
    assert "multi_head_self_attention" in graph_ops(fn(x))
    assert leanpass.gradcheck(fn, (x,))
    assert leanpass.gradgradcheck(fn, (x,))


def test_multihead_attention_bad_input_changes_nothing(device):
    mha = nn.MultiheadAttention(E, HEADS, device=device)
    before = snapshot(mha)
    q = Tensor(np.ones((L, N, E)), requires_grad=True, device=device)
    kv = Tensor(np.ones((S, N, E)), device=device)
    with pytest.raises(ValueError, match="MultiheadAttention: embed_dim 6 is not divisible by num_heads 4"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(NotImplementedError, match="MultiheadAttention: kdim=3 other than embed_dim=6"):
        nn.MultiheadAttention(6, 2, kdim=3)
    with pytest.raises(NotImplementedError, match="MultiheadAttention: add_bias_kv=True is not supported"):
        nn.MultiheadAttention(6, 2, 0.0, True, True)  # PyTorch's positional order: add_bias_kv fifth
    assert nn.MultiheadAttention(6, 2, 0.0, True, False, False, None, None, True).batch_first
    with pytest.raises(ValueError, match=r"MultiheadAttention: query of shape \(3, 2, 5\).* must end in embed_dim 6"):
        mha(Tensor(np.ones((L, N, 5)), device=device), kv, kv)
    with pytest.raises(ValueError, match="must all be 3-D"):
        mha(q, Tensor(np.ones((S, E)), device=device), kv)
    with pytest.raises(ValueError, match=r"one batch size"):
        mha(q, Tensor(np.ones((S, 3, E)), device=device), Tensor(np.ones((S, 3, E)), device=device))
    with pytest.raises(ValueError, match=r"MultiheadAttention: attn_mask of shape \(4, 3\) does not fit a query of "
                                         r"shape \(3, 2, 6\) \(expected \(3, 4\) or \(4, 3, 4\)\)"):
        mha(q, kv, kv, attn_mask=np.zeros((S, L), bool))
    with pytest.raises(ValueError, match=r"MultiheadAttention: key_padding_mask of shape \(4,\) does not fit"):
        mha(q, kv, kv, key_padding_mask=np.zeros(S, bool))
    with pytest.raises(TypeError, match="MultiheadAttention: attn_mask must be bool or floating, got dtype int64"):
        mha(q, kv, kv, attn_mask=np.zeros((L, S), np.int64))
    assert same_state(mha, before) and not q.has_grad and not mha.in_proj_weight.has_grad


def graph_ops(t):
    """The operation names of the nodes that ``t`` was made from (a multiset, as a list)."""
    return [str(node._op) for node in graph_nodes(t)]


def test_multihead_self_attention_makes_one_input_projection(device):
    """Self-attention's q, k and v come from ONE product with in_proj_weight (the
    three projections together), not one product per projection."""
    mha = nn.MultiheadAttention(E, HEADS, batch_first=True, device=device, dtype="float64")
    x = Tensor(np.random.default_rng(11).normal(size=(N, L, E)), requires_grad=True, device=device)
    y, _ = mha(x, x, x, need_weights=False)
    assert graph_ops(y).count("linear") == 2  # in_proj and out_proj
    assert graph_ops(y).count("multi_head_self_attention") == 1 and "unstack" not in graph_ops(y)


@pytest.mark.parametrize("batched", [True, False])
def test_multi_head_attention_forward_is_torchs_function(device, batched):
    """``F.multi_head_attention_forward`` takes PyTorch's arguments (sequence-first
    inputs, bool masks True = masked) and weight layouts: outputs, weights and
    gradients as PyTorch's to 1e-10."""
    torch = torch_or_skip()
    torch.manual_seed(1)
    E, H, L, S, N = 8, 2, 5, 4, 3
    ref = torch.nn.MultiheadAttention(E, H, dtype=torch.float64)
    rng = np.random.default_rng(2)
    q = rng.normal(size=(L, N, E) if batched else (L, E))
    k = rng.normal(size=(S, N, E) if batched else (S, E))
    mask = rng.random((L, S)) > 0.7
    mask[:, 0] = False  # every query sees a key
    tq = torch.tensor(q, requires_grad=True)
    tk = torch.tensor(k)
    out, weights = torch.nn.functional.multi_head_attention_forward(
        tq, tk, tk, E, H, ref.in_proj_weight, ref.in_proj_bias, None, None, False, 0.0, ref.out_proj.weight,
        ref.out_proj.bias, attn_mask=torch.tensor(mask))
    out.sum().backward()
    lq = Tensor(q, requires_grad=True, device=device)
    lk = Tensor(k, device=device)
    w_in = Tensor(host(ref.in_proj_weight), requires_grad=True, device=device)
    w_out = Tensor(host(ref.out_proj.weight), device=device)
    ours, our_weights = F.multi_head_attention_forward(
        lq, lk, lk, E, H, w_in, Tensor(host(ref.in_proj_bias), device=device), None, None, False, 0.0, w_out,
        Tensor(host(ref.out_proj.bias), device=device), attn_mask=leanpass.asarray(mask, device=device))
    ours.sum().backward()
    close(ours, out)
    close(our_weights, weights)
    close(lq.grad, tq.grad)
    close(w_in.grad, ref.in_proj_weight.grad)
    with pytest.raises(NotImplementedError, match="multi_head_attention_forward: bias_k is not supported"):
        F.multi_head_attention_forward(lq, lk, lk, E, H, w_in, None, w_out[0], None, False, 0.0, w_out, None)
    with pytest.raises(ValueError, match=r"in_proj_weight of shape \(8, 24\).*\(24, 8\)"):
        F.multi_head_attention_forward(lq, lk, lk, E, H, w_in.mT, None, None, None, False, 0.0, w_out, None)


def test_batch_norm_bias_of_another_dtype_promotes(device):
    """A float64 bias on float32 data gives float64, as ``F.linear`` does (the
    standard's promotion), on every device; it used to be added in place (float32
    on cpu, a raw TypeError on strict)."""
    x = Tensor(np.random.default_rng(0).normal(size=(4, 3, 2)), device=device, dtype="float32")
    weight = Tensor(np.ones(3), device=device, dtype="float32")
    bias = Tensor(np.arange(3.0), device=device, dtype="float64")
    y = F.batch_norm(x, None, None, weight, bias, training=True)
    assert y.dtype == "float64"
    close(y.mean(axis=(0, 2)), np.arange(3.0), atol=1e-6)


# ---- empty inputs and NumPy integers (found by review, against PyTorch) ------------------------


@pytest.mark.parametrize("shape", [(0, 3), (2, 3, 0), (0, 3, 4)])
def test_batch_norm_of_an_empty_batch_keeps_the_running_statistics(device, shape):
    """PyTorch: an empty output, the statistics unchanged (the batch count still grows);
    they used to become NaN, or NumPy's reshape error."""
    bn = nn.BatchNorm1d(3, device=device)
    x = Tensor(np.zeros(shape), device=device, requires_grad=True)
    y = bn(x)
    assert y.shape == shape
    y.sum().backward()
    np.testing.assert_array_equal(host(bn.running_mean), np.zeros(3))
    np.testing.assert_array_equal(host(bn.running_var), np.ones(3))
    assert int(host(bn.num_batches_tracked)) == 1
    np.testing.assert_array_equal(host(bn.weight.grad), np.zeros(3))
    bn.eval()
    assert not np.isnan(host(bn(Tensor(np.ones((2, 3)), device=device)))).any()


def test_softmax_and_attention_over_nothing(device):
    """Softmax over an empty axis is empty; attention with no keys gives zeros (PyTorch)."""
    x = Tensor(np.zeros((2, 0)), device=device, requires_grad=True)
    assert nn.Softmax(-1)(x).shape == (2, 0)
    assert F.log_softmax(x, -1).shape == (2, 0)
    q = Tensor(np.ones((2, 3, 4)), device=device, requires_grad=True)
    k = Tensor(np.ones((2, 0, 4)), device=device, requires_grad=True)
    out = F.scaled_dot_product_attention(q, k, k)
    np.testing.assert_array_equal(host(out), np.zeros((2, 3, 4)))
    out.sum().backward()
    np.testing.assert_array_equal(host(q.grad), np.zeros((2, 3, 4)))


def test_layer_sizes_may_be_numpy_integers(device):
    """As PyTorch (and Linear, Conv2d here) accept them."""
    assert nn.LayerNorm(np.int64(8), device=device).normalized_shape == (8,)
    bn = nn.BatchNorm1d(np.int64(8), device=device)
    assert bn.num_features == 8 and type(bn.num_features) is int
    mha = nn.MultiheadAttention(np.int64(8), np.int32(2), device=device)
    assert mha.embed_dim == 8 and mha.num_heads == 2


def test_attention_of_batched_queries_and_shared_keys_differentiates_twice(device):
    """q of (N, L, E) with k, v of (S, E): the products' scaling was written in place into
    a reshape view when the rule ran again on Tensors (create_graph)."""
    rng = np.random.default_rng(0)
    q = Tensor(rng.normal(size=(2, 4, 3)), requires_grad=True, device=device)
    k = Tensor(rng.normal(size=(5, 3)), requires_grad=True, device=device)
    v = Tensor(rng.normal(size=(5, 2)), requires_grad=True, device=device)
    assert leanpass.gradgradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c), [q, k, v])
    assert leanpass.gradgradcheck(lambda a, b, c: F.scaled_dot_product_attention(b[None], a, a[0]),
                                  [Tensor(rng.normal(size=(2, 5, 3)), requires_grad=True, device=device),
                                   Tensor(rng.normal(size=(4, 3)), requires_grad=True, device=device), v])


def test_functional_errors_name_the_function_and_change_nothing(device):
    rm = Tensor(np.zeros(3), device=device)
    rv = leanpass.asarray(np.ones(3, dtype=np.int64), device=device)
    with pytest.raises(TypeError, match="batch_norm: running_var must be floating-point"):
        F.batch_norm(Tensor(np.arange(6.0).reshape(2, 3), device=device), rm, rv, training=True)
    np.testing.assert_array_equal(host(rm), np.zeros(3))
    with pytest.raises(TypeError, match="mse_loss: the target"):
        nn.mse_loss(Tensor([1.0, 2.0], device=device), ["a", "b"])
    with pytest.raises(ValueError, match="constant_: cannot fill"):
        nn.init.constant_(Tensor(np.zeros((2, 2)), device=device), np.ones(3))
    with pytest.raises(ValueError, match="clip_grad_norm_"):
        nn.utils.clip_grad_norm_([], 1.0, norm_type="fro")


def test_cross_entropy_over_no_classes_is_nan(device):
    """Probability targets with an empty class axis: NaN, as PyTorch (a NumPy error before)."""
    logits = Tensor(np.zeros((2, 0)), requires_grad=True, device=device)
    loss = nn.cross_entropy_loss(logits, np.zeros((2, 0)))
    assert np.isnan(float(loss))
    loss.backward()
    assert host(logits.grad).shape == (2, 0)


def test_layer_norm_of_a_constant_row_is_exactly_zero(device):
    """A constant row (BERT's eps=1e-12, float32): output and gradient 0, as PyTorch's,
    where the rounding of the row's mean would be scaled up to +-1."""
    import leanpass as lp
    from leanpass.nn import functional as F

    x = lp.Tensor(np.full((2, 768), 1234.567), dtype="float32", device=device, requires_grad=True)
    y = F.layer_norm(x, (768,), eps=1e-12)
    assert float(lp.max(lp.abs(y))) == 0.0
    y.sum().backward()  # the gradient is (g - mean(g)) / sqrt(eps) there: 0 for a constant g
    assert float(np.abs(lp.asarray(x.grad).numpy()).max()) == 0.0
