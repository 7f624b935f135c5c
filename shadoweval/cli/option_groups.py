"""Groups of options several commands take together, declared once.

An option group is a frozen dataclass marked with :func:`option_group` whose fields are
declared like a command's parameters (``name: XOpt = default``, the ``Annotated`` aliases of
:mod:`shadoweval.cli.options`). A command takes the group as one parameter annotated with the
group's class and is decorated with :func:`takes_option_groups`: Typer then sees the group's
fields one by one, in the group parameter's place and in field order, with their own
declarations and defaults (so ``--help`` lists them exactly as if they were written out), and
the command receives them gathered into one group object.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

GroupT = TypeVar("GroupT")

_GROUP_MARK = "__shadoweval_option_group__"


def option_group(cls: type[GroupT]) -> type[GroupT]:
    """Mark ``cls`` (a dataclass) as an option group.

    Raises:
        TypeError: ``cls`` is not a dataclass.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    setattr(cls, _GROUP_MARK, True)
    return cls


def takes_option_groups(command: Callable[..., Any]) -> Callable[..., Any]:
    """Spread the option-group parameters of ``command`` into its signature (for Typer).

    The returned callable takes the groups' fields as keyword arguments, in place of each
    group parameter, gathers them into the groups and calls ``command``. Its docstring,
    name and module are ``command``'s.

    Raises:
        TypeError: two parameters (of the command or of its groups) have the same name.
    """
    hints = typing.get_type_hints(command, include_extras=True)
    parameters: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[Any], tuple[str, ...]]] = {}
    for parameter in inspect.signature(command).parameters.values():
        annotation = hints.get(parameter.name, parameter.annotation)
        if not getattr(annotation, _GROUP_MARK, False):
            parameters.append(parameter.replace(annotation=annotation))
            continue
        fields = _group_parameters(annotation, parameter.kind)
        groups[parameter.name] = (annotation, tuple(field.name for field in fields))
        parameters.extend(fields)
    names = [parameter.name for parameter in parameters]
    if len(set(names)) != len(names):
        raise TypeError(f"{command.__qualname__}: an option group repeats a parameter name")

    @functools.wraps(command)
    def spread(**arguments: Any) -> Any:
        for name, (group, fields) in groups.items():
            arguments[name] = group(**{field: arguments.pop(field) for field in fields})
        return command(**arguments)

    signature = inspect.Signature(parameters)
    spread.__signature__ = signature  # type: ignore[attr-defined]
    spread.__annotations__ = {
        parameter.name: parameter.annotation for parameter in signature.parameters.values()
    }
    del spread.__wrapped__  # Typer must read the spread signature, not the command's
    return spread


def _group_parameters(group: type[Any], kind: inspect._ParameterKind) -> list[inspect.Parameter]:
    """The fields of option group ``group`` as parameters of kind ``kind``, in field order,
    with their declared types and defaults."""
    hints = typing.get_type_hints(group, include_extras=True)
    parameters = []
    for field in dataclasses.fields(group):
        default = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        parameters.append(
            inspect.Parameter(field.name, kind, default=default, annotation=hints[field.name])
        )
    return parameters
