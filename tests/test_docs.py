"""The user documentation in docs/: every page's code runs and prints what it says.

Conventions for the ```python blocks of docs/*.md, which these tests keep:

- All blocks of a page run in order, in ONE namespace per page, so a later block
  may use names an earlier one defined. Each page runs in a fresh temporary
  working directory (so examples may write files such as "model.npz"), on the
  default device "cpu" with the default dtype "float64"; the defaults, the grad
  mode, the random seed and the backend registry are restored afterwards.
- A comment that starts with `# ->` after a one-line `print(...)` is the exact
  text that print writes: `print(t.shape)  # -> (3,)`. Each time the line runs it
  must print exactly that, and it must run at least once. `# ->` anywhere else is
  an error. Every other comment is prose and is not checked.
- The two seed pages (tensor-basics.md, operations.md) keep the original
  documents' own comment style, `print(t.data)       # [1. 2. 3.]`. There, a
  `print(...)` line with a plain comment must print the comment's leading text:
  the whole comment, or its start up to a space (`# True (a requires grad)`), or
  that text in double quotes (`# "+"`); a `print(...)` line followed by a
  comment-only line prints that comment. (tests/test_seeds.py checks the seed
  documents themselves, value by value.) New prints there use `# ->`.
- A block that needs a CUDA GPU starts with the comment `# needs a CUDA GPU`
  (a block containing `device="cuda` or `.cuda(` counts as one too). Such a block
  must be self-contained: it runs in its own namespace, in a separate test that
  is skipped, with the reason, when `get_backend("cuda")` raises RuntimeError.
- A page whose code imports sklearn is skipped when scikit-learn is not installed;
  one that uses the `strict` devices, when array_api_strict is not.
- Every page is linked from docs/index.md and from README.md's "## Documentation"
  section.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from leanpass import autograd, backends
from leanpass.backends import _base

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md"))
SEED_PAGES = {"tensor-basics.md", "operations.md"}

BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", flags=re.S | re.M)
PRINT_EXPECT = re.compile(r"^\s*print\(.*\)\s+# -> (.*)$")
PRINT_COMMENT = re.compile(r"^\s*print\(.*\)\s+#\s*(.*)$")
PRINT_BARE = re.compile(r"^\s*print\(.*\)\s*$")
COMMENT_ONLY = re.compile(r"^\s*#\s*(.*)$")


def blocks(page: str) -> list[tuple[int, str]]:
    """``(first line number in the page, code)`` of each ```python block of a page."""
    text = (DOCS / page).read_text()
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def needs_cuda(code: str) -> bool:
    return "# needs a CUDA GPU" in code or 'device="cuda' in code or ".cuda(" in code


def expected_prints(page: str, start: int, code: str) -> dict[int, str | tuple[str, str]]:
    """``{page line number: expected printed text}`` for the checked prints of a block."""
    lines = code.splitlines()
    expected = {}
    for i, line in enumerate(lines):
        number = start + i
        if "# ->" in line:
            match = PRINT_EXPECT.match(line)
            if not match:
                raise AssertionError(f"docs/{page}:{number}: `# ->` must follow a one-line print(...): {line!r}")
            expected[number] = match.group(1).strip()
        elif page in SEED_PAGES:
            match = PRINT_COMMENT.match(line)
            if match:
                expected[number] = ("seed", match.group(1).strip())
            elif PRINT_BARE.match(line) and i + 1 < len(lines) and COMMENT_ONLY.match(lines[i + 1]):
                expected[number] = COMMENT_ONLY.match(lines[i + 1]).group(1).strip()
    return expected


def matches(printed: str, expected) -> bool:
    if isinstance(expected, tuple):  # a seed-style comment: the output is its leading text
        comment = expected[1]
        return printed == comment or comment.startswith((printed + " ", f'"{printed}"'))
    return printed == expected


def describe(expected) -> str:
    return expected[1] if isinstance(expected, tuple) else expected


class Recorder:
    """A ``print`` for the examples' namespace that also records what each line printed."""

    def __init__(self, filename: str):
        self.filename = filename
        self.printed: dict[int, list[str]] = defaultdict(list)

    def __call__(self, *args, sep=" ", end="\n", file=None, flush=False):
        if file is None:
            frame = sys._getframe(1)
            if frame.f_code.co_filename == self.filename:
                text = (" " if sep is None else sep).join(str(a) for a in args)
                self.printed[frame.f_lineno].append(text.rstrip())
        builtins.print(*args, sep=sep, end=end, file=file, flush=flush)


