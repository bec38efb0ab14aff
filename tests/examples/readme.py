"""Run the README's examples as written, doctest-style.

Every fenced ``python`` / ``sh`` block of the README carries a marker on the line before
it, an HTML comment that a reader does not see::

    <!-- readme-test: file mymodule.py -->            write the block to that file
    <!-- readme-test: install -->                      the install step (see Session)
    <!-- readme-test: background, ready "TEXT" -->     start it, go on once it printed TEXT
    <!-- readme-test: run, paste "PREFIX", expect "TEXT" -->
                                                       run it; a line starting with PREFIX
                                                       is replaced by the line a background
                                                       block printed from PREFIX on (what a
                                                       reader pastes); its output must hold
                                                       each TEXT
    <!-- readme-test: skip (why) -->                   not run, for the reason given

A block without a marker is an error: no example goes untested by oversight. The ``sh``
blocks run one after the other in one emulated shell (each sees what the previous ones
exported, as a reader's second terminal would); ``python`` blocks run as scripts with
``python`` from that shell's PATH. At the end every background block gets SIGINT (the
reader's Ctrl-C) and must exit 0.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.waits import wait_until

__all__ = ["Block", "Session", "parse", "section"]

MARKER = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
LANGS = {"python", "sh", "bash", "shell"}
TIMEOUT = 180.0


@dataclass
class Block:
    line: int  #: 1-based line of the opening fence
    lang: str
    code: str
    kind: str = ""
    arg: str = ""
    options: dict[str, list[str]] = field(default_factory=dict)

    def where(self) -> str:
        return f"README.md:{self.line} ({self.kind} {self.lang} block)"


def _items(spec: str) -> list[tuple[str, str]]:
    """``run, paste "a, b", expect "c"`` -> [("run", ""), ("paste", "a, b"), ("expect", "c")]."""
    out = []
    for m in re.finditer(
        r'\s*(\w+)(?:\s+(?:"((?:[^"\\]|\\.)*)"|(\([^)]*\))|([^,\s]+)))?\s*(?:,|$)', spec
    ):
        if m.group(0).strip():
            value = m.group(2) if m.group(2) is not None else (m.group(3) or m.group(4) or "")
            out.append((m.group(1), value))
    return out


def parse(text: str) -> list[Block]:
    """Every fenced block of a language we run, with its marker; raises ValueError for a
    block that has none, or a marker that names no known kind."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        code = "\n".join(lines[start + 1 : j]) + "\n"
        i = j + 1
        if lang not in LANGS:
            continue
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        marker = MARKER.match(lines[prev]) if prev >= 0 else None
        if marker is None:
            raise ValueError(f"README.md:{start + 1}: a {lang} block without a readme-test marker")
        items = _items(marker.group(1))
        kind, arg = items[0]
        if kind not in ("file", "install", "background", "run", "skip"):
            raise ValueError(f"README.md:{start + 1}: unknown readme-test kind {kind!r}")
        options: dict[str, list[str]] = {}
        for name, value in items[1:]:
            options.setdefault(name, []).append(value)
        blocks.append(Block(start + 1, lang, code, kind, arg, options))
    return blocks


def section(text: str, title: str) -> str:
    """The README's text from the heading ``title`` to the next heading of its level."""
    m = re.search(rf"^(#+) {re.escape(title)}\s*$", text, re.M)
    if m is None:
        raise ValueError(f"no section {title!r}")
    level = len(m.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[m.end() :], re.M)
    return text[m.start() : m.end() + (end.start() if end else len(text))]


