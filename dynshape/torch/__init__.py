"""Import ``torch.export`` programs: ``dynshape.torch.load(program_or_path, dims=None)``.

Needs the optional ``torch`` package (``pip install -e '.[torch]'``); the rest of dynshape never
imports this package, and this package imports torch only when a program is read. torch's
symbolic sizes, their ranges (``Dim("seq", max=2048)``) and simple run-time assertions become
dynshape's symbols, ranges and entry checks (``design/torch.md``).

    ep = torch.export.export(model, args, dynamic_shapes={"x": {0: Dim("batch", max=64)}})
    program = dynshape.torch.load(ep)          # or a .pt2 path saved by torch.export.save
    exe = dynshape.compile(program)
"""

from __future__ import annotations

from . import ops_control as _ops_control  # noqa: F401  (the imports register the converters)
from . import ops_conv as _ops_conv  # noqa: F401
from . import ops_create as _ops_create  # noqa: F401
from . import ops_elementwise as _ops_elementwise  # noqa: F401
from . import ops_layout as _ops_layout  # noqa: F401
from . import ops_more as _ops_more  # noqa: F401
from . import ops_nn as _ops_nn  # noqa: F401
from .graph import Imported, import_program, load
from .registry import CONVERTERS
from .targets import missing_targets

__all__ = ["CONVERTERS", "Imported", "import_program", "load", "missing_targets"]
