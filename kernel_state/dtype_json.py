"""A numpy dtype as JSON, structured ones included.

`dtype.str` names a plain dtype exactly ('<f4', '>i2', '<M8[s]'), but every structured dtype of 16 bytes
is '|V16': its fields would be lost. A structured dtype is written in numpy's own dict form instead
(names, formats, offsets, itemsize, titles), each format again in this form, so that padding,
overlapping fields, titles and nested records all come back; `np.lib.format.dtype_to_descr` (the .npy
header's form) refuses titles and overlapping fields."""
from __future__ import annotations


def dtype_to_json(dtype):
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        return {"subarray": dtype_to_json(base), "shape": list(shape)}
    if dtype.fields is None:
        return dtype.str
    fields = [dtype.fields[name] for name in dtype.names]
    out = {"names": list(dtype.names), "formats": [dtype_to_json(f[0]) for f in fields],
           "offsets": [f[1] for f in fields], "itemsize": dtype.itemsize}
    titles = [f[2] if len(f) > 2 and isinstance(f[2], str) else None for f in fields]
    if any(t is not None for t in titles):
        out["titles"] = titles
    if dtype.isalignedstruct:
        out["aligned"] = True
    return out


def dtype_from_json(value):
    import numpy as np  # only arrays reach here: kernel_state itself runs without numpy

    if isinstance(value, str):
        return np.dtype(value)
    if "subarray" in value:
        return np.dtype((dtype_from_json(value["subarray"]), tuple(value["shape"])))
    spec = {"names": value["names"], "formats": [dtype_from_json(f) for f in value["formats"]],
            "offsets": value["offsets"], "itemsize": value["itemsize"]}
    if "titles" in value:
        spec["titles"] = value["titles"]
    return np.dtype(spec, align=bool(value.get("aligned")))


def array_dtype(record: dict, key: str):
    """The dtype a manifest record gives under `key` ('dtype', 'numpy_dtype'): from `key`_fields when
    the dtype is structured (`key` itself holds dtype.str, as for any other)."""
    fields = record.get(f"{key}_fields")
    return dtype_from_json(fields if fields is not None else record[key])