def run_blocks(page: str, selected: list[tuple[int, str]], namespace: dict) -> str:
    """Run ``selected`` blocks of ``page`` in ``namespace``; check their prints; return stdout."""
    filename = str(DOCS / page)
    recorder = Recorder(filename)
    namespace.setdefault("__name__", "__docs__")
    namespace["print"] = recorder
    expected = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for start, code in selected:
            expected.update(expected_prints(page, start, code))
            # Padding keeps line numbers those of the page, in tracebacks and for the recorder.
            exec(compile("\n" * (start - 1) + code, filename, "exec"), namespace)
    for number, want in expected.items():
        got = recorder.printed.get(number)
        assert got, f"docs/{page}:{number}: this print never ran"
        for text in got:
            assert matches(text, want), f"docs/{page}:{number}: printed {text!r}, the page says {describe(want)!r}"
    return out.getvalue()


@pytest.fixture
def clean_state(tmp_path, monkeypatch):
    """A fresh working directory; defaults and registry as a new session has them, restored after."""
    saved = (
        backends.get_default_device(),
        backends.get_default_dtype(),
        autograd._state.enabled,
        backends._seed,
        _base._host_rng,
        dict(backends._TYPES),
        dict(backends._LIBRARIES),
        dict(backends._INSTANCES),
    )
    monkeypatch.chdir(tmp_path)
    backends.set_default_device("cpu")
    backends.set_default_dtype("float64")
    autograd._state.enabled = True
    try:
        yield
    finally:
        device, dtype, enabled, seed, rng, types, libraries, instances = saved
        for registry, old in ((backends._TYPES, types), (backends._LIBRARIES, libraries),
                              (backends._INSTANCES, instances)):
            registry.clear()
            registry.update(old)
        backends._default_device = device
        backends.set_default_dtype(dtype)
        autograd._state.enabled = enabled
        backends._seed = seed
        _base._host_rng = rng


def skip_without_requirements(page: str) -> None:
    code = "".join(code for _, code in blocks(page))
    if re.search(r"^\s*(from|import) sklearn", code, flags=re.M):
        pytest.importorskip("sklearn", reason=f"docs/{page} needs scikit-learn (pip install scikit-learn)")
    if re.search(r"""["']strict""", code):
        pytest.importorskip("array_api_strict", reason=f"docs/{page} uses the strict devices (array-api-strict)")


def test_there_are_docs():
    assert "index.md" in PAGES and SEED_PAGES <= set(PAGES)
    assert all(blocks(page) for page in PAGES if page != "index.md")


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run_and_print_what_they_say(page, clean_state):
    skip_without_requirements(page)
    selected = [(start, code) for start, code in blocks(page) if not needs_cuda(code)]
    run_blocks(page, selected, {})


CUDA_PAGES = [page for page in PAGES if any(needs_cuda(code) for _, code in blocks(page))]


@pytest.mark.parametrize("page", CUDA_PAGES)
def test_page_cuda_examples(page, clean_state):
    try:
        backends.get_backend("cuda")
    except RuntimeError as exc:
        pytest.skip(f"docs/{page}'s CUDA examples need a GPU: {exc}")
    for start, code in blocks(page):
        if needs_cuda(code):
            run_blocks(page, [(start, code)], {})


def without_code(text: str) -> str:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def links(text: str) -> set[str]:
    """The targets of the Markdown links in ``text`` (outside code), without their #anchors."""
    return set(re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", without_code(text)))


def anchors(page: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^```.*?^```", "", (DOCS / page).read_text(), flags=re.S | re.M)
    headings = re.findall(r"^#{1,6} (.*)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_page_is_linked_from_the_index_and_the_readme():
    index = links((DOCS / "index.md").read_text())
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Documentation\n(.*?)(?=^## |\Z)", readme, flags=re.S | re.M)
    assert section, "README.md has no '## Documentation' section"
    readme_links = links(section.group(1))
    for page in PAGES:
        if page != "index.md":
            assert page in index, f"docs/index.md does not link {page}"
        assert f"docs/{page}" in readme_links, f"README.md's Documentation section does not link docs/{page}"
    for target in index:
        if not target.startswith(("http:", "https:")):
            assert (DOCS / target).is_file(), f"docs/index.md links {target}, which does not exist"


def test_links_between_pages_point_to_pages_and_headings():
    for page in PAGES:
        text = without_code((DOCS / page).read_text())
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if target.startswith(("http:", "https:")):
                continue
            target = target or page
            assert (DOCS / target).is_file(), f"docs/{page} links {target}, which does not exist"
            if anchor:
                assert anchor in anchors(target), f"docs/{page} links {target}#{anchor}: no such heading"
