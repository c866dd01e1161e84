"""Train a character-level transformer (a small GPT) with LeanPass, on the CPU or a GPU.

    python examples/train_transformer.py                          # Python's own library source, CPU
    python examples/train_transformer.py --sample 400             # ... then write 400 characters
    python examples/train_transformer.py --data book.txt --steps 2000 --layers 4 --width 256 --device cuda
    python examples/train_transformer.py --checkpoint run.npz --stop-after 200   # save, stop at step 200
    python examples/train_transformer.py --checkpoint run.npz --resume           # ... and continue
    mpiexec -n 2 python -m mpi4py examples/train_transformer.py --distributed    # data parallel, 2 processes

The model is decoder-only with pre-LayerNorm blocks: token and position embeddings,
``--layers`` blocks of (LayerNorm, causal multi-head self-attention, residual;
LayerNorm, MLP with GELU, residual), a final LayerNorm and a linear head to the
characters' logits. It learns to predict each character from the ``--context``
characters before it; the held-out loss is reported in bits per character (the
cross-entropy in nats / ln 2: about 4.5-5 for a model that knows only the
characters' frequencies, lower as it learns words and syntax).

Data: by default the ``.py`` files at the top of this Python's standard library
(sorted by name, the first ``--corpus-mb`` megabytes; nothing is downloaded or
copied, and another Python version gives other text), or any text file with
--data (UTF-8, undecodable bytes replaced). The vocabulary is the sorted set of
characters seen (kept in the checkpoint); the first 90% of the text trains, the
last 10% is held out.

Training: AdamW, the learning rate warming up linearly for --warmup steps then
falling on a cosine to a tenth at --steps, gradients clipped to norm 1. Each step
draws --batch-size windows at random (seeded by --seed and the step), so the same
--seed gives the same numbers on the CPU, also across --stop-after / --resume with
the same --steps (and the same --dtype and model sizes, which --resume insists on).
A checkpoint is written at each evaluation (--eval-every) and at the --stop-after
step, with the training loss summed since the last evaluation.

A device that cannot be used here (``--device cuda`` without CuPy or a GPU) ends
the script at once with a one-line reason and exit status 2, as a bad argument does.
--distributed works as in train_mlp.py: every process draws its own windows,
gradients are averaged (DistributedDataParallel), rank 0 alone prints, plots and
checkpoints, and a checkpoint resumes on any number of processes.
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import train_mlp  # noqa: E402

import leanpass  # noqa: E402
from leanpass import Tensor, nn, no_grad, optim  # noqa: E402
from leanpass import distributed as dist  # noqa: E402
from leanpass.backends import get_backend  # noqa: E402
from leanpass.nn import functional as F  # noqa: E402

LN2 = math.log(2.0)


positive, natural, rate, seed = train_mlp.positive, train_mlp.natural, train_mlp.rate, train_mlp.seed


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or strict (default: cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--steps", type=positive, default=600, help="optimizer steps (the schedule's length)")
    p.add_argument("--stop-after", type=positive, default=None, metavar="STEP",
                   help="end this run after STEP (continue later with --resume)")
    p.add_argument("--batch-size", type=positive, default=24, help="windows per step (per process)")
    p.add_argument("--context", type=positive, default=64, help="characters the model sees (block size)")
    p.add_argument("--layers", type=positive, default=2)
    p.add_argument("--width", type=positive, default=96, help="embedding width, a multiple of --heads")
    p.add_argument("--heads", type=positive, default=4)
    p.add_argument("--lr", type=rate, default=3e-3, help="AdamW's peak learning rate")
    p.add_argument("--warmup", type=natural, default=30, help="steps of linear warm-up")
    p.add_argument("--weight-decay", type=train_mlp.non_negative, default=0.01,
                   help="AdamW's weight decay (default: 0.01)")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--data", default=None, help="a text file; default: this Python's standard library source")
    p.add_argument("--corpus-mb", type=float, default=1.0, help="megabytes of the default corpus (default: 1)")
    p.add_argument("--eval-every", type=positive, default=100, metavar="STEPS", help="held-out loss every STEPS")
    p.add_argument("--eval-windows", type=positive, default=64, help="held-out windows per evaluation")
    p.add_argument("--sample", type=natural, default=0, metavar="N", help="write N characters after training")
    p.add_argument("--prompt", default=None, help="text the sample continues (default: a newline)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (> 0)")
    p.add_argument("--plot", default=None, metavar="PNG", help="write the loss curves here")
    p.add_argument("--checkpoint", default=None, metavar="NPZ", help="save model and optimizer here")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--compile", action="store_true",
                   help="run the training step through leanpass.compile (traced once, then replayed)")
    p.add_argument("--distributed", action="store_true",
                   help="data parallel over the processes mpiexec started (MPI on cpu, NCCL on cuda)")
    args = p.parse_args(argv)
    if args.width % args.heads:
        p.error(f"--width {args.width} is not a multiple of --heads {args.heads}")
    if not args.temperature > 0:
        p.error(f"--temperature must be > 0, got {args.temperature}")
    if not args.lr > 0 or not 0 < args.corpus_mb < math.inf:
        p.error(f"--lr and --corpus-mb must be finite numbers > 0, got {args.lr} and {args.corpus_mb}")
    if args.data is not None and not os.path.isfile(args.data):
        p.error(f"--data {args.data!r} is not a file")
    args.error = p.error
    return train_mlp.checked(p, args)  # --resume needs --checkpoint; the device must be usable


# ---- data ----------------------------------------------------------------------------------
def read_text(path=None, megabytes=1.0):
    """(name, text): the file at ``path``, or the standard library's top-level ``.py``
    files in sorted order up to ``megabytes``."""
    if path is not None:
        with open(path, encoding="utf-8", errors="replace") as f:
            return os.path.basename(path), f.read()
    folder = os.path.dirname(os.__file__)
    budget, parts = int(megabytes * 1e6), []
    for name in sorted(glob.glob(os.path.join(folder, "*.py"))):
        with open(name, encoding="utf-8", errors="replace") as f:
            parts.append(f.read()[:budget])
        budget -= len(parts[-1])
        if budget <= 0:
            break
    return f"Python {folder} source", "".join(parts)


def windows(text_ids, starts, length):
    """Rows ``text_ids[s : s + length]`` for each start: an int64 array (len(starts), length)."""
    return text_ids[np.asarray(starts)[:, None] + np.arange(length)]


# ---- the model -----------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees itself and the ones before."""

    def __init__(self, width, heads, *, device=None, dtype=None):
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width, device=device, dtype=dtype)  # queries, keys, values at once
        self.out = nn.Linear(width, width, device=device, dtype=dtype)

    def forward(self, x):
        batch, length, width = x.shape
        # (batch, length, 3 * width) -> 3 x (batch, heads, length, width / heads)
        qkv = self.qkv(x).reshape(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return self.out(y.permute(0, 2, 1, 3).reshape(batch, length, width))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, width, heads, *, device=None, dtype=None):
        kw = dict(device=device, dtype=dtype)
        self.norm1 = nn.LayerNorm(width, **kw)
        self.attention = CausalSelfAttention(width, heads, **kw)
        self.norm2 = nn.LayerNorm(width, **kw)
        # GPT-2's GELU, the tanh approximation: it runs on every device (the exact form needs erf)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width, **kw), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * width, width, **kw))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class CharTransformer(nn.Module):
    """Characters (batch, length) -> logits (batch, length, vocabulary)."""

    def __init__(self, vocabulary, context, width, layers, heads, *, device=None, dtype=None):
        kw = dict(device=device, dtype=dtype)
        self.context = context
        self.tokens = nn.Embedding(vocabulary, width, **kw)
        self.positions = nn.Embedding(context, width, **kw)
        for table in (self.tokens, self.positions):
            nn.init.normal_(table.weight, 0.0, 0.02)  # GPT-2's initialisation
        self.blocks = nn.ModuleList([Block(width, heads, **kw) for _ in range(layers)])
        self.norm = nn.LayerNorm(width, **kw)
        self.head = nn.Linear(width, vocabulary, **kw)

    def forward(self, ids, last_only=False):
        x = self.tokens(ids) + self.positions(np.arange(ids.shape[-1]))
        for block in self.blocks:
            x = block(x)
        if last_only:  # sampling needs the last position's logits alone
            x = x[:, -1:]
        return self.head(self.norm(x))


