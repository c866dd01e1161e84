"""Training that converges, on every device, with fixed seeds: the problems of
the guides in docs/."""

from __future__ import annotations

import numpy as np
import pytest

import leanpass
from leanpass import Tensor, nn, no_grad, optim


def fit(model, opt, loss_fn, x, y, epochs, batch_size=None, seed=0):
    """Minibatch training; returns the last epoch's mean loss."""
    n = x.shape[0]
    batch_size = batch_size or n
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(n) if batch_size < n else np.arange(n)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
    return total / n


def accuracy(model, x, labels):
    with no_grad():
        predicted = model(x).numpy().argmax(axis=1)
    return (predicted == labels).mean()


def test_linear_regression(device):
    leanpass.manual_seed(0)
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, size=(200, 1))
    ys = 2 * xs + 1 + rng.normal(0, 0.1, size=xs.shape)
    model = nn.Linear(1, 1, device=device)
    opt = optim.SGD(model.parameters(), lr=0.1)
    fit(model, opt, nn.mse_loss, Tensor(xs, device=device), Tensor(ys, device=device), epochs=300)
    assert abs(model.weight.item() - 2.0) < 0.1 and abs(model.bias.item() - 1.0) < 0.1


def test_xor(device):
    leanpass.manual_seed(0)
    xs = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=float)
    ys = np.array([[0], [1], [1], [0]], dtype=float)
    model = nn.MLP([2, 8, 1], activation="tanh", device=device)
    opt = optim.Adam(model.parameters(), lr=0.05)
    fit(model, opt, nn.binary_cross_entropy_loss, Tensor(xs, device=device), Tensor(ys, device=device), epochs=300)
    with no_grad():
        predicted = (model(Tensor(xs, device=device)).numpy() > 0).astype(float)
    assert (predicted == ys).all()


def test_points_inside_a_circle(device):
    leanpass.manual_seed(0)
    rng = np.random.default_rng(1)
    xs = rng.uniform(-1, 1, size=(400, 2))
    labels = ((xs**2).sum(axis=1) < 0.5).astype(int)
    x = Tensor(xs, device=device)
    model = nn.MLP([2, 16, 16, 2], device=device)
    opt = optim.Adam(model.parameters(), lr=0.02)
    fit(model, opt, nn.cross_entropy_loss, x, Tensor(labels, device=device), epochs=60, batch_size=50)
    assert accuracy(model, x, labels) >= 0.9


def test_three_gaussian_clusters(device):
    leanpass.manual_seed(0)
    rng = np.random.default_rng(2)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [3.0, 6.0 * np.sqrt(3) / 2]])  # pairwise 6 apart
    labels = rng.integers(0, 3, size=300)
    xs = centres[labels] + rng.normal(0, 1.0, size=(300, 2))
    onehot = np.eye(3)[labels]
    x = Tensor(xs, device=device)
    model = nn.MLP([2, 16, 3], device=device)
    opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    fit(model, opt, nn.cross_entropy_loss, x, Tensor(onehot, device=device), epochs=30, batch_size=30)
    assert accuracy(model, x, labels) >= 0.95


def test_sine_regression(device):
    leanpass.manual_seed(0)
    rng = np.random.default_rng(3)
    xs = rng.uniform(-np.pi, np.pi, size=(256, 1))
    ys = np.sin(xs)
    x, y = Tensor(xs, device=device), Tensor(ys, device=device)
    model = nn.MLP([1, 32, 32, 1], activation="tanh", device=device)
    opt = optim.Adam(model.parameters(), lr=0.01)
    fit(model, opt, nn.mse_loss, x, y, epochs=100, batch_size=32)
    with no_grad():
        mse = nn.mse_loss(model(x), y).item()
    assert mse <= 0.05


def test_digits_mlp_adam(device):
    datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn is missing: pip install scikit-learn")
    digits = datasets.load_digits()
    xs = digits.data / 16.0
    labels = digits.target
    rng = np.random.default_rng(0)
    order = rng.permutation(len(xs))
    train, test = order[:1400], order[1400:]
    leanpass.manual_seed(0)
    model = nn.MLP([64, 64, 10], device=device)
    opt = optim.Adam(model.parameters(), lr=0.01)
    x_train = Tensor(xs[train], device=device)
    y_train = Tensor(labels[train], device=device)
    fit(model, opt, nn.cross_entropy_loss, x_train, y_train, epochs=15, batch_size=64)
    model.eval()
    assert accuracy(model, Tensor(xs[test], device=device), labels[test]) >= 0.95
