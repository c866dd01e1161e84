"""``nn.TransformerEncoderLayer`` and ``nn.TransformerEncoder`` against PyTorch's: a
PyTorch ``state_dict`` loads as it is, and outputs and gradients agree, on every device."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import close, host, torch_or_skip

import leanpass as lp
from leanpass import Tensor, nn

RNG = np.random.default_rng(17)


def pair(torch, device, **kw):
    """A PyTorch layer and ours with its weights, both float64, in eval mode."""
    theirs = torch.nn.TransformerEncoderLayer(8, 2, 16, dtype=torch.float64, **kw)
    ours = nn.TransformerEncoderLayer(8, 2, 16, device=device, dtype="float64", **kw)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    theirs.eval()
    ours.eval()
    return theirs, ours


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("layout", ["batch_first", "sequence_first", "unbatched"])
def test_encoder_layer_matches_torch_with_masks(device, norm_first, activation, layout):
    torch = torch_or_skip()
    if activation == "gelu" and device.startswith("strict"):
        pytest.skip("strict has no erf (the exact GELU)")
    theirs, ours = pair(torch, device, activation=activation, norm_first=norm_first,
                        batch_first=layout == "batch_first")
    shape = {"batch_first": (3, 5, 8), "sequence_first": (5, 3, 8), "unbatched": (5, 8)}[layout]
    x = RNG.normal(size=shape)
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    kwargs, their_kwargs = {"src_mask": lp.asarray(causal, device=device)}, {"src_mask": torch.tensor(causal)}
    if layout != "unbatched":
        pad = np.zeros((3, 5), dtype=bool)
        pad[1, 3:] = True
        kwargs["src_key_padding_mask"] = lp.asarray(pad, device=device)
        their_kwargs["src_key_padding_mask"] = torch.tensor(pad)
    ox, tx = Tensor(x, requires_grad=True, device=device), torch.tensor(x, requires_grad=True)
    oy, ty = ours(ox, **kwargs), theirs(tx, **their_kwargs)
    close(oy, ty)
    g = RNG.normal(size=shape)
    oy.backward(Tensor(g, device=device))
    ty.backward(torch.tensor(g))
    close(ox.grad, tx.grad)
    theirs_grads = {k: v.grad for k, v in theirs.named_parameters()}
    for name, p in ours.named_parameters():
        close(p.grad, theirs_grads[name])


def test_a_callable_activation_and_dropout_in_training(device):
    torch = torch_or_skip()
    theirs, ours = pair(torch, device, activation=torch.nn.functional.silu, dropout=0.0, batch_first=True)
    ours.activation = nn.functional.silu
    x = RNG.normal(size=(2, 4, 8))
    ours.train()
    theirs.train()
    close(ours(Tensor(x, device=device)), theirs(torch.tensor(x)))  # dropout 0: training changes nothing
    _, dropping = pair(torch, device, dropout=0.5, batch_first=True)
    dropping.train()
    lp.manual_seed(0)
    a, b = host(dropping(Tensor(x, device=device))), host(dropping(Tensor(x, device=device)))
    assert not np.array_equal(a, b)  # new masks at each call
    dropping.eval()
    np.testing.assert_array_equal(host(dropping(Tensor(x, device=device))), host(dropping(Tensor(x, device=device))))


def test_encoder_stacks_independent_copies_and_its_norm_as_torch(device):
    torch = torch_or_skip()
    layer_t, layer_o = pair(torch, device, batch_first=True, norm_first=True)
    theirs = torch.nn.TransformerEncoder(layer_t, 3, norm=torch.nn.LayerNorm(8, dtype=torch.float64),
                                         enable_nested_tensor=False)
    ours = nn.TransformerEncoder(layer_o, 3, norm=nn.LayerNorm(8, device=device, dtype="float64"))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with torch.no_grad():
        for k, layer in enumerate(theirs.layers):  # each layer its own weights
            layer.linear1.weight.mul_(1.0 + 0.1 * k)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    assert ours.layers[0].linear1.weight is not ours.layers[1].linear1.weight
    theirs.eval()
    ours.eval()
    x = RNG.normal(size=(2, 6, 8))
    causal = np.triu(np.ones((6, 6), dtype=bool), 1)
    close(ours(Tensor(x, device=device), mask=lp.asarray(causal, device=device), is_causal=True),
          theirs(torch.tensor(x), mask=torch.tensor(causal), is_causal=True))


def test_a_compiled_training_step_equals_eager(device):
    def setup():
        lp.manual_seed(3)
        encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True,
                                                                   device=device), 2)
        head = nn.Linear(8, 4, device=device)
        return encoder, head, lp.optim.AdamW([*encoder.parameters(), *head.parameters()], lr=1e-2)

    def stepper(encoder, head, opt):
        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(head(encoder(x)).reshape(-1, 4), y)
            loss.backward()
            opt.step()
            return loss

        return step

    eager, compiled = stepper(*setup()), lp.compile(stepper(*setup()))
    for k in range(3):
        x = Tensor(RNG.normal(size=(2, 5, 8)), device=device, dtype="float32")
        y = lp.asarray(RNG.integers(0, 4, size=10), device=device)
        lp.manual_seed(k)
        expected = eager(x, y)
        lp.manual_seed(k)
        np.testing.assert_array_equal(host(compiled(x, y)), host(expected))
    assert compiled.calls == {"traced": 1, "replayed": 2, "eager": 0}


@pytest.mark.parametrize("mask", ["float causal", "bool causal", "bool other", "none"])
def test_an_encoder_finds_a_causal_mask_as_torch(device, mask, monkeypatch):
    """``TransformerEncoder(..., is_causal=None)`` reads the mask, as PyTorch's
    ``_detect_is_causal_mask``: a causal one (float from ``generate_square_subsequent_mask``,
    or bool) makes the layers' attention causal (a block of queries at a time), any
    other is used as it is; the results are PyTorch's either way."""
    torch = torch_or_skip()
    applied = []
    real = lp.tensor.apply
    monkeypatch.setattr(lp.nn.functional, "apply", lambda fn, *a, **kw: applied.append(kw.get("causal")) or
                        real(fn, *a, **kw))
    layer_t, layer_o = pair(torch, device, batch_first=True)
    theirs = torch.nn.TransformerEncoder(layer_t, 2, enable_nested_tensor=False)
    ours = nn.TransformerEncoder(layer_o, 2)
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    theirs.eval()
    ours.eval()
    x = RNG.normal(size=(2, 6, 8))
    values = {"float causal": np.triu(np.full((6, 6), -np.inf), 1), "bool causal": np.triu(np.ones((6, 6), bool), 1),
              "bool other": RNG.uniform(size=(6, 6)) < 0.3, "none": None}[mask]
    kwargs = {} if values is None else {"mask": lp.asarray(values, device=device)}
    their_kwargs = {k: torch.tensor(values) for k in kwargs}
    close(ours(Tensor(x, device=device), **kwargs), theirs(torch.tensor(x), **their_kwargs))
    assert applied.count(True) == (2 if mask.endswith(" causal") else 0)  # (one attention per layer)


