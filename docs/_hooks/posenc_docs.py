"""mkdocs hooks (``hooks:`` in mkdocs.yml): the pages and figures made from posenc at build time.

- One page per registered encoding (``encodings/NAME.md``, from :func:`posenc.available`)
  and their index: summary, formula, configuration keys, when to use it, figures, code and
  paper, read from the installed package (``posenc.info``, ``posenc.describe``,
  ``posenc.guide``), so the site cannot drift from the code.
- Every figure: those of the encoding pages, drawn by ``posenc plot`` with the command the
  page prints, and those a hand-written page shows (``![...](FILE)``) whose shell block
  writes them (``posenc plot ... --out FILE``): every ``posenc`` line of that block runs
  as written, in order, in a scratch folder (a block may train a tiny arena run first).
  Figures go into the built site only; ``POSENC_DOCS_FIGURES=0`` writes a blank
  placeholder instead (a fast build whose links are still checked).
- ``<!-- posenc:guide -->`` in a page becomes the when-to-use guide of :mod:`posenc.guide`.

Nothing is fetched: the pages and figures come from the working tree's posenc.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import logging
import os
import posixpath
import re
import shlex
import tempfile
from pathlib import Path
from typing import Any

import posenc
from posenc.terminal import yes_no

log = logging.getLogger("mkdocs.plugins.posenc_docs")

#: a 1 x 1 white PNG, the placeholder of every figure when POSENC_DOCS_FIGURES=0
BLANK_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC"
)
SHELL_BLOCK = re.compile(r"```(?:sh|bash|console)\n(.*?)```", re.S)
GUIDE_MARKER = "<!-- posenc:guide -->"
ARXIV = re.compile(r"arXiv:(\d{4}\.\d{4,5})")


def figures_enabled() -> bool:
    """Whether figures are drawn (POSENC_DOCS_FIGURES unset or not "0")."""
    return os.environ.get("POSENC_DOCS_FIGURES", "1") != "0"


def figures_for(name: str) -> list[tuple[str, list[str], str]]:
    """The figures of encoding ``name``'s page: ``(file name, posenc plot arguments, caption)``.

    Chosen by what each figure takes: additive 1-D encodings their matrix (``heatmap``), 2-D
    ones the ``grid``, bias ones their ``bias`` per head, M-RoPE its ``mrope-ids``, RoPE its
    ``frequencies`` and ``decay``, NoPE the ``permutation`` that shows what it lacks; every
    encoding its ``similarity``.
    """
    cls = posenc.registry.get(name)
    kind, two_d = cls.kind, cls.position_axes == 2
    figs: list[tuple[str, list[str], str]] = []
    if kind == "additive" and not two_d:
        figs.append(("heatmap", ["--encoding", name], "the encoding matrix, position × dimension"))
    if two_d:
        figs.append(("grid", ["--encoding", name], "one patch's similarity to every patch"))
    if kind == "bias":
        figs.append(("bias", ["--encoding", name], "the score bias of each head"))
    if name == "mrope":
        figs.append(("mrope-ids", [], "the (t, h, w) ids of text + image + video + text"))
    if name == "rope":
        figs.append(("frequencies", [], "each pair's wavelength under each scaling"))
        figs.append(("decay", [], "the long-term decay bound per base and scaling"))
    figs.append(("similarity", ["--encoding", name], "how each position sees every other"))
    if kind == "none":
        figs.append(("permutation", [], "attention without positions cannot tell order"))
    return [(f"{name}-{fig}.png", ["plot", fig, *args], caption) for fig, args, caption in figs]


def run_commands(commands: list[list[str]], cwd: Path) -> None:
    """Run each ``posenc`` command (argv without ``posenc``) in folder ``cwd``, in order, as
    ``posenc.cli.main`` does. Raises ``RuntimeError`` naming the first one that fails."""
    from posenc import cli

    cwd.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    for argv in commands:
        stdout, stderr = io.StringIO(), io.StringIO()
        os.chdir(cwd)
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                code = cli.main(argv)
        except SystemExit as e:  # a usage error may exit instead of returning
            code = e.code if isinstance(e.code, int) else 1
        finally:
            os.chdir(here)
        if code != 0:
            raise RuntimeError(f"posenc {shlex.join(argv)} failed ({code}): {stderr.getvalue()}")


def figure(commands: list[list[str]], cwd: Path, out: str) -> bytes:
    """The bytes of file ``out`` (relative to ``cwd``) once ``commands`` have run there, or
    the blank placeholder when figures are off (nothing runs)."""
    if not figures_enabled():
        return BLANK_PNG
    path = cwd / out
    if not path.is_file():
        run_commands(commands, cwd)
    if not path.is_file():
        raise RuntimeError(f"{[shlex.join(argv) for argv in commands]} did not write {out}")
    return path.read_bytes()


def _cell(text: Any) -> str:
    """``text`` fit for a Markdown table cell: ``|`` escaped, also in a code span (as
    ``<code>`` with ``&#124;``, since a code span would show the escape)."""
    text = re.sub(
        r"`([^`]*\|[^`]*)`",
        lambda m: f"<code>{html.escape(m[1]).replace('|', '&#124;')}</code>",
        str(text),
    )
    return text.replace("|", "\\|").replace("\n", " ")


def when_to_use_lines(name: str) -> list[str]:
    """The guide's answer for every situation that recommends ``name``, as ``posenc guide``
    gives it (its reasons, and the published arena run's numbers): one source for the page,
    the command and the README, so a page cannot recommend what the run measured against."""
    from posenc import guide

    answers = [a for a in guide.guide(run=guide.published_run()) if name in a.situation.recommend]
    if not answers:
        return ["No situation of the [guide](../guide.md) names it."]
    lines = []
    for answer in answers:
        s = answer.situation
        rank = f"{s.recommend.index(name) + 1} of {len(s.recommend)}: {', '.join(s.recommend)}"
        lines += [f"- **{s.question}** (the guide's choice {rank}). {s.why}"]
        if answer.evidence:
            lines += [f"  *Measured (the published arena run):* {' '.join(answer.evidence)}"]
    return lines


def encoding_page(name: str) -> str:
    """The Markdown of encoding ``name``'s page."""
    from posenc import describe

    info = posenc.info(name)
    cls = posenc.registry.get(name)
    lines = [f"# {name}", "", f"{info.summary[:1].upper()}{info.summary[1:]}.", ""]
    lines += [
        "| kind | trainable | relative | runs past training length | size key |",
        "|---|---|---|---|---|",
    ]
    lines.append(
        f"| `{info.kind}` | {yes_no(info.trainable)} | {yes_no(info.relative)} "
        f"| {yes_no(info.extrapolates)} | `{cls.size_key}` |"
    )
    # a class of its own: docs/stylesheets/extra.css wraps it inside the text column
    lines += ["", "## Formula", "", "```{.text .posenc-formula}", info.formula.strip(), "```", ""]
    lines += ["## Configuration", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for key in describe.config_keys(name):
        lines.append(
            f"| `{key.name}` | {_cell(key.type)} | {_cell(key.default)} | {_cell(key.meaning)} |"
        )
    lines += ["", "## When to use it", ""]
    lines += when_to_use_lines(name)
    lines += ["", "## Figures", ""]
    for file, argv, caption in figures_for(name):
        lines += [f"![{name}: {caption}](img/{file})", "", f"*{caption.capitalize()}:*"]
        lines += ["", "```sh", f"posenc {shlex.join(argv)} --out {file}", "```", ""]
    lines += ["## Code", "", "```python", describe.example(name).strip(), "```", ""]
    paper = ARXIV.sub(r"[arXiv:\1](https://arxiv.org/abs/\1)", info.reference)
    lines += ["## Paper", "", paper, ""]
    return "\n".join(lines)


def index_page() -> str:
    """The Markdown of ``encodings/index.md``: every encoding in one table."""
    lines = [
        "# Encodings",
        "",
        "Every registered encoding (`posenc.available()`), one page each, made from the",
        "installed package when the site is built (`posenc list` prints the same table).",
        "",
        "| name | kind | trainable | relative | runs past training length | summary |",
        "|---|---|---|---|---|---|",
    ]
    for name in posenc.available():
        info = posenc.info(name)
        lines.append(
            f"| [{name}]({name}.md) | `{info.kind}` | {yes_no(info.trainable)} "
            f"| {yes_no(info.relative)} | {yes_no(info.extrapolates)} | {_cell(info.summary)} |"
        )
    return "\n".join(lines) + "\n"


def on_config(config: Any) -> Any:
    """Replace the nav's ``encodings/index.md`` entry by the index and one page per encoding."""
    pages = [{"Overview": "encodings/index.md"}]
    pages += [{name: f"encodings/{name}.md"} for name in posenc.available()]
    for i, entry in enumerate(config.nav or []):
        if isinstance(entry, dict) and list(entry.values()) == ["encodings/index.md"]:
            config.nav[i] = {next(iter(entry)): pages}
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages and draw every figure into the site."""
    from mkdocs.structure.files import File

    with tempfile.TemporaryDirectory() as tmp:
        files.append(File.generated(config, "encodings/index.md", content=index_page()))
        for name in posenc.available():
            page = encoding_page(name)
            files.append(File.generated(config, f"encodings/{name}.md", content=page))
            for file, argv, _ in figures_for(name):
                data = figure([[*argv, "--out", file]], Path(tmp, "encodings"), file)
                files.append(File.generated(config, f"encodings/img/{file}", content=data))
        for path in sorted(Path(config.docs_dir).glob("*.md")):
            cwd = Path(tmp, "pages", path.stem)
            for commands, shown in shown_blocks(path.read_text()):
                for out in shown:
                    data = figure(commands, cwd, out)
                    files.append(File.generated(config, out, content=data))
    return files


def shown_blocks(markdown: str) -> list[tuple[list[list[str]], list[str]]]:
    """The shell blocks of ``markdown`` that make a file the page shows: ``(every posenc
    command of the block as argv without "posenc", the files shown)``. A file is shown
    when it is a ``--out`` of the block's ``posenc plot`` lines and the page links to it
    (``](FILE)``); the other blocks (example commands, the README's ``docs/images/``) are
    not run: the site does not make their files."""
    blocks = []
    for block in SHELL_BLOCK.findall(markdown):
        commands = [
            shlex.split(line, comments=True)[1:]
            for line in block.splitlines()
            if line.strip().startswith("posenc ")
        ]
        outs = [argv[argv.index("--out") + 1] for argv in commands if "--out" in argv[:-1]]
        shown = [
            posixpath.normpath(out)
            for out in outs
            if not out.startswith(("/", "..")) and f"]({out})" in markdown
        ]
        if shown:
            blocks.append((commands, shown))
    return blocks


def guide_markdown() -> str:
    """The when-to-use guide (:func:`posenc.guide.guide`, every situation) as Markdown, each
    recommended encoding linked to its page (from ``guide.md``: ``encodings/NAME.md``)."""
    from posenc import guide

    lines = []
    for advice in guide.guide():
        s = advice.situation
        flags = " ".join(f"`{guide.FLAGS[need]}`" for need in s.needs)
        lines += [f"## {s.question}", "", f"Flags: {flags}", ""]
        use = ", ".join(f"[{name}](encodings/{name}.md)" for name in s.recommend)
        lines += [f"**Use:** {use}", "", f"**Why:** {s.why}", ""]
        if s.measured:
            measured = ", ".join(f"`{e}`" for e in s.measured)
            lines += [f"**Measured by the arena:** {measured}", ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill ``<!-- posenc:guide -->`` with the when-to-use guide."""
    if GUIDE_MARKER in markdown:
        markdown = markdown.replace(GUIDE_MARKER, guide_markdown())
    return markdown
