"""Saving what the notebook defined (classes, functions, enums, cached functions) by value.

A fresh kernel has nothing in `__main__`, so a pickle that names `__main__.X` fails there with an
AttributeError. Everything defined in the notebook is therefore pickled by value, and anything that
could still only be named is refused at save time (the variable is skipped with the reason) instead of
being discovered at restore.
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
import enum
import functools
import pickletools
import types

import dill

PROTOCOL = 5
_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_GETS = {"BINGET", "LONG_BINGET", "GET"}
# what the enum machinery puts in an Enum class's namespace itself (rebuilt by EnumMeta)
_ENUM_INTERNAL = {"_generate_next_value_", "__module__", "__doc__", "_member_names_", "_member_map_",
                  "_value2member_map_", "_unhashable_values_", "_member_type_", "_value_repr_", "__new__",
                  "_new_member_", "_use_args_", "__dict__", "__weakref__", "_hashable_values_",
                  "__qualname__", "_sort_order_", "__firstlineno__", "__static_attributes__"}


def main_references(data: bytes) -> list[str]:
    """The names a pickle takes from `__main__` by reference (GLOBAL or STACK_GLOBAL opcodes), other than
    `__main__.__dict__`: a notebook function's globals, which are the namespace of whatever kernel loads it."""
    if b"__main__" not in data:
        return []
    found, memo, last = [], {}, []
    for op, arg, _pos in pickletools.genops(data):
        name = op.name
        if name in _STRINGS:
            last.append(arg)
        elif name in _GETS:
            last.append(memo.get(arg))
        elif name == "MEMOIZE":
            memo[len(memo)] = last[-1] if last else None
            continue
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[arg] = last[-1] if last else None
            continue
        elif name == "GLOBAL":
            module, _, qualname = arg.partition(" ")
            if module == "__main__" and qualname != "__dict__":
                found.append(qualname)
            last.append(None)
        elif name == "STACK_GLOBAL":
            if len(last) >= 2 and last[-2] == "__main__" and last[-1] != "__dict__":
                found.append(str(last[-1]))
            last.append(None)
        else:
            last.append(None)
        del last[:-2]
    return found


def refuse_main_references(obj, data: bytes) -> bytes:
    """`data`, unless it names something in `__main__`: then the TypeError that skips its variable."""
    refused = main_references(data)
    own = _own_instances(obj) if refused else []
    if own:  # dill names the class from inside its own pickle: "define it in a module" missed the cause
        raise TypeError(f"{obj.__qualname__} holds instances of itself in its class attributes "
                        f"({', '.join(own)}): a class saved by value cannot hold its own instances (a default, a "
                        f"registry, a sentinel); define it in a module and import it (the class is then named, and "
                        f"its instances saved), or exclude these variables")
    if refused:
        raise TypeError(f"{getattr(obj, '__qualname__', type(obj).__qualname__)} can only be saved as a reference "
                        f"to __main__.{refused[0]}, which a fresh kernel does not have; define it in a module "
                        f"and import it, or exclude this variable")
    return data


def _own_instances(obj) -> list[str]:
    """The class attributes of a notebook class (or of a function's class) that hold its own instances, directly or
    in a list, tuple, set or dict: `Node.ROOT = Node()`, `registry = []` filled by `__init__`."""
    cls = obj if isinstance(obj, type) else None
    if cls is None:
        return []
    found = []
    for name, value in vars(cls).items():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple, set,
                                                                                           frozenset)) else [value]
        try:
            if any(isinstance(item, cls) for item in items):
                found.append(f"{cls.__qualname__}.{name}")
        except Exception:  # a container whose iteration fails: not what this names
            continue
    return found


# The restore that is unpickling a variable: a by-value pickle inside it refers to its tensors, arrays
# and other variables, which only that restore can resolve.
LOADER: contextvars.ContextVar = contextvars.ContextVar("gkews_byvalue_loader", default=dill.loads)


def loads(data: bytes):
    return LOADER.get()(data)


# The closure cells the restore that is unpickling has made, by their number in the save (Capture._cell_numbers)
CELLS: contextvars.ContextVar = contextvars.ContextVar("gkews_byvalue_cells", default=None)


