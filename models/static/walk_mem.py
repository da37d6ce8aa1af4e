"""Memory accesses in the source walker.

Every array subscript, pointer dereference, struct member of a buffer element,
``vloadN``/``vstoreN``, atomic and image read/write is an :class:`~models.static.features.Access`
with its address space, load/store/atomic, bytes, index and lane strides
(:mod:`models.static.affine`). A component of a vector element (``a[i].x``) counts as a load of
the component. A loaded value whose own index varies between lanes has an unknown lane stride:
an access indexed by it is ``indirect`` (gather). An index that is not affine in the ids
(``gid*gid``) has ``affine=False``.
"""

from __future__ import annotations

import re
from fractions import Fraction

import clang.cindex as ci
from kernelcast.models.static import _cx
from kernelcast.models.static.affine import average, deriv, is_zero, printable
from kernelcast.models.static.clbuiltins import FENCE, IGNORE, VLOAD, VSTORE
from kernelcast.models.static.cursors import (
    ARRAY_KINDS,
    expr_text,
    is_mem_lvalue,
    type_bytes,
    type_class,
    unit_scale,
    unwrap,
)
from kernelcast.models.static.expr import DATA, VAR, WI, Atom, Poly
from kernelcast.models.static.features import Access
from kernelcast.models.static.guards import shift_guarded
from kernelcast.models.static.values import UNKNOWN, ZERO, MemRef, Ptr, Val
from kernelcast.models.static.walk_base import WalkerBase, serials

K = ci.CursorKind
TK = ci.TypeKind

#: the most copies of a loop body over which :meth:`MemWalker.distinct_share` enumerates addresses
DISTINCT_MAX_COPIES = 1 << 16


