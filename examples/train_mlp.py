"""Train an MLP classifier with LeanPass, on the CPU or a GPU with the same code.

    python examples/train_mlp.py                                  # scikit-learn's digits, CPU
    python examples/train_mlp.py --device cuda --dtype float32    # the same on a GPU
    python examples/train_mlp.py --data ~/mnist --epochs 10 --hidden 512,256 --plot curves.png
    python examples/train_mlp.py --checkpoint run.npz             # save every epoch
    python examples/train_mlp.py --checkpoint run.npz --resume    # ... and continue from it
    mpiexec -n 2 python -m mpi4py examples/train_mlp.py --distributed   # data parallel, 2 processes

A device that cannot be used here (``--device cuda`` without CuPy or a GPU) ends
the script at once with a one-line reason and exit status 2, as a bad argument does.

Data: scikit-learn's 8x8 digits by default (shipped inside scikit-learn, no
download), or MNIST from files you downloaded (--data: a folder with the four
IDX files, gzipped or not, or an mnist.npz). The same --seed gives the same
numbers on the CPU, also across --resume (which refuses a checkpoint made with
another --seed, --dtype, data or model: the seed splits the digits, and another
one would train on held-out samples).

--distributed trains one model on every process that ``mpiexec`` started
(``pip install "leanpass[mpi]"``): each epoch's shuffled samples are split between
them, --batch-size is each process's share of a step, and the gradients are averaged
(DistributedDataParallel), so N processes with batch B step as one with batch N*B.
With --device cuda each process takes the GPU cuda:<its rank on the node>, and the
gradients travel over NCCL. Rank 0 alone prints, plots and checkpoints; a checkpoint
resumes on any number of processes. ``python -m mpi4py`` makes an exception on one
process end them all (a plain ``python`` would leave the others waiting).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from example_data import load_digits, load_mnist  # noqa: E402

import leanpass  # noqa: E402
from leanpass import Tensor, nn, no_grad, optim  # noqa: E402
from leanpass import distributed as dist  # noqa: E402
from leanpass.backends import get_backend  # noqa: E402


def _integer(low, high=None):
    """An int >= ``low`` (and < ``high`` if given), for argparse's ``type``."""
    def parse(text):
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text}")
        if high is not None and value >= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high_text}), got {text}")
        return value
    high_text = "2**64" if high == 2**64 else str(high)
    parse.__name__ = "integer"  # argparse names the type in its message
    return parse


positive, natural = _integer(1), _integer(0)
seed = _integer(0, 2**64)  # leanpass.manual_seed takes [-2**63, 2**64); NumPy's generators no negatives


def non_negative(text):
    """A finite number >= 0 (a weight decay)."""
    value = float(text)
    if not 0.0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


non_negative.__name__ = "number"


def rate(text):
    """A learning rate: a finite number > 0."""
    value = float(text)
    if not 0.0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


rate.__name__ = "learning rate"


def arg_parser(description: str) -> argparse.ArgumentParser:
    """The options every training script here takes (train_cnn.py adds its own)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or strict (default: cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--epochs", type=positive, default=20)
    p.add_argument("--batch-size", type=positive, default=64)
    p.add_argument("--lr", type=rate, default=3e-3, help="Adam's learning rate")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--data", default=None, help="MNIST folder (IDX files) or mnist.npz; default: digits")
    p.add_argument("--plot", default=None, metavar="PNG", help="write loss and accuracy curves here")
    p.add_argument("--checkpoint", default=None, metavar="NPZ", help="save model and optimizer here each epoch")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--compile", action="store_true",
                   help="run the training step through leanpass.compile (traced once, then replayed)")
    p.add_argument("--distributed", action="store_true",
                   help="data parallel over the processes mpiexec started (MPI on cpu, NCCL on cuda)")
    return p


def sizes_option(p: argparse.ArgumentParser, option: str, text: str) -> list:
    """``text`` like ``"256,128"`` as a list of positive ints, maybe empty (a usage error otherwise)."""
    try:
        sizes = [int(n) for n in str(text).split(",") if n.strip()]
    except ValueError:
        sizes = [0]
    if min(sizes, default=1) < 1:
        p.error(f"{option} takes positive sizes like 256,128, got {text!r}")
    return sizes


def output_path(p: argparse.ArgumentParser, option: str, path) -> None:
    """A usage error now, not after training, if ``path`` cannot be written: its folder must exist."""
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        p.error(f"{option} {path!r} is a folder; give a file name in it")
    if not os.path.isdir(folder):
        p.error(f"{option} {path!r}: there is no folder {folder!r} to write it in")
    if not os.access(folder, os.W_OK):
        p.error(f"{option} {path!r}: the folder {folder!r} is not writable")


def refuse(args, message: str):
    """A usage error (exit status 2) from inside ``train``: ``args.error`` is the parser's."""
    error = getattr(args, "error", None)
    if error is not None:
        error(message)
    raise ValueError(message)