def load_function(data: bytes, qualname: str, cells: tuple = ()):
    """dill rebuilds a function's __qualname__ from its code; functools.wraps had set another one. A closure
    cell another function of this restore shares (the same number) is that function's cell."""
    function = loads(data)
    function.__qualname__ = qualname
    made = CELLS.get()
    if cells and made is not None and function.__closure__ and len(cells) == len(function.__closure__):
        closure = tuple(made.setdefault(n, cell) for n, cell in zip(cells, function.__closure__))
        if any(a is not b for a, b in zip(closure, function.__closure__)):
            function = _with_closure(function, closure)
    return function


def _with_closure(fn: types.FunctionType, closure: tuple) -> types.FunctionType:
    """The same function over other cells (a function's __closure__ cannot be assigned)."""
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    new.__annotations__ = fn.__annotations__
    return new


# -- a class's hooks: its class statement ran them; what they did is in the saved state -------------
_NO_HOOK = {"__init_subclass__": classmethod(lambda cls, **kwargs: None),
            "__set_name__": lambda self, owner, name: None}


def create_type(meta, name, bases, namespace):
    """dill's _create_type, `meta(name, bases, namespace)`, without running the notebook's hooks again
    (restore.DillUnpickler uses it): a notebook base's `__init_subclass__` would register the class a
    second time (a registry doubles) or fail on a notebook global not restored yet, and a notebook
    descriptor's `__set_name__` would repeat its side effects. The saved class dict and the restored
    registries already hold what they did. Hooks of imported classes still run: what they write (a
    library's registry) is no part of the checkpoint."""
    with _hooks_silenced(bases, namespace.values()):
        return _class_from(meta, name, bases, namespace)


def new_class(name, bases=(), kwds=None, exec_body=None):
    """types.new_class, which dill uses for a class with `__orig_bases__`, hooks silenced as above."""
    namespace = {}
    if exec_body is not None:
        exec_body(namespace)
    resolved = types.resolve_bases(bases)
    meta, prepared, kwds = types.prepare_class(name, resolved, kwds)
    prepared.update(namespace)
    if resolved is not bases:
        prepared["__orig_bases__"] = bases
    with _hooks_silenced(resolved, namespace.values()):
        return _class_from(meta, name, resolved, prepared, kwds)


def _class_from(meta, name, bases, namespace, kwds=None):
    """meta(name, bases, namespace), without the `__new__` and `__init__` of metaclasses the notebook defined:
    a class statement ran them, and what they did is in the saved class dict (what they set on the class)
    and in the restored variables (a registry they appended to, which doubled when they ran again)."""
    kwds = kwds or {}
    notebook = [m for m in meta.__mro__ if m.__module__ == "__main__" and {"__new__", "__init__"} & set(m.__dict__)]
    if not notebook:
        return meta(name, bases, namespace, **kwds)
    library = next(m for m in meta.__mro__ if m.__module__ != "__main__")  # type, or ABCMeta, EnumMeta...
    cls = library.__new__(meta, name, bases, namespace, **kwds)
    if isinstance(cls, meta):
        library.__init__(cls, name, bases, namespace, **kwds)
    return cls


@contextlib.contextmanager
def _hooks_silenced(bases, values):
    """type.__new__ calls the hooks itself: the notebook classes that define them get a no-op meanwhile."""
    silenced = {}
    for hook, classes in (("__init_subclass__", [c for base in bases for c in getattr(base, "__mro__", ())]),
                          ("__set_name__", [c for value in values for c in type(value).__mro__])):
        for owner in classes:
            if hook in owner.__dict__ and owner.__module__ == "__main__":
                silenced[hook, id(owner)] = (owner, hook, owner.__dict__[hook])
    silenced = list(silenced.values())
    for owner, hook, _ in silenced:
        type.__setattr__(owner, hook, _NO_HOOK[hook])
    try:
        yield
    finally:
        for owner, hook, original in silenced:
            type.__setattr__(owner, hook, original)