class MemWalker(WalkerBase):
    # --- lvalues --------------------------------------------------------------------------------
    def subscript_parts(self, s: ci.Cursor) -> tuple[Val, Val]:
        ch = list(s.get_children())
        base_c, idx_c = ch[0], ch[1]
        # C allows idx[ptr]; normalize
        if type_class(base_c.type)[0] != "ptr" and type_class(idx_c.type)[0] == "ptr":
            base_c, idx_c = idx_c, base_c
        return self.ev(base_c), self.ev(idx_c)

    def lvalue_mem(self, c: ci.Cursor) -> MemRef | None:
        """A memory reference for an lvalue expression (subscript, deref, member), or None."""
        s = unwrap(c)
        if s.kind == K.ARRAY_SUBSCRIPT_EXPR:
            base_v, idx_v = self.subscript_parts(s)
            p = base_v.ptr
            if p is None:
                self.note(f"line {s.location.line}: subscript of a pointer the analysis does not follow")
                return None
            scale = unit_scale(s, p.leaf_bytes)
            idx = None if (p.offset is None or idx_v.poly is None) else p.offset + idx_v.poly * scale
            deps = p.deps | idx_v.deps | base_v.deps
            eb = max(1, type_bytes(s.type))
            # a signed 32-bit index into the buffer itself (no pointer offset: ``p = in + 1; p[i]`` is
            # vectorized like ``in[i + off]``, models.analytical.cpu_vectorizer.shifted_int_index)
            own = p.offset is not None and is_zero(p.offset)
            return MemRef(p.base, p.space, idx, deps, eb, p.leaf_bytes, expr_text(s),
                          signed32=own and _signed32_index(s))
        if s.kind == K.UNARY_OPERATOR and _cx.unary_op(s) == "*":
            v = self.ev(list(s.get_children())[0])
            p = v.ptr
            if p is None:
                self.note(f"line {s.location.line}: dereference of a pointer the analysis does not follow")
                return None
            return MemRef(p.base, p.space, p.offset, p.deps | v.deps, max(1, type_bytes(s.type)), p.leaf_bytes,
                          expr_text(s))
        if s.kind == K.MEMBER_REF_EXPR:
            ch = list(s.get_children())
            if not ch:
                return None
            base = unwrap(ch[0])
            if type_class(base.type)[0] == "ptr":  # p->field
                v = self.ev(base)
                p = v.ptr
                if p is None:
                    return None
                return MemRef(p.base, p.space, p.offset, p.deps | v.deps, max(1, type_bytes(s.type)),
                              p.leaf_bytes, expr_text(s))
            m = self.lvalue_mem(base)
            if m is not None:
                m.elem_bytes = max(1, type_bytes(s.type))
                m.text = expr_text(s)
            return m
        return None

    def address_of(self, x: ci.Cursor) -> Val:
        s = unwrap(x)
        if s.kind == K.ARRAY_SUBSCRIPT_EXPR:
            base_v, idx_v = self.subscript_parts(s)
            if base_v.ptr is not None:
                p = base_v.ptr
                off = None if (p.offset is None or idx_v.poly is None) else (
                    p.offset + idx_v.poly * unit_scale(s, p.leaf_bytes))
                return Val(None, base_v.deps | idx_v.deps, Ptr(p.base, p.space, off, p.leaf_bytes, p.deps | idx_v.deps))
            return Val(None, base_v.deps | idx_v.deps)
        if s.kind == K.UNARY_OPERATOR and _cx.unary_op(s) == "*":
            return self.ev(list(s.get_children())[0])
        if s.kind == K.DECL_REF_EXPR and s.referenced is not None:
            v = self.ev(s)
            name = s.spelling
            return Val(None, v.deps, Ptr(name, "private", ZERO, max(1, type_bytes(s.type))))
        m = self.lvalue_mem(s)
        if m is not None:
            return Val(None, m.deps, Ptr(m.base, m.space, m.index, m.unit_bytes, m.deps))
        self.ev(x)
        return UNKNOWN

    # --- loads and stores -----------------------------------------------------------------------
    def load_lvalue(self, c: ci.Cursor) -> Val:
        s = unwrap(c)
        if s.kind == K.ARRAY_SUBSCRIPT_EXPR:
            canon = s.type.get_canonical()
            if canon.kind in ARRAY_KINDS:
                base_v, idx_v = self.subscript_parts(s)  # a row of a multi-dimensional array
                p = base_v.ptr
                if p is None:
                    return Val(None, base_v.deps | idx_v.deps)
                off = None if (p.offset is None or idx_v.poly is None) else (
                    p.offset + idx_v.poly * unit_scale(s, p.leaf_bytes))
                return Val(None, base_v.deps | idx_v.deps, Ptr(p.base, p.space, off, p.leaf_bytes, p.deps | idx_v.deps))
        if s.kind == K.MEMBER_REF_EXPR:
            ch = list(s.get_children())
            base = unwrap(ch[0]) if ch else None
            if base is None:
                return UNKNOWN
            if type_class(base.type)[0] != "ptr" and not is_mem_lvalue(base):
                v = self.ev(base)
                return Val(None, v.deps)
        m = self.lvalue_mem(s)
        if m is None:
            deps: set[str] = set()
            for ch_ in s.get_children():
                deps |= self.ev(ch_).deps
            return Val(None, frozenset(deps))
        return self.record_load(m, c)

    def record_load(self, m: MemRef, c: ci.Cursor) -> Val:
        self.record(m, "load", c)
        return self.loaded_value(m)

    def loaded_value(self, m: MemRef) -> Val:
        deps = frozenset(m.deps | {DATA}) - {VAR}
        idx = m.index.to_str() if m.index is not None else "?"
        key = f"d:{m.base}[{m.index.key() if m.index is not None else self.serial()}]"
        dv: tuple[Poly | None, ...] | None = (ZERO, ZERO, ZERO)
        if WI in deps:
            # the same address in every lane of a warp (e.g. row_ptr[gid / 32]) loads a uniform value
            dv = None
            if m.index is not None and all(is_zero(deriv(m.index, d)) for d in range(3)):
                dv = (ZERO, ZERO, ZERO)
        a = Atom(key, "data", f"ld({m.base}[{idx}])", deps=deps, deriv=dv)
        return Val(Poly.atom(a), deps)

    def store_to(self, lhs_c: ci.Cursor, rv: Val, c: ci.Cursor) -> None:
        s = unwrap(lhs_c)
        if s.kind == K.DECL_REF_EXPR and s.referenced is not None:
            self.assign_var(s.referenced.hash, rv, s.type)
            return
        # v.x = ... on a variable: partial update
        if s.kind in (K.UNEXPOSED_EXPR, K.MEMBER_REF_EXPR):
            base = s
            while base.kind in (K.UNEXPOSED_EXPR, K.MEMBER_REF_EXPR, K.PAREN_EXPR):
                chs = list(base.get_children())
                if len(chs) != 1:
                    break
                base = chs[0]
            if base.kind == K.DECL_REF_EXPR and base.referenced is not None and \
                    type_class(base.type)[0] != "ptr":
                old = self.vars.get(base.referenced.hash, UNKNOWN)
                self.vars[base.referenced.hash] = Val(None, old.deps | rv.deps)
                return
            if s.kind == K.UNEXPOSED_EXPR:
                chs = list(s.get_children())
                if len(chs) == 1:
                    m = self.lvalue_mem(chs[0])
                    if m is not None:
                        m.elem_bytes = max(1, type_bytes(s.type))
                        self.record(m, "store", c)
                        return
        m = self.lvalue_mem(s)
        if m is not None:
            self.record(m, "store", c)
            return
        self.ev(lhs_c)

    def record(self, m: MemRef, kind: str, c: ci.Cursor, via: str = "") -> None:
        if self.mute:
            return
        idx = m.index
        s0 = s1 = None
        affine = True
        coeffs: dict[str, str] = {}
        trips: dict[str, str] = {}
        if idx is not None:
            d0, d1 = deriv(idx, 0), deriv(idx, 1)
            for d in (d0, d1):
                if d is not None and WI in d.deps:
                    affine = False
            s0 = printable(average(d0)) if d0 is not None else None
            s1 = printable(average(d1)) if d1 is not None else None
            if d0 is None:
                s1 = None
            for a in sorted(idx.atoms()):
                if a.kind == "wi":
                    co = idx.coefficient(a)
                    coeffs[a.name] = co.to_str() if co is not None else "?"
                elif a.kind == "iter":
                    co = idx.coefficient(a)
                    co = printable(average(co)) if co is not None else None
                    if co is not None and not co.is_zero():
                        trips[a.name] = co.to_str()
        else:
            affine = False
        indirect = DATA in m.deps and s0 is None
        if s0 is None:
            affine = False
        self.accesses.append(Access(
            arg=m.base, space=m.space, kind=kind, elem_bytes=m.elem_bytes, unit_bytes=m.unit_bytes,
            index=m.text, count="", count_warp="",
            stride0=s0.to_str() if s0 is not None else None, stride1=s1.to_str() if s1 is not None else None,
            index_expr=idx.to_str() if idx is not None else "?", coeffs=coeffs, trip_strides=trips, affine=affine,
            indirect=indirect, line=c.location.line, via=via, conditional=self.conditional, index_int32=m.signed32,
            index_guarded=m.signed32 and shift_guarded(idx, self.guards)))
        self.acc_polys.append((self.w_item, self.w_warp))
        self.count_size(load=kind == "load" and m.space != "private")
        if m.space != "private":
            self.work_groups.add_site(self.guards)
        if kind != "load":
            self.store_loops.append((m.space, frozenset(ctx.lid for ctx in self.loop_stack)))
        elif idx is not None:
            share, outer = self.distinct_share(idx, m.space)
            if share < 1.0:
                self.accesses[-1].unrolled_distinct = share
                self.repeat_nests[len(self.accesses) - 1] = outer

    def distinct_share(self, idx: Poly, space: str) -> tuple[float, int]:
        """The share of the executions of a load at ``idx`` in the fully unrolled loops around it
        (innermost first, up to the first loop that is not unrolled) at an address no earlier copy
        of the body read, and the serial of the outermost of those loops; (1.0, 0) where the
        index is not a sum of constant multiples of their counters plus values made outside them,
        or a barrier in them may change a local buffer (a store does: :meth:`finish_repeats`)."""
        nest = []
        for ctx in reversed(self.loop_stack):
            if ctx.unrolled is None or not ctx.unrolled.is_const():
                break
            if ctx.barrier and space == "local":
                return 1.0, 0
            nest.append(ctx)
        if not nest:
            return 1.0, 0
        outer = nest[-1].lid
        lids = {ctx.lid for ctx in nest}
        made = serials([Val(idx)])
        if made is None or any(x >= outer and x not in lids for x in made):
            return 1.0, 0
        atoms = {a.key: a for a in idx.atoms()}
        steps: list[tuple[int, int]] = []
        total = 1
        for ctx in nest:
            trips = int(ctx.unrolled.const_value())          # type: ignore[union-attr]
            total *= trips
            if total > DISTINCT_MAX_COPIES:
                return 1.0, 0
            a = atoms.get(f"i:{ctx.lid}")
            co = idx.coefficient(a) if a is not None else ZERO
            if co is None or not co.is_const() or co.const_value().denominator != 1:
                return 1.0, 0
            steps.append((int(co.const_value()), trips))
        seen = {0}
        for step, trips in steps:
            seen = {x + step * t for x in seen for t in range(trips)}
        return len(seen) / total, outer

    def finish_repeats(self) -> None:
        """Undo :meth:`distinct_share` for loads whose unrolled loops also store to (or update
        atomically) memory of the load's space: a copy may read what another wrote."""
        for i, outer in self.repeat_nests.items():
            a = self.accesses[i]
            if any(space == a.space and outer in lids for space, lids in self.store_loops):
                a.unrolled_distinct = 1.0

    # --- builtins that access memory --------------------------------------------------------------
    def memory_builtin(self, name: str, args: list[ci.Cursor], c: ci.Cursor) -> Val | None:
        if name.startswith(("atomic_", "atom_")) and name not in IGNORE and name not in FENCE:
            return self.atomic(name, args, c)
        m = VLOAD.match(name)
        if m and args:
            return self.vload(m, args, c, name)
        m = VSTORE.match(name)
        if m and args:
            return self.vstore(m, args, c, name)
        if name.startswith(("read_image", "write_image")):
            return self.image(name, args, c)
        return None

    def atomic(self, name: str, args: list[ci.Cursor], c: ci.Cursor) -> Val:
        if not args:
            return UNKNOWN
        pv = self.ev(args[0])
        for a in args[1:]:
            self.ev(a)
        p = pv.ptr
        if p is None:
            self.note(f"line {c.location.line}: {name} on a pointer the analysis does not follow")
            return Val(None, pv.deps | {DATA})
        pointee = args[0].type.get_canonical().get_pointee()
        eb = max(1, type_bytes(pointee))
        m = MemRef(p.base, p.space, p.offset, p.deps | pv.deps, eb, p.leaf_bytes, expr_text(args[0]))
        self.record(m, "atomic", c, via=name)
        return Val(None, frozenset(m.deps | {DATA}))

    def vload(self, m: re.Match[str], args: list[ci.Cursor], c: ci.Cursor, name: str) -> Val:
        n = int(m.group(3) or 1)
        half = bool(m.group(2))
        off = self.ev(args[0])
        pv = self.ev(args[1]) if len(args) > 1 else UNKNOWN
        p = pv.ptr
        if p is None:
            self.note(f"line {c.location.line}: {name} on a pointer the analysis does not follow")
            return Val(None, off.deps | {DATA})
        eb = (2 if half else p.leaf_bytes) * n
        idx = None if (p.offset is None or off.poly is None) else off.poly + p.offset * Fraction(p.leaf_bytes, eb)
        mr = MemRef(p.base, p.space, idx, p.deps | off.deps | pv.deps, eb, eb, expr_text(c))
        self.record(mr, "load", c, via=name)
        if half:
            self.op("conv", n)
        return Val(None, frozenset(mr.deps | {DATA}))

    def vstore(self, m: re.Match[str], args: list[ci.Cursor], c: ci.Cursor, name: str) -> Val:
        n = int(m.group(3) or 1)
        half = bool(m.group(2))
        self.ev(args[0])
        off = self.ev(args[1]) if len(args) > 1 else UNKNOWN
        pv = self.ev(args[2]) if len(args) > 2 else UNKNOWN
        p = pv.ptr
        if p is None:
            self.note(f"line {c.location.line}: {name} on a pointer the analysis does not follow")
            return UNKNOWN
        eb = (2 if half else p.leaf_bytes) * n
        idx = None if (p.offset is None or off.poly is None) else off.poly + p.offset * Fraction(p.leaf_bytes, eb)
        mr = MemRef(p.base, p.space, idx, p.deps | off.deps | pv.deps, eb, eb, expr_text(c))
        self.record(mr, "store", c, via=name)
        if half:
            self.op("conv", n)
        return UNKNOWN

    def image(self, name: str, args: list[ci.Cursor], c: ci.Cursor) -> Val:
        vals = [self.ev(a) for a in args]
        kind = "load" if name.startswith("read") else "store"
        if not self.mute:
            img = unwrap(args[0]).spelling if args else "image"
            eb = 16 if name[-1] in "fi" or name.endswith("ui") else 8
            self.accesses.append(Access(
                arg=img, space="image", kind=kind, elem_bytes=eb, unit_bytes=eb, index=expr_text(c),
                count="", count_warp="", stride0=None, stride1=None,
                affine=False, line=c.location.line, via=name, conditional=self.conditional))
            self.acc_polys.append((self.w_item, self.w_warp))
            self.count_size(load=kind == "load")
        deps: set[str] = {DATA}
        for v in vals:
            deps |= v.deps
        return Val(None, frozenset(deps))


def _signed32_index(s: ci.Cursor) -> bool:
    """Whether the index of the subscript ``s`` (either operand order) is a signed 32-bit integer."""
    ch = list(s.get_children())
    if len(ch) != 2:
        return False
    idx = ch[1] if type_class(ch[0].type)[0] == "ptr" or type_class(ch[1].type)[0] != "ptr" else ch[0]
    return idx.type.get_canonical().kind == ci.TypeKind.INT
