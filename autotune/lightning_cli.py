"""The user's objects, built the way their own LightningCLI builds them (trial processes only).

A trial must train exactly what ``python train.py fit --config config.yaml`` would: the same
``class_path``/``init_args`` (subclass mode), nested objects, ``optimizer:`` and ``lr_scheduler:``
sections, ``link_arguments`` of the user's ``LightningCLI`` subclass, and the user's trainer
settings. So every trial parses the user's config with LightningCLI's own parser (jsonargparse),
with the trial's knobs as overrides at their dotted paths (``--data.batch_size=64``,
``--optimizer.init_args.lr=0.01``), as a user would type them. The Trainer is not built by the
CLI: :func:`build` returns the user's trainer settings and callbacks, and the trial process builds
its own Trainer from them (see :func:`autotune.trial_trainer.trainer_kwargs`).

The CLI class is the user's own ``LightningCLI`` subclass when there is one (:func:`find_cli_class`):
defined in the model file, or in a training script beside it that imports the model file.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.errors import ModelFileError, UsageError
from autotune.loader import CLI_TOP_KEYS, FIT_KEYS, SPACE_AS_CONFIG, looks_like_space, top_key_hint

__all__ = [
    "Built",
    "CliClass",
    "build",
    "build_spec",
    "cli_overrides",
    "cli_scripts",
    "find_cli_class",
    "get_dotted",
    "imports_model",
    "load_cli_class",
    "load_spec",
    "parser_links",
    "set_dotted",
]

#: Names the user's code may import LightningCLI under.
_CLI_BASES = {"LightningCLI"}


@dataclass(frozen=True)
class CliClass:
    """Where the user's ``LightningCLI`` subclass is.

    Attributes:
        file: Absolute path of the Python file that defines it.
        name: The class name.
        subcommands: Whether the script runs it with subcommands (``run=True``, the default:
            ``python train.py fit --config ...``) or with ``run=False`` (no subcommand).
        model: The name of the LightningModule class the script hands its CLI (``CLI(Model, ...)``
            or ``model_class=Model``), when it hands one by name and not in ``subclass_mode_model``
            (then the config cannot pick another class); else ``None``.
    """

    file: str
    name: str
    subcommands: bool = True
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "name": self.name, "subcommands": self.subcommands, "model": self.model}


@dataclass
class Built:
    """What LightningCLI built for a trial.

    Attributes:
        model: The LightningModule (its ``configure_optimizers`` replaced by the config's
            ``optimizer:``/``lr_scheduler:`` sections when they are given, as LightningCLI does).
        datamodule: The LightningDataModule, or ``None``.
        trainer: The user's trainer settings as their CLI parsed them (every key: the config's
            values, the CLI's defaults, Lightning's), instantiated (callbacks are objects).
        callbacks: The user's callbacks (``trainer.callbacks`` and the CLI's callback arguments).
        config: The parsed config as plain data (``parser.dump``), links applied.
        links: Each ``link_arguments`` target of the user's CLI (dotted path, ``"model.batch_size"``)
            to its source(s) (``"data.batch_size"``): the parser refuses a value given for a target.
    """

    model: Any
    datamodule: Any
    trainer: dict[str, Any] = field(default_factory=dict)
    callbacks: list[Any] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)


def parser_links(parser: Any) -> dict[str, str]:
    """The ``link_arguments`` of a jsonargparse parser: target path to its source paths (``", "``-joined).

    jsonargparse keeps them as ``ActionLink`` objects in the parser's "Linked arguments" group (the
    group ``--help`` prints); both kinds are read, applied on parse and on instantiation.
    """
    group = getattr(parser, "_links_group", None)
    links: dict[str, str] = {}
    for action in getattr(group, "_group_actions", []):
        target, sources = getattr(action, "_target", None), getattr(action, "_source", ())
        if isinstance(target, str):
            links[target] = ", ".join(str(s) for s in sources)
    return links


def _subclasses_cli(node: ast.ClassDef) -> bool:
    for base in node.bases:
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
        if name in _CLI_BASES:
            return True
    return False


def _run_false(tree: ast.Module, name: str) -> bool:
    """Whether the file calls ``name(..., run=False)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
            for kw in node.keywords:
                if kw.arg == "run" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                    return True
    return False