# -- __hash__ = object.__hash__ (or = Base.__hash__) in a class with __eq__ -------------------------
def dropped_hash(cls):
    """The __hash__ dill leaves out of the class (dill/_dill.py, _get_typedict_type, drops every attribute
    that is its base's own object), or None. Rebuilt without it, a class that defines __eq__ gets
    __hash__ = None from type(): its instances, keys of a dict a moment ago, are unhashable."""
    value = cls.__dict__.get("__hash__")
    if value is None or "__eq__" not in cls.__dict__ or not hasattr(value, "__qualname__"):
        return None
    inherited = {}
    for base in reversed(cls.__bases__):  # as dill looks: the bases' own dicts, the first one winning
        inherited.update(base.__dict__)
    return value if inherited.get("__hash__") is value else None


def restore_hash(cls, hash_):
    cls.__hash__ = hash_
    return cls


# -- a class whose base is a typing.Generic subclass (torch's Dataset, Sampler, a notebook Base[T]) --
def lost_bases(cls):
    """The bases dill would lose, or None. dill rebuilds a class that has `__orig_bases__` from those
    (dill/_dill.py, save_type), and finds the attribute inherited from a generic base: `class DS(Dataset)`
    came back as `class DS(Generic)`, no longer a Dataset and without its methods (and `__bases__` cannot
    be set back afterwards: Generic's layout differs). DillPickler gives such a class its own
    `__orig_bases__`, its `__bases__`, while it is pickled."""
    if "__orig_bases__" in cls.__dict__ or not hasattr(cls, "__orig_bases__"):
        return None
    return cls.__bases__


# -- Enum classes: dill cannot pickle them by value (it recurses through the members) --------------
def is_enum_class(obj) -> bool:
    return isinstance(obj, enum.EnumMeta)


def reduce_enum(cls):
    # aliases too (`CRIMSON = 1` after `RED = 1`): defined again after their member, they are aliases again
    members = [(name, member._value_) for name, member in cls.__members__.items()]
    namespace = {k: v for k, v in cls.__dict__.items()
                 if k not in _ENUM_INTERNAL and k not in cls.__members__ and _defined_by_user(k, v)}
    return rebuild_enum, (type(cls), cls.__name__, cls.__qualname__, cls.__bases__, members, namespace,
                          cls.__doc__)


def _defined_by_user(key: str, value) -> bool:
    """Methods the notebook wrote, and plain attributes; not what EnumMeta derives or copies in."""
    function = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
    if callable(function) or isinstance(value, (staticmethod, classmethod, property)):
        return getattr(function, "__module__", None) == "__main__"
    return not (key.startswith("_") and key.endswith("_"))


def rebuild_enum(meta, name, qualname, bases, members, namespace, doc):
    classdict = meta.__prepare__(name, bases)
    for key, value in members:
        classdict[key] = value
    classdict["__module__"] = "__main__"
    classdict["__qualname__"] = qualname
    if doc is not None:
        classdict["__doc__"] = doc
    for key, value in namespace.items():
        if key not in classdict:
            classdict[key] = value
    return meta(name, bases, classdict)


# -- namedtuple classes: dill rebuilds them from their field names alone, without their methods -----
_NAMEDTUPLE_INTERNAL = set(collections.namedtuple("_Probe", "a").__dict__) | {"__orig_bases__", "__annotations__"}


def is_namedtuple_class(obj) -> bool:
    return isinstance(obj, type) and obj.__bases__ == (tuple,) and isinstance(getattr(obj, "_fields", None), tuple)


def reduce_namedtuple(cls):
    namespace = {k: v for k, v in cls.__dict__.items()
                 if k not in _NAMEDTUPLE_INTERNAL and k not in cls._fields and _defined_by_user(k, v)}
    defaults = [cls._field_defaults[f] for f in cls._fields if f in cls._field_defaults]
    return rebuild_namedtuple, (cls.__name__, cls.__qualname__, cls._fields, defaults, namespace, cls.__doc__,
                                dict(cls.__dict__.get("__annotations__", {})))


