"""RNN, LSTM, GRU and their cells: PyTorch's outputs and input, state and parameter
gradients from the same state dict (loaded as it is), gradcheck and second
derivatives on every device, one graph node per layer and direction, dropout
between layers, and errors that name the layer and change nothing."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from helpers import close, graph_nodes, host, other_device, torch_or_skip

import leanpass
from leanpass import Tensor, nn

RTOL, ATOL = 1e-7, 1e-10
MODES = {  # name: (LeanPass class, PyTorch class name, extra arguments)
    "rnn_tanh": (nn.RNN, "RNN", {}),
    "rnn_relu": (nn.RNN, "RNN", {"nonlinearity": "relu"}),
    "lstm": (nn.LSTM, "LSTM", {}),
    "gru": (nn.GRU, "GRU", {}),
}
# (num_layers, bidirectional, batch_first, bias, batched, initial state given)
CONFIGS = [
    (1, False, False, True, True, False),
    (2, True, True, False, True, True),
    (3, True, False, True, False, True),
    (2, False, True, True, True, True),
    (1, True, False, True, False, False),
]


def torch_state(torch, module) -> dict:
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def pair(torch, mode, num_layers=1, bidirectional=False, batch_first=False, bias=True, device="cpu",
         input_size=4, hidden_size=5):
    """A PyTorch layer and LeanPass's with PyTorch's state dict loaded as it is."""
    cls, torch_name, extra = MODES[mode]
    ref = getattr(torch.nn, torch_name)(input_size, hidden_size, num_layers=num_layers, bias=bias,
                                        batch_first=batch_first, bidirectional=bidirectional,
                                        dtype=torch.float64, **extra)
    ours = cls(input_size, hidden_size, num_layers=num_layers, bias=bias, batch_first=batch_first,
               bidirectional=bidirectional, device=device, dtype="float64", **extra)
    assert ours.load_state_dict(torch_state(torch, ref)) == ([], [])
    return ref, ours


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "L{}-bi{:d}-bf{:d}-bias{:d}-batched{:d}-h0{:d}".format(*c))
@pytest.mark.parametrize("mode", MODES)
def test_matches_torch_outputs_and_every_gradient(device, mode, config):
    torch = torch_or_skip()
    num_layers, bidirectional, batch_first, bias, batched, given = config
    ref, ours = pair(torch, mode, num_layers, bidirectional, batch_first, bias, device)
    rng = np.random.default_rng(0)
    steps, batch, directions = 6, 3, 2 if bidirectional else 1
    shape = ((batch, steps) if batch_first else (steps, batch)) if batched else (steps,)
    x = rng.normal(size=(*shape, 4))
    state_shape = (num_layers * directions, batch, 5) if batched else (num_layers * directions, 5)
    states = [rng.normal(size=state_shape) for _ in range(2 if mode == "lstm" else 1)] if given else []
    xs, ts = [Tensor(a, requires_grad=True, device=device) for a in [x, *states]], [
        torch.tensor(a, requires_grad=True) for a in [x, *states]]
    hx = None if not given else (tuple(xs[1:]) if mode == "lstm" else xs[1])
    thx = None if not given else (tuple(ts[1:]) if mode == "lstm" else ts[1])
    y, h = ours(xs[0], hx)
    ty, th = ref(ts[0], thx)
    outs = [y, *(h if mode == "lstm" else (h,))]
    touts = [ty, *(th if mode == "lstm" else (th,))]
    loss, tloss = 0.0, 0.0
    for a, t in zip(outs, touts):
        assert a.shape == tuple(t.shape)
        close(a, t, rtol=RTOL, atol=ATOL)
        g = rng.normal(size=a.shape)
        loss = loss + (a * Tensor(g, device=device)).sum()
        tloss = tloss + (t * torch.tensor(g)).sum()
    loss.backward()
    tloss.backward()
    for a, t in zip(xs, ts):
        close(a.grad, t.grad, rtol=RTOL, atol=ATOL)
    for (name, p), (tname, tp) in zip(ours.named_parameters(), ref.named_parameters()):
        assert name == tname
        close(p.grad, tp.grad, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("mode", MODES)
def test_state_dict_is_torchs_names_shapes_and_order(device, mode):
    torch = torch_or_skip()
    ref, ours = pair(torch, mode, num_layers=2, bidirectional=True, device=device)
    state = ours.state_dict()
    assert list(state) == list(ref.state_dict())
    for k, v in ref.state_dict().items():
        assert tuple(state[k].shape) == tuple(v.shape)
        close(state[k], v, rtol=0, atol=0)
    assert list(ours.state_dict(layout="torch")) == list(state)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [[p.shape for p in layer] for layer in ours.all_weights] == [
        [tuple(p.shape) for p in layer] for layer in ref.all_weights]


@pytest.mark.parametrize("mode", MODES)
def test_initialisation_is_uniform_within_one_over_sqrt_hidden_and_seeded(mode):
    cls, _, extra = MODES[mode]
    leanpass.manual_seed(5)
    a = cls(3, 16, num_layers=2, dtype="float64", **extra)
    leanpass.manual_seed(5)
    b = cls(3, 16, num_layers=2, dtype="float64", **extra)
    values = np.concatenate([host(p).ravel() for p in a.parameters()])
    assert -(16 ** -0.5) <= values.min() < -0.95 * 16 ** -0.5 and 0.95 * 16 ** -0.5 < values.max() <= 16 ** -0.5
    for p, q in zip(a.parameters(), b.parameters()):
        close(p, q, rtol=0, atol=0)


CELLS = {"rnn_tanh": (nn.RNNCell, "RNNCell", {}), "rnn_relu": (nn.RNNCell, "RNNCell", {"nonlinearity": "relu"}),
         "lstm": (nn.LSTMCell, "LSTMCell", {}), "gru": (nn.GRUCell, "GRUCell", {})}


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("given", [True, False])
@pytest.mark.parametrize("mode", CELLS)
def test_cells_match_torch(device, mode, given, batched):
    torch = torch_or_skip()
    cls, torch_name, extra = CELLS[mode]
    ref = getattr(torch.nn, torch_name)(4, 3, dtype=torch.float64, **extra)
    ours = cls(4, 3, device=device, dtype="float64", **extra)
    ours.load_state_dict(torch_state(torch, ref))
    assert list(ours.state_dict()) == list(ref.state_dict())
    rng = np.random.default_rng(1)
    lead = (2,) if batched else ()
    arrays = [rng.normal(size=(*lead, 4))] + ([rng.normal(size=(*lead, 3))] * (2 if mode == "lstm" else 1)
                                               if given else [])
    xs = [Tensor(a, requires_grad=True, device=device) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    hx = (tuple(xs[1:]) if mode == "lstm" else xs[1]) if given else None
    thx = (tuple(ts[1:]) if mode == "lstm" else ts[1]) if given else None
    out, tout = ours(xs[0], hx), ref(ts[0], thx)
    outs, touts = (out, tout) if mode == "lstm" else ((out,), (tout,))
    loss, tloss = 0.0, 0.0
    for a, t in zip(outs, touts):
        assert a.shape == tuple(t.shape)
        close(a, t, rtol=RTOL, atol=ATOL)
        loss, tloss = loss + (a * a).sum(), tloss + (t * t).sum()
    loss.backward()
    tloss.backward()
    for a, t in zip(xs, ts):
        close(a.grad, t.grad, rtol=RTOL, atol=ATOL)
    for p, tp in zip(ours.parameters(), ref.parameters()):
        close(p.grad, tp.grad, rtol=RTOL, atol=ATOL)


def layer_function(module, mode):
    """``f(x, h0, *params)``: the module with its parameters replaced by the arguments
    (so that gradcheck perturbs them), returning output and final states in one Tensor."""
    names = [n for n, _ in module.named_parameters()]

    def f(x, h0, *params):
        for name, p in zip(names, params):
            setattr(module, name, p)
        hx = (h0, h0 * 0.5 + 0.1) if mode == "lstm" else h0
        y, h = module(x, hx)
        last = h[1] if mode == "lstm" else h  # c_n for the LSTM
        return leanpass.concat([leanpass.reshape(y, (-1,)), leanpass.reshape(last, (-1,))])

    return f


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck(device, mode):
    cls, _, extra = MODES[mode]
    leanpass.manual_seed(0)
    module = cls(3, 2, num_layers=2, bidirectional=True, device=device, dtype="float64", **extra)
    rng = np.random.default_rng(2)
    x = Tensor(rng.normal(size=(3, 2, 3)), requires_grad=True, device=device)
    h0 = Tensor(rng.normal(size=(4, 2, 2)), requires_grad=True, device=device)
    params = [Tensor(host(p), requires_grad=True, device=device) for p in module.parameters()]
    if mode == "rnn_relu":  # away from ReLU's kink, where finite differences mean nothing
        params = [Tensor(host(p) * 0.5 + (0.3 if p.ndim == 1 else 0.0), requires_grad=True, device=device)
                  for p in params]
    assert leanpass.gradcheck(layer_function(module, mode), (x, h0, *params))


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_second_derivatives_gradgradcheck(device, mode):
    # create_graph runs the fused op again on Tensors: its rules differentiate themselves
    cls, _, extra = MODES[mode]
    leanpass.manual_seed(1)
    module = cls(2, 2, device=device, dtype="float64", **extra)
    rng = np.random.default_rng(3)
    x = Tensor(rng.normal(size=(3, 1, 2)), requires_grad=True, device=device)
    h0 = Tensor(rng.normal(size=(1, 1, 2)), requires_grad=True, device=device)
    params = [Tensor(host(p), requires_grad=True, device=device) for p in module.parameters()]
    assert leanpass.gradgradcheck(layer_function(module, mode), (x, h0, *params))


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_gradient_penalty_matches_torch(mode):
    # d/dW of |d sum(y) / dx|^2: backward with create_graph=True through the fused node
    torch = torch_or_skip()
    ref, ours = pair(torch, mode, num_layers=2, bidirectional=True, input_size=3, hidden_size=4)
    x = np.random.default_rng(4).normal(size=(5, 2, 3))
    xs, ts = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (gx,) = leanpass.autograd.grad(ours(xs)[0].sum(), [xs], create_graph=True)
    (tgx,) = torch.autograd.grad(ref(ts)[0].sum(), [ts], create_graph=True)
    close(gx, tgx, rtol=RTOL, atol=ATOL)
    (gx * gx).sum().backward()
    (tgx * tgx).sum().backward()
    for p, tp in zip(ours.parameters(), ref.parameters()):
        close(p.grad, tp.grad, rtol=1e-6, atol=1e-9)


def recurrent_nodes(t) -> list:
    """The names of the recurrent nodes in ``t``'s graph."""
    return [str(node._op) for node in graph_nodes(t) if str(node._op) in ("rnn", "lstm", "gru")]


