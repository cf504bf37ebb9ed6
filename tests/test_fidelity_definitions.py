"""What the notebook defines comes back in a fresh kernel; what could only be named is refused at save
time; restore semantics (one __reduce__ per save, one class object, a redefined class)."""
from __future__ import annotations


from kernels import Kernel
from test_fidelity_state import unchanged_after_restore

BUILD = r'''
import enum, dataclasses, functools, typing
class Color(enum.Enum):
    RED = 1
    GREEN = "g"
    CRIMSON = 1
    def shout(self): return self.name + "!"
class Flags(enum.IntFlag):
    R = 4
    W = 2
    RW = 6
@dataclasses.dataclass(frozen=True)
class Config:
    lr: float
    layers: tuple = (3, 4)
    tags: list = dataclasses.field(default_factory=list)
class Pair(typing.NamedTuple):
    left: int
    right: str = "r"
class Slotted:
    __slots__ = ("a", "b")
    def __init__(self, a, b): self.a, self.b = a, b
    def total(self): return self.a + self.b
def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return ("logged", fn(*args))
    return wrapper
@logged
def area(w, h):
    """width times height"""
    return w * h
@functools.lru_cache(maxsize=32)
def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)
@functools.cache
def cube(n): return n ** 3
fib(20)
favourite = Color.GREEN
perms = Flags.R | Flags.W
cfg = Config(0.5, tags=["a"])
pair = Pair(3)
slot = Slotted(2, 5)
table = {"color": Color.RED, "cfg": cfg, "fn": fib}
'''

CHECK = ("[favourite is Color.GREEN, favourite.shout(), Color('g') is favourite, int(perms), "
         "perms == Flags.R | Flags.W,"
         " cfg, cfg == Config(0.5, tags=['a']), dataclasses.is_dataclass(cfg), pair, pair._fields, Pair(1).right,"
         " slot.total(), hasattr(slot, '__dict__'), area(2, 3), area.__name__, area.__doc__, area.__qualname__,"
         " fib(30), fib.cache_info().maxsize, cube(3), table['color'] is Color.RED, table['fn'] is fib,"
         " table['cfg'] is cfg, Color.CRIMSON is Color.RED, list(Color.__members__), perms is Flags.RW]")


def test_notebook_definitions_round_trip_in_a_fresh_kernel(tmp_path):
    with Kernel(tmp_path) as first:
        first.run(BUILD)
        out = first.run("%gkews_checkpoint save")
        assert "Skipped" not in out, out
        expected = first.run(f"print({CHECK})")
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out, out
        assert fresh.run(f"print({CHECK})") == expected
        assert "True, 'GREEN!', True, 6, True" in expected
        assert expected.endswith("True, ['RED', 'GREEN', 'CRIMSON'], True]\n"), expected  # an alias is one


TYPED = r'''
import functools
from typing import Generic, NewType, ParamSpec, TypeVar
T = TypeVar("T")
Num = TypeVar("Num", int, float)
Row = TypeVar("Row", bound=dict, covariant=True)
P = ParamSpec("P")
UserId = NewType("UserId", int)
class Buffer(Generic[T]):
    def __init__(self): self.items: list[T] = []
class Dataset:
    def __init__(self, n): self.n, self.computed = n, 0
    @functools.cached_property
    def stats(self):
        self.computed += 1
        return {"mean": self.n / 2}
replay = Buffer[int](); replay.items += [1, 2, 3]
ds = Dataset(10)
ds.stats
fresh_ds = Dataset(4)
owner = UserId(7)
'''
TYPED_CHECK = ("[replay.items, type(replay).__name__, T.__name__, T.__module__, [c.__name__ for c in "
               "Num.__constraints__], Row.__bound__.__name__,"
               " Row.__covariant__, P.__name__, UserId(5), UserId.__supertype__ is int, UserId.__module__, owner,"
               " ds.stats, ds.computed, 'stats' in vars(fresh_ds), type(ds).__dict__['stats'].attrname]")


