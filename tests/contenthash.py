"""Content digests of live values, to compare what was saved with what came back.

Kept free of project imports so that the peers benchmark can also run this file inside a kernel.
Arrays and tensors by dtype, shape and bytes (a view by its own values); modules and optimizers by their
state_dict (optimizers with the values of their parameters); anything else by its pickle.
"""
import pickle
import sys

import xxhash


def content_digest(value) -> str:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.nn.Module):
        return content_digest({k: v for k, v in value.state_dict().items()})
    if torch is not None and isinstance(value, torch.optim.Optimizer):
        # what torch defines as an optimizer's state (its pickle is not canonical: it carries private
        # one-time warning flags torch's own __setstate__ drops), and the values of the parameters it steps
        params = [p for group in value.param_groups for p in group["params"]]
        return "optimizer:" + content_digest([type(value).__name__, value.state_dict(), *params])
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu().contiguous().numpy()
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray) and not value.dtype.hasobject:
        a = np.ascontiguousarray(value)
        return f"{a.dtype.str}{list(a.shape)}:" + xxhash.xxh3_128_hexdigest(memoryview(a).cast("B"))
    if isinstance(value, dict):
        return "dict:" + xxhash.xxh3_128_hexdigest(
            "|".join(f"{k!r}={content_digest(v)}" for k, v in value.items()).encode())
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + ":" + xxhash.xxh3_128_hexdigest(
            "|".join(content_digest(v) for v in value).encode())
    return "pickle:" + xxhash.xxh3_128_hexdigest(pickle.dumps(value, protocol=5))


def namespace_digests(ns: dict, names) -> dict:
    return {name: content_digest(ns[name]) for name in names if name in ns}
