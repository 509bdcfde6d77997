"""Example configs shipped inside the package, and ``mrgrpo configs list | copy``.

Every example config (tiny, SmolLM2 and GPU versions of each task, the testbed's) lives in
``mrgrpo/configs/`` inside the installed package; a checkout reaches the same files through the
``configs`` link at its root. A shipped config's *name* is its path under that folder without
``.yaml``: ``tiny``, ``smollm2_code``, ``gpu_math``, ``testbed/scale1``.

``--config X`` (train, compare) reads the file ``X`` when it exists; otherwise :func:`resolve`
looks ``X`` up among the shipped configs, so ``mrgrpo train --config smollm2_tool_call`` and the
README's ``--config configs/gpu_math.yaml`` both work from any directory after ``pip install``
(a leading ``configs/`` and a trailing ``.yaml`` are ignored for the look-up). A local file of
the same name always wins.

``mrgrpo configs list`` prints each name with the first line of its header comment;
``mrgrpo configs copy NAME [DEST]`` writes a copy to edit (default ``./NAME.yaml``; an existing
file is refused unless ``--force``), as torchtune's ``tune ls`` / ``tune cp`` do.

Besides the configs, one *kit* ships: ``verl``, the verl launcher (``run.sh``, its Hydra config
``mrgrpo_math.yaml``, ``prepare_data.py`` and a README), kept in the package at
``mrgrpo/integrations/verl/example/`` (a checkout's ``examples/verl`` links to it).
``mrgrpo configs copy verl [DEST]`` copies the folder to ``DEST`` (default ``./examples/verl``,
so the README's ``bash examples/verl/run.sh`` works as written after ``pip install``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated, Optional

import typer

from mrgrpo.errors import ConfigError

SUFFIX = ".yaml"


def shipped_dir() -> Path:
    """The folder of the shipped configs (inside the installed ``mrgrpo`` package)."""
    import mrgrpo

    return Path(mrgrpo.__file__).resolve().parent / "configs"


def available() -> dict[str, Path]:
    """``{name: path}`` of every shipped config, sorted by name (``testbed/...`` after the top level)."""
    root = shipped_dir()
    found = {p.relative_to(root).with_suffix("").as_posix(): p for p in root.rglob(f"*{SUFFIX}") if p.is_file()}
    return dict(sorted(found.items(), key=lambda item: (item[0].count("/"), item[0])))


#: Folders that ship beside the configs: name -> (folder inside the package, default destination).
KITS = {"verl": ("integrations/verl/example", "examples/verl")}


def kit_dir(name: str) -> Path:
    """The shipped folder of the kit ``name`` (inside the installed ``mrgrpo`` package)."""
    return shipped_dir().parent / KITS[name][0]


def config_name(text: str) -> str:
    """The shipped-config name a ``--config`` value stands for: ``configs/gpu_math.yaml`` -> ``gpu_math``."""
    name = text.strip().replace("\\", "/")
    name = name.removeprefix("./").removeprefix("configs/")
    return name.removesuffix(SUFFIX)


def lookup(text: str) -> Path | None:
    """The shipped config ``text`` names, or ``None``."""
    return available().get(config_name(text))


def resolve(path: str | Path) -> tuple[Path, str]:
    """``(file to read, name for messages)``: the file itself when it exists, else the shipped config
    of that name; raises :class:`ConfigError` (listing the shipped names) when neither exists."""
    given = Path(path).expanduser()
    if given.exists():
        return given, str(path)
    shipped = lookup(str(path))
    if shipped is not None:
        return shipped, f"shipped config {config_name(str(path))}"
    raise ConfigError(
        f"config file not found: {path} (and no shipped config of that name); shipped configs: "
        f"{', '.join(available())} (`mrgrpo configs list`)"
    )


def summary(path: Path) -> str:
    """The first line of a config's leading comment block (what it is), or ``""``."""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        return stripped.lstrip("#").strip() if stripped.startswith("#") else ""
    return ""


def copy(name: str, dest: str | Path | None = None, force: bool = False) -> Path:
    """Copy the shipped config ``name`` to ``dest`` (a file, or a directory to put ``<name>.yaml`` in;
    default the current directory); returns the written path."""
    if name in KITS:
        return copy_kit(name, dest, force)
    source = lookup(name)
    if source is None:
        raise ConfigError(f"no shipped config {name!r}; shipped configs: {', '.join([*available(), *KITS])}")
    target = Path(dest) if dest is not None else Path(".")
    if target.is_dir():
        target = target / source.name
    if target.exists() and not force:
        raise ConfigError(f"{target} already exists; pass --force to overwrite it or give another DEST")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


def copy_kit(name: str, dest: str | Path | None = None, force: bool = False) -> Path:
    """Copy the kit ``name``'s folder to ``dest`` (default its ``KITS`` destination under the current
    directory); an existing non-empty destination is refused unless ``force``. Returns the folder."""
    source = kit_dir(name)
    target = Path(dest) if dest is not None else Path(KITS[name][1])
    if target.exists() and any(target.iterdir()) and not force:
        raise ConfigError(f"{target} already exists and is not empty; pass --force to overwrite it or give another DEST")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source, target, ignore=ignore, dirs_exist_ok=True)
    return target


def kit_summary(name: str) -> str:
    """What the kit is, for ``mrgrpo configs list``."""
    files = ", ".join(sorted(p.name for p in kit_dir(name).iterdir() if p.is_file()))
    return f"(folder, copies to ./{KITS[name][1]}) the {name} launcher kit: {files}"


# ----------------------------------------------------------------------------- commands


def register(app: typer.Typer) -> None:
    """Add ``mrgrpo configs list`` and ``mrgrpo configs copy`` to ``app``."""
    group = typer.Typer(help="Example configs shipped with mrgrpo: list them, copy one to edit.", no_args_is_help=True)

    @group.command("list")
    def list_command() -> None:
        """Each shipped config's name (what --config accepts) and what it is."""
        configs = available()
        width = max(map(len, [*configs, *KITS]), default=0)
        for name, path in configs.items():
            typer.echo(f"{name:<{width}}  {summary(path)}".rstrip())
        for name in KITS:
            typer.echo(f"{name:<{width}}  {kit_summary(name)}")

    @group.command("copy")
    def copy_command(
        name: Annotated[str, typer.Argument(help="a name from `mrgrpo configs list`")],
        dest: Annotated[Optional[Path], typer.Argument(help="file or directory (default: ./NAME.yaml; verl: ./examples/verl)")] = None,
        force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
    ) -> None:
        """Copy a shipped config to edit it (then: mrgrpo train --config THAT_FILE), or the verl kit's folder."""
        typer.echo(str(copy(name, dest, force)))

    app.add_typer(group, name="configs")