def _model_argument(tree: ast.Module, name: str, which: str = "model") -> str | None:
    """The class name the file's call ``name(Model, ...)`` (or ``model_class=Model``) passes, unless
    the call sets ``subclass_mode_model=True``; ``None`` when there is no such call or no plain name.
    ``which="datamodule"``: its second argument (``datamodule_class=``) instead."""
    index, keyword, flag = (0, "model_class", "subclass_mode_model") if which == "model" else (1, "datamodule_class", "subclass_mode_data")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
            keywords = {kw.arg: kw.value for kw in node.keywords}
            mode = keywords.get(flag)
            if isinstance(mode, ast.Constant) and mode.value is True:
                return None
            arg = node.args[index] if len(node.args) > index else keywords.get(keyword)
            return arg.id if isinstance(arg, ast.Name) else None
    return None


def script_module(cli: Mapping[str, Any] | None, model_file: str | Path) -> tuple[Any, str | None]:
    """The user's LightningCLI script as a module, and the DataModule class name its CLI call passes,
    when the script is another file than the model file and importing it does not run the CLI (a
    subclass :func:`find_cli_class` picked, or a ``LightningCLI(...)`` call under ``if __name__ ==
    "__main__":``); else ``(None, None)``. :func:`autotune.loader.find_classes` takes the DataModule
    from it when the model file has none.

    Raises:
        ModelFileError: The script cannot be imported (the message names the exception and the line).
    """
    if not cli or Path(cli["file"]).resolve() == Path(model_file).resolve():
        return None, None
    try:
        tree = ast.parse(Path(cli["file"]).read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, OSError, ValueError):
        return None, None
    if _called_on_import(tree, cli["name"]) or any(_called_on_import(tree, base) for base in _CLI_BASES):
        return None, None
    from autotune.loader import load_user_module

    return load_user_module(cli["file"]), _model_argument(tree, cli["name"], "datamodule")


def _imports(tree: ast.Module, module: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            return True
        if isinstance(node, ast.Import) and any(alias.name == module for alias in node.names):
            return True
    return False


def _called_on_import(tree: ast.Module, name: str) -> bool:
    """Whether a top-level statement (outside ``if __name__ == "__main__":``) calls ``name``: importing
    such a script would run the CLI."""
    for node in tree.body:
        if isinstance(node, (ast.Expr, ast.Assign)):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) == name:
                    return True
    return False