class Background:
    """A background block: a shell in a session of its own, its output collected."""

    def __init__(self, block: Block, cwd: Path, env: dict[str, str]) -> None:
        self.block = block
        self.proc = subprocess.Popen(
            ["bash", "-c", block.code],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str) -> None:
        def printed_or_ended() -> bool:
            return any(text in line for line in self.lines) or (
                self.proc.poll() is not None and not self.reader.is_alive()
            )

        try:
            wait_until(printed_or_ended, TIMEOUT, f"{self.block.where()}: {text!r}")
        except AssertionError:
            raise AssertionError(
                f"{self.block.where()}: no {text!r}:\n{self.output[-4000:]}"
            ) from None
        if not any(text in line for line in self.lines):
            raise AssertionError(f"{self.block.where()} ended before printing {text!r}:\n"
                                 f"{self.output[-4000:]}")  # fmt: skip

    def interrupt(self) -> int:
        """Ctrl-C: SIGINT to its process group, as a terminal sends it."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            return self.proc.wait(60)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class Session:
    """Runs blocks in ``cwd`` with ``env`` (updated by what each ``sh`` block exports).

    ``install``: ``"run"`` runs the install block as written (a fresh venv); ``"skip"``
    leaves it out, for a session whose ``env`` already has rsjobs installed on its PATH.
    """

    def __init__(self, cwd: Path, env: dict[str, str], *, install: str) -> None:
        assert install in ("run", "skip")
        self.cwd, self.env, self.install = cwd, dict(env), install
        self.background: list[Background] = []
        self.ran: list[Block] = []
        self.outputs: list[str] = []

    def run_all(self, blocks: list[Block]) -> None:
        try:
            for b in blocks:
                self.run(b)
        except BaseException:
            for bg in self.background:
                bg.kill()
            raise

    def run(self, b: Block) -> None:
        if b.kind == "skip" or (b.kind == "install" and self.install == "skip"):
            return
        self.ran.append(b)
        if b.kind == "file":
            (self.cwd / b.arg).write_text(b.code)
        elif b.kind == "background":
            bg = Background(b, self.cwd, self.env)
            self.background.append(bg)
            for text in b.options.get("ready", []):
                bg.wait_for(text)
        else:  # run, install
            self._run(b)

    def pasted(self, b: Block) -> str:
        code = b.code
        for prefix in b.options.get("paste", []):
            printed = [
                line[line.index(prefix) :].strip()
                for bg in self.background
                for line in bg.lines
                if prefix in line
            ]
            if not printed:
                raise AssertionError(f"{b.where()}: no background block printed {prefix!r}")
            lines = code.splitlines()
            hits = [i for i, line in enumerate(lines) if line.lstrip().startswith(prefix)]
            if len(hits) != 1:
                raise AssertionError(f"{b.where()}: expected one line starting {prefix!r}")
            lines[hits[0]] = printed[-1]
            code = "\n".join(lines) + "\n"
        return code

    def _run(self, b: Block) -> None:
        n = len(self.ran)
        env_out = self.cwd / f".readme-env-{n}"
        if b.lang == "python":
            script = self.cwd / f".readme-block-{n}.py"
            script.write_text(b.code)
            body = f'python "{script}"\n'
        else:
            body = self.pasted(b)
        program = f'set -euo pipefail\n{body}\nenv -0 > "{env_out}"\n'
        out = subprocess.run(
            ["bash", "-c", program], cwd=self.cwd, env=self.env, capture_output=True,
            text=True, timeout=TIMEOUT, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        text = out.stdout + out.stderr
        self.outputs.append(text)
        if out.returncode != 0:
            raise AssertionError(f"{b.where()} exited {out.returncode}:\n{text[-4000:]}")
        for expected in b.options.get("expect", []):
            if expected not in text:
                raise AssertionError(
                    f"{b.where()}: {expected!r} not in its output:\n{text[-4000:]}"
                )
        if b.lang != "python":
            pairs = env_out.read_text().split("\0")
            self.env = dict(p.split("=", 1) for p in pairs if "=" in p)
            self.env.pop("OLDPWD", None)
            self.env.pop("PWD", None)

    def stop(self) -> list[tuple[Background, int]]:
        """Ctrl-C to every background block; their exit statuses."""
        return [(bg, bg.interrupt()) for bg in self.background]