# ---- training --------------------------------------------------------------------------------
def schedule(warmup, steps):
    """The learning rate's factor after ``step`` steps: linear warm-up, cosine down to 0.1."""
    def factor(step):
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min((step - warmup) / max(steps - warmup, 1), 1.0)
        return 0.1 + 0.45 * (1.0 + math.cos(math.pi * progress))
    return factor


def held_out_bits(model, ids, context, count, batch_size, device):
    """Mean cross-entropy in bits per character over ``count`` evenly spaced windows."""
    starts = np.linspace(0, len(ids) - context - 1, num=min(count, len(ids) - context), dtype=np.int64)
    chunk = windows(ids, starts, context + 1)
    total = 0.0
    with no_grad():
        for rows in range(0, len(chunk), batch_size):
            part = Tensor(chunk[rows:rows + batch_size], device=device, dtype="int64")
            loss = nn.cross_entropy_loss(model(part[:, :-1]), part[:, 1:])
            total += loss.item() * part.shape[0]
    return total / len(chunk) / LN2


def generate(model, prompt_ids, count, context, temperature, seed, device):
    """``count`` sampled character ids continuing ``prompt_ids`` (a window of ``context``)."""
    rng = np.random.default_rng(seed)
    ids = list(prompt_ids)
    with no_grad():
        for _ in range(count):
            x = Tensor([ids[-context:]], device=device, dtype="int64")
            logits = model(x, last_only=True).numpy()[0, -1].astype(np.float64) / temperature
            p = np.exp(logits - logits.max())
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    return ids[len(prompt_ids):]