def test_a_compiled_step_checks_the_mask_it_found_causal_again(device):
    """A compiled step whose encoder found the mask causal replays while it still is;
    a call whose mask is not takes the other path, traced beside it (the mask used as
    it is), and replayed when it comes again."""
    lp.manual_seed(4)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True,
                                                               device=device, dtype="float64"), 1)

    def step(x, mask):
        with lp.no_grad():
            return encoder(x, mask=mask).sum()

    compiled = lp.compile(step)
    x = Tensor(RNG.normal(size=(2, 5, 8)), device=device)
    causal = np.triu(np.ones((5, 5), bool), 1)
    other = causal.copy()
    other[4, 0] = True  # the last query may not look at the first key: no longer causal
    for values in (causal, causal, other, causal, other):
        mask = lp.asarray(values, device=device)
        np.testing.assert_allclose(host(compiled(x, mask)), host(step(x, mask)), rtol=1e-12)
    assert compiled.calls == {"traced": 2, "replayed": 3, "eager": 0}


@pytest.mark.parametrize("make, error, message", [
    (lambda: nn.TransformerEncoderLayer(8.0, 2), ValueError, "d_model must be a positive integer"),
    (lambda: nn.TransformerEncoderLayer(8, 3), ValueError, "not divisible by num_heads"),
    (lambda: nn.TransformerEncoderLayer(8, 2, activation="tanh"), ValueError, "activation must be"),
    (lambda: nn.TransformerEncoderLayer(8, 2, activation=3), TypeError, "activation must be"),
    (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 0), ValueError, "num_layers"),
    (lambda: nn.TransformerEncoder("layer", 2), TypeError, "TransformerEncoder: the layer must be a Module"),
    (lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), -1), ValueError, "num_layers"),
    (lambda: nn.TransformerDecoderLayer(8, 2, activation="swish"), ValueError, "TransformerDecoderLayer: activation"),
    (lambda: nn.Transformer.generate_square_subsequent_mask(-1), ValueError, "sz must be a non-negative integer"),
    (lambda: nn.Transformer.generate_square_subsequent_mask(2.0), ValueError, "sz must be a non-negative integer"),
])
def test_bad_construction_names_the_layer(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_layer_and_stack_match_torch_with_every_mask(device, norm_first, batch_first):
    torch = torch_or_skip()
    kw = {"norm_first": norm_first, "batch_first": batch_first}
    theirs = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, 16, dtype=torch.float64, **kw), 2,
                                         norm=torch.nn.LayerNorm(8, dtype=torch.float64))
    ours = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, device=device, dtype="float64", **kw), 2,
                                 norm=nn.LayerNorm(8, device=device, dtype="float64"))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    theirs.eval()
    ours.eval()
    t_len, s_len, n = 4, 6, 3
    tgt = RNG.normal(size=(n, t_len, 8) if batch_first else (t_len, n, 8))
    memory = RNG.normal(size=(n, s_len, 8) if batch_first else (s_len, n, 8))
    causal = np.triu(np.ones((t_len, t_len), dtype=bool), 1)
    memory_mask = RNG.normal(size=(t_len, s_len))  # float masks: added to the scores
    pad = np.zeros((n, s_len))
    pad[0, 4:] = -np.inf
    masks = {"tgt_mask": causal, "memory_mask": memory_mask, "memory_key_padding_mask": pad}
    ot, om = Tensor(tgt, requires_grad=True, device=device), Tensor(memory, requires_grad=True, device=device)
    tt, tm = torch.tensor(tgt, requires_grad=True), torch.tensor(memory, requires_grad=True)
    oy = ours(ot, om, tgt_is_causal=True, **{k: lp.asarray(v, device=device) for k, v in masks.items()})
    ty = theirs(tt, tm, tgt_is_causal=True, **{k: torch.tensor(v) for k, v in masks.items()})
    close(oy, ty)
    oy.sum().backward()
    ty.sum().backward()
    close(ot.grad, tt.grad)
    close(om.grad, tm.grad)


