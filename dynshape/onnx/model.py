"""Reading an ONNX model: the file (or bytes, or ``ModelProto``), its opset, dtypes and weights.

Every failure of the ``onnx`` package (a truncated file, a bad protobuf, missing external data)
becomes a ``ModelImportError`` naming the model; nothing of protobuf reaches the user.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelImportError
from .known import Known

#: The versions of the default ONNX domain the importer supports. 13 is the floor of the issue;
#: 22 to 28 add element types (bfloat16, float8, int4, float6) and new ops to the ops it
#: converts; the two changes of semantics are followed where they apply: ``Range``'s
#: ``stash_type`` (27: float16 counted in float32) and ``Mod`` with ``fmod=0`` for floats (28).
OPSETS = range(13, 29)

#: ONNX element types (``TensorProto.DataType``) -> the IR's dtypes.
DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
    # the extended dtypes, ml_dtypes' (onnx depends on it; shape_funcs.declarations.dtypes)
    16: "bfloat16",
    17: "float8_e4m3fn",
    18: "float8_e4m3fnuz",
    19: "float8_e5m2",
    20: "float8_e5m2fnuz",
    21: "uint4",
    22: "int4",
    23: "float4_e2m1fn",
    24: "float8_e8m0fnu",
    25: "uint2",
    26: "int2",
}


def onnx_module() -> Any:
    """The ``onnx`` package, or an error saying how to install it."""
    try:
        import onnx
    except ImportError:  # pragma: no cover - the extra is installed in CI
        raise ModelImportError(
            "importing ONNX models needs the onnx package: pip install -e '.[onnx]'"
        ) from None
    return onnx


def read(model: Any, external_data_dir: str | os.PathLike[str] | None = None) -> Any:
    """A ``ModelProto`` from a path, bytes or a ``ModelProto``, its external data loaded.

    Weights stored in files beside the model (ONNX's external data) are read from the model
    file's directory for a path, and for bytes or a proto only from ``external_data_dir``,
    which the caller names: never from the current directory, whatever the model says. onnx
    refuses locations outside that directory (``..``, absolute paths)."""
    onnx = onnx_module()
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray)):
        proto = _parse(lambda: onnx.load_from_string(bytes(model)), "the model's bytes")
    elif isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise ModelImportError(f"{path}: no such model file")
        proto = _parse(lambda: onnx.load(str(path)), str(path))
        external_data_dir = None  # loaded, from the file's own directory
    else:
        raise ModelImportError(
            f"expected a path, bytes or an onnx.ModelProto, got {type(model).__name__}"
        )
    check_text(proto, "model")
    if external_data_dir is not None:
        proto = _copy_with_external_data(proto, Path(external_data_dir))
    return proto


def _parse(load: Any, what: str) -> Any:
    """``load()``, any failure of the onnx package a ModelImportError naming ``what``."""
    try:
        return load()
    except Exception as e:  # protobuf's DecodeError, OSError on external data, ...
        raise ModelImportError(
            f"{what}: not a readable ONNX model ({type(e).__name__}: {e})"
        ) from None


def _copy_with_external_data(proto: Any, directory: Path) -> Any:
    """A copy of ``proto`` with its external data read from ``directory`` (the caller's proto
    is left as it was)."""
    onnx = onnx_module()
    if not directory.is_dir():
        raise ModelImportError(f"external_data_dir={str(directory)!r} is not a directory")
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    try:
        onnx.external_data_helper.load_external_data_for_model(copy, str(directory))
    except Exception as e:
        raise ModelImportError(
            f"the model's external data cannot be read from {directory} ({type(e).__name__}: {e})"
        ) from None
    return copy


def check_text(message: Any, where: str) -> Any:
    """``message``, once every string field in it (nested messages, subgraphs included) is
    text: ONNX's protos are proto2, whose parser hands a string field holding invalid UTF-8
    back as ``bytes``, which no name lookup or message expects. Tensor data are ``bytes``
    fields and are not visited."""
    from google.protobuf.descriptor import FieldDescriptor  # protobuf comes with onnx

    for field, value in message.ListFields():
        if field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
            continue  # numbers and bytes: the weights, possibly millions of them
        repeated = getattr(field, "is_repeated", None)  # protobuf 7 has no label any more
        if repeated is None:
            repeated = field.label == FieldDescriptor.LABEL_REPEATED
        items = list(enumerate(value)) if repeated else [(None, value)]
        for i, item in items:
            at = f"{where}.{field.name}" + (f"[{i}]" if i is not None else "")
            if field.type == FieldDescriptor.TYPE_STRING and not isinstance(item, str):
                raise ModelImportError(f"{at} is not valid UTF-8 text ({bytes(item)[:40]!r})")
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                check_text(item, at)
    return message


def opset_of(model: Any) -> int:
    """The model's version of the default domain; an error outside ``OPSETS``."""
    versions = {o.domain: o.version for o in model.opset_import}
    version = versions.get("", versions.get("ai.onnx"))
    if version is None:
        raise ModelImportError("the model imports no version of the default ONNX domain")
    if version not in OPSETS:
        raise ModelImportError(
            f"the model uses opset {version} of the default domain; "
            f"supported: {OPSETS.start} to {OPSETS.stop - 1}"
        )
    return int(version)


def dtype_of(elem_type: int, what: str) -> str:
    """The IR dtype of an ONNX element type, or an error naming ``what``."""
    if elem_type not in DTYPES:
        onnx = onnx_module()
        name = (
            onnx.TensorProto.DataType.Name(elem_type)
            if elem_type in onnx.TensorProto.DataType.values()
            else str(elem_type)
        )
        raise ModelImportError(f"{what} has element type {name}, which dynshape does not support")
    return DTYPES[elem_type]


def weight(tensor: Any, what: str) -> Known:
    """An initializer or a ``Constant``'s tensor as a ``Known`` (one copy of the bytes)."""
    onnx = onnx_module()
    dtype = dtype_of(tensor.data_type, what)
    if onnx.external_data_helper.uses_external_data(tensor):
        # not loaded by ``read``: to_array would read it relative to the current directory
        raise ModelImportError(
            f"{what}: its data is in an external file; a model given as bytes or a proto "
            "reads external data only from a directory you name (external_data_dir=DIR), or "
            "load the model from its path"
        )
    try:
        array = onnx.numpy_helper.to_array(tensor)
    except Exception as e:
        raise ModelImportError(
            f"{what}: unreadable tensor data ({type(e).__name__}: {e})"
        ) from None
    array = np.asarray(array, dtype=dtype, order="C")  # (ascontiguousarray makes 0-d 1-d)
    if not array.flags.owndata:
        array = array.copy()
    array.setflags(write=False)  # so the IR's constant takes it without another copy
    return Known(array, dtype)