def test_type_variables_and_cached_properties_of_the_notebook_come_back(tmp_path):
    """A notebook's TypeVar, ParamSpec or NewType pickles as its name, which a fresh kernel lacks: it, every
    class generic over it and their instances were skipped. A class with a functools.cached_property was
    skipped with its instances ("a lock ... is a live resource": the RLock cached_property holds up to
    Python 3.11). They come back, a cached value as it was, one not computed yet computed on first use."""
    with unchanged_after_restore(tmp_path, TYPED, TYPED_CHECK) as fresh:
        assert fresh.value(TYPED_CHECK) == [
            [1, 2, 3], "Buffer", "T", "__main__", ["int", "float"], "dict", True, "P", 5, True, "__main__", 7,
            {"mean": 5.0}, 1, False, "stats"]
        assert fresh.value("[fresh_ds.stats, fresh_ds.computed, fresh_ds.stats, fresh_ds.computed]") == [
            {"mean": 2.0}, 1, {"mean": 2.0}, 1]


def test_what_only_main_could_name_is_reported_at_save(tmp_path):
    with Kernel(tmp_path) as k:
        k.run("class Token:\n    def __reduce__(self): return 'TOKEN'\n"
              "TOKEN = Token()\nholder = {'t': TOKEN}\nfine = 1")
        out = k.run("%gkews_checkpoint save")
        assert "TOKEN: TypeError: Token object 'TOKEN' can only be saved as a reference to __main__.TOKEN" in out
        assert "re-run cell [1]: TOKEN = Token()" in out
        assert "holder: TypeError: Token object 'TOKEN' can only be saved" in out
        assert "Skipped 2 (not saved):" in out


def test_restore_semantics(tmp_path):
    with Kernel(tmp_path) as k:
        # a __reduce__ with a side effect: once per save, even when the variable needs dill (a code object)
        k.run("calls = []\nclass Audited:\n    def __reduce__(self):\n        calls.append(1)\n"
              "        return (Audited, ())\n"
              "needs_dill = [Audited(), (lambda: 1).__code__]")
        out = k.run("%gkews_checkpoint save needs_dill")
        assert "Skipped" not in out
        assert k.value("len(calls)") == 1
        manifest = k.call({"op": "status"})["result"]["latest"]
        assert manifest["variables"] == 1
        # two instances of a class that is no variable share one class after restore
        k.run("def build():\n    class Hidden:\n        pass\n    return Hidden\nH = build()\n"
              "one, two = H(), H()\ndel H\ntype(one).label = 'v1'")
        k.run("%gkews_checkpoint save one two")
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out, out
        assert fresh.value("[type(one) is type(two), type(one).label]") == [True, "v1"]

    with Kernel(tmp_path) as same:
        # a same-kernel restore brings back the checkpoint's definition, and says so
        same.run("class Model:\n    version = 1\nm = Model()")
        same.run("%gkews_checkpoint save Model m")
        same.run("class Model:\n    version = 2")
        out = same.run("%gkews_checkpoint restore")
        assert ("Warning: Model: this kernel redefined it since the checkpoint; the checkpoint's definition is "
                "restored (re-run its cell to use the new one)") in out
        assert same.value("[Model.version, type(m) is Model]") == [1, True]


def test_a_notebook_class_derived_from_another_keeps_its_base_after_a_restore(tmp_path):
    """The subclass is pickled by value with its notebook base inside it: restored, its base was a copy of
    the restored base class, so isinstance(obj, Base) and issubclass(Impl, Base) turned False."""
    with Kernel(tmp_path) as first:
        first.run("import abc, torch\n"
                  "class Base(abc.ABC):\n    @abc.abstractmethod\n    def f(self): ...\n"
                  "class Impl(Base):\n    def f(self): return 1\n"
                  "class Block(torch.nn.Module):\n    def __init__(self):\n"
                  "        super().__init__(); self.l = torch.nn.Linear(2, 2)\n"
                  "class Deeper(Block):\n    pass\n"
                  "obj, net = Impl(), Deeper()")
        first.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        out = fresh.run("import abc, torch\n%gkews_checkpoint restore")
        assert "Not restored" not in out and "Warning" not in out, out
        assert fresh.value("[Impl.__bases__[0] is Base, issubclass(Impl, Base), isinstance(obj, Base), obj.f(), "
                           "isinstance(net, Block), isinstance(net, torch.nn.Module), type(net) is Deeper]") == \
            [True, True, True, 1, True, True, True]
        verdicts = fresh.call({"op": "verify"})["result"]["variables"]
        assert all(v["verdict"] == "match" for v in verdicts.values()), verdicts


