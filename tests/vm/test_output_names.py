"""Names of ``main``'s results in the executable (``Executable.output_names``): kept through a
file, checked on load, given to ``named_outputs``; an executable without them is as before."""

from __future__ import annotations

import dataclasses

import pytest
from test_executable import _with_meta, rich_program

from vm import Executable, FormatError, VirtualMachine


def _named(*names: str) -> Executable:
    return dataclasses.replace(rich_program(), output_names=names)


def _names_for(exe: Executable) -> tuple[str, ...]:
    return tuple(f"result {i}" for i in range(len(exe.outputs)))


def test_names_survive_a_file() -> None:
    exe = rich_program()
    names = _names_for(exe)
    named = _named(*names)
    loaded = Executable.from_bytes(named.to_bytes())
    assert loaded.output_names == names
    assert [p.name for p in loaded.named_outputs] == list(names)
    assert [p.type for p in loaded.named_outputs] == list(exe.outputs)
    assert VirtualMachine(loaded).named_outputs == loaded.named_outputs


def test_without_names_the_file_is_as_before() -> None:
    exe = rich_program()
    assert exe.output_names == ()
    assert b"output_names" not in exe.to_bytes()
    assert [p.name for p in exe.named_outputs] == [f"output{i}" for i in range(len(exe.outputs))]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ([f"n{i}" for i in range(50)], "50 names for the"),
        ("abc", "'output_names' must be a list of strings"),
        ([1], "'output_names' must be a list of strings"),
        ([""], "expected non-empty strings"),
    ],
)
def test_bad_names_in_a_file_are_named(names: object, message: str) -> None:
    def edit(meta: dict) -> None:
        meta["output_names"] = names

    with pytest.raises(FormatError, match=message):
        Executable.from_bytes(_with_meta(rich_program().to_bytes(), edit))


def test_a_name_given_twice_is_refused() -> None:
    exe = rich_program()
    if len(exe.outputs) < 2:
        pytest.fail("rich_program's main should return two results for this test")
    twice = ("same",) * len(exe.outputs)
    with pytest.raises(FormatError, match="'same' names two results"):
        _named(*twice).to_bytes()


def test_an_unknown_metadata_field_is_still_refused() -> None:
    def edit(meta: dict) -> None:
        meta["output_namez"] = []

    with pytest.raises(FormatError, match="metadata fields"):
        Executable.from_bytes(_with_meta(rich_program().to_bytes(), edit))
