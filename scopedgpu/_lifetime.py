"""LifetimeMachine: a hypothesis state machine over a user's own kernels.

Imported by scopedgpu.testing on first use of LifetimeMachine (it needs hypothesis);
builds on scopedgpu._testkit, never on scopedgpu.testing (no import cycle).
"""
from __future__ import annotations

import functools
import gc
import inspect
import logging
import math
from typing import Any, Callable, NoReturn

import numpy as np
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import scopedgpu as sg
from scopedgpu._testkit import (Kernel, KernelTimeout, LeakError, arrays, default_device,
                                live_counts, push_constants, spec_constants)
from scopedgpu.manager import abandoned_managers, live_vulkan_objects

__all__ = ["LifetimeMachine"]

_KINDS = ("device", "host")
_MAX_MANAGERS = 3        # managers opened in one example (each close may open a new one)


def _lit(x: Any) -> str:
    """Python source for a value: arrays as np.array(..., dtype=np.<dtype>)."""
    if isinstance(x, np.ndarray):
        return f"np.array({_lit(x.tolist())}, dtype=np.{x.dtype.name})"
    if isinstance(x, (list, tuple)):
        body = ", ".join(_lit(v) for v in x)
        return f"[{body}]" if isinstance(x, list) else f"({body}{',' if len(x) == 1 else ''})"
    if isinstance(x, float) and not math.isfinite(x):
        return f"float('{x}')"
    if isinstance(x, np.generic):
        return _lit(x.item())
    return repr(x)


class _Manager:
    def __init__(self, var: str, mgr: sg.Manager):
        self.var = var
        self.mgr = mgr
        self.open = True
        self.base = mgr.live_objects()          # what an idle, empty manager holds
        self.baseline = live_counts(mgr)        # the same, after a collection: no_leaks'


class _Tensor:
    def __repr__(self) -> str:
        return self.var

    def __init__(self, var: str, m: _Manager, t: sg.Tensor, host: np.ndarray):
        self.var = var
        self.m = m
        self.t = t
        self.kind = t.kind
        self.host = host            # the model of data()
        self.alive = True


class _Algo:
    def __repr__(self) -> str:
        return self.var

    def __init__(self, var: str, m: _Manager, a: sg.Algorithm, k: Kernel,
                 tensors: list[_Tensor], spec: Any, push: Any):
        self.var = var
        self.m = m
        self.a = a
        self.k = k
        self.tensors = tensors
        self.spec = spec
        self.push = push
        self.alive = True


class _Seq:
    def __repr__(self) -> str:
        return self.var

    def __init__(self, var: str, m: _Manager, s: sg.Sequence, name: str | None):
        self.var = var
        self.m = m
        self.s = s
        self.name = name
        self.alive = True
        self.ops: list[tuple] = []             # the recorded program, as the model sees it
        self.running = False                   # submitted, completion not yet observed
        self.expect: dict[_Tensor, np.ndarray] = {}
        self.tol = (0.0, 0.0)
        self.uses: set = set()

    def objects(self) -> set:
        out: set = set()
        for op in self.ops:
            if op[0] == "dispatch":
                out.add(op[1])
                out.update(op[1].tensors)
            else:
                out.update(op[1])
        return out