@pytest.mark.parametrize("mode", MODES)
def test_one_graph_node_per_layer_and_direction_whatever_the_length(mode):
    cls, _, extra = MODES[mode]
    module = cls(3, 4, num_layers=2, bidirectional=True, **extra)
    for steps in (1, 40):
        y, _ = module(Tensor(np.ones((steps, 2, 3)), requires_grad=True))
        assert len(recurrent_nodes(y)) == 4


def test_dropout_between_layers_is_seeded_and_only_in_training():
    module = nn.LSTM(3, 4, num_layers=3, dropout=0.5, dtype="float64")
    x = Tensor(np.random.default_rng(5).normal(size=(4, 2, 3)))
    leanpass.manual_seed(7)
    a = module(x)[0]
    leanpass.manual_seed(7)
    b = module(x)[0]
    close(a, b, rtol=0, atol=0)
    c = module(x)[0]  # another mask
    assert not np.allclose(host(a), host(c))
    module.eval()
    plain = copy.deepcopy(module)
    plain.dropout = 0.0
    close(module(x)[0], plain(x)[0], rtol=0, atol=0)  # no dropout in eval mode


def test_dropout_one_zeroes_the_input_of_every_layer_but_the_first():
    module = nn.GRU(3, 4, num_layers=2, dropout=1.0, dtype="float64")
    x = Tensor(np.random.default_rng(6).normal(size=(4, 2, 3)), requires_grad=True)
    y = module(x)[0]
    top = nn.GRU(4, 4, dtype="float64")  # the second layer alone, on zeros
    top.load_state_dict({k.replace("_l1", "_l0"): v for k, v in module.state_dict().items() if "_l1" in k})
    close(y, top(Tensor(np.zeros((4, 2, 4))))[0], rtol=1e-12)
    y.sum().backward()
    close(x.grad, np.zeros((4, 2, 3)), rtol=0, atol=0)


