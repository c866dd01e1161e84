"""The two original user documents (Tensor Basics, Operations): every example
runs as written and prints what the document says.

Each example is the document's code, verbatim, run with exec; its printed lines
are compared with the comments the document gives.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest


def run(code: str, capsys, namespace: dict | None = None) -> list[str]:
    namespace = {} if namespace is None else namespace
    exec(textwrap.dedent(code), namespace)
    return capsys.readouterr().out.splitlines()


# ---- Tensor Basics ----------------------------------------------------------------


def test_creating_tensors(capsys):
    ns = {}
    run(
        """
        from leanpass import Tensor
        import numpy as np

        # From a list
        t = Tensor([1.0, 2.0, 3.0])

        # From a NumPy array
        t = Tensor(np.array([[1, 2], [3, 4]]))

        # With gradient tracking
        t = Tensor([1.0, 2.0, 3.0], requires_grad=True)

        # With a name (useful for debugging)
        t = Tensor([1.0, 2.0], requires_grad=True, name="input")
        """,
        capsys,
        ns,
    )
    t = ns["t"]
    assert t.name == "input" and t.requires_grad and t.shape == (2,)


def test_from_numpy_int_array_becomes_float():
    from leanpass import Tensor

    t = Tensor(np.array([[1, 2], [3, 4]]))
    assert t.data.dtype == np.float64
    assert isinstance(t.data, np.ndarray)
    np.testing.assert_array_equal(t.data, [[1.0, 2.0], [3.0, 4.0]])


def test_key_attributes(capsys):
    out = run(
        """
        from leanpass import Tensor
        t = Tensor([1.0, 2.0, 3.0], requires_grad=True)

        print(t.data)       # [1. 2. 3.]
        print(t.grad)       # [0. 0. 0.]  (initialized to zeros)
        print(t.shape)      # (3,)
        """,
        capsys,
    )
    assert out == ["[1. 2. 3.]", "[0. 0. 0.]", "(3,)"]


def test_grad_is_none_without_requires_grad():
    from leanpass import Tensor

    assert Tensor([1.0, 2.0]).grad is None


def test_gradient_tracking(capsys):
    out = run(
        """
        from leanpass import Tensor
        a = Tensor([2.0], requires_grad=True)
        b = Tensor([3.0], requires_grad=False)  # no gradient tracking

        c = a * b
        print(c.requires_grad)  # True (a requires grad)

        d = a + 5.0
        print(d.requires_grad)  # True
        """,
        capsys,
    )
    assert out == ["True", "True"]


def test_resetting_gradients_with_zero_grad_all(capsys):
    ns = {}
    from leanpass import Tensor

    ns["x"] = x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    ns["w"] = w = Tensor([0.5, -1.0, 2.0], requires_grad=True)
    ns["b"] = b = Tensor(0.25, requires_grad=True)
    run(
        """
        y = (x * w).sum() + b
        y.backward()
        """,
        capsys,
        ns,
    )
    np.testing.assert_array_equal(x.grad, [0.5, -1.0, 2.0])
    np.testing.assert_array_equal(w.grad, [1.0, 2.0, 3.0])
    assert b.grad == 1.0
    run(
        """
        # ... after an optimization step ...
        y.zero_grad_all()
        """,
        capsys,
        ns,
    )
    for t in (x, w, b):
        np.testing.assert_array_equal(t.grad, np.zeros(t.shape))


def test_resetting_gradients_with_optimizer(capsys):
    optim = pytest.importorskip("leanpass.optim", reason="leanpass.optim arrives with the nn/optim issue")
    from leanpass import Tensor

    w = Tensor([0.5, -1.0], requires_grad=True)
    (w * w).sum().backward()
    ns = {"optimizer": optim.SGD([w], lr=0.1)}
    run("optimizer.zero_grad()", capsys, ns)
    np.testing.assert_array_equal(w.grad, [0.0, 0.0])


def test_shape_and_broadcasting(capsys):
    out = run(
        """
        from leanpass import Tensor
        import numpy as np
        a = Tensor(np.ones((3, 1)), requires_grad=True)  # shape (3, 1)
        b = Tensor(np.ones((1, 4)), requires_grad=True)  # shape (1, 4)
        c = a + b  # broadcasts to (3, 4)

        c.backward(np.ones((3, 4)))
        print(a.grad.shape)  # (3, 1) — summed back
        print(b.grad.shape)  # (1, 4) — summed back
        """,
        capsys,
    )
    assert out == ["(3, 1)", "(1, 4)"]


def test_broadcast_gradient_values():
    from leanpass import Tensor

    a = Tensor(np.ones((3, 1)), requires_grad=True)
    b = Tensor(np.ones((1, 4)), requires_grad=True)
    (a + b).backward(np.ones((3, 4)))
    np.testing.assert_array_equal(a.grad, np.full((3, 1), 4.0))
    np.testing.assert_array_equal(b.grad, np.full((1, 4), 3.0))


def test_representation(capsys):
    out = run(
        """
        from leanpass import Tensor
        t = Tensor([1.0, 2.0, 3.0], requires_grad=True, name="x")
        print(t)
        # Tensor(shape=(3,), requires_grad=True, name=x)
        """,
        capsys,
    )
    assert out == ["Tensor(shape=(3,), requires_grad=True, name=x)"]


def test_representation_without_name_and_on_other_devices():
    from leanpass import Tensor

    assert repr(Tensor([1.0])) == "Tensor(shape=(1,), requires_grad=False)"
    assert repr(Tensor([[1.0]], device="strict:1")) == "Tensor(shape=(1, 1), requires_grad=False, device=strict:1)"


# ---- Operations ---------------------------------------------------------------------


def test_arithmetic_operations(capsys):
    ns = {}
    run(
        """
        from leanpass import Tensor
        a = Tensor([1.0, 2.0, 3.0], requires_grad=True)
        b = Tensor([4.0, 5.0, 6.0], requires_grad=True)

        c = a + b      # addition
        d = a - b      # subtraction
        e = a * b      # element-wise multiplication
        f = a / b      # division

        # With Python scalars
        g = a + 10.0
        h = a * 2.0
        i = 3.0 - a
        """,
        capsys,
        ns,
    )
    expected = {
        "c": [5.0, 7.0, 9.0], "d": [-3.0, -3.0, -3.0], "e": [4.0, 10.0, 18.0],
        "f": [0.25, 0.4, 0.5], "g": [11.0, 12.0, 13.0], "h": [2.0, 4.0, 6.0], "i": [2.0, 1.0, 0.0],
    }
    for name, values in expected.items():
        np.testing.assert_allclose(ns[name].data, values, rtol=1e-15)
    assert [ns[k]._op for k in "cdefghi"] == ["+", "-", "*", "/", "+", "*", "-"]


def test_matrix_multiplication(capsys):
    ns = {}
    run(
        """
        from leanpass import Tensor
        import numpy as np
        x = Tensor(np.random.randn(32, 64), requires_grad=True)
        w = Tensor(np.random.randn(64, 16), requires_grad=True)

        y = x @ w   # shape (32, 16)
        """,
        capsys,
        ns,
    )
    assert ns["y"].shape == (32, 16)
    assert ns["y"]._op == "@"
    assert ns["x"].matmul(ns["w"]).shape == (32, 16)
    np.testing.assert_allclose(ns["y"].data, ns["x"].data @ ns["w"].data)


def test_power(capsys):
    ns = {}
    run(
        """
        from leanpass import Tensor
        x = Tensor([2.0, 3.0], requires_grad=True)
        y = x ** 2   # element-wise square: [4.0, 9.0]
        """,
        capsys,
        ns,
    )
    np.testing.assert_array_equal(ns["y"].data, [4.0, 9.0])
    ns["y"].sum().backward()
    # "** Multiplies gradient by 2 * self": exactly, not approximately.
    np.testing.assert_array_equal(ns["x"].grad, 2 * ns["x"].data)


def test_negation(capsys):
    ns = {}
    run(
        """
        from leanpass import Tensor
        x = Tensor([1.0, -2.0], requires_grad=True)
        y = -x       # [-1.0, 2.0]
        """,
        capsys,
        ns,
    )
    np.testing.assert_array_equal(ns["y"].data, [-1.0, 2.0])
    assert ns["y"]._op == "neg"


def test_reduction_operations(capsys):
    ns = {}
    run(
        """
        from leanpass import Tensor
        import numpy as np
        x = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)

        s = x.sum()    # scalar: 10.0
        m = x.mean()   # scalar: 2.5
        """,
        capsys,
        ns,
    )
    assert ns["s"].item() == 10.0 and ns["s"].shape == ()
    assert ns["m"].item() == 2.5 and ns["m"].shape == ()
    assert isinstance(ns["s"].data, np.ndarray)  # a 0-d array, never a NumPy scalar
    assert (ns["s"]._op, ns["m"]._op) == ("sum", "mean")


def test_non_linear_operations(capsys):
    ns = {}
    run(
        """
        from leanpass import Tensor
        x = Tensor([-2.0, -1.0, 0.0, 1.0, 2.0], requires_grad=True)

        r = x.relu()      # [0.0, 0.0, 0.0, 1.0, 2.0]
        e = x.exp()       # [0.135, 0.368, 1.0, 2.718, 7.389]
        l = x.log()       # nan, nan, -inf, 0.0, 0.693  (log of negative is nan)
        s = x.sigmoid()   # [0.119, 0.269, 0.5, 0.731, 0.881]
        """,
        capsys,
        ns,
    )
    np.testing.assert_array_equal(ns["r"].data, [0.0, 0.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(np.round(ns["e"].data, 3), [0.135, 0.368, 1.0, 2.718, 7.389])
    np.testing.assert_array_equal(np.round(ns["l"].data, 3), [np.nan, np.nan, -np.inf, 0.0, 0.693])
    np.testing.assert_array_equal(np.round(ns["s"].data, 3), [0.119, 0.269, 0.5, 0.731, 0.881])
    assert [ns[k]._op for k in "rels"] == ["relu", "exp", "log", "sigmoid"]


def test_operation_graph(capsys):
    out = run(
        """
        from leanpass import Tensor
        x = Tensor([2.0], requires_grad=True)
        y = x ** 2
        z = y + 1.0

        print(z._op)    # "+"
        print(y._op)    # "**"
        print(x._op)    # "leaf" (no operation — a root node)
        """,
        capsys,
    )
    assert out == ["+", "**", "leaf"]


def test_gradient_flow_table():
    """Each row of the document's table of backward behaviours."""
    from leanpass import Tensor

    a0, b0 = np.array([1.0, 2.0, 4.0]), np.array([3.0, 5.0, 8.0])
    g = np.array([0.5, -1.0, 2.0])

    def grads(fn):
        a, b = Tensor(a0, requires_grad=True), Tensor(b0, requires_grad=True)
        fn(a, b).backward(g)
        return a.grad, b.grad

    ga, gb = grads(lambda a, b: a + b)  # passes gradient unchanged to both
    np.testing.assert_array_equal(ga, g)
    np.testing.assert_array_equal(gb, g)
    ga, gb = grads(lambda a, b: a - b)  # unchanged to first, negated to second
    np.testing.assert_array_equal(ga, g)
    np.testing.assert_array_equal(gb, -g)
    ga, gb = grads(lambda a, b: a * b)  # multiplies by the other input
    np.testing.assert_array_equal(ga, g * b0)
    np.testing.assert_array_equal(gb, g * a0)
    ga, gb = grads(lambda a, b: a / b)  # 1/other for first, -self/other**2 for second
    np.testing.assert_allclose(ga, g / b0, rtol=1e-15)
    np.testing.assert_allclose(gb, -g * a0 / b0**2, rtol=1e-15)
    ga, _ = grads(lambda a, b: a**2)  # 2 * self
    np.testing.assert_array_equal(ga, g * 2 * a0)

    A, B = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    G = np.ones((2, 4))
    ta, tb = Tensor(A, requires_grad=True), Tensor(B, requires_grad=True)
    (ta @ tb).backward(G)  # the other matrix, transposed appropriately
    np.testing.assert_array_equal(ta.grad, G @ B.T)
    np.testing.assert_array_equal(tb.grad, A.T @ G)

    t = Tensor(A, requires_grad=True)
    t.sum().backward()  # broadcasts gradient back to the original shape
    np.testing.assert_array_equal(t.grad, np.ones((2, 3)))
    t = Tensor(A, requires_grad=True)
    t.mean().backward()  # divided by element count
    np.testing.assert_array_equal(t.grad, np.full((2, 3), 1 / 6))
