"""``--config FILE``: a YAML file of a long-running command's options (``/etc/gpufleet/
controller.yaml``, ``agent.yaml``), turned into the command-line options they stand for and
put before the ones typed, which therefore win (a repeatable option gets both).

One key per option, named as the option without its dashes (``data-dir: /var/lib/gpufleet``;
``data_dir`` is read the same): a flag takes ``true``/``false`` (an on/off pair such as
``heal`` gives its ``--no-`` form for ``false``), a repeatable option a list (or,
for ``KEY=VALUE`` options such as ``label``, a mapping), any other a single value. Every
problem of the file is reported at once, each with its line, unknown keys with a did-you-mean.
The file is refused when others may change it (the agent runs as root), and it may never hold
a token: a token belongs in a 0600 file named by ``token-file``."""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Mapping, Sequence
from typing import Any, Literal

# "switch": an on/off pair (``--heal/--no-heal``): ``false`` is the ``--no-`` form, not silence
Kind = Literal["flag", "switch", "value", "multi"]
OPTION = "--config"
NEVER = {"token": "a token never goes in a config file: name a 0600 file with token-file"}


class OptionFileError(ValueError):
    """Every problem of a config file, one per line."""


def split_config(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The ``--config`` file named in ``argv`` (or None) and ``argv`` without it."""
    path, rest, args = None, [], list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest += args[i:]
            break
        if a == OPTION or a.startswith(OPTION + "="):
            if path is not None:
                raise OptionFileError(f"{OPTION} given twice: one config file per command")
            if a == OPTION:
                if i + 1 >= len(args):
                    raise OptionFileError(f"{OPTION} needs a FILE")
                path, i = args[i + 1], i + 2
            else:
                path, i = a.partition("=")[2], i + 1
            continue
        rest.append(a)
        i += 1
    return path, rest


def expand(argv: Sequence[str], options: Mapping[str, Kind]) -> list[str]:
    """``argv`` with its ``--config FILE`` replaced by the file's options, put first."""
    path, rest = split_config(argv)
    if path is None:
        return rest
    return [*read(path, options), *rest]


def read(path: str, options: Mapping[str, Kind]) -> list[str]:
    """The options ``path`` gives, as command-line words; OptionFileError lists every problem."""
    text = _text(path)
    import yaml  # only when a file is given

    loader = yaml.SafeLoader(text)
    try:
        return _options(loader, path, options)
    except yaml.YAMLError as e:
        raise OptionFileError(f"{path}: not YAML: {e}") from None
    finally:
        loader.dispose()


def _options(loader: Any, path: str, options: Mapping[str, Kind]) -> list[str]:
    import yaml

    root = loader.get_single_node()
    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode):
        raise OptionFileError(f"{path}: expected a mapping of option: value")
    words: list[str] = []
    problems: list[str] = []
    seen: set[str] = set()
    for key_node, value_node in root.value:
        raw = key_node.value
        where = f"{path}:{key_node.start_mark.line + 1}"
        name = str(raw).replace("_", "-")
        if name in seen:
            problems.append(f"{where}: {raw!r} is given twice")
            continue
        seen.add(name)
        if name in NEVER:
            problems.append(f"{where}: {NEVER[name]}")
        elif name == OPTION[2:] or name not in options:
            near = difflib.get_close_matches(name, list(options), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            problems.append(f"{where}: unknown option {raw!r}{hint}")
        else:
            try:
                words += _words(name, options[name], loader.construct_object(value_node, True))
            except ValueError as e:
                problems.append(f"{where}: {raw}: {e}")
    if problems:
        raise OptionFileError("\n".join(problems))
    return words


def _text(path: str) -> str:
    """The file's text, refused when group or others may write it (it runs as root)."""
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise OptionFileError(f"config file {path}: cannot read it: {e}") from None
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise OptionFileError(
            f"config file {path}: permissions {mode:04o} let others change it; "
            f"run: chmod go-w {path}"
        )
    return text


def _scalar(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, list | dict):
        raise ValueError(f"expected one value, got {_shown(value)}")
    return str(value)


def _shown(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true/false"
    return "a list" if isinstance(value, list) else "a mapping"


def _words(name: str, kind: Kind, value: Any) -> list[str]:
    option = f"--{name}"
    if kind == "flag":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return [option] if value else []
    if kind == "switch":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return [option] if value else [f"--no-{name}"]
    if kind == "value":
        return [option, _scalar(value)]
    if isinstance(value, dict):
        items = [f"{_scalar(k)}={_scalar(v)}" for k, v in value.items()]
    elif isinstance(value, list):
        items = [_scalar(v) for v in value]
    else:
        items = [_scalar(value)]
    return [w for item in items for w in (option, item)]


def argparse_options(parser: Any) -> dict[str, Kind]:
    """The long options of an ``argparse`` parser, by kind (help and ``--config`` left out)."""
    import argparse

    found: dict[str, Kind] = {}
    for action in parser._actions:
        longs = [o[2:] for o in action.option_strings if o.startswith("--")]
        if not longs or action.help == argparse.SUPPRESS or longs[0] in ("help", "config"):
            continue
        if action.nargs == 0:
            found[longs[0]] = "flag"
        elif isinstance(action, argparse._AppendAction):
            found[longs[0]] = "multi"
        else:
            found[longs[0]] = "value"
    return found
