"""One training step of an MLP classifier (linear layers, ReLU, cross-entropy on
integer labels, plain SGD), written three ways so they can be timed side by side:

- ``LeanPassStep``: LeanPass on any device;
- ``HandStep``: the same arithmetic written by hand with the array library itself
  (NumPy on the CPU, CuPy on a GPU): the floor LeanPass is measured against;
- ``TorchStep``: PyTorch eager (when installed).

All three start from the same weights and data, so their losses agree.

``model_steps`` makes the same kind of step (cross-entropy, backward, SGD) for
``benchmarks/models.py``'s CNN or transformer, in LeanPass and PyTorch, with
PyTorch's initial weights loaded into LeanPass.
"""

from __future__ import annotations

import numpy as np


def make_problem(sizes, batch, seed=0):
    """Host data: inputs (batch, sizes[0]), integer labels, and weights as float64,
    each ``(fan_in, fan_out)`` as :class:`HandStep` multiplies them (PyTorch's and
    LeanPass's ``Linear.weight`` is the transpose)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, sizes[0]))
    labels = rng.integers(0, sizes[-1], size=batch)
    weights = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / np.sqrt(fan_in)
        weights.append((rng.uniform(-bound, bound, size=(fan_in, fan_out)), np.zeros(fan_out)))
    return x, labels, weights


class _FrameworkStep:
    """A step of a framework with autodiff: model, loss, optimizer set up by a subclass."""

    def __call__(self):
        self.optimizer.zero_grad()
        loss = self._loss(self.model(self.x), self.labels)
        loss.backward()
        self.optimizer.step()
        return loss

    def loss_value(self, loss) -> float:
        return loss.item()


class LeanPassStep(_FrameworkStep):
    name = "leanpass"

    def __init__(self, sizes, batch, device="cpu", dtype="float32", lr=0.01, seed=0):
        import leanpass
        from leanpass import nn, optim

        x, labels, weights = make_problem(sizes, batch, seed)
        self.backend = leanpass.backends.get_backend(device)
        self.model = nn.MLP(sizes, device=device, dtype=dtype)
        self.model.load_state_dict({  # Linear.weight is (out, in): w.T, laid out in C order
            name: np.ascontiguousarray(value, dtype=dtype)
            for (w, b), layer in zip(weights, range(len(weights)))
            for name, value in ((f"layers.{layer}.weight", w.T), (f"layers.{layer}.bias", b))
        })
        self.optimizer = optim.SGD(self.model.parameters(), lr=lr)
        self.x = leanpass.Tensor(x, device=device, dtype=dtype)
        self.labels = leanpass.asarray(labels, device=device)  # int64 class indices, as PyTorch's
        self._loss = nn.cross_entropy_loss

    def sync(self):
        self.backend.synchronize()


class CompiledLeanPassStep(LeanPassStep):
    """:class:`LeanPassStep`'s step through ``leanpass.compile``: traced at the first
    call, replayed after (the same kernels, without the graph)."""

    name = "leanpass compiled"

    def __init__(self, *args, **kwargs):
        import leanpass

        super().__init__(*args, **kwargs)

        def step(x, labels):
            self.optimizer.zero_grad()
            loss = self._loss(self.model(x), labels)
            loss.backward()
            self.optimizer.step()
            return loss

        self._step = leanpass.compile(step)

    def __call__(self):
        return self._step(self.x, self.labels)


class HandStep:
    """Forward, backward and SGD update written out with the array library."""

    name = "by hand"

    def __init__(self, sizes, batch, device="cpu", dtype="float32", lr=0.01, seed=0):
        x, labels, weights = make_problem(sizes, batch, seed)
        if device.startswith("cuda"):
            import cupy as xp

            self.device = xp.cuda.Device(int(device.partition(":")[2] or 0))
            self.device.use()
            self.sync = lambda: self.device.synchronize()
        else:
            xp = np
            self.sync = lambda: None
        self.xp = xp
        self.lr = lr
        self.x = xp.asarray(x, dtype=dtype)
        self.labels = xp.asarray(labels)
        self.rows = xp.arange(batch)
        self.weights = [(xp.asarray(w, dtype=dtype), xp.asarray(b, dtype=dtype)) for w, b in weights]

    def __call__(self):
        xp, lr = self.xp, self.lr
        acts, pre = [self.x], []
        h = self.x
        for i, (w, b) in enumerate(self.weights):
            z = h @ w + b
            pre.append(z)
            h = xp.maximum(z, 0) if i < len(self.weights) - 1 else z
            acts.append(h)
        logits = acts[-1]
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = xp.exp(shifted)
        total = exp.sum(axis=1, keepdims=True)
        n = logits.shape[0]
        loss = (xp.log(total[:, 0]) - shifted[self.rows, self.labels]).mean()
        grad = exp / total
        grad[self.rows, self.labels] -= 1
        grad /= n
        for i in range(len(self.weights) - 1, -1, -1):
            w, b = self.weights[i]
            gw = acts[i].T @ grad
            gb = grad.sum(axis=0)
            if i:
                grad = (grad @ w.T) * (pre[i - 1] > 0)
            w -= lr * gw
            b -= lr * gb
        return loss

    def loss_value(self, loss) -> float:
        return float(loss)


class TorchStep(_FrameworkStep):
    name = "pytorch"

    def __init__(self, sizes, batch, device="cpu", dtype="float32", lr=0.01, seed=0):
        import torch

        self.torch = torch
        x, labels, weights = make_problem(sizes, batch, seed)
        tdtype = getattr(torch, dtype)
        layers = []
        for i, (w, b) in enumerate(weights):
            linear = torch.nn.Linear(*w.shape).to(device=device, dtype=tdtype)
            with torch.no_grad():
                linear.weight.copy_(torch.tensor(w.T))
                linear.bias.copy_(torch.tensor(b))
            layers.append(linear)
            if i < len(weights) - 1:
                layers.append(torch.nn.ReLU())
        self.model = torch.nn.Sequential(*layers)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.x = torch.tensor(x, dtype=tdtype, device=device)
        self.labels = torch.tensor(labels, device=device)
        self.cuda = device.startswith("cuda")
        self._loss = torch.nn.functional.cross_entropy

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()


class ModelStep(_FrameworkStep):
    """A training step of a model that takes several inputs (a transformer's mask)."""

    def __init__(self, name, model, inputs, labels, loss, optimizer, sync):
        self.name, self.model, self.inputs, self.labels = name, model, inputs, labels
        self._loss, self.optimizer, self.sync = loss, optimizer, sync

    def __call__(self):
        self.optimizer.zero_grad()
        logits = self.model(*self.inputs)
        loss = self._loss(logits.reshape((-1, logits.shape[-1])), self.labels)
        loss.backward()
        self.optimizer.step()
        return loss


class CompiledModelStep(ModelStep):
    """:class:`ModelStep`'s step through ``leanpass.compile``, replayed (and its fused
    runs compiled) three times before it is timed."""

    def __init__(self, *args):
        import leanpass

        super().__init__(*args)
        self._step = leanpass.compile(lambda inputs, labels: ModelStep.__call__(self))
        for _ in range(3):
            self()

    def __call__(self):
        return self._step(self.inputs, self.labels)


def model_steps(kind, batch, device="cpu", dtype="float32", lr=0.01, seed=0, width=32, depth=2, frameworks=None,
                compiled=False):
    """``{framework: ModelStep}`` for ``kind`` "cnn" (``benchmarks/models.py``'s CNN
    on ``(batch, 1, 28, 28)`` images, channels ``width`` and ``2 * width``) or
    "transformer" (``depth`` blocks of ``width`` with 4 heads on sequences of 128,
    one label per position), LeanPass and PyTorch (where installed), from the same
    weights and data; with ``compiled``, "leanpass compiled" too (a model of its own,
    the same weights)."""
    import models

    import leanpass

    rng = np.random.default_rng(seed)
    if kind == "cnn":
        shape, label_shape, classes = (batch, 1, 28, 28), (batch,), 10

        def build(nn, **kw):
            return models.cnn(nn, channels=(width, 2 * width), classes=classes, **kw)
    else:
        length, classes = 128, 64
        shape, label_shape = (batch, length, width), (batch * length,)

        def build(nn, **kw):
            return models.transformer(nn, width, 4, depth, classes, **kw)
    x = rng.normal(size=shape)
    labels = rng.integers(0, classes, size=label_shape)
    above = np.triu(np.ones((128, 128), dtype=bool), 1)  # the transformer's causal mask
    steps = {}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and device.startswith("cuda") and not torch.cuda.is_available():
        torch = None
    reference = None
    if torch is not None:
        torch.manual_seed(seed)
        reference = build(torch.nn, dtype=getattr(torch, dtype))
    if reference is not None and device.startswith(("cpu", "cuda")):  # elsewhere PyTorch gives the weights only
        reference.to(device)
        inputs = [torch.tensor(x, dtype=getattr(torch, dtype), device=device)]
        if kind == "transformer":
            inputs.append(torch.tensor(above, device=device))
        cuda = device.startswith("cuda")
        steps["pytorch"] = ModelStep("pytorch", reference, inputs, torch.tensor(labels, device=device),
                                     torch.nn.functional.cross_entropy,
                                     torch.optim.SGD(reference.parameters(), lr=lr),
                                     torch.cuda.synchronize if cuda else (lambda: None))
    backend = leanpass.backends.get_backend(device)
    for name, kind_of_step in [("leanpass", ModelStep)] + ([("leanpass compiled", CompiledModelStep)] * compiled):
        model = build(leanpass.nn, device=device, dtype=dtype)
        if reference is not None:
            model.load_state_dict({k: v.detach().cpu().numpy() for k, v in reference.state_dict().items()},
                                  layout="torch")
        inputs = [leanpass.Tensor(x, device=device, dtype=dtype)]
        if kind == "transformer":
            inputs.append(leanpass.asarray(above, device=device))
        steps[name] = kind_of_step(name, model, inputs, leanpass.asarray(labels, device=device),
                                   leanpass.nn.cross_entropy_loss,
                                   leanpass.optim.SGD(model.parameters(), lr=lr), backend.synchronize)
    return {name: steps[name] for name in (frameworks or steps) if name in steps}


def available_contestants(device):
    """The step classes that can run here, LeanPass first (only LeanPass on `strict`)."""
    if not device.startswith(("cpu", "cuda")):
        return [LeanPassStep]
    found = [LeanPassStep, HandStep]
    try:
        import torch

        if device == "cpu" or torch.cuda.is_available():
            found.append(TorchStep)
    except ImportError:
        pass
    return found