class _Log(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "validation layer is not installed" not in msg:
            self.messages.append(f"{record.levelname}: {msg}")


def _step(fn: Callable) -> Callable:
    """Runs a rule; on failure, notes the example as a standalone program (hypothesis
    prints notes of the shrunk, final example only)."""
    @functools.wraps(fn)
    def run(self: LifetimeMachine, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except BaseException:
            self._note_program()
            raise
    return run


class LifetimeMachine(RuleBasedStateMachine):
    """A hypothesis state machine that tests your kernels' lifetimes and results.

    Subclass it, list your kernels (scopedgpu.testing.Kernel) in `kernels`, and collect
    `TestCase`::

        class PipelineMachine(LifetimeMachine):
            kernels = [Kernel("scale", GLSL, [Binding("x"), Binding("y", role="out")],
                              reference=lambda x, y, push: {"y": x * push[0]},
                              push_consts=st.floats(-4, 4, width=32).map(lambda v: [v]))]

        TestPipeline = PipelineMachine.TestCase

    Each example opens a Manager (debug=True: validation errors raise) and drives a random
    order of: tensor creation for a binding, algorithm creation over new or existing
    tensors (drawn dims, specialization and push constants), sequences (anonymous and
    named), recording dispatches (with push-constant overrides) between syncs, eval,
    eval_async, eval_await, is_running, clear, host writes through data(), destroy() of
    any tensor, algorithm or sequence (also while it runs), and closing the manager (a
    new one opens later). Use of anything destroyed must raise sg.DestroyedError.

    After every step it checks: every completed evaluation's outputs against your
    reference (with the kernel's rtol/atol), every idle tensor's data() against the
    model, the manager's live tensors, algorithms, sequences, command pools, fences and
    descriptor pools against the model, and that nothing was logged (validation
    warnings). At the end of an example it destroys what is left and checks that the
    manager is back to its opening counts (no_leaks) and that closing it left no Vulkan
    object alive. A failure is shrunk, and the failing example is printed as a
    standalone pytest test (the exact scopedgpu calls, with the expected values).

    Every wait for the GPU lasts at most `kernel_timeout` seconds: eval() is made as
    eval_async().eval_await(kernel_timeout), and so is eval_await() without a timeout,
    clear() and a new submission wait for the running one that way first, and the
    manager's wait_timeout (which bounds destroy() and close() of running work) is the
    same bound. GPU work still running then raises KernelTimeout (naming the sequence,
    its kernels and the bound, with the example as a program): the run stops at the
    first such example, unshrunk, and the manager gives up on the work (its device and
    memory stay allocated until the process exits).

    Budget: the `sg-quick` profile's (20 examples of 20 steps) unless the profile loaded
    when the subclass is defined is an `sg-` one (`--hypothesis-profile=sg-long`);
    assign `MyMachine.TestCase.settings = settings(...)` for your own.
    """

    #: The kernels under test (a list of scopedgpu.testing.Kernel).
    kernels: list[Kernel] = []
    #: Tensor kinds drawn for new tensors.
    kinds: tuple[str, ...] = _KINDS
    #: Most dispatches one record() step appends.
    max_dispatches: int = 3
    #: Open managers with the validation layer (validation errors raise).
    debug: bool = True
    #: Seconds the machine waits for any GPU work (an evaluation, destroy() or close()
    #: of running work) before the example fails with KernelTimeout. Raise it for kernels
    #: that legitimately run longer on the device under test.
    kernel_timeout: float = 10.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        current = settings.default
        getname = getattr(settings, "get_current_profile_name", None)
        name = getname() if getname else getattr(settings, "_current_profile", None)
        if not (name or "").startswith("sg-"):
            try:
                quick = settings.get_profile("sg-quick")
            except Exception:    # the plugin (which registers it) is not loaded
                quick = settings(max_examples=20, stateful_step_count=20)
            current = settings(current, max_examples=quick.max_examples,
                               stateful_step_count=quick.stateful_step_count)
        cls.TestCase.settings = settings(current, deadline=None,
                                         suppress_health_check=list(HealthCheck))

    @classmethod
    def spirv(cls) -> dict[str, bytes]:
        """The SPIR-V of each kernel, by name (what a printed failing example uses)."""
        return {k.name: k.spirv for k in cls.kernels}

    def __init__(self) -> None:
        super().__init__()
        if not self.kernels:
            raise TypeError(f"{type(self).__name__}: list the kernels under test in "
                            "`kernels = [Kernel(...), ...]`")
        t = self.kernel_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise TypeError(f"{type(self).__name__}.kernel_timeout must be a number of "
                            f"seconds, not {type(t).__name__} {t!r}")
        if not 0 < t < math.inf:    # (the manager's wait_timeout must be finite)
            raise ValueError(f"{type(self).__name__}.kernel_timeout must be a finite number "
                             f"of seconds above 0, not {t!r}")
        self._kernels = {k.name: k for k in self.kernels}
        # The collections of the leak checks would otherwise scan everything the process
        # holds (hypothesis' own state grows with every example) and take most of the
        # run: until teardown, they see only what this example makes.
        gc.freeze()
        self.before = live_vulkan_objects()
        self.ms: list[_Manager] = []
        self.ts: list[_Tensor] = []
        self.als: list[_Algo] = []
        self.sqs: list[_Seq] = []
        self.lines: list[str] = []
        self.counter = 0
        self.names = 0
        self.log = _Log()
        logging.getLogger("scopedgpu").addHandler(self.log)

    # -- the transcript ---------------------------------------------------------------------
    def _emit(self, line: str) -> None:
        self.lines.append(line)

    def _var(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def program(self) -> str:
        """The example so far as a standalone pytest test."""
        cls = type(self)
        head = ["import numpy as np", "import pytest", "import scopedgpu as sg",
                f"from {cls.__module__} import {cls.__qualname__.split('.')[0]}", "",
                f"SPIRV = {cls.__qualname__}.spirv()", "", "",
                "def test_replay():"]
        return "\n".join(head + ["    " + ln for ln in self.lines])

    def _note_program(self) -> None:
        if getattr(self, "_noted", False):
            return
        self._noted = True
        try:
            note("\nThe failing example as scopedgpu calls (a standalone test):\n\n"
                 + self.program() + "\n")
        except Exception:   # pragma: no cover - outside a hypothesis run
            pass

    def _expect_destroyed(self, code: str, call: Callable[[], Any]) -> None:
        self._emit("with pytest.raises(sg.DestroyedError):")
        self._emit(f"    {code}")
        try:
            call()
        except sg.DestroyedError:
            return
        raise AssertionError(f"{code}: expected sg.DestroyedError (the model says an "
                             "object it uses was destroyed), but it succeeded")

    # -- helpers --------------------------------------------------------------------------
    @property
    def _m(self) -> _Manager:
        return self.ms[-1]

    def _dims(self, k: Kernel, data: Any) -> dict[str, int]:
        dims = dict(k.dims) or {"n": st.integers(1, 300)}
        return {name: data.draw(v if isinstance(v, st.SearchStrategy) else st.just(v),
                                label=f"{k.name}: dim {name}") for name, v in dims.items()}

    def _shape(self, k: Kernel, b: Any, dims: dict[str, int], data: Any) -> tuple[int, ...]:
        if isinstance(b.shape, st.SearchStrategy):
            return tuple(data.draw(b.shape, label=f"{k.name}.{b.name}: shape"))
        return tuple(dims[d] if isinstance(d, str) else int(d) for d in b.shape)

    def _const(self, what: Any, auto: Callable[[bytes], Any], k: Kernel,
               dims: dict[str, int], data: Any, label: str) -> Any:
        if callable(what) and not isinstance(what, st.SearchStrategy):
            what = what(dims)
        if isinstance(what, str) and what == "auto":
            what = auto(k.spirv)
        if isinstance(what, st.SearchStrategy):
            return data.draw(what, label=f"{k.name}: {label}")
        return what

    def _new_tensor(self, m: _Manager, k: Kernel, b: Any, shape: tuple[int, ...],
                    data: Any) -> _Tensor:
        x = data.draw(arrays(b.dtype, shape, elements=b.elements),
                      label=f"{k.name}.{b.name}: values")
        kind = data.draw(st.sampled_from(self.kinds), label=f"{k.name}.{b.name}: kind")
        var = self._var("t")
        self._emit(f"{var} = {m.var}.tensor({_lit(x)}, kind={kind!r})")
        t = m.mgr.tensor(x, kind=kind)
        assert t.shape == x.shape and t.dtype == x.dtype and t.kind == kind
        mt = _Tensor(var, m, t, x.copy())
        self.ts.append(mt)
        return mt

    def _wait_for_users(self, objs: set) -> None:
        """Completes running sequences that use any of objs (so that the model stays
        deterministic: the library orders them on the queue anyway)."""
        for s in self.sqs:
            if s.running and s.uses & objs:
                self._await(s)

    def _await(self, s: _Seq) -> None:
        """Waits for s's running submission, at most kernel_timeout seconds, and checks
        its outputs."""
        t = self.kernel_timeout
        self._emit(f"assert {s.var}.eval_await({t!r}) is True")
        if not s.s.eval_await(t):
            self._timed_out([s], f"{s.var}.eval_await({t!r}) returned False")
        self._complete(s)

    def _timed_out(self, seqs: list[_Seq], what: str) -> NoReturn:
        """Raises KernelTimeout for sequences whose work outlived kernel_timeout."""
        cls = type(self).__name__
        names = ", ".join(f"{s.var} (running {self._kernel_names(s)})" for s in seqs) \
            or "GPU work"
        raise KernelTimeout(
            f"{names} did not finish within kernel_timeout={self.kernel_timeout:g} s: "
            f"{what}. A kernel that never ends (a loop whose exit its data never reaches, a "
            f"wait for a flag nothing sets), or one that takes longer than that on this "
            f"device: if it legitimately does, raise the bound on the machine class "
            f"(`kernel_timeout = 60` in {cls}, or {cls}.kernel_timeout = 60). The manager "
            f"gives the work up (its device and memory stay allocated until the process "
            f"exits). Not shrunk: each replay would wait the whole bound again.\n\n"
            f"The example as scopedgpu calls (a standalone test):\n\n{self.program()}\n",
            [s.var for s in seqs])

    @staticmethod
    def _kernel_names(s: _Seq) -> list[str]:
        return sorted({op[1].k.name for op in s.ops if op[0] == "dispatch"})

    def _complete(self, s: _Seq) -> None:
        """The model learns that s's last submission completed: check its outputs."""
        if not s.running:
            return
        s.running = False
        rtol, kernel_atol = s.tol
        for t, want in s.expect.items():
            if not t.alive:
                continue
            got = t.t.data()
            # A device may flush denormal results to zero (Vulkan allows it unless the
            # shader declares DenormPreserve; NVIDIA's do): differences below the smallest
            # normal float are no failure.
            atol = max(kernel_atol, float(np.finfo(got.dtype).tiny)) \
                if got.dtype.kind == "f" else kernel_atol
            self._emit(f"np.testing.assert_allclose({t.var}.data(), {_lit(want)}, "
                       f"rtol={rtol!r}, atol={atol!r})")
            close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
            if not close.all():
                bad = np.argwhere(~close)
                kernels = self._kernel_names(s)
                where = ", ".join(str(tuple(int(v) for v in i)) for i in bad[:8])
                np.testing.assert_allclose(
                    got, want, rtol=rtol, atol=atol,
                    err_msg=f"{t.var} (shape {t.t.shape}) after {s.var} ran {kernels}: "
                            f"{len(bad)} element(s) differ from the reference, at {where}"
                            f"{' ...' if len(bad) > 8 else ''}")
            t.host = got.copy()
        s.expect = {}
        s.uses = set()

    def _simulate(self, s: _Seq) -> tuple[dict[_Tensor, np.ndarray], tuple[float, float]]:
        """What s's program leaves in the host memory of the tensors it writes."""
        host = {t: t.host.copy() for t in s.objects() if isinstance(t, _Tensor)}
        dev: dict[_Tensor, np.ndarray] = {}
        written: set = set()
        rtol = atol = 0.0

        # Host tensors too: the GPU reads and writes their host-visible memory, data() is
        # a copy of it that the sync ops refresh. (record() syncs every binding to the
        # device before its dispatches.)
        for op in s.ops:
            if op[0] == "sync_device":
                for t in op[1]:
                    dev[t] = host[t].copy()
            elif op[0] == "sync_local":
                for t in op[1]:
                    if t in dev:
                        host[t] = dev[t].copy()
                        written.add(t)
            else:
                a, push = op[1], op[2]
                k = a.k
                rtol, atol = max(rtol, k.rtol), max(atol, k.atol)
                args = {b.name: dev[t].copy() for b, t in zip(k.bindings, a.tensors)}
                out = _call_reference(k, args, a.spec, a.push if push is None else push)
                for b, t in zip(k.bindings, a.tensors):
                    if b.name in out:
                        dev[t] = np.asarray(out[b.name], dtype=b.dtype).reshape(t.t.shape)
        return {t: host[t] for t in written}, (rtol, atol)

    def _submit(self, s: _Seq, how: str) -> None:
        code = f"{s.var}.{how}()"
        objs = s.objects()
        # A running submission first, within the bound: eval() and eval_async() would wait
        # for it without one.
        if s.running:
            self._await(s)
        if any(not o.alive for o in objs):
            self._expect_destroyed(code, getattr(s.s, how))
            return
        self._wait_for_users(objs - {s})
        expect, tol = self._simulate(s)
        t = self.kernel_timeout
        if how == "eval":   # eval() has no limit: as eval_async(), then a bounded wait
            self._emit(f"assert {s.var}.eval_async().eval_await({t!r}) is True")
        else:
            self._emit(code)
        s.s.eval_async()
        if s.ops:   # (an empty sequence submits nothing)
            s.running = True
            s.uses = objs
            s.tol = tol
            s.expect = expect
        if how == "eval":
            if not s.s.eval_await(t):
                self._timed_out([s], f"{s.var}.eval_async().eval_await({t!r}) returned False")
            self._complete(s)

    # -- managers ---------------------------------------------------------------------------
    def _open(self) -> None:
        var = "mgr" if not self.ms else f"mgr{len(self.ms) + 1}"
        dev = default_device()
        # Its wait_timeout is the bound too: destroy() and close() of work that never
        # ends give up after it, and so does the final close() after a failure.
        t = float(self.kernel_timeout)
        args = ", ".join(([repr(dev)] if dev is not None else []) +
                         [f"debug={self.debug!r}", f"wait_timeout={t!r}"])
        self._emit(f"{var} = sg.Manager({args})")
        self.ms.append(_Manager(var, sg.Manager(dev, debug=self.debug, wait_timeout=t)))

    @initialize()
    @_step
    def open_manager(self) -> None:
        """Rule: the example's first Manager (with the validation layer when `debug`)."""
        self._open()

    def _current(self) -> _Manager:
        """The manager new objects go to: a new one after a close (up to a few an
        example; after that, the closed one, whose use raises DestroyedError)."""
        if not self._m.open and len(self.ms) < _MAX_MANAGERS:
            self._open()
        return self._m

    def _close(self) -> None:
        """close(): the manager's objects are destroyed, using them raises
        DestroyedError; a later step opens a new manager."""
        m = self._m
        running = [s for s in self.sqs if s.m is m and s.running]
        given_up = abandoned_managers()
        self._emit(f"{m.var}.close()")
        m.mgr.close()
        # close() waited at most its wait_timeout (kernel_timeout) for running work
        if running:
            self._emit(f"assert sg.abandoned_managers() == {given_up}")
        if abandoned_managers() != given_up:
            self._timed_out(running, f"{m.var}.close() gave up on its work")
        if not m.open:
            return
        m.open = False
        for obj in self.ts + self.als + self.sqs:
            if obj.m is m:
                obj.alive = False
                if isinstance(obj, _Seq):
                    obj.running = False
        self._expect_destroyed(f"{m.var}.tensor([1.0])", lambda: m.mgr.tensor([1.0]))

    # -- tensors and algorithms -------------------------------------------------------------
    @rule(data=st.data())
    @_step
    def new_tensor(self, data: Any) -> None:
        """Rule: a tensor for a kernel's binding (its dtype, a drawn shape, values, kind)."""
        k = self._pick_kernel(data)
        b = data.draw(st.sampled_from(k.bindings), label="binding")
        shape = self._shape(k, b, self._dims(k, data), data)
        m = self._current()
        if not m.open:
            self._expect_destroyed(f"{m.var}.tensor([1.0])", lambda: m.mgr.tensor([1.0]))
            return
        self._new_tensor(m, k, b, shape, data)

    @rule(data=st.data())
    @_step
    def new_algorithm(self, data: Any) -> None:
        """Rule: an algorithm of a kernel over existing tensors that fit, or new ones,
        with drawn dims and constants (a destroyed tensor now and then: DestroyedError)."""
        self._new_algorithm(data)

    def _new_algorithm(self, data: Any) -> _Algo | None:
        k = self._pick_kernel(data)
        m = self._current()
        if not m.open:
            return None
        dims = self._dims(k, data)
        chosen: list[_Tensor] = []
        for b in k.bindings:
            shape = self._shape(k, b, dims, data)
            fits = [t for t in self.ts if t.m is m and t not in chosen
                    and t.t.dtype == b.dtype and t.t.shape == shape]
            alive = [t for t in fits if t.alive]
            pool = alive if data.draw(st.integers(0, 19), label="a destroyed tensor") \
                else fits
            if pool and data.draw(st.booleans(), label=f"{k.name}.{b.name}: reuse"):
                chosen.append(data.draw(st.sampled_from(pool), label=f"{k.name}.{b.name}"))
            else:
                chosen.append(self._new_tensor(m, k, b, shape, data))
        spec = self._const(k.spec_consts, spec_constants, k, dims, data, "spec_consts")
        push = self._const(k.push_consts, push_constants, k, dims, data, "push_consts")
        wg = k.workgroup
        if callable(wg):
            wg = wg(dims, spec) if len(inspect.signature(wg).parameters) > 1 else wg(dims)
        var = self._var("a")
        names = ", ".join(t.var for t in chosen)
        extra = "".join(f", {n}={_lit(v)}" for n, v in (("workgroup", wg), ("spec_consts", spec),
                                                         ("push_consts", push)) if v is not None)
        code = f"{m.var}.algorithm([{names}], SPIRV[{k.name!r}]{extra})"
        call = lambda: m.mgr.algorithm([t.t for t in chosen], k.spirv, workgroup=wg,
                                       spec_consts=spec, push_consts=push)
        if any(not t.alive for t in chosen):
            self._expect_destroyed(code, call)
            return None
        self._emit(f"{var} = {code}")
        a = _Algo(var, m, call(), k, chosen, spec, push)
        self.als.append(a)
        return a

    def _pick_kernel(self, data: Any) -> Kernel:
        return self._kernels[data.draw(st.sampled_from(sorted(self._kernels)), label="kernel")]

    @rule(data=st.data())
    @_step
    def write_inputs(self, data: Any) -> None:
        """New values through data(), the way kp users update inputs."""
        busy = set().union(*(s.uses for s in self.sqs if s.running)) if self.sqs else set()
        cands = [t for t in self.ts if t.alive and t not in busy]
        if not cands:
            return
        t = data.draw(st.sampled_from(cands), label="tensor")
        elements = None
        for a in self.als:
            if t in a.tensors:
                elements = a.k.bindings[a.tensors.index(t)].elements
        x = data.draw(arrays(t.t.dtype, t.t.shape, elements=elements), label="values")
        self._emit(f"{t.var}.data()[...] = {_lit(x)}")
        t.t.data()[...] = x
        t.host = x.copy()

    # -- sequences ----------------------------------------------------------------------------
    @rule(named=st.booleans())
    @_step
    def new_sequence(self, named: bool) -> None:
        """Rule: an anonymous sequence, or a named one (names repeat: the same comes back)."""
        self._new_sequence(named)

    def _new_sequence(self, named: bool) -> None:
        m = self._current()
        name = None
        if named:
            self.names += 1
            name = f"n{self.names % 3}"   # names repeat: the same sequence comes back
        var = self._var("s")
        code = f"{m.var}.sequence({name!r})" if named else f"{m.var}.sequence()"
        if not m.open:
            self._expect_destroyed(code, lambda: m.mgr.sequence(name))
            return
        same = next((s for s in self.sqs if s.m is m and s.alive and name is not None
                     and s.name == name), None)
        self._emit(f"{var} = {code}")
        seq = m.mgr.sequence(name)
        if same is not None:
            assert seq is same.s, f"{code} returned a new sequence, not {same.var}"
            self._emit(f"assert {var} is {same.var}")
            return
        self.sqs.append(_Seq(var, m, seq, name))

    @rule(data=st.data())
    @_step
    def record(self, data: Any) -> None:
        """Rule: appends dispatches of 1..max_dispatches algorithms to a sequence, between
        a sync of their bindings to the device and a sync of their outputs back."""
        self._ensure_sequence(data)
        s = self._draw_seq(data)
        if s is not None:
            self._record(s, data)

    def _ensure_sequence(self, data: Any) -> None:
        m = self._current()
        if m.open and not any(s.alive and s.m is m for s in self.sqs):
            self._new_sequence(data.draw(st.booleans(), label="named"))

    def _record(self, s: _Seq, data: Any) -> None:
        """Appends: a sync to the device of every binding, 1..max_dispatches dispatches
        (some with push constants of their own), a sync back of the outputs."""
        if s.m.open and not any(a.alive and a.m is s.m for a in self.als):
            self._new_algorithm(data)
        algos = [a for a in self.als if a.m is s.m]
        if not algos:
            return
        alive = [a for a in algos if a.alive]
        pool = alive if alive and data.draw(st.integers(0, 9), label="a destroyed algorithm") \
            else algos
        n = data.draw(st.integers(1, self.max_dispatches), label="dispatches")
        chosen = [data.draw(st.sampled_from(pool), label="algorithm") for _ in range(n)]
        tensors = list(dict.fromkeys(t for a in chosen for t in a.tensors))
        outs = list(dict.fromkeys(t for a in chosen for b, t in zip(a.k.bindings, a.tensors)
                                  if b.role != "in"))
        ops: list[tuple[tuple, str, Callable[[], Any]]] = []
        ops.append((("sync_device", tensors),
                    f"sg.OpTensorSyncDevice([{', '.join(t.var for t in tensors)}])",
                    functools.partial(sg.OpTensorSyncDevice, [t.t for t in tensors])))
        for a in chosen:
            push = None
            if a.push is not None and data.draw(st.integers(0, 3), label="own push") == 0:
                push = self._const(a.k.push_consts, push_constants, a.k, {}, data,
                                   "push_consts of a dispatch")
            code = f"sg.OpAlgoDispatch({a.var}" + \
                (f", push_consts={_lit(push)})" if push is not None else ")")
            ops.append((("dispatch", a, push), code,
                        functools.partial(sg.OpAlgoDispatch, a.a, push_consts=push)))
        ops.append((("sync_local", outs),
                    f"sg.OpTensorSyncLocal([{', '.join(t.var for t in outs)}])",
                    functools.partial(sg.OpTensorSyncLocal, [t.t for t in outs])))
        for model, code, make in ops:
            objs = {model[1]} | set(model[1].tensors) if model[0] == "dispatch" \
                else set(model[1])
            if not s.alive or any(not o.alive for o in objs):
                self._expect_destroyed(f"{s.var}.record({code})",
                                       functools.partial(_record, s.s, make))
                return
            self._emit(f"{s.var}.record({code})")
            _record(s.s, make)
            s.ops.append(model)

    def _draw_seq(self, data: Any) -> _Seq | None:
        if not self.sqs:
            return None
        alive = [s for s in self.sqs if s.alive]
        pool = alive if alive and data.draw(st.integers(0, 5), label="a destroyed sequence") \
            else self.sqs
        return data.draw(st.sampled_from(pool), label="sequence")

    @rule(how=st.sampled_from(["eval", "eval", "eval_async", "eval_async", "eval_await",
                               "is_running", "clear"]),
          timeout=st.sampled_from([0.0, 0.001, None]), data=st.data())
    @_step
    def evaluate(self, how: str, timeout: float | None, data: Any) -> None:
        """Rule: eval, eval_async, eval_await(timeout), is_running or clear of a sequence
        (recording into it first when it has nothing to run)."""
        self._evaluate(how, timeout, data)

    # (a second rule: evaluations are what most steps should do)
    @rule(how=st.sampled_from(["eval", "eval_async", "eval_await"]),
          timeout=st.sampled_from([0.0, 0.001, None]), data=st.data())
    @_step
    def evaluate_again(self, how: str, timeout: float | None, data: Any) -> None:
        """Rule: as evaluate (a second rule, so that evaluations are frequent)."""
        self._evaluate(how, timeout, data)

    def _evaluate(self, how: str, timeout: float | None, data: Any) -> None:
        self._ensure_sequence(data)
        s = self._draw_seq(data)
        if s is None:
            return
        if how in ("eval", "eval_async"):
            if not s.alive:
                self._expect_destroyed(f"{s.var}.{how}()", getattr(s.s, how))
                return
            if not s.ops and data.draw(st.integers(0, 3), label="record first"):
                self._record(s, data)   # most evaluations do work
                if not s.alive:
                    return
            self._submit(s, how)
        elif how == "eval_await":
            if not s.alive:
                self._expect_destroyed(f"{s.var}.eval_await({timeout!r})",
                                       lambda: s.s.eval_await(timeout))
                return
            if timeout is None:    # no limit: within kernel_timeout instead
                if s.running:
                    self._await(s)
                else:
                    self._emit(f"assert {s.var}.eval_await({self.kernel_timeout!r}) is True")
                    assert s.s.eval_await(self.kernel_timeout) is True
                return
            self._emit(f"{s.var}.eval_await({timeout!r})")
            if s.s.eval_await(timeout):
                self._complete(s)
        elif how == "is_running":
            if s.alive and not s.s.is_running:
                self._emit(f"assert not {s.var}.is_running")
                self._complete(s)
        else:
            if not s.alive:
                self._expect_destroyed(f"{s.var}.clear()", s.s.clear)
                return
            if s.running:          # clear() would wait for it without a limit
                self._await(s)
            self._emit(f"{s.var}.clear()")
            s.s.clear()
            s.ops = []

    # -- destroy ------------------------------------------------------------------------------
    @rule(what=st.sampled_from(["tensor", "algorithm", "sequence", "tensor", "algorithm",
                                "sequence", "manager"]), data=st.data())
    @_step
    def destroy(self, what: str, data: Any) -> None:
        """destroy() of any tensor, algorithm or sequence (alive, running or destroyed),
        or close() of the manager."""
        if what == "manager":
            self._close()
            return
        objs: list[Any] = self.ts if what == "tensor" else self.als if what == "algorithm" \
            else self.sqs
        if not objs:
            return
        o = data.draw(st.sampled_from(objs), label=what)
        if isinstance(o, _Seq):
            self._destroy_sequence(o)
            return
        self._emit(f"{o.var}.destroy()")
        handle = o.t if isinstance(o, _Tensor) else o.a
        handle.destroy()
        assert handle.destroyed
        o.alive = False
        if isinstance(o, _Tensor):
            self._expect_destroyed(f"{o.var}.data()", o.t.data)

    def _destroy_sequence(self, s: _Seq) -> None:
        """destroy(), also of a running sequence: it waits at most the manager's
        wait_timeout (kernel_timeout), then leaves the work running, destroyed."""
        self._emit(f"{s.var}.destroy()")
        s.s.destroy()
        assert s.s.destroyed
        if s.alive and s.running:
            self._emit(f"assert not {s.var}.is_running")
            if s.s.is_running:
                self._timed_out([s], f"{s.var}.destroy() gave up on it")
            self._complete(s)       # destroy() waited for its GPU work
        s.alive = False

    # -- checks -------------------------------------------------------------------------------
    @invariant()
    @_step
    def matches_the_model(self) -> None:
        """Invariant: nothing logged; live counts, and every idle tensor's data(), as the
        model says."""
        assert not self.log.messages, "scopedgpu logged:\n" + "\n".join(self.log.messages)
        if not self.ms or not self._m.open:
            return
        m = self._m
        live = m.mgr.live_objects()
        ts = [t for t in self.ts if t.m is m and t.alive]
        als = [a for a in self.als if a.m is m and a.alive]
        sqs = [s for s in self.sqs if s.m is m and s.alive]
        model = {"tensors": len(ts), "algorithms": len(als), "sequences": len(sqs)}
        got = {k: live[k] for k in model}
        assert got == model, f"live objects {got}, the model expects {model} (a leak, or " \
            "an object freed too early)"
        cached = live["cached_sequences"] - m.base["cached_sequences"]
        for k in ("command_pools", "fences"):
            assert live[k] - m.base[k] == len(sqs) + cached, \
                f"{k}: {live[k] - m.base[k]} for {len(sqs)} sequences ({cached} cached)"
        # (the descriptor sets kept for reuse, cached_descriptor_sets, taken off)
        extra = (live["descriptor_pools"] - live["cached_descriptor_sets"]) - \
            (m.base["descriptor_pools"] - m.base["cached_descriptor_sets"])
        assert len(als) <= extra <= len(als) + live["pending_releases"], \
            f"descriptor pools: {extra} for {len(als)} algorithms"
        busy = set().union(*(s.uses for s in self.sqs if s.running)) if self.sqs else set()
        for t in ts:
            if t not in busy:
                np.testing.assert_array_equal(
                    t.t.data(), t.host, err_msg=f"{t.var}.data() changed although nothing "
                    "the model knows of wrote it")

    def teardown(self) -> None:
        """Destroys what is left, checks that the manager is back to its opening counts,
        closes it and checks that no Vulkan object is left in the process."""
        try:
            if getattr(self, "_noted", False):
                return
            self._teardown()
        except BaseException:
            self._note_program()
            raise
        finally:
            logging.getLogger("scopedgpu").removeHandler(self.log)
            for m in self.ms:
                m.mgr.close()
            gc.unfreeze()

    def _teardown(self) -> None:
        for m in self.ms:
            if not m.open:
                continue
            for s in self.sqs:
                if s.m is m and s.alive:
                    self._destroy_sequence(s)
            for o in self.als + self.ts:
                if o.m is m and o.alive:
                    self._emit(f"{o.var}.destroy()")
                    (o.a if isinstance(o, _Algo) else o.t).destroy()
                    o.alive = False
            after = live_counts(m.mgr)
            if after != m.baseline:
                diff = {k: (m.baseline.get(k, 0), after.get(k, 0))
                        for k in sorted(set(after) | set(m.baseline))
                        if m.baseline.get(k, 0) != after.get(k, 0)}
                raise LeakError(f"{m.var}: objects left alive after everything was "
                                f"destroyed: {diff}", diff)
            self._emit(f"{m.var}.close()")
            m.mgr.close()
            m.open = False
        gc.collect()
        after = live_vulkan_objects()
        assert after == self.before, f"Vulkan objects alive after closing: {after} " \
            f"(before the example: {self.before})"


def _record(seq: sg.Sequence, make: Callable[[], sg.Op]) -> None:
    seq.record(make())


def _call_reference(k: Kernel, args: dict[str, np.ndarray], spec: Any, push: Any
                    ) -> dict[str, np.ndarray]:
    params = inspect.signature(k.reference).parameters
    takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())
    kwargs = {n: v for n, v in args.items() if takes_all or n in params}
    if "spec" in params:
        kwargs["spec"] = spec
    if "push" in params:
        kwargs["push"] = push
    out = k.reference(**kwargs)
    outs = [b.name for b in k.bindings if b.role != "in"]
    if out is None:                  # changed in place
        return {name: kwargs[name] for name in outs if name in kwargs}
    if isinstance(out, np.ndarray) or not isinstance(out, dict):
        if len(outs) != 1:
            raise TypeError(f"kernel {k.name!r}: the reference returned one array, but the "
                            f"kernel has {len(outs)} out bindings {outs}: return a dict")
        return {outs[0]: out}
    unknown = set(out) - {b.name for b in k.bindings}
    if unknown:
        raise TypeError(f"kernel {k.name!r}: the reference returned {sorted(unknown)}, "
                        "which are not bindings")
    return dict(out)