def checked(p: argparse.ArgumentParser, args) -> argparse.Namespace:
    """The checks every script makes once its own options are read."""
    if args.resume and not args.checkpoint:
        p.error("--resume needs --checkpoint PATH")
    if args.data is not None and not os.path.exists(args.data):
        p.error(f"--data {args.data!r} is not a file or folder")
    output_path(p, "--plot", args.plot)
    output_path(p, "--checkpoint", args.checkpoint)
    args.error = p.error  # for the checks only train() can make (the data, a checkpoint)
    try:  # before loading any data: a device that cannot be used is a one-line error, not a traceback
        if args.distributed:
            dist.init_process_group(device=args.device)
            if args.device.startswith("cuda"):  # one GPU per process
                args.device = f"cuda:{dist.get_local_rank()}"
        get_backend(args.device)
    except (ValueError, RuntimeError) as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")
    return args


def parse_args(argv=None):
    p = arg_parser(__doc__)
    p.add_argument("--hidden", default="128", help="hidden layer sizes, comma-separated (default: 128)")
    args = p.parse_args(argv)
    args.hidden = sizes_option(p, "--hidden", args.hidden)
    return checked(p, args)


def build_mlp(args, data, device):
    """The model and how the first line describes it."""
    sizes = [data.features, *args.hidden, data.classes]
    return nn.MLP(sizes, device=device, dtype=args.dtype), f"MLP {sizes}"


def batches(n, batch_size):
    """Basic slices: no index arrays, so nothing is checked on the host per batch."""
    for start in range(0, n, batch_size):
        yield slice(start, min(start + batch_size, n))


def evaluate(model, x, y, batch_size):
    """(accuracy, mean loss) over a whole split, without recording a graph; the
    sums stay on the device until the end (one host read, not one per batch)."""
    xp = get_backend(x.device).xp
    correct = total_loss = None
    with no_grad():
        for rows in batches(len(y), max(batch_size, 256)):
            logits = model(x[rows])
            loss = nn.cross_entropy_loss(logits, y[rows]) * float(rows.stop - rows.start)
            hits = xp.sum(xp.astype(xp.argmax(logits.data, axis=1) == xp.astype(y.data[rows], xp.int64), xp.int64))
            total_loss = loss if total_loss is None else total_loss + loss
            correct = hits if correct is None else correct + hits
    return int(correct) / len(y), total_loss.item() / len(y)


def progress(total, desc, quiet):
    if quiet:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="sample", leave=False, dynamic_ncols=True, disable=None)