def _cli_in(path: Path, model_file: Path | None) -> CliClass | None:
    """The ``LightningCLI`` subclass (first) or ``LightningCLI(...)`` call that ``path`` holds, else ``None``
    (also when ``path`` does not parse, or is not ``model_file`` and does not import it; ``None``: any file)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, OSError, ValueError):
        return None
    if model_file is not None and path != model_file and not _imports(tree, model_file.stem):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and _subclasses_cli(node) and not _called_on_import(tree, node.name):
            return CliClass(str(path), node.name, not _run_false(tree, node.name), _model_argument(tree, node.name))
    if any(isinstance(n, ast.Call) and getattr(n.func, "id", None) in _CLI_BASES for n in ast.walk(tree)):
        return CliClass(str(path), "LightningCLI", not _run_false(tree, "LightningCLI"), _model_argument(tree, "LightningCLI"))
    return None


def cli_scripts(model_file: str | Path) -> list[CliClass]:
    """Every file that :func:`find_cli_class` could pick, best first: the model file and the ``.py`` files of
    its folder that import it, each with its first ``LightningCLI`` subclass, else its plain call; those
    named ``*train*`` first (the script the user trains with), then the model file, then the others by
    name, and within each of these, a subclass before a plain call."""
    model_file = Path(model_file).resolve()
    others = sorted(p for p in model_file.parent.glob("*.py") if p != model_file)
    found = [c for c in (_cli_in(path, model_file) for path in [model_file, *others]) if c is not None]

    def rank(c: CliClass) -> tuple[int, bool]:
        path = Path(c.file)
        tier = 0 if "train" in path.stem.lower() and path != model_file else 1 if path == model_file else 2
        return tier, c.name == "LightningCLI"

    return sorted(found, key=rank)  # stable: by name within a rank


def imports_model(script: str | Path, model_file: str | Path) -> bool:
    """Whether ``script`` is the model file, or a file in its folder that imports it by its module name
    (a script elsewhere imports the ``model.py`` of its own folder, not this one)."""
    script, model_file = Path(script).resolve(), Path(model_file).resolve()
    return script == model_file or (script.parent == model_file.parent and _cli_in(script, model_file) is not None)


def find_cli_class(model_file: str | Path, script: str | Path | None = None) -> CliClass | None:
    """The user's ``LightningCLI``, found without running any code.

    Looked for in ``script`` when given (``--cli-script``), else in the model file and the ``.py`` files of
    its folder that import the model file, in :func:`cli_scripts`' order: a script named ``*train*``
    first (``train.py``: the script the user trains with), then the model file, then the others; in
    each, a class that derives from ``LightningCLI`` (its links and parser defaults then apply in every
    trial), else a call of ``LightningCLI(...)`` itself (for the export's run line; trials use
    Lightning's class). A subclass whose script would run it when imported is passed over.

    Returns:
        Its :class:`CliClass` (``name`` is ``"LightningCLI"`` for a plain call), or ``None``.

    Raises:
        UsageError: ``script`` does not exist, or neither defines a ``LightningCLI`` subclass nor calls
            ``LightningCLI(...)``.
    """
    model_file = Path(model_file).resolve()
    if script is not None:
        path = Path(script).resolve()
        if not path.is_file():
            raise UsageError(f"--cli-script {str(script)!r} does not exist; name the Python script that runs your LightningCLI")
        found = _cli_in(path, None)
        if found is None:
            raise UsageError(
                f"--cli-script {str(script)!r} neither subclasses LightningCLI nor calls LightningCLI(...) (or does not parse); "
                "name the script that runs your CLI, or leave the flag out"
            )
        return found
    return next(iter(cli_scripts(model_file)), None)


def load_cli_class(cli: Mapping[str, Any] | None, package: Any = None) -> type:
    """The ``LightningCLI`` class to build with: the user's (imported from its file), else Lightning's.

    Args:
        cli: :meth:`CliClass.to_dict`, or ``None``.
        package: ``lightning.pytorch`` or ``pytorch_lightning``, as the model uses (default the first).

    Raises:
        UsageError: The file cannot be imported or no longer defines the class.
    """
    import importlib

    package_name = getattr(package, "__name__", "lightning.pytorch")
    LightningCLI = importlib.import_module(f"{package_name}.cli").LightningCLI

    if not cli or cli["name"] in _CLI_BASES:  # none, or the script calls Lightning's own class
        return LightningCLI
    from autotune.loader import load_user_module

    module = load_user_module(cli["file"])
    cls = getattr(module, cli["name"], None)
    if not (isinstance(cls, type) and issubclass(cls, LightningCLI)):
        raise UsageError(f"{cli['file']}: no LightningCLI subclass {cli['name']!r} any more; the study was made with it")
    return cls


def set_dotted(document: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at a dotted ``path`` (``data.batch_size``, ``optimizer.lr``) of a LightningCLI
    config document as LightningCLI reads it: under ``init_args`` where a section names its class
    (``class_path``), else directly. Missing sections are created."""
    keys = path.split(".")
    node = document
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
        if "class_path" in node:  # the section names its class: its arguments are under init_args
            if not isinstance(node.get("init_args"), dict):
                node["init_args"] = {}
            node = node["init_args"]
    node[keys[-1]] = value


def get_dotted(config: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of a LightningCLI config (parsed or as written), going through
    ``init_args`` where a section names its class (the inverse of :func:`set_dotted`), or ``None``."""
    node: Any = config
    for key in path.split("."):
        if isinstance(node, Mapping) and "init_args" in node and key not in node:
            node = node["init_args"]
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def cli_overrides(values: Mapping[str, Any]) -> list[str]:
    """Command-line arguments that set each dotted path to its value (``--data.batch_size=64``).

    Values are written as JSON, which jsonargparse reads back with their types.
    """
    return [f"--{path}={json.dumps(value)}" for path, value in values.items()]


def build(
    cli_class: type,
    model_class: type,
    datamodule_class: type | None,
    document: Mapping[str, Any] | None,
    overrides: Mapping[str, Any],
    seed: int,
    work_dir: str | Path,
    config_file: str | None = None,
) -> Built:
    """Parse the user's config with the trial's overrides and instantiate model and datamodule.

    Args:
        cli_class: ``LightningCLI`` or the user's subclass (:func:`load_cli_class`).
        model_class, datamodule_class: The user's classes (the config's ``class_path`` may name a
            subclass of them).
        document: The user's ``--config`` as a mapping, or ``None``.
        overrides: Dotted path to value (the trial's knobs).
        seed: ``seed_everything`` of the trial (the study's seed).
        work_dir: A folder for the config file handed to the parser.
        config_file: The path of ``--config``, named in a refusal's message; ``None``: not named.

    Raises:
        ModelFileError: The user's code raised while the objects were built (a constructor of the
            module or datamodule, a hook of the user's CLI): ``file:line: Class.__init__ raised ...``
            (the innermost frame of the user's code), from the exception.
        UsageError: The parser refused the config or an override (its message, one line).
    """
    args: list[str] = []
    document = dict(document or {})
    if document:
        path = Path(work_dir) / "autotune-config.json"
        # seed_everything is the trial's own; Trainer.fit's arguments (a saved config's ckpt_path:
        # null) belong to the fit subcommand, which this parser (run=False) does not have
        path.write_text(json.dumps({k: v for k, v in document.items() if k != "seed_everything" and k not in FIT_KEYS}))
        args += ["--config", str(path)]
    args += cli_overrides({"seed_everything": seed, **overrides})
    subclass_model = isinstance(document.get("model"), Mapping) and "class_path" in document["model"]
    subclass_data = isinstance(document.get("data"), Mapping) and "class_path" in document["data"]

    class TrialCLI(cli_class):
        """The user's CLI, whose Trainer the trial process builds itself."""

        def instantiate_trainer(self, **kwargs: Any) -> Any:
            config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
            self.autotune_callbacks = [self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys]
            # every key: what the config sets, and the defaults of the user's CLI (set_defaults in
            # add_arguments_to_parser, trainer_defaults); the trial process replaces the keys it owns
            self.autotune_trainer = dict(config)
            return None

    try:
        cli = TrialCLI(
            model_class,
            datamodule_class,
            save_config_callback=None,
            subclass_mode_model=subclass_model,
            subclass_mode_data=subclass_data,
            args=args,
            run=False,
            parser_kwargs={"exit_on_error": False},
        )
    except SystemExit as e:  # a parser that exits despite exit_on_error
        raise UsageError(f"LightningCLI refused the config (exit code {e.code}); run your own CLI with it to see why") from None
    except Exception as e:
        from autotune.loader import user_frame

        where = user_frame(e)
        if where is not None:  # the user's code raised (a constructor, the CLI's own hooks): not a config problem
            file, line, function = where
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ModelFileError(f"{file}:{line}: {function} raised {type(e).__name__}{': ' + first if first else ''}") from e
        if type(e).__name__ in ("ArgumentError", "NSKeyError", "ValueError", "TypeError"):
            # jsonargparse's message on one line: the key and its first reason (a union type lists every
            # type it tried, which says no more)
            lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
            text = " ".join(lines[:2]) or type(e).__name__
            # a class_path/init_args section: the union's own reason names the bad class or key
            found = next((i for i, line in enumerate(lines) if "Problem with given class_path" in line), None)
            if found is not None:
                reason = lines[found + 1] if found + 1 < len(lines) and not lines[found + 1].startswith("- ") else ""
                text = " ".join([lines[0], lines[found].lstrip("- "), reason]).strip()
            text = text if len(text) <= 300 else text[:297] + "..."
            # a misspelled top-level key (lr_schedulr:) is refused by one of its nested options: name the key
            strange = [k for k in document if k not in CLI_TOP_KEYS and any(f"'{k}." in line or f"'{k}'" in line for line in lines)]
            if looks_like_space(document):
                raise UsageError(f"--config {config_file or ''} {SPACE_AS_CONFIG}") from None
            hint = _option_hint(lines, {"model": model_class, "data": datamodule_class})
            raise UsageError(
                f"LightningCLI refused the config: {text}{hint}{_given_and_choices(lines)}"
                f"{f'; {strange[0]!r} is not a top-level key of a LightningCLI config' + top_key_hint(strange[:1]) if strange else ''}"
                f"; fix --config{' ' + str(config_file) if config_file else ''} (or the model's constructor arguments)"
            ) from None
        raise
    callbacks = [c for c in (cli.autotune_trainer.pop("callbacks", None) or []) if c is not None]
    for extra in cli.autotune_callbacks:
        callbacks += extra if isinstance(extra, list) else [extra] if extra is not None else []
    dumped = cli.parser.dump(cli.config, skip_none=False, format="json")
    return Built(cli.model, cli.datamodule, cli.autotune_trainer, callbacks, json.loads(dumped), parser_links(cli.parser))


#: jsonargparse's refusal of an unknown nested key, and of a ``class_path`` whose module lacks the class.
_UNKNOWN_OPTION = re.compile(r"Group '(?P<group>model|data|trainer)' does not accept option '(?P<option>\w+)'")
_NO_CLASS = re.compile(r"module '(?P<module>[\w.]+)' has no attribute '(?P<name>\w+)'")
_CLASS_OPTION = re.compile(r"Problem with given class_path '(?P<path>[\w.]+)': Option '(?P<option>\w+)' is not accepted")


def _option_hint(lines: Sequence[str], classes: Mapping[str, Any]) -> str:
    """``" (did you mean 'hidden'?)"`` for a mistyped constructor argument of the model, data module or
    Trainer, or under a ``class_path``'s ``init_args`` (the class's ``__init__`` parameters), or a
    mistyped class of a ``class_path`` (the module's classes); ``""`` when nothing is close. helper-31's ``hiden``, ``max_epoch`` and ``EarlyStoping``
    had been refused with no guess, where a mistyped top-level key got one."""
    import importlib
    import inspect

    from autotune.errors import did_you_mean

    def guess(value: str, names: Sequence[str]) -> str:
        close = did_you_mean(value, names)  # "; did you mean 'x'?"
        return f" ({close.removeprefix('; ')})" if close else ""

    def arguments(cls: Any) -> list[str]:
        try:
            return [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "args", "kwargs")]
        except (TypeError, ValueError):
            return []

    text = " ".join(lines)
    if (m := _UNKNOWN_OPTION.search(text)) is not None:
        cls: Any = classes.get(m["group"])
        if m["group"] == "trainer":
            from lightning.pytorch import Trainer

            cls = Trainer
        return guess(m["option"], arguments(cls))
    if (m := _CLASS_OPTION.search(text)) is not None:  # an init_args key of a class_path section
        module, _, name = m["path"].rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except Exception:
            return ""
        return guess(m["option"], arguments(cls))
    if (m := _NO_CLASS.search(text)) is not None:
        try:
            module = importlib.import_module(m["module"])
        except Exception:
            return ""
        return guess(m["name"], [n for n, v in vars(module).items() if inspect.isclass(v) and not n.startswith("_")])
    return ""


def _given_and_choices(lines: Sequence[str]) -> str:
    """``" (given '32-ture'; accepted: 16-true, ...)"``: the value and the literal choices a jsonargparse
    type error lists on its own lines (``Given value:``, ``- Expected a typing.Literal[...]``), or ``""``.
    A new user's ``precision: 32-ture`` was refused without either."""
    import re

    given = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Given value:")), None)
    if given is None:
        return ""
    choices: list[str] = []
    for line in lines:
        if line.startswith("- Expected a typing.Literal["):
            for item in re.findall(r"'([^']*)'|([-\w.]+)", line[len("- Expected a typing.Literal[") :].rstrip("]")):
                value = item[0] or item[1]
                if value not in choices:
                    choices.append(value)
    accepted = f"; accepted: {', '.join(choices)}" if choices else ""
    return f" (given {given!r}{accepted})"


def load_spec(spec: Mapping[str, Any]):
    """The user's classes, config and LightningCLI class: the study's snapshot of ``--config`` and
    the CLI class it found when the spec has them (a trial), else found now (an inspection)."""
    from autotune.loader import find_classes, load_user_module, read_user_config

    module = load_user_module(spec["model_file"])
    if "cli" in spec:
        cli = spec["cli"]
    else:
        found = find_cli_class(spec["model_file"], spec.get("cli_script"))
        cli = found.to_dict() if found else None
    missed: ModelFileError | None = None
    try:
        model_cls, data_cls = find_classes(module, spec.get("model_class"), spec.get("data_class"))
    except ModelFileError as e:
        if spec.get("data_class") is None:
            raise
        missed, data_cls = e, None  # --data names a class of the CLI script: looked for there below
    if data_cls is None:
        script, script_data = script_module(cli, spec["model_file"])
        if script is not None:
            model_cls, data_cls = find_classes(module, spec.get("model_class"), spec.get("data_class"), script, script_data)
        elif missed is not None:
            raise missed
    user_config = spec.get("user_config") or read_user_config(spec.get("config_file"), strict=cli is None)
    return model_cls, data_cls, user_config, cli


def build_spec(
    spec: Mapping[str, Any],
    model_cls: Any,
    data_cls: Any,
    user_config: Mapping[str, Any],
    cli: Any,
    overrides: Mapping[str, Any],
    work_dir: str,
) -> Built:
    """:func:`build` with the user's (or Lightning's) CLI class, in the package the model uses."""
    from autotune.loader import lightning_package

    cli_class = load_cli_class(cli, lightning_package(model_cls))
    return build(
        cli_class, model_cls, data_cls, user_config.get("document"), overrides, int(spec.get("seed", 0)), work_dir, spec.get("config_file")
    )