def test_a_class_over_a_generic_base_keeps_its_bases(tmp_path):
    """dill rebuilt a class from the `__orig_bases__` it inherited: `class DS(Dataset)` (torch's Dataset
    is a typing.Generic) came back as `class DS(Generic)`, no longer a Dataset and without its methods,
    and the child of a notebook `Base(Generic[T])` lost Base. The classes keep their bases, and the user's
    class is left as it was."""
    with Kernel(tmp_path) as first:
        first.run("import typing, torch\nfrom torch.utils.data import Dataset, DataLoader\n"
                  "class Base(typing.Generic[typing.AnyStr]):\n    def hello(self): return 'hi'\n"
                  "class Child(Base):\n    pass\n"
                  "class DS(Dataset):\n    def __len__(self): return 3\n    def __getitem__(self, i): return i\n"
                  "c, ds = Child(), DS()")
        first.run("%gkews_checkpoint save")
        assert first.value("['__orig_bases__' in Child.__dict__, '__orig_bases__' in DS.__dict__]") == [False, False]
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out, out
        seen = fresh.value("[[k.__name__ for k in DS.__mro__], [k.__name__ for k in Child.__mro__], c.hello(), "
                           "isinstance(ds, Dataset), type(ds + ds).__name__, [b.tolist() for b in DataLoader(ds)]]")
        assert seen == [["DS", "Dataset", "Generic", "object"], ["Child", "Base", "Generic", "object"], "hi", True,
                        "ConcatDataset", [[0], [1], [2]]]
        verdicts = fresh.call({"op": "verify"})["result"]["variables"]
        assert all(v["verdict"] == "match" for v in verdicts.values()), verdicts


def test_definitions_refer_to_the_variables_they_hold(tmp_path):
    """A function's default, a class attribute and a nested class are the kernel's own objects after a
    restore, not copies: `predict` uses the restored `model`, `Trainer.cfg is config`, and an instance of
    `Outer.Inner` is one."""
    with Kernel(tmp_path) as first:
        first.run("""
import torch
model = torch.nn.Linear(2, 2)
def predict(x, m=model): return m(x)
config = {"lr": 0.1}
class Trainer:
    cfg = config
class Outer:
    class Inner:
        pass
inner = Outer.Inner()
callbacks = [predict]
""")
        out = first.run("%gkews_checkpoint save")
        assert "Skipped" not in out, out
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out, out
        assert fresh.value("[predict.__defaults__[0] is model, Trainer.cfg is config, isinstance(inner, Outer.Inner), "
                           "callbacks[0] is predict]") == [True, True, True, True]
        verdicts = fresh.call({"op": "verify"})["result"]["variables"]
        assert {v["verdict"] for v in verdicts.values()} == {"match"}, verdicts
        fresh.run("config['lr'] = 0.5; torch.nn.init.ones_(model.weight); torch.nn.init.zeros_(model.bias)")
        assert fresh.value("[Trainer.cfg['lr'], predict(torch.ones(1, 2)).tolist()]") == [0.5, [[2.0, 2.0]]]


def test_a_class_holding_an_instance_of_itself_is_refused_at_save(tmp_path):
    """dill can only name such a class in `__main__`: refused at save with the reason, not at restore. The reason
    was "can only be saved as a reference to __main__.Registry, which a fresh kernel does not have": it named
    neither the attribute nor the cause (a registry filled by `__init__`, a default, a sentinel)."""
    with Kernel(tmp_path) as k:
        k.run("class Registry:\n    default = None\nRegistry.default = Registry()\nfine = 1\n"
              "class Tracked:\n    instances = []\n    def __init__(self): Tracked.instances.append(self)\n"
              "t = Tracked()")
        out = k.run("%gkews_checkpoint save")
        assert "Registry: TypeError: Registry holds instances of itself in its class attributes (Registry.default): " \
               "a class saved by value cannot hold its own instances" in out, out
        assert "t: TypeError: Tracked holds instances of itself in its class attributes (Tracked.instances)" in out
        assert "Skipped 3 (not saved):" in out and "PicklingWarning" not in out