def test_the_whole_transformer_matches_torch(device):
    torch = torch_or_skip()
    theirs = torch.nn.Transformer(8, 2, 2, 1, 16, batch_first=True, dtype=torch.float64)
    ours = nn.Transformer(8, 2, 2, 1, 16, batch_first=True, device=device, dtype="float64")
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    theirs.eval()
    ours.eval()
    src, tgt = RNG.normal(size=(2, 5, 8)), RNG.normal(size=(2, 3, 8))
    mask = nn.Transformer.generate_square_subsequent_mask(3, device=device, dtype="float64")
    close(mask, torch.nn.Transformer.generate_square_subsequent_mask(3, dtype=torch.float64))
    assert nn.Transformer.generate_square_subsequent_mask(0).shape == (0, 0)  # (torch's too)
    close(ours(Tensor(src, device=device), Tensor(tgt, device=device), tgt_mask=mask),
          theirs(torch.tensor(src), torch.tensor(tgt), tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(
              3, dtype=torch.float64)))
    with pytest.raises(ValueError, match="batch size of src"):
        ours(Tensor(src, device=device), Tensor(RNG.normal(size=(4, 3, 8)), device=device))
    with pytest.raises(ValueError, match="feature size"):
        ours(Tensor(src, device=device), Tensor(RNG.normal(size=(2, 3, 6)), device=device))
    lp.manual_seed(0)
    fresh = nn.Transformer(8, 2, 1, 1, 16)  # weight matrices Xavier-uniform, as PyTorch's
    bound = np.sqrt(6 / (16 + 8))
    assert np.abs(host(fresh.encoder.layers[0].linear1.weight)).max() <= bound