def rebuild_namedtuple(name, qualname, fields, defaults, namespace, doc, annotations):
    cls = collections.namedtuple(name, fields, defaults=defaults or None, module="__main__")
    cls.__qualname__, cls.__doc__ = qualname, doc
    if annotations:
        cls.__annotations__ = annotations
    for key, value in namespace.items():
        setattr(cls, key, value)
    return cls


# -- functools.lru_cache / cache: the wrapper pickles as a name; rebuild it around its function -----
def is_cached_function(obj) -> bool:
    return isinstance(obj, functools._lru_cache_wrapper)


def reduce_cached(obj):
    params = obj.cache_parameters()
    return rebuild_cached, (obj.__wrapped__, params["maxsize"], params["typed"], dict(obj.__dict__))


def rebuild_cached(function, maxsize, typed, attributes):
    """The cache comes back empty: its entries are results, recomputed on demand."""
    wrapper = functools.lru_cache(maxsize=maxsize, typed=typed)(function)
    attributes.pop("__wrapped__", None)
    wrapper.__dict__.update(attributes)
    return wrapper


# -- functools.cached_property: up to Python 3.11 it holds an RLock (never used since 3.12), which no pickle
# takes, so a notebook class with one was skipped with its instances; it goes as its function and name
def reduce_cached_property(obj):
    return rebuild_cached_property, ({k: v for k, v in vars(obj).items() if k != "lock"},)


def rebuild_cached_property(attributes):
    prop = functools.cached_property(attributes["func"])  # a lock of its own, where this Python has one
    prop.__dict__.update(attributes)  # attrname, which __set_name__ set in the class, and the rest
    return prop


# -- typing's TypeVar, ParamSpec and NewType pickle as their names: one made in the notebook would need
# __main__ to have it already; it goes as its definition, and comes back as the notebook's (__module__)
def reduce_type_variable(obj):
    typing_ = __import__("typing")
    if getattr(obj, "__module__", None) != "__main__":
        return None
    if isinstance(obj, typing_.NewType):
        return rebuild_type_variable, ("NewType", obj.__name__, (obj.__supertype__,), {}, obj.__qualname__)
    for kind in ("TypeVar", "ParamSpec"):
        if isinstance(obj, getattr(typing_, kind)):
            options = {"bound": obj.__bound__, "covariant": obj.__covariant__,
                       "contravariant": obj.__contravariant__}
            constraints = tuple(getattr(obj, "__constraints__", ()))
            if constraints:
                options.pop("bound")
            return rebuild_type_variable, (kind, obj.__name__, constraints, options, None)
    return None


def rebuild_type_variable(kind, name, args, options, qualname):
    made = getattr(__import__("typing"), kind)(name, *args, **options)
    made.__module__ = "__main__"
    if qualname is not None:
        made.__qualname__ = qualname
    return made


def is_notebook_function(obj) -> bool:
    return isinstance(obj, types.FunctionType) and getattr(obj, "__module__", None) in ("__main__", None)


# -- the source of a notebook definition: the cell it was defined in -------------------------------------
def source_files(obj) -> set[str]:
    """The file names (IPython's per-cell names in linecache) of a notebook function's or class's code: the
    checkpoint keeps those cells' text, so that after a restore `inspect.getsource`, `fn??` and tracebacks
    through the restored definitions show their lines (a fresh kernel's linecache has none of them)."""
    found = set()
    members = [obj] if not isinstance(obj, type) else list(vars(obj).values())
    for member in members:
        function = getattr(member, "__func__", None) or getattr(member, "fget", None) or member
        code = getattr(function, "__code__", None)
        if isinstance(code, types.CodeType):
            found.add(code.co_filename)
    return found


def cell_sources(files) -> dict[str, str]:
    """{file name: text} of those cells linecache holds."""
    import linecache
    return {name: text for name in sorted(files) if (text := "".join(linecache.getlines(name)))}


def register_sources(sources: dict) -> None:
    """Put saved cells back in linecache (without a time: checkcache never drops them, as IPython's own)."""
    import linecache
    for name, text in (sources or {}).items():
        if isinstance(name, str) and isinstance(text, str) and name not in linecache.cache:
            linecache.cache[name] = (len(text), None, text.splitlines(True), name)