def test_a_named_tuple_keeps_its_methods_and_properties(tmp_path):
    """dill rebuilds a namedtuple class from its field names alone; ours keeps what the class body wrote."""
    with Kernel(tmp_path) as first:
        first.run("""
import typing
class Pt(typing.NamedTuple):
    x: int
    y: int = 5
    def norm(self): return abs(self.x) + self.y
    @property
    def double(self): return 2 * self.x
p = Pt(-3)
""")
        first.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value("[p.norm(), p.double, Pt(1).y, isinstance(p, Pt), list(Pt.__annotations__), p._asdict()]") \
            == [8, -6, 5, True, ["x", "y"], {"x": -3, "y": 5}]
        verdicts = fresh.call({"op": "verify"})["result"]["variables"]
        assert {v["verdict"] for v in verdicts.values()} == {"match"}, verdicts


def test_a_class_whose_hash_is_its_bases_stays_hashable_after_a_restore(tmp_path):
    """`__hash__ = object.__hash__` (or `= Parent.__hash__`) beside an `__eq__`: dill leaves out a class
    attribute that is its base's own object, and the class came back with `__hash__ = None`, so the dict
    keyed by its instances failed to restore (unhashable type) and a same-kernel restore warned that the
    kernel had redefined the class."""
    build = ("class Key:\n    def __init__(self, n): self.n = n\n    def __eq__(self, o): return self.n == o.n\n"
             "    __hash__ = object.__hash__\n"
             "class Parent:\n    def __eq__(self, o): return True\n    def __hash__(self): return 7\n"
             "class Child(Parent):\n    def __eq__(self, o): return self is o\n    __hash__ = Parent.__hash__\n"
             "k1, c = Key(1), Child()\nindex = {k1: 1, c: 2}\n"
             "needs_dill = [{Key(3): 3}, (lambda: 1).__code__]")  # the code object: only dill saves it
    check = "[index[k1], index[c], hash(c), Key.__hash__ is object.__hash__, list(needs_dill[0].values())]"
    with Kernel(tmp_path) as first:
        first.run(build)
        assert "Skipped" not in first.run("%gkews_checkpoint save")
        out = first.run("%gkews_checkpoint restore")
        assert "Not restored" not in out and "Warning" not in out, out
        assert first.value(check) == [1, 2, 7, True, [3]]
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out and "Warning" not in out, out
        assert fresh.value(check) == [1, 2, 7, True, [3]]
        verdicts = fresh.call({"op": "verify"})["result"]["variables"]
        assert {v["verdict"] for v in verdicts.values()} == {"match"}, verdicts


def test_restoring_a_subclass_does_not_run_the_notebook_class_hooks_again(tmp_path):
    """A class comes back with the state its class statement left: its base's `__init_subclass__` ran
    again on restore (a registry kept as a class attribute doubled to ['A', 'B', 'A', 'B']; a hook writing
    a notebook global restored before it failed with NameError and the class was lost), and so did a
    descriptor's `__set_name__`."""
    build = """
class Base:
    registry = []
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Base.registry.append(cls.__name__)
class A(Base):
    pass
class B(Base):
    pass
plugins = {}
class Plugin:
    def __init_subclass__(cls, **kwargs):
        plugins[cls.__name__] = cls
class Csv(Plugin):
    pass
names = []
class Field:
    def __set_name__(self, owner, name):
        self.name = name
        names.append(name)
class Row:
    x = Field()
"""
    check = ("[Base.registry, issubclass(B, Base), sorted(plugins), plugins.get('Csv') is Csv, names, Row.x.name, "
             "type(Row.x) is Field]")
    expected = [["A", "B"], True, ["Csv"], True, ["x"], "x", True]
    with Kernel(tmp_path) as first:
        first.run(build)
        assert "Skipped" not in first.run("%gkews_checkpoint save")
        out = first.run("%gkews_checkpoint restore")  # the same kernel: its hooks must not run either
        assert "Not restored" not in out and "Warning" not in out, out
        assert first.value(check) == expected
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out and "Warning" not in out, out
        assert fresh.value(check) == expected
        verdicts = fresh.call({"op": "verify"})["result"]["variables"]
        assert {v["verdict"] for v in verdicts.values()} == {"match"}, verdicts
        fresh.run("class C(Base):\n    pass")  # the restored hook still works for new classes
        assert fresh.value("Base.registry") == ["A", "B", "C"]