def test_dropout_with_one_layer_warns_as_torch():
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.GRU(3, 4, dropout=0.5)


def test_float32_and_repr_and_module_api():
    torch = torch_or_skip()
    ours = nn.LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.25, bidirectional=True, dtype="float32")
    ref = torch.nn.LSTM(3, 4, num_layers=2, batch_first=True, dropout=0.25, bidirectional=True)
    assert repr(ours) == repr(ref)
    assert repr(nn.RNNCell(3, 4, nonlinearity="relu", bias=False)) == repr(
        torch.nn.RNNCell(3, 4, nonlinearity="relu", bias=False))
    assert repr(nn.GRU(3, 4, bias=False)) == repr(torch.nn.GRU(3, 4, bias=False))
    assert ours.weight_ih_l0.dtype == leanpass.float32
    ours.eval()
    ours.flatten_parameters()
    y, (h, c) = ours(Tensor(np.ones((2, 5, 3), dtype="float32")))
    assert (y.shape, h.shape, c.shape, y.dtype) == ((2, 5, 8), (4, 2, 4), (4, 2, 4), leanpass.float32)
    ours.double()
    assert ours(Tensor(np.ones((2, 5, 3))))[0].dtype == leanpass.float64


def test_empty_batch_gives_empty_outputs_as_torch():
    y, (h, c) = nn.LSTM(3, 4, num_layers=2, dtype="float32")(Tensor(np.ones((5, 0, 3), dtype="float32")))
    assert (y.shape, h.shape, c.shape) == ((5, 0, 4), (2, 0, 4), (2, 0, 4))


