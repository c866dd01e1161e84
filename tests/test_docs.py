"""The user documentation in docs/: every page's code runs and prints what it says.

Conventions for the ```python blocks of docs/**/*.md, which these tests keep:

- All blocks of a page run in order, in ONE namespace per page, so a later block
  may use names an earlier one defined. Each page runs on the default device
  "cpu" with the default dtype "float64"; the defaults, the grad mode, the random
  seed and the backend registry are restored afterwards.
- Examples leave no files behind: one that writes a file writes it into a
  `tempfile.TemporaryDirectory()`, visibly. Each page runs in an empty temporary
  working directory, with `tempfile` making its directories in another one; both
  must be empty afterwards, and the repository must have no new files.
- A comment that starts with `# ->` after a one-line `print(...)` is the exact
  text that print writes: `print(t.shape)  # -> (3,)`. Each time the line runs it
  must print exactly that, and it must run at least once. `# ->` anywhere else is
  an error. Every other comment is prose and is not checked.
- docs/seeds/ keeps the original 0.1 pages (Tensor Basics, Operations) verbatim,
  with Markdown formatting added (test_seed_copies_are_verbatim checks this where
  the originals are at hand), in their own comment style,
  `print(t.data)       # [1. 2. 3.]`: a `print(...)` line with a plain comment
  must print the comment's leading text: the whole comment, or its start up to a
  space (`# True (a requires grad)`), or that text in double quotes (`# "+"`); a
  `print(...)` line followed by a comment-only line prints that comment. What
  their examples assume but do not define (imports, `x`, `w`, `b`, an optimizer)
  is set up by SEED_SETUP below, not added to the pages. (tests/test_seeds.py
  checks the original documents themselves, value by value.)
- A block that needs a CUDA GPU starts with the comment `# needs a CUDA GPU`
  (a block containing `device="cuda` or `.cuda(` counts as one too). Such a block
  must be self-contained: it runs in its own namespace, in a separate test that
  is skipped, with the reason, when `get_backend("cuda")` raises RuntimeError.
- A page whose code imports sklearn is skipped when scikit-learn is not installed;
  one that imports einops, when einops is not; one that uses the `strict` devices,
  when array_api_strict is not.
- A page whose code sets `SCIPY_ARRAY_API` runs in a fresh Python process (with
  the same checks): SciPy reads the variable once, when it is imported, so the
  page must run before anything imports SciPy, and its setting must not reach
  the other tests. It is skipped with a SciPy older than 1.17 (older ones compute
  through NumPy, which a tensor in a graph refuses).
- Every page is linked from docs/index.md, and every page outside docs/seeds/
  from README.md's "## Documentation" section. Links between pages must reach a
  page and, with an #anchor, one of its headings; a page of PLANNED_PAGES may be
  linked before it exists.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import SCIPY_DISPATCH

from leanpass import backends
from leanpass._graph import modes
from leanpass.backends import _base

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
SEED_PAGES = {"seeds/tensor-basics.md", "seeds/operations.md"}
# Pages that other pages may link before they are written.
PLANNED_PAGES: set[str] = set()

# What the verbatim seed pages assume but do not define, run before the block whose
# first line is the key (in the page's namespace; its prints are not checked).
SEED_SETUP = {
    "seeds/tensor-basics.md": {
        "y = (x * w).sum() + b": (
            "x = Tensor([1.0, 2.0, 3.0], requires_grad=True)\n"
            "w = Tensor([0.5, -1.0, 2.0], requires_grad=True)\n"
            "b = Tensor(0.25, requires_grad=True)\n"
        ),
        "optimizer.zero_grad()": "from leanpass.optim import SGD\noptimizer = SGD([x, w, b], lr=0.1)\n",
    },
    "seeds/operations.md": {
        "a = Tensor([1.0, 2.0, 3.0], requires_grad=True)": "import numpy as np\nfrom leanpass import Tensor\n",
    },
}
# The original documents, where this checkout sits beside them (../shared/seeds).
ORIGINALS = ROOT.parent / "shared" / "seeds"

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
            setup = SEED_SETUP.get(page, {}).get(code.split("\n", 1)[0])
            if setup:
                exec(compile(setup, f"<setup for docs/{page}:{start}>", "exec"), namespace)
            # Padding keeps line numbers those of the page, in tracebacks and for the recorder.
            exec(compile("\n" * (start - 1) + code, filename, "exec"), namespace)
    for number, want in expected.items():
        got = recorder.printed.get(number)
        assert got, f"docs/{page}:{number}: this print never ran"
        for text in got:
            assert matches(text, want), f"docs/{page}:{number}: printed {text!r}, the page says {describe(want)!r}"
    return out.getvalue()


IGNORED = {".git", ".venv", ".nox", ".hypothesis", ".ruff_cache", ".pytest_cache", "__pycache__"}


def repository_files() -> set[str]:
    """Every file of the checkout, outside version control's and tools' folders."""
    found = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in IGNORED and not d.endswith(".egg-info")]
        found.update(os.path.relpath(os.path.join(folder, f), ROOT) for f in files)
    return found


@pytest.fixture
def clean_state(tmp_path, monkeypatch):
    """An empty working directory and an empty directory for `tempfile`; defaults and
    registry as a new session has them. Yields a function that asserts nothing was
    left behind: not in those directories, not in the repository."""
    saved = (
        backends.get_default_device(),
        backends.get_default_dtype(),
        modes._state.enabled,
        backends._seed,
        _base._host_rng,
        dict(backends._TYPES),
        dict(backends._LIBRARIES),
        dict(backends._INSTANCES),
    )
    work, temp = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir()
    temp.mkdir()
    before = repository_files()
    monkeypatch.chdir(work)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    backends.set_default_device("cpu")
    backends.set_default_dtype("float64")
    modes._state.enabled = True

    def assert_nothing_left(page: str) -> None:
        for where, folder in (("the working directory", work), ("the temporary directory", temp)):
            left = sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))
            assert not left, f"docs/{page} left {left} in {where}; write files into a tempfile.TemporaryDirectory()"
        new = sorted(repository_files() - before)
        assert not new, f"docs/{page} left {new} in the repository"

    try:
        yield assert_nothing_left
    finally:
        device, dtype, enabled, seed, rng, types, libraries, instances = saved
        for registry, old in ((backends._TYPES, types), (backends._LIBRARIES, libraries),
                              (backends._INSTANCES, instances)):
            registry.clear()
            registry.update(old)
        backends._default_device = device
        backends.set_default_dtype(dtype)
        modes._state.enabled = enabled
        backends._seed = seed
        _base._host_rng = rng


def skip_without_requirements(page: str) -> None:
    code = "".join(code for _, code in blocks(page))
    if re.search(r"^\s*(from|import) sklearn", code, flags=re.M):
        pytest.importorskip("sklearn", reason=f"docs/{page} needs scikit-learn (pip install scikit-learn)")
    if re.search(r"^\s*(from|import) einops", code, flags=re.M):
        pytest.importorskip("einops", reason=f"docs/{page} needs einops (pip install einops)")
    if fresh_interpreter(page):
        import scipy

        if tuple(int(part) for part in re.findall(r"\d+", scipy.__version__)[:2]) < SCIPY_DISPATCH[0]:
            pytest.skip(f"docs/{page} needs SciPy 1.17 or newer, found {scipy.__version__}: {SCIPY_DISPATCH[1]}")
    if re.search(r"""["']strict""", code):
        pytest.importorskip("array_api_strict", reason=f"docs/{page} uses the strict devices (array-api-strict)")