def test_restoring_a_class_does_not_run_its_notebook_metaclass_again(tmp_path):
    """A plugin registry kept by a notebook metaclass doubled on restore (['Plugin', 'Resize', 'Plugin',
    'Resize']): the class came back through its metaclass, whose `__new__` registered it again. What that
    `__new__` set on the class comes back with it, a library metaclass under it (ABCMeta) still does its
    part, and a class defined after the restore is registered as before."""
    build = """
import abc
class PluginMeta(type):
    registry = []
    def __new__(mcls, name, bases, ns):
        cls = super().__new__(mcls, name, bases, ns)
        cls.slug = name.lower()
        mcls.registry.append(name)
        return cls
class Plugin(metaclass=PluginMeta):
    pass
class Resize(Plugin):
    pass
class Counted(abc.ABCMeta):
    made = 0
    def __init__(cls, name, bases, ns):
        super().__init__(name, bases, ns)
        Counted.made += 1
class Shape(metaclass=Counted):
    @abc.abstractmethod
    def area(self): ...
class Square(Shape):
    def area(self): return 4
"""
    check = ("[PluginMeta.registry, Resize.slug, issubclass(Resize, Plugin), Counted.made, Square().area(), "
             "sorted(Shape.__abstractmethods__), isinstance(Square(), Shape)]")
    expected = [["Plugin", "Resize"], "resize", True, 2, 4, ["area"], True]
    with Kernel(tmp_path) as first:
        first.run(build)
        assert "Skipped" not in first.run("%gkews_checkpoint save")
        assert first.value(check) == expected
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out and "Warning" not in out, out
        assert fresh.value(check) == expected
        assert fresh.run("try:\n    Shape()\nexcept TypeError:\n    print('abstract')") == "abstract\n"
        fresh.run("class Crop(Plugin):\n    pass")
        assert fresh.value("[PluginMeta.registry, Crop.slug]") == [["Plugin", "Resize", "Crop"], "crop"]


def test_notebook_code_that_unpickling_runs_sees_the_variables_restored_before(tmp_path):
    """A notebook function that a value's reduction calls at restore reads another restored variable (a module
    alias, a helper) as a global: it must be in place by then, in a fresh kernel too (a restore that put its
    values in place only at its end failed such a variable with NameError)."""
    with Kernel(tmp_path) as first:
        first.run("import os.path as osp\nprefix = 'runs'\n"
                  "def rebuild(leaf):\n    return osp.join(prefix, leaf)\n"
                  "class Run:\n    def __init__(self, leaf): self.leaf = leaf\n"
                  "    def __reduce__(self): return (rebuild, (self.leaf,))\n"
                  "run = Run('seed-1')")
        first.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out, out
        assert fresh.value("run") == "runs/seed-1"


def test_a_custom_autograd_op_of_the_notebook_and_the_model_using_it_come_back(tmp_path):
    """`class Sq(torch.autograd.Function)` holds the `_backward_cls` torch's FunctionMeta made for it, which
    refers back to Sq by name: Sq was skipped ("can only be saved as a reference to __main__.Sq"), and the
    model whose forward calls Sq.apply with it."""
    build = ("import torch\ntorch.manual_seed(0)\n"
             "class Sq(torch.autograd.Function):\n"
             "    @staticmethod\n    def forward(ctx, x):\n        ctx.save_for_backward(x)\n        return x * x\n"
             "    @staticmethod\n    def backward(ctx, g):\n"
             "        (x,) = ctx.saved_tensors\n        return 3 * x * g\n"
             "class Net(torch.nn.Module):\n"
             "    def __init__(self):\n        super().__init__()\n        self.lin = torch.nn.Linear(3, 3)\n"
             "    def forward(self, x):\n        return Sq.apply(self.lin(x))\n"
             "net = Net()\nX = torch.randn(4, 3)\n")
    step = "net.zero_grad(); net(X).sum().backward()"
    seen = "[net(X).tolist(), net.lin.weight.grad.tolist()]"
    with Kernel(tmp_path) as first:
        first.run(build)
        out = first.run("%gkews_checkpoint save")
        assert "Skipped" not in out, out
        first.run(step)
        expected = first.value(seen)
    with Kernel(tmp_path) as fresh:
        out = fresh.run("%gkews_checkpoint restore")
        assert "Not restored" not in out and "Never saved" not in out, out
        fresh.run(step)
        assert fresh.value(seen) == expected  # the op's own backward (3x, not autograd's 2x) came back
        assert fresh.value("[Sq._backward_cls._forward_cls is Sq, isinstance(net, Net)]") == [True, True]