def progress(total, initial, quiet):
    if quiet:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, desc="training", unit="step", leave=False, dynamic_ncols=True,
                disable=None)


def plot(history, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 4))
    axis.plot(history["step"], history["train_bits"], label="train")
    axis.plot(history["step"], history["held_out_bits"], label="held out")
    axis.set(xlabel="step", ylabel="bits per character", title="cross-entropy")
    axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    args = parse_args(argv)
    try:
        return train(args)
    finally:
        if args.distributed:
            dist.destroy_process_group()


def train(args):
    rank, processes = (dist.get_rank(), dist.get_world_size()) if args.distributed else (0, 1)
    say = print if rank == 0 else (lambda *a, **k: None)  # rank 0 alone prints
    device = get_backend(args.device).device
    saved = None
    if args.resume and os.path.exists(args.checkpoint):
        saved = train_mlp.resume_checkpoint(args, device, ("model", "optimizer", "scheduler", "step", "history",
                                                           "vocab", "sizes"))
    name, text = read_text(args.data, args.corpus_mb)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # one code point per character
    vocab = saved["vocab"] if saved else "".join(map(chr, np.unique(codes)))
    index = {c: i for i, c in enumerate(vocab)}
    known = np.frombuffer(vocab.encode("utf-32-le"), dtype=np.uint32)  # sorted
    ids = np.minimum(np.searchsorted(known, codes), len(known) - 1)
    unknown = np.unique(codes[known[ids] != codes])
    if unknown.size:
        args.error(f"the text has characters the checkpoint's vocabulary lacks: {''.join(map(chr, unknown[:20]))!r}")
    ids = ids.astype(np.int64)
    split = int(0.9 * len(ids))
    train_ids, test_ids = ids[:split], ids[split:]
    if len(test_ids) <= args.context or len(train_ids) <= args.context:
        args.error(f"{name} has {len(text)} characters: too few for 90/10 splits longer than --context "
                   f"{args.context}")
    prompt = args.prompt if args.prompt is not None else ("\n" if "\n" in index else vocab[0])
    if args.sample and (not prompt or set(prompt) - set(index)):
        args.error(f"--prompt must be non-empty text of the vocabulary's characters, got {prompt!r}")

    leanpass.manual_seed(args.seed)
    sizes = {"context": args.context, "width": args.width, "layers": args.layers, "heads": args.heads}
    if saved and saved["sizes"] != sizes:
        args.error(f"the checkpoint holds a model of {saved['sizes']}, not {sizes}")
    if saved:
        train_mlp.same_settings(args, saved, {"dtype": args.dtype})
    model = CharTransformer(len(vocab), **sizes, device=device, dtype=args.dtype)
    optimizer = optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=args.weight_decay)
    scheduler = optim.lr_scheduler.LambdaLR(optimizer, schedule(args.warmup, args.steps))
    net = nn.parallel.DistributedDataParallel(model) if args.distributed else model  # what the steps call
    history = {"step": [], "train_bits": [], "held_out_bits": [], "chars_per_s": []}
    done, running, counted = 0, None, 0  # steps done; the training loss summed since the last evaluation
    if saved:
        try:
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
        except (ValueError, KeyError, TypeError) as exc:
            args.error(f"--checkpoint {args.checkpoint!r} does not fit this model: {exc}")
        history, done = saved["history"], saved["step"]
        if saved.get("counted"):  # stopped between evaluations: the next one averages over those steps too
            running = Tensor(saved["running"], device=device, dtype=args.dtype)
            counted = saved["counted"]
        say(f"resumed from {args.checkpoint} after step {done}")
        if args.distributed:  # every process read the same file; make sure they agree
            net._broadcast_state(model.parameters())

    parameters = sum(p.size for p in model.parameters())
    shares = f", {processes} processes x batch {args.batch_size}" if args.distributed else ""
    say(f"{name}: {len(train_ids):,} train / {len(test_ids):,} held-out characters, vocabulary {len(vocab)}; "
        f"transformer {args.layers} layers x width {args.width} x {args.heads} heads, context {args.context}, "
        f"{parameters:,} parameters, {args.dtype} on {device}{shares}")
    last = min(args.steps, args.stop_after or args.steps)
    bar = progress(last, done, args.quiet or rank != 0)

    def save(step, loss_sum=0.0, steps_summed=0):
        if args.checkpoint and rank == 0:  # the model without the wrapper: resumes on any number of processes
            leanpass.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                           "scheduler": scheduler.state_dict(), "step": step, "history": history,
                           "vocab": vocab, "sizes": sizes, "dtype": args.dtype,
                           "running": loss_sum, "counted": steps_summed}, args.checkpoint)

    def train_step(batch):
        optimizer.zero_grad()
        loss = nn.cross_entropy_loss(net(batch[:, :-1]), batch[:, 1:])
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        return loss

    if args.compile:
        train_step = leanpass.compile(train_step)
    timed, start = 0, time.perf_counter()
    for step in range(done + 1, last + 1):
        model.train()
        rng = np.random.default_rng([args.seed, step, rank])  # per step and process: resumable, distinct
        batch = Tensor(windows(train_ids, rng.integers(0, len(train_ids) - args.context, args.batch_size),
                               args.context + 1), device=device, dtype="int64")
        loss = train_step(batch)
        running = loss.detach() if running is None else running + loss.detach()  # stays on the device
        counted += 1
        timed += 1
        if bar is not None:
            bar.update(1)
        if step % args.eval_every and step != args.steps:
            if step == last and args.checkpoint:
                # --stop-after between evaluations: no evaluation (an uninterrupted run has none here);
                # the checkpoint keeps the loss summed so far, so the resumed run's next figures are the same
                loss_sum = running.item()
                if args.distributed:  # the processes' mean: they all go on from it when resumed
                    loss_sum = float(dist.all_reduce(Tensor([loss_sum], device=device, dtype="float64"))
                                     .numpy()[0]) / processes
                save(step, loss_sum, counted)
            continue
        train_loss = running.item() / counted
        if args.distributed:  # every process's windows: one all-reduce per evaluation
            train_loss = float(dist.all_reduce(Tensor([train_loss], device=device)).numpy()[0]) / processes
        seconds = time.perf_counter() - start
        bits = held_out_bits(model.eval(), test_ids, args.context, args.eval_windows, args.batch_size, device)
        history["step"].append(step)
        history["train_bits"].append(train_loss / LN2)
        history["held_out_bits"].append(bits)
        history["chars_per_s"].append(timed * args.batch_size * args.context * processes / seconds)
        message = (f"step {step:5d}  train bits/char {train_loss / LN2:.3f}  held-out bits/char {bits:.3f}  "
                   f"{history['chars_per_s'][-1]:,.0f} chars/s")
        (bar.write if bar is not None else say)(message)  # above the progress bar
        save(step)
        running, counted, timed, start = None, 0, 0, time.perf_counter()
    if bar is not None:
        bar.close()
    if last < args.steps and done < last:
        say(f"stopped after step {last} of {args.steps}"
            + (f": continue with --checkpoint {args.checkpoint} --resume" if args.checkpoint else ""))
    if args.plot and history["step"] and rank == 0:
        plot(history, args.plot)
        say(f"curves written to {args.plot}")
    if history["held_out_bits"]:
        say(f"held-out bits/char: {history['held_out_bits'][-1]:.2f}")
    if args.sample:
        prompt_ids = [index[c] for c in prompt]
        sample = "".join(vocab[i] for i in generate(model.eval(), prompt_ids, args.sample, args.context,
                                                       args.temperature, args.seed, device))
        history["sample"] = sample
        say(f"--- {args.sample} characters sampled at temperature {args.temperature} ---")
        say(prompt + sample)
    return history


if __name__ == "__main__":
    main()
