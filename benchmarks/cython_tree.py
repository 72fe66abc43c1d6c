"""A copy of Shoal with its hot path compiled by Cython as it is, to set beside the
interpreted tree with `trees.py` (ADR 0056).

    .venv/bin/python benchmarks/cython_tree.py OUT [--src src] [--jobs 2]
    .venv/bin/python benchmarks/trees.py src OUT

Copies the `shoal` package from `--src` to OUT/shoal, then compiles the modules on the control
plane's hot path there, each as it stands: the runtime, the store, the bus, the engine, the
workflows' interpreter (`shoal/workflows/*.py`), events, ids, metrics, the mailbox, states,
and the sockets' direct paths and fan-out (`api/direct.py`, `api/fanout.py`). The compiler
is Cython, pinned below, in a venv of its own (`benchmarks/.cython-venv`, made the first
time; never Shoal's). Each module gets its own compiler run with `-O3`, so a module Cython
refuses leaves only that module interpreted.

Some modules are left out:
- packages' `__init__.py`;
- `store/models.py`, the SQLAlchemy tables;
- any module that imports pydantic or FastAPI (the worker socket's route among them). A
  compiled method is not a function to pydantic, which then takes it for a field.

Then OUT is imported whole. Any compiled module whose import still fails is removed and the
import is tried again. Prints what was compiled, what Cython refused (its first error) and what
was removed. It takes a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from trees import tree_of

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("SHOAL_BENCH_CYTHON_VENV", HERE / ".cython-venv"))
PINS = ("Cython==3.1.4", "setuptools==80.9.0")
HOT = ("runtime/*.py", "store/*.py", "bus/*.py", "engine/*.py", "workflows/*.py", "events.py",
       "ids.py", "metrics.py", "mailbox.py", "states.py", "api/direct.py", "api/fanout.py")
LEFT_OUT = frozenset({"store/models.py"})
FRAMEWORK = re.compile(r"^\s*(from|import)\s+(pydantic|fastapi)\b", re.MULTILINE)
# The module that imports the rest (the app, its routes, the runtime and the worker's code).
WHOLE = "import shoal.api.app, shoal.worker.agent, shoal.cli"


@dataclass(slots=True)
class Build:
    """What became of each module chosen."""

    compiled: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # module → Cython's first error
    removed: list[str] = field(default_factory=list)  # compiled, but would not import


def chosen(package: Path) -> list[Path]:
    """The hot path's modules under `package` (a `shoal` folder) that can be compiled as
    they are, in a stable order."""
    found: set[Path] = set()
    for pattern in HOT:
        found.update(package.glob(pattern))
    return sorted(
        path for path in found
        if path.name != "__init__.py"
        and path.relative_to(package).as_posix() not in LEFT_OUT
        and not FRAMEWORK.search(path.read_text(encoding="utf-8")))


def first_error(output: str) -> str:
    """The first line Cython gave for a refusal (`file:line:col: message`), else the last."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if re.match(r"^\S+\.py:\d+:\d+: ", line):
            return line[:200]
    return lines[-1][:200] if lines else "no output"


def compiled_module(path: Path) -> Path | None:
    """The extension module Cython built beside `path`, if any."""
    return next(iter(sorted(path.parent.glob(f"{path.stem}.cpython-*.so"))), None)


def ensure_venv() -> Path:
    """The compiler's venv, made (or made again when the pins change); its Python."""
    python = VENV / "bin" / "python"
    digest = hashlib.sha256("\n".join(PINS).encode()).hexdigest()
    marker = VENV / ".pins-sha256"
    if python.exists() and marker.exists() and marker.read_text() == digest:
        return python
    for argv in ([sys.executable, "-m", "venv", "--clear", str(VENV)],
                 [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  *PINS]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"making the compiler's venv failed ({' '.join(argv[:3])}): "
                             f"{first_error(done.stderr)}")
    marker.write_text(digest)
    return python


def compile_one(python: Path, root: Path, module: Path) -> str | None:
    """Compile `module` (under `root`, the folder that holds `shoal`) in place; None when
    built, else why not. The build's own files go to `root`/build."""
    env = {**os.environ, "CFLAGS": "-O3"}
    done = subprocess.run(
        [str(python), "-m", "Cython.Build.Cythonize", "-i", "-3", "-q",
         module.relative_to(root).as_posix()],
        cwd=root, env=env, capture_output=True, text=True, check=False)
    if done.returncode == 0 and compiled_module(module) is not None:
        return None
    return first_error(done.stdout + "\n" + done.stderr)


def import_failure(root: Path) -> str:
    """'' when the tree at `root` imports whole, else the traceback's text."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", WHOLE], env=env, capture_output=True,
                          text=True, check=False, cwd=root)
    return "" if done.returncode == 0 else done.stderr


def culprit(traceback: str, build: Build) -> str | None:
    """The last compiled module the traceback names (Cython's frames say "init
    package.module"), if any."""
    named: list[str] = re.findall(r'File "[^"]+", line \d+, in init ([\w.]+)', traceback)
    for dotted in reversed(named):
        module = dotted.removeprefix("shoal.").replace(".", "/") + ".py"
        if module in build.compiled:
            return module
    return None


def build_tree(src: Path, out: Path, jobs: int) -> Build:
    """Copy `src`'s `shoal` to `out` and compile its hot path there."""
    package = out / "shoal"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(src / "shoal", package, ignore=shutil.ignore_patterns("__pycache__"))
    python = ensure_venv()
    modules = chosen(package)
    build = Build()
    with ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        results = list(pool.map(lambda m: (m, compile_one(python, out, m)), modules))
    for module, error in results:
        name = module.relative_to(package).as_posix()
        if error is None:
            build.compiled.append(name)
        else:
            build.refused[name] = error
    while failure := import_failure(out):
        name = culprit(failure, build)
        if name is None:
            raise SystemExit(f"The compiled tree does not import, and no compiled module is to "
                             f"blame:\n{failure.strip().splitlines()[-1]}")
        extension = compiled_module(package / name)
        if extension is not None:
            extension.unlink()
        build.compiled.remove(name)
        build.removed.append(name)
    return build


def main(argv: list[str] | None = None) -> None:
    """Build the tree and say what became of each module."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("out", help="the folder to build in (its shoal/ is replaced)")
    parser.add_argument("--src", default=str(HERE.parent / "src"),
                        help="the folder holding the shoal package to copy (default: src)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    src, out = tree_of(args.src), Path(args.out).resolve()
    if out == src:
        parser.error("OUT must not be the source folder: its shoal/ would be replaced")
    out.mkdir(parents=True, exist_ok=True)
    build = build_tree(src, out, args.jobs)
    total = len(build.compiled) + len(build.refused) + len(build.removed)
    print(f"Compiled {len(build.compiled)} of the {total} modules chosen into {out}/shoal")
    for name, error in sorted(build.refused.items()):
        print(f"  refused by Cython: {name}: {error}")
    for name in build.removed:
        print(f"  compiled but removed (its import failed): {name}")
    print(f"Next: {sys.executable} {HERE / 'trees.py'} {src} {out}")


if __name__ == "__main__":
    main()
