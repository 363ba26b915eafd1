"""Every Python code block of the README runs, and its shell commands name real CLI commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_starts_with_the_two_commands() -> None:
    first = re.search(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert first is not None
    assert first.group(1).splitlines() == [
        "pip install -e '.[dev]' && python -m dynshape demo",
        "pip install -e '.[dev]' && pytest",
    ]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ir
    from dynshape.custom_op import unregister_op

    if "import torch" in BLOCKS[index]:
        # the torch extra's example: not in dev (a large wheel). torch.export, not torch:
        # without torch installed, "torch" imports tests/torch (a namespace package)
        pytest.importorskip("torch.export")
    monkeypatch.chdir(tmp_path)  # blocks may write files (prog.dsx)
    before = {op.name for op in ir.all_ops()}
    try:
        exec(compile(BLOCKS[index], f"README.md block {index}", "exec"), {"__name__": "__readme__"})
    finally:
        for op in ir.all_ops():  # the custom-op guide registers one: no test should see it
            if op.name not in before:
                unregister_op(op.name)


def test_readme_op_table_lists_every_built_in_op() -> None:
    import ir

    text = README.read_text()
    table = text[text.index("## Supported ops") : text.index("## Errors")]
    listed = set(re.findall(r"`([a-z_.0-9]+)`", table))
    assert listed == set(ir.ops.BUILTIN_OP_NAMES)