def test_a_weight_changed_after_the_forward_makes_backward_raise():
    module = nn.GRU(3, 4, dtype="float32")
    y, _ = module(Tensor(np.ones((4, 2, 3), dtype="float32")))
    with leanpass.no_grad():
        module.weight_hh_l0 += 1.0
    with pytest.raises(RuntimeError, match="gru"):
        y.sum().backward()


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_the_output_changed_in_place_still_differentiates(mode):
    # the node reads its own per-step arrays, never its output
    cls, _, extra = MODES[mode]
    module = cls(3, 4, dtype="float64", **extra)
    x = Tensor(np.random.default_rng(8).normal(size=(4, 2, 3)), requires_grad=True)
    module(x)[0].sum().backward()
    plain = host(x.grad).copy()
    x.grad = None
    y = module(x)[0]
    y *= 2.0
    y.sum().backward()
    close(x.grad, 2 * plain, rtol=1e-12)


def test_trains_a_tiny_sequence_task():
    leanpass.manual_seed(0)
    model = nn.LSTM(1, 8, batch_first=True, dtype="float32")
    head = nn.Linear(8, 1, dtype="float32")
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, size=(16, 6, 1)).astype("float32")
    target = Tensor(x.sum(axis=1))  # the running sum
    params = model.parameters() + head.parameters()
    opt = leanpass.optim.Adam(params, lr=0.05)
    losses = []
    for _ in range(40):
        y, _ = model(Tensor(x))
        loss = nn.mse_loss(head(y[:, -1, :]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.2 * losses[0]


# ---- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("make, error, message", [
    (lambda: nn.RNN(3, 4, nonlinearity="sigmoid"), ValueError, "nonlinearity 'sigmoid'"),
    (lambda: nn.LSTM(3, 4, dropout=1.5), ValueError, "dropout should be a number in range"),
    (lambda: nn.GRU(3, 4, dropout="0.5"), ValueError, "dropout"),
    (lambda: nn.LSTM(3, 4, proj_size=2), NotImplementedError, "proj_size"),
    (lambda: nn.LSTM(3, 4, proj_size=4), ValueError, "smaller than hidden_size"),
    (lambda: nn.GRU(3, 0), ValueError, "GRU: hidden_size must be positive"),
    (lambda: nn.RNN(3.0, 4), TypeError, "RNN: input_size must be an int"),
    (lambda: nn.LSTM(3, 4, num_layers=0), ValueError, "num_layers must be positive"),
    (lambda: nn.LSTM(3, 4, bidirectional="yes"), TypeError, "bidirectional must be a bool"),
    (lambda: nn.GRU(3, 4, dtype="int64"), ValueError, "floating-point"),
    (lambda: nn.LSTMCell(3, -1), ValueError, "LSTMCell: hidden_size"),
    (lambda: nn.RNNCell(3, 4, nonlinearity="gelu"), ValueError, "RNNCell: unknown nonlinearity"),
])
def test_bad_constructor_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def bad_calls(device):
    x = Tensor(np.ones((5, 2, 3)), device=device)
    h = Tensor(np.zeros((2, 2, 4)), device=device)  # 2 layers
    return [
        ("LSTM", lambda m: m(Tensor(np.ones((5, 2, 3, 1)), device=device)), ValueError,
         r"LSTM: expected input to be 2-D \(unbatched\) or 3-D \(batched\), got shape \(5, 2, 3, 1\)"),
        ("GRU", lambda m: m(Tensor(np.ones((5, 2, 6)), device=device)), ValueError,
         r"GRU: input.shape\[-1\] must be equal to input_size 3, got input of shape \(5, 2, 6\)"),
        ("GRU", lambda m: m(Tensor(np.ones((5, 2, 3), dtype="float32"), device=device)), TypeError,
         "GRU: input has dtype float32, the parameters float64"),
        ("RNN", lambda m: m(x, Tensor(np.zeros((2, 3, 4)), device=device)), ValueError,
         r"RNN: hx must have shape \(2, 2, 4\) \(num_layers \* num_directions, batch, hidden_size\), "
         r"got \(2, 3, 4\)"),
        ("RNN", lambda m: m(Tensor(np.ones((5, 3)), device=device), h), ValueError,
         r"RNN: for unbatched 2-D input, hx should be 2-D too, got shape \(2, 2, 4\)"),
        ("LSTM", lambda m: m(x, h), TypeError, r"LSTM: hx must be a tuple \(h_0, c_0\)"),
        ("LSTM", lambda m: m(x, (h, Tensor(np.zeros((2, 2, 5)), device=device))), ValueError,
         r"LSTM: c_0 must have shape \(2, 2, 4\)"),
        ("LSTM", lambda m: m(x, (h, np.zeros((2, 2, 4)))), TypeError, "LSTM: expected a Tensor as c_0"),
        ("GRU", lambda m: m(np.ones((5, 2, 3))), TypeError, "GRU: expected a Tensor as input"),
        ("GRU", lambda m: m(Tensor(np.ones((0, 2, 3)), device=device)), ValueError,
         "GRU: expected a sequence length larger than 0"),
        ("GRU", lambda m: m(Tensor(np.ones((5, 2, 3)), device=other_device(device))), ValueError,
         "GRU: input is on"),
    ]