def test_the_source_of_a_restored_definition_is_there_for_getsource_and_tracebacks(tmp_path):
    """A fresh kernel's linecache has none of the old kernel's cells: `inspect.getsource(loss_fn)` and
    `loss_fn??` raised 'source code not available', and a traceback through a restored function showed no
    line. The checkpoint keeps the cells of the definitions it saves by value."""
    with Kernel(tmp_path) as first:
        first.run("def loss_fn(x):\n    '''squared'''\n    return x * x\n"
                  "class Model:\n    def forward(self, x):\n        return 1 / x\n")
        first.run("%gkews_checkpoint save")
    with Kernel(tmp_path) as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert fresh.value("__import__('inspect').getsource(loss_fn)") == \
            "def loss_fn(x):\n    '''squared'''\n    return x * x\n"
        assert "def forward(self, x):" in fresh.value("__import__('inspect').getsource(Model.forward)")
        out = fresh.run("import traceback\ntry:\n    Model().forward(0)\nexcept ZeroDivisionError:\n"
                        "    print(traceback.format_exc())")
        assert "ZeroDivisionError" in out and "return 1 / x" in out, out


def test_a_proxy_delegating_through_getattr_comes_back(tmp_path):
    """A wrapper whose __getattr__ delegates to an attribute (`return getattr(self.inner, name)`) was saved
    without a word and failed its restore with a RecursionError: unpickling asked the half-built object for
    __setstate__, and __getattr__ read `inner`, which was not there yet."""
    setup = ("class Proxy:\n    def __init__(self, inner): self.inner = inner\n"
             "    def __getattr__(self, name): return getattr(self.inner, name)\n"
             "class Slotted(Proxy):\n    __slots__ = ('tag',)\n"
             "p = Proxy([1, 2, 3])\ns = Slotted({'a': 1}); s.tag = 'kept'\nnested = {'p': p, 'again': p}")
    seen = "[p.inner, p.count(2), s.inner, s.tag, list(s.keys()), nested['again'] is p, nested['p'].index(3)]"
    with unchanged_after_restore(tmp_path, setup, seen) as fresh:
        assert fresh.value("[p.append(4), p.inner][1]") == [1, 2, 3, 4]


def test_closures_over_one_variable_still_share_it_after_a_restore_and_a_rewind(tmp_path):
    """`add, get = make_acc()` over one `total`: restored in a fresh kernel (and rewound in kernel undo), each
    function came back with a cell of its own: `add(10)` no longer changed what `get()` reads (5 instead of
    15), also inside one variable (`pair`), without a word."""
    from test_kernel_undo import settle
    build = ("def make_acc():\n    total = 0\n    def add(v):\n        nonlocal total; total += v; return total\n"
             "    def get(): return total\n    return add, get\n"
             "add, get = make_acc(); add(5)\npair = make_acc(); pair[0](3)")
    check = "[add(10), pair[0](1), get(), pair[1](), add.__closure__[0] is get.__closure__[0]][2:]"
    with Kernel(tmp_path / "store") as first:
        first.run(build + "\n%gkews_checkpoint save")
    with Kernel(tmp_path / "store") as fresh:
        fresh.run("%gkews_checkpoint restore")
        assert "4/4 variables bit-identical" in fresh.run("%gkews_checkpoint verify")  # make_acc, add, get, pair
        assert fresh.value(check) == [15, 4, True]
    with Kernel(tmp_path / "undo", notebook="undo.ipynb") as k:
        k.run("%gkews_checkpoint auto on")
        k.run(build)
        cell = k.value("__import__('IPython').get_ipython().execution_count") - 1
        settle(k)
        k.run("add(100); pair[0](100)")
        settle(k)
        assert "Rewound" in k.run(f"%gkews_checkpoint rewind {cell}")
        assert k.value(check) == [15, 4, True]