def test_there_are_docs():
    assert "index.md" in PAGES and SEED_PAGES <= set(PAGES)
    assert all(blocks(page) for page in PAGES if page != "index.md")
    assert not PLANNED_PAGES & SEED_PAGES
    for page, setups in SEED_SETUP.items():
        firsts = {code.split("\n", 1)[0] for _, code in blocks(page)}
        assert set(setups) <= firsts, f"SEED_SETUP names blocks that docs/{page} does not have"


def fresh_interpreter(page: str) -> bool:
    """Whether the page sets SCIPY_ARRAY_API, which SciPy reads once, when it is imported."""
    return any("SCIPY_ARRAY_API" in code for _, code in blocks(page))


def run_in_a_fresh_interpreter(page: str) -> None:
    """``run_blocks`` on the page's blocks (not those for a GPU) in a new Python, in this
    working directory and temporary directory, with warnings as errors (as pytest has them)."""
    script = "\n".join([
        "import sys",
        "sys.dont_write_bytecode = True",
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})",
        "import test_docs",
        "assert 'scipy' not in sys.modules, 'SciPy is imported before the page runs: it would not see SCIPY_ARRAY_API'",
        "test_docs.backends.set_default_device('cpu')",
        "test_docs.backends.set_default_dtype('float64')",
        f"page = {page!r}",
        "test_docs.run_blocks(page, [b for b in test_docs.blocks(page) if not test_docs.needs_cuda(b[1])], {})",
    ])
    env = {name: value for name, value in os.environ.items() if name != "SCIPY_ARRAY_API"}  # the page sets it
    env["TMPDIR"] = tempfile.gettempdir()
    done = subprocess.run([sys.executable, "-W", "error", "-c", script], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"docs/{page}, run in a fresh Python process:\n{done.stderr}"


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run_and_print_what_they_say(page, clean_state):
    skip_without_requirements(page)
    if fresh_interpreter(page):
        run_in_a_fresh_interpreter(page)
    else:
        selected = [(start, code) for start, code in blocks(page) if not needs_cuda(code)]
        run_blocks(page, selected, {})
    clean_state(page)


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
    clean_state(page)


def unmarked(text: str) -> list[str]:
    """The non-blank lines of a seed copy without its header and Markdown formatting:
    no fences, headings without their #, pipe-table rows as tab-separated cells."""
    lines, code = [], False
    for line in text.split("\n")[1:]:  # the first line is the header
        if line.startswith("```"):
            code = not code
        elif not line.strip() or re.fullmatch(r"\|(-+\|)+", line):
            continue
        elif code:
            lines.append(line)
        elif line.startswith("#"):
            lines.append(line.lstrip("#").strip())
        elif line.startswith("| "):
            lines.append("\t".join(cell.strip() for cell in line.strip("|").split(" | ")))
        else:
            lines.append(line)
    return lines


@pytest.mark.parametrize("page", sorted(SEED_PAGES))
def test_seed_copies_are_verbatim(page):
    if not ORIGINALS.is_dir():
        pytest.skip(f"the original documents are not beside this checkout ({ORIGINALS})")
    originals = {path.read_text().split("\n", 1)[0]: path.read_text() for path in ORIGINALS.glob("*.txt")}
    text = (DOCS / page).read_text()
    assert text.startswith("> The original LeanPass 0.1 documentation, kept verbatim")
    title = re.search(r"^# (.*)$", text, flags=re.M).group(1)
    original = [line for line in originals[title].split("\n") if line.strip()]
    assert unmarked(text) == original


def without_code(text: str) -> str:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def links(text: str) -> set[str]:
    """The targets of the Markdown links in ``text`` (outside code), without their #anchors."""
    return set(re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", without_code(text)))


def resolve(page: str, target: str) -> str:
    """A link's target as a page name (relative to docs/), from the page that links it."""
    return os.path.normpath(os.path.join(os.path.dirname(page), target)).replace(os.sep, "/")


def exists(page: str) -> bool:
    return (DOCS / page).is_file() or page in PLANNED_PAGES


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
        if page not in SEED_PAGES:
            assert f"docs/{page}" in readme_links, f"README.md's Documentation section does not link docs/{page}"
    for target in index:
        if not target.startswith(("http:", "https:")):
            assert exists(target), f"docs/index.md links {target}, which does not exist"
    for target in readme_links:
        if target.startswith("docs/"):
            assert exists(target[len("docs/"):]), f"README.md links {target}, which does not exist"


def test_links_between_pages_point_to_pages_and_headings():
    for page in PAGES:
        text = without_code((DOCS / page).read_text())
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if target.startswith(("http:", "https:")):
                continue
            target = resolve(page, target) if target else page
            assert exists(target), f"docs/{page} links {target}, which does not exist"
            if anchor and (DOCS / target).is_file():
                assert anchor in anchors(target), f"docs/{page} links {target}#{anchor}: no such heading"


def test_array_api_page_lists_every_function():
    """docs/array-api.md has a row for every function of the namespace and its extensions."""
    import leanpass
    from leanpass._namespace import SECTIONS

    text = (DOCS / "array-api.md").read_text()
    names = [n for section in SECTIONS.values() for n in section]
    names += list(leanpass.linalg.__all__) + list(leanpass.fft.__all__)
    missing = [n for n in names if f"`{n}`" not in text]
    assert not missing, f"docs/array-api.md does not list {missing}"