@pytest.mark.parametrize("case", range(11))
def test_bad_input_names_the_layer_and_changes_nothing(device, case):
    name, call, error, message = bad_calls(device)[case]
    cls = {"RNN": nn.RNN, "LSTM": nn.LSTM, "GRU": nn.GRU}[name]
    module = cls(3, 4, num_layers=2, device=device, dtype="float64")
    before = {k: host(v).copy() for k, v in module.state_dict().items()}
    with pytest.raises(error, match=message):
        call(module)
    for k, v in module.state_dict().items():
        close(v, before[k], rtol=0, atol=0)
    assert not any(p.has_grad for p in module.parameters())


@pytest.mark.parametrize("call, error, message", [
    (lambda m: m(Tensor(np.ones((2, 2, 3)))), ValueError, "LSTMCell: expected input to be 1-D"),
    (lambda m: m(Tensor(np.ones((2, 5)))), ValueError, "LSTMCell: input.shape"),
    (lambda m: m(Tensor(np.ones((2, 3))), Tensor(np.ones((2, 4)))), TypeError, r"LSTMCell: hx must be a tuple"),
    (lambda m: m(Tensor(np.ones((2, 3))), (Tensor(np.ones((3, 4))), Tensor(np.ones((2, 4))))), ValueError,
     r"LSTMCell: h must have shape \(2, 4\)"),
    (lambda m: m(Tensor(np.ones(3)), (Tensor(np.ones((1, 4))), Tensor(np.ones((1, 4))))), ValueError,
     r"LSTMCell: h must have shape \(4,\)"),
])
def test_bad_cell_input(call, error, message):
    with pytest.raises(error, match=message):
        call(nn.LSTMCell(3, 4, dtype="float64"))
