"""Calls in the source walker: helper functions of the same file are inlined with their arguments
bound (recursion is noted and not followed); builtins are work-item functions, barriers and
fences, memory builtins (:class:`~models.static.walk_mem.MemWalker`) or math/integer functions
(:func:`models.static.clbuiltins.math_builtin`)."""

from __future__ import annotations

import clang.cindex as ci
from kernelcast.models.static.affine import wi_atom
from kernelcast.models.static.clbuiltins import BARRIER, FENCE, HORIZONTAL, SIZES, WORKITEM, math_builtin
from kernelcast.models.static.cursors import const_arg, type_class
from kernelcast.models.static.expr import DATA, GRP, WI, Poly, opaque
from kernelcast.models.static.features import BUILTIN_CLASSES
from kernelcast.models.static.values import UNKNOWN, ZERO, Val, same_value
from kernelcast.models.static.walk_base import Frame, WalkerBase

K = ci.CursorKind


class CallWalker(WalkerBase):
    def call(self, c: ci.Cursor) -> Val:
        name = c.spelling
        args = list(c.get_arguments())
        ref = c.referenced
        if ref is not None and ref.kind == K.FUNCTION_DECL:
            d = ref.get_definition()
            if d is not None and d.location.file is not None and d.location.file.name == self.filename:
                return self.inline(d, args, c)
        return self.builtin(name, args, c)

    def inline(self, d: ci.Cursor, args: list[ci.Cursor], c: ci.Cursor) -> Val:
        name = d.spelling
        if any(f.name == name for f in self.frames):
            self.note(f"recursive call of {name} not followed")
            for a in args:
                self.ev(a)
            return UNKNOWN
        vals = [self.ev(a) for a in args]
        if not self.mute and name not in self.helpers:
            self.helpers.append(name)
        params = list(d.get_arguments())
        saved = self.vars
        self.vars = dict(saved)
        for p, v in zip(params, vals):
            self.vars[p.hash] = v
        body = next((x for x in d.get_children() if x.kind == K.COMPOUND_STMT), None)
        fr = Frame(name)
        self.frames.append(fr)
        try:
            if body is not None:
                self.walk_stmt(body)
        finally:
            self.frames.pop()
            inner = self.vars
            # variables of the caller keep their (possibly updated through pointers) values
            self.vars = {k: inner.get(k, v) for k, v in saved.items()}
        if not fr.returns:
            return UNKNOWN
        r = fr.returns[0]
        for other in fr.returns[1:]:
            if not same_value(r, other):
                r = self.phi(r, other, frozenset())
        return r

    def builtin(self, name: str, args: list[ci.Cursor], c: ci.Cursor) -> Val:
        if name in WORKITEM:
            dim = const_arg(args)
            for a in args:
                self.ev(a)
            if dim is None or not 0 <= dim <= 2:
                return Val(None, frozenset({WI}) if name != "get_group_id" else frozenset({GRP}))
            self.dims = max(self.dims, dim + 1)
            return Val.of(Poly.atom(wi_atom(WORKITEM[name], dim)))
        if name in SIZES:
            dim = const_arg(args)
            if dim is None or not 0 <= dim <= 2:
                return UNKNOWN
            return Val(Poly.symbol(f"{SIZES[name]}{dim}", integer=True))
        if name in ("get_global_linear_id", "get_local_linear_id"):
            pre = "gid" if name == "get_global_linear_id" else "lid"
            sz = "gsize" if pre == "gid" else "lsize"
            s0, s1 = Poly.symbol(f"{sz}0", integer=True), Poly.symbol(f"{sz}1", integer=True)
            p = Poly.atom(wi_atom(pre, 0)) + Poly.atom(wi_atom(pre, 1)) * s0 + Poly.atom(wi_atom(pre, 2)) * s0 * s1
            return Val.of(p)
        if name == "get_global_offset":
            return Val(ZERO)
        if name == "get_work_dim":
            return Val(Poly.symbol("work_dim", integer=True))
        if name in BARRIER:
            self.op("barrier")
            return UNKNOWN
        if name in FENCE:
            self.op("fence")
            return UNKNOWN
        mv = self.memory_builtin(name, args, c)
        if mv is not None:
            return mv
        vals = [self.ev(a) for a in args]
        result = type_class(c.type)
        b = math_builtin(name, vals, result, type_class(args[0].type) if args else result)
        if not self.mute:
            for cls in {cls for cls, _ in b.ops if cls in BUILTIN_CLASSES}:
                key = f"{cls}:{name}"
                self.call_sites[key] = self.call_sites.get(key, 0) + 1
        if (args and name.removeprefix("fast_") in HORIZONTAL and type_class(args[0].type)[1] > 1
                and any(v.deps & {WI, DATA} for v in vals)):
            self.mix_lanes(c)
        value = b.value
        if value.poly is None and result[0] in ("fp32", "fp64") and b.ops and vals and \
                all(v.poly is not None for v in vals):
            # a floating-point result is a pure function of the arguments: keep it as one, so a
            # call of it is loop-invariant where they are
            value = Val.of(opaque(name, [v.poly for v in vals if v.poly is not None]), value.deps)
        out_of = max((self.op_of(cls, n, vals, result[1]) for cls, n in b.ops), default=0)
        if out_of:
            # a call of loop-invariant values runs once per entry of the outermost loop it leaves
            self.note(f"{name} at line {c.location.line}: loop-invariant, hoisted out of the loop at line {out_of}")
        if b.note is not None:
            self.note(b.note)
        return value