def plot(history, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = range(1, len(history["train_loss"]) + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(epochs, history["train_loss"], label="train")
    left.plot(epochs, history["test_loss"], label="held out")
    left.set(xlabel="epoch", ylabel="cross-entropy", title="loss")
    left.legend()
    right.plot(epochs, history["test_accuracy"], color="tab:green")
    right.set(xlabel="epoch", ylabel="accuracy", title="held-out accuracy")
    for axis in (left, right):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def resume_checkpoint(args, device, keys) -> dict:
    """``--checkpoint`` read for ``--resume``: a usage error if it is not one of this script's."""
    try:
        saved = leanpass.load(args.checkpoint, device=device)
    except (OSError, ValueError) as exc:
        refuse(args, f"--checkpoint {args.checkpoint!r} cannot be resumed: {exc}")
    missing = [key for key in keys if key not in saved]
    if missing:
        refuse(args, f"--checkpoint {args.checkpoint!r} was not written by this script (it lacks {missing})")
    return saved


def same_settings(args, saved: dict, settings: dict) -> None:
    """Refuse to resume with another --dtype, --seed or data than the checkpoint's run had."""
    for name, value in settings.items():
        if name not in saved or saved[name] == value:
            continue
        if name == "data":
            refuse(args, f"the checkpoint was trained on {saved[name]}, not on {value}: resume with the same --data")
        why = " (another seed splits and orders the data differently)" if name == "seed" else ""
        refuse(args, f"the checkpoint was made with --{name} {saved[name]}, not --{name} {value}{why}: "
                     f"resume with --{name} {saved[name]} (or write another --checkpoint)")


def main(argv=None, parse=parse_args, build=build_mlp):
    args = parse(argv)
    try:
        return train(args, build)
    finally:
        if args.distributed:
            dist.destroy_process_group()


def train(args, build=build_mlp):
    """Train ``build(args, data, device)``'s model; the history of each epoch's figures."""
    rank, processes = (dist.get_rank(), dist.get_world_size()) if args.distributed else (0, 1)
    say = print if rank == 0 else (lambda *a, **k: None)  # rank 0 alone prints
    try:
        data = load_mnist(args.data) if args.data else load_digits(seed=args.seed)
    except (OSError, ValueError) as exc:  # a folder without the files, a file that is not MNIST
        reason = str(exc)
        refuse(args, f"--data: {reason}" if args.data in reason else f"--data {args.data!r}: {reason}")
    backend = get_backend(args.device)
    device = backend.device
    x_train = Tensor(data.x_train, device=device, dtype=args.dtype)
    y_train = Tensor(data.y_train, device=device, dtype=args.dtype)
    x_test = Tensor(data.x_test, device=device, dtype=args.dtype)
    y_test = Tensor(data.y_test, device=device, dtype=args.dtype)

    leanpass.manual_seed(args.seed)
    model, described = build(args, data, device)
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    net = nn.parallel.DistributedDataParallel(model) if args.distributed else model  # what the steps call
    history = {"train_loss": [], "test_loss": [], "test_accuracy": [], "samples_per_s": []}
    first_epoch = 1
    # What a resumed run must share with the run that wrote the checkpoint: the seed splits
    # the digits (another one would train on held-out samples) and orders each epoch.
    settings = {"dtype": args.dtype, "seed": args.seed,
                "data": f"{data.name}, {len(data.y_train)} train / {len(data.y_test)} held out"}
    if args.resume and os.path.exists(args.checkpoint):
        saved = resume_checkpoint(args, device, ("model", "optimizer", "epoch", "history", "model_description"))
        same_settings(args, saved.get("settings", {}), settings)
        if saved["model_description"] != described:
            refuse(args, f"the checkpoint holds a model of {saved['model_description']}, not {described}: "
                         "resume with the options that made it (or write another --checkpoint)")
        try:
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
        except (ValueError, KeyError, TypeError) as exc:
            refuse(args, f"--checkpoint {args.checkpoint!r} does not fit this model: {exc}")
        history = saved["history"]
        first_epoch = saved["epoch"] + 1
        say(f"resumed from {args.checkpoint} after epoch {saved['epoch']}")
        if args.distributed:  # every process read the same file; make sure they agree
            net._broadcast_state(model.parameters())

    shares = f", {processes} processes x batch {args.batch_size}" if args.distributed else ""
    say(f"{data.name}: {len(data.y_train)} train / {len(data.y_test)} held out, {described}, "
        f"{args.dtype} on {device}{shares}")
    n = len(data.y_train)
    if args.distributed:  # each epoch, every process takes its share of one shuffle
        sampler = leanpass.data.DistributedSampler(range(n), seed=args.seed, drop_last=True)
    def train_step(x, y):
        optimizer.zero_grad()
        loss = nn.cross_entropy_loss(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    if args.compile:
        train_step = leanpass.compile(train_step)
    for epoch in range(first_epoch, args.epochs + 1):
        model.train()
        if args.distributed:
            sampler.set_epoch(epoch)
            order = np.fromiter(sampler, dtype=np.int64)
        else:
            order = np.random.default_rng(args.seed * 1_000_003 + epoch).permutation(n)  # per epoch: resumable
        bar = progress(len(order), f"epoch {epoch}/{args.epochs}", args.quiet or rank != 0)
        running = None
        seen = 0
        start = time.perf_counter()
        with no_grad():  # one shuffle on the device per epoch; batches are then plain slices
            x_epoch, y_epoch = x_train[order], y_train[order]
        for step, rows in enumerate(batches(len(order), args.batch_size), start=1):
            size = rows.stop - rows.start
            loss = train_step(x_epoch[rows], y_epoch[rows])
            weighted = loss.detach() * float(size)
            running = weighted if running is None else running + weighted  # stays on the device
            seen += size
            if bar is not None:
                bar.update(size)
                if step % 10 == 0:  # reading the loss waits for the device: not every step
                    bar.set_postfix(loss=f"{running.item() / seen:.4f}",
                                    samples_s=f"{seen / (time.perf_counter() - start):,.0f}")
        backend.synchronize()
        seconds = time.perf_counter() - start
        if bar is not None:
            bar.close()
        if args.distributed:  # every process's samples: one all-reduce per epoch
            totals = Tensor([running.item(), seen], device=device, dtype=args.dtype)
            seen = int(dist.all_reduce(totals).numpy()[1])
            running = totals[0]
        train_loss = running.item() / seen
        accuracy, test_loss = evaluate(model.eval(), x_test, y_test, args.batch_size)
        history["train_loss"].append(train_loss)
        history["test_loss"].append(test_loss)
        history["test_accuracy"].append(accuracy)
        history["samples_per_s"].append(seen / seconds)
        say(f"epoch {epoch:3d}  train loss {train_loss:.4f}  held-out loss {test_loss:.4f}  "
            f"accuracy {accuracy:.4f}  {seen / seconds:,.0f} samples/s")
        if args.checkpoint and rank == 0:  # the model without the wrapper: resumes on any number of processes
            leanpass.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                           "epoch": epoch, "history": history, "model_description": described,
                           "settings": settings}, args.checkpoint)
    if args.plot and history["train_loss"] and rank == 0:
        plot(history, args.plot)
        say(f"curves written to {args.plot}")
    if history["test_accuracy"]:
        say(f"final held-out accuracy {history['test_accuracy'][-1]:.4f}")
    return history


if __name__ == "__main__":
    main()
