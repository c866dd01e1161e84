"""Train a small convolutional network with LeanPass, on the CPU or a GPU with the same code.

    python examples/train_cnn.py                                   # scikit-learn's digits, CPU
    python examples/train_cnn.py --device cuda                     # the same on a GPU
    python examples/train_cnn.py --data ~/mnist --epochs 5 --plot curves.png
    python examples/train_cnn.py --checkpoint cnn.npz --resume     # save every epoch, continue
    mpiexec -n 2 python -m mpi4py examples/train_cnn.py --distributed

The network: blocks of 3x3 convolution, batch normalisation and ReLU, one per
--channels entry, with 2x2 max-pooling after the first; then the average over each
quarter of the image (AdaptiveAvgPool2d(2), which keeps where in the image a feature
was) and one Linear layer to the class logits.

It takes train_mlp.py's options and data (scikit-learn's 8x8 digits by default, no
download; --data: MNIST files) and trains with the same loop: see that script for
--distributed, --checkpoint and the one-line error for a device that cannot be used.
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_mlp  # noqa: E402

from leanpass import Tensor, nn  # noqa: E402


class CNN(nn.Module):
    """Images flattened to ``(batch, side * side)`` in, class logits out."""

    def __init__(self, side: int, channels, classes: int, *, device=None, dtype=None):
        self.side = side
        blocks, before = [], 1
        for i, width in enumerate(channels):
            blocks += [nn.Conv2d(before, width, 3, padding=1, bias=False, device=device, dtype=dtype),
                       nn.BatchNorm2d(width, device=device, dtype=dtype), nn.ReLU()]
            if i == 0:
                blocks.append(nn.MaxPool2d(2))
            before = width
        self.features = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.flatten = nn.Flatten()
        self.head = nn.Linear(before * 4, classes, device=device, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        images = x.reshape((x.shape[0], 1, self.side, self.side))
        return self.head(self.flatten(self.pool(self.features(images))))


def parse_args(argv=None):
    p = train_mlp.arg_parser(__doc__)
    p.add_argument("--channels", default="32,64,64",
                   help="channels of each convolution block, comma-separated (default: 32,64,64)")
    p.set_defaults(epochs=12)
    args = p.parse_args(argv)
    args.channels = train_mlp.sizes_option(p, "--channels", args.channels)
    if not args.channels:
        p.error("--channels needs at least one block")
    return train_mlp.checked(p, args)


def build_cnn(args, data, device):
    """The model and how the first line describes it: square images only."""
    side = math.isqrt(data.features)
    if side * side != data.features:
        train_mlp.refuse(args, f"--data: {data.name}'s {data.features} features are not a square image")
    model = CNN(side, args.channels, data.classes, device=device, dtype=args.dtype)
    return model, f"CNN {side}x{side} -> channels {args.channels} -> {data.classes}"


def main(argv=None):
    return train_mlp.main(argv, parse=parse_args, build=build_cnn)


if __name__ == "__main__":
    main()
