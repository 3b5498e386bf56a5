"""Python AST of a @jit function -> block IR, by a standard SSA construction.

Local variables live in a dict from name to value (a `tensor`, a `constexpr` or another
Python object such as a dtype or a tuple). Values are immutable; a runtime `if` yields
the variables its branches changed, and a loop carries the variables its body assigns
as block arguments. Constexpr conditions fold, `static_range` unrolls, and calls to other
@jit functions are inlined with their own scope. Any error becomes a `CompilationError`
at the user's line.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import inspect
import math
import numbers
import types

import numpy as np

from kiln.ir import Block, Builder, Function, Loc, Operation, verify
from kiln.ir.types import scalar_of
from kiln.language import semantic
from kiln.language.core import constexpr, dtype, is_aggregate, is_builtin, tensor, tuple_type
from kiln.language.semantic import unwrap

from .aggregates import describe, flatten, is_carriable
from . import config
from .loop_unroll import unroll_loops
from .errors import CompilationError, CompileTimeAssertionFailure, UnsupportedLanguageConstruct

MAX_INLINE_DEPTH = 64


def wrap(value):
    """Python scalars and strings become constexprs; everything else stays as it is."""
    if isinstance(value, (tensor, constexpr)):
        return value
    if value is None or isinstance(value, (bool, numbers.Number, str, np.generic)):
        return constexpr(value)
    if isinstance(value, tuple):
        items = [wrap(v) for v in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else tuple(items)  # NamedTuples stay
    return value


def assigned_names(statements) -> set[str]:
    """Names a list of statements assigns anywhere inside it (loop-carried candidates)."""
    names = set()
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _materialize(value):
    """Python numbers (also inside tuples) as scalar tensors; anything else unchanged."""
    raw = unwrap(value)
    if isinstance(raw, tuple):
        items = [_materialize(v) for v in raw]
        return type(raw)(*items) if hasattr(type(raw), "_fields") else tuple(items)  # NamedTuples stay
    if isinstance(raw, (bool, numbers.Number, np.generic)) and not isinstance(raw, tensor):
        return semantic.to_tensor(raw)
    return value


def _same_constant(a, b) -> bool:
    """Both are the same compile-time number (so a branch need not yield it)."""
    a, b = unwrap(a), unwrap(b)
    scalar = (bool, numbers.Number, np.generic)
    return isinstance(a, scalar) and isinstance(b, scalar) and type(a) is type(b) and a == b


_RETURN_IN_LOOP = "Cannot have `return` statements inside `while` or `for` statements in triton."  # Triton's words


def _contains_return(node) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(node))


def _always_returns(statements) -> bool:
    if not statements:
        return False
    last = statements[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and _always_returns(last.body) and _always_returns(last.orelse)


def _exact(t):
    """A type with the pointer constness that type equality leaves out (`x_ptr: tl.const`)."""
    return (t, getattr(scalar_of(t), "const", False))


def hoist_returns(statements: list) -> list:
    """The statements with what follows an `if` that may return moved into its branches, so that a
    `return` in one branch of a runtime `if` ends the function as in Python: `if c: return x`
    then `rest` becomes `if c: return x` / `else: rest` (a branch that falls off the end returns None)."""
    for i, stmt in enumerate(statements):
        if isinstance(stmt, ast.If) and _contains_return(stmt):
            rest = statements[i + 1:]

            def branch(body):
                return hoist_returns(list(body) + ([] if _always_returns(body) else rest))
            new = ast.copy_location(ast.If(test=stmt.test, body=branch(stmt.body), orelse=branch(stmt.orelse)), stmt)
            return statements[:i] + [new]
    return statements


class _Unsupported(Exception):
    pass


def _caused_by(error: CompilationError, cause: Exception) -> CompilationError:
    """`error` with `cause` as its `__cause__` (as Triton, whose users read the underlying error
    there), the cause stripped of its traceback so that no frame inside kiln is printed."""
    error.__cause__ = cause.with_traceback(None)
    error.__suppress_context__ = True
    return error


class CodeGenerator(ast.NodeVisitor):
    """Builds the IR of one function body; `call_jit_function` inlines callees."""

    def __init__(self, jitfn, scope: dict, builder: Builder, depth: int = 0, fixed_loc: Loc | None = None):
        self.jitfn = jitfn
        self.source = jitfn.source_info()
        self.scope = dict(scope)
        self.builder = builder
        self.depth = depth
        self.fixed_loc = fixed_loc
        self.ret = None
        self.returned = False
        self.ret_node = None  # the last `return` visited, for errors about it
        self.def_node = None  # the function's `def`, where Triton points when its returns' types differ
        self.elementwise = False  # inside tl.map_elementwise: a block condition selects per element
        self.globals = jitfn.fn.__globals__
        self.closure = jitfn.closure_vars()
        self._node = None

    # --- errors and locations ----------------------------------------------------------
    def _loc(self, node) -> Loc:
        return Loc(self.source.file, self.source.first_line + node.lineno - 1, node.col_offset + self.source.indent)

    def error(self, node, reason: str, kind=CompilationError) -> CompilationError:
        return self.error_at(self._loc(node), reason, kind)

    def error_at(self, loc: Loc, reason: str, kind=CompilationError) -> CompilationError:
        """An error at `loc` in this function, with Triton's locator (line and column in the function)."""
        at = (loc.line - self.source.first_line + 1, loc.col - self.source.indent, self.jitfn.__name__)
        return kind(self.source.file, loc.line, loc.col, self.source.line_text(loc.line), reason, at)

    def visit(self, node):
        if not hasattr(node, "lineno"):
            return super().visit(node)
        saved = self.builder.loc
        self.builder.loc = self.fixed_loc or self._loc(node)
        try:
            return super().visit(node)
        except CompilationError:
            raise
        except AssertionError as e:  # static_assert: its message says it all (Triton gives no __cause__)
            raise self.error(node, str(e) or "static assertion failed", CompileTimeAssertionFailure) from None
        except Exception as e:
            if isinstance(e, _Unsupported):
                raise _caused_by(self.error(node, str(e), UnsupportedLanguageConstruct), e)
            raise _caused_by(self.error(node, f"{type(e).__name__}: {e}"), e)
        finally:
            self.builder.loc = saved

    def generic_visit(self, node):
        raise _Unsupported(f"unsupported syntax: {type(node).__name__}")

    # --- names --------------------------------------------------------------------------
    def lookup(self, name: str):
        if name in self.scope:
            return self.scope[name]
        if name in self.closure:
            return wrap(self._captured(name, self.closure[name], captured=True))
        if name in self.globals:
            value = self._captured(name, self.globals[name])
            if semantic.state.global_reads is not None and _is_data(value):
                semantic.state.global_reads[(name, id(self.globals))] = (self.globals, value)
            return wrap(value)
        if name in _BUILTINS:
            return _BUILTINS[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise NameError(f"name '{name}' is not defined")

    def _captured(self, name: str, value, captured=False):
        """Triton 3.6's rule for a name a kernel reads from its module or an enclosing function:
        constants (`tl.constexpr(...)`), dtypes, modules, classes and functions. A plain value is
        refused, also one whose global is annotated `X: tl.constexpr = 42` (the annotation makes
        nothing constant in Python; Triton 3.6 refuses it too): the kernel is compiled with the
        value it has now and would not see it change (TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1
        allows it, as in Triton)."""
        if _capturable(value) or config.allow_non_constexpr_globals() \
                or self.jitfn.is_internal:  # kiln's own library (tl.random's constant tables)
            return value
        if captured:  # Triton does not see an enclosing function's plain values at all
            raise NameError(f"{name} is not defined (kiln: a value of type {type(value).__name__} from an enclosing "
                            "function; a kernel reads constexprs, dtypes, modules and functions from there, "
                            "and TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1 allows other values)")
        raise NameError(f"Cannot access global variable {name} from within @jit'ed function. Triton kernels can "
                        f"only access global variables that are instanstiated as constexpr (`x = "
                        f"triton.language.constexpr(42)`). Alternatively, set the envvar "
                        f"TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1 (kiln: {name} is a {type(value).__name__}; the "
                        f"compiled kernel would keep the value it has now)")

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store):
            raise _Unsupported("internal: Name in store context")
        return self.lookup(node.id)

    def assign(self, target, value, node, materialize=False):
        """Bind `target` to `value`; with `materialize`, Python numbers become scalar tensors.

        A plain `x = 1` in a Triton kernel makes `x` an int32 tensor (so `int8_block + x`
        is int32); only `x: tl.constexpr = 1` keeps a compile-time constant.
        """
        if materialize:
            value = _materialize(value)
        if isinstance(target, ast.Name):
            self.scope[target.id] = wrap(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            value = unwrap(value)
            if isinstance(value, tensor):
                raise TypeError("cannot unpack a tensor; use tl.split for pairs")
            values = list(value)
            if len(values) != len(target.elts):
                raise ValueError(f"cannot unpack {len(values)} values into {len(target.elts)} names")
            for t, v in zip(target.elts, values):
                self.assign(t, v, node)
        else:
            raise _Unsupported(f"cannot assign to {type(target).__name__}: kernels assign only to names")

    # --- statements ---------------------------------------------------------------------
    def visit_body(self, statements):
        for stmt in statements:
            if self.returned:
                break
            self.visit(stmt)

    def visit_FunctionDef(self, node):
        self.def_node = node
        self.visit_body(hoist_returns(node.body))

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value, node, materialize=True)

    def visit_AnnAssign(self, node):
        if node.value is None:
            return
        value = self.visit(node.value)
        annotation = unwrap(self.visit(node.annotation))
        if annotation is constexpr:
            if isinstance(node.target, ast.Name) and node.target.id in self.scope:  # a parameter too
                raise ValueError(f"{node.target.id} is already defined. constexpr cannot be reassigned.")
            # as Triton's: a tuple too is one constexpr, its type constexpr_type of it; a runtime value Triton
            # wraps too, its ops reading through the wrapper: the value is the tensor (FlagGems' radix sort:
            # `CTA_TILE_N: tl.constexpr = TILE_N * tiles_n_per_cta`)
            if not isinstance(value, tensor):
                value = constexpr(value)
        self.assign(node.target, value, node, materialize=annotation is not constexpr or isinstance(value, tensor))

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise _Unsupported("augmented assignment only to names")
        current = self.lookup(node.target.id)
        value = self.binary(node.op, current, self.visit(node.value))
        self.assign(node.target, value, node, materialize=True)

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        if isinstance(node.value, ast.Call):
            node.value._is_unused = True  # its result is dropped (checked against must_use_result)
        self.visit(node.value)

    def visit_Pass(self, node):
        pass

    def visit_Return(self, node):
        value = self.visit(node.value) if node.value is not None else None
        self.ret = wrap(value)
        self.returned = True
        self.ret_node = node

    def visit_Assert(self, node):
        cond = self.visit(node.test)
        msg = unwrap(self.visit(node.msg)) if node.msg is not None else ""
        if isinstance(cond, tensor):
            semantic.device_assert(cond, msg or ast.unparse(node.test))
        elif not unwrap(cond):
            raise AssertionError(f"assertion failed: {msg}" if msg else f"assertion failed: {ast.unparse(node.test)}")

    def visit_If(self, node):
        cond = self.visit(node.test)
        if not isinstance(cond, tensor):
            self.visit_body(node.body if unwrap(cond) else node.orelse)
            return
        if self.elementwise and cond.type.shape:
            self.elementwise_if(semantic.cast(cond, semantic.int1), node.body, node.orelse)
            return
        cond = self.scalar_condition(cond, "if", node)
        self.runtime_if(cond, node.body, node.orelse, node)

    def elementwise_if(self, cond, then_body, else_body):
        """An `if` on a block inside tl.map_elementwise: both branches run, and every name they
        assign (and the returned value) takes each element from the branch its condition picks."""
        before = self.scope
        branches = []
        for body in (then_body, else_body):
            self.scope, self.returned, self.ret = dict(before), False, None
            self.visit_body(body)
            branches.append((self.scope, self.returned, self.ret))
        (then_scope, then_ret, then_val), (else_scope, else_ret, else_val) = branches
        self.scope, self.returned, self.ret = before, False, None
        if then_ret != else_ret:
            raise _Unsupported("a `return` inside an `if` needs a `return` in the other branch too")
        for n in then_scope.keys() & else_scope.keys():
            a, b = then_scope[n], else_scope[n]
            if a is not before.get(n) or b is not before.get(n):
                self.scope[n] = a if a is b else semantic.where(cond, a, b)
        if then_ret:
            self.ret, self.returned = semantic.where(cond, then_val, else_val), True

    def scalar_condition(self, cond: tensor, what: str, node=None) -> tensor:
        """`cond` as the int1 scalar of a runtime `if` (an if statement is `node`) or `while`."""
        if cond.type.shape and node is not None and cond.type.numel == 1:
            # an `if` statement takes a one-element block's element, with Triton's warning
            semantic.warn_at_user_line("If conditional called with multidimensional Tensor instead of scalar; "
                                       f"please use \"if ({ast.unparse(node.test)}).item()\" instead")
            cond = semantic.unsplat(cond)
        if cond.type.shape:
            ambiguous = "Boolean value of Tensor with more than one value is ambiguous: " if node is not None else ""
            raise TypeError(f"{ambiguous}the condition of a runtime `{what}` must be a scalar, not a block {cond.type}")
        if what == "while" and cond.dtype != semantic.int1:
            # Triton hands it to its loop condition as it is, which its IR rejects
            raise TypeError(f"the condition of a `while` must be a boolean (int1) scalar, not {cond.dtype}: "
                            "compare it, e.g. `while x != 0:` (Triton fails on it with 'error encountered "
                            "during parsing')")
        return semantic.cast(cond, semantic.int1) if cond.dtype != semantic.int1 else cond

    def _run_branch(self, statements, before):
        block = Block()
        self.scope, self.returned, self.ret = dict(before), False, None
        with semantic.insertion_block(block):
            self.visit_body(statements)
        return block, self.scope, self.returned, self.ret

    def runtime_if(self, cond, then_body, else_body, node):
        before = self.scope
        then_block, then_scope, then_ret, then_val = self._run_branch(then_body, before)
        else_block, else_scope, else_ret, else_val = self._run_branch(else_body, before)
        self.scope = before
        if then_ret != else_ret:  # the other branch falls off the end of the function: it returns None
            if unwrap(then_val if then_ret else else_val) is not None:
                # ... an undefined value of the returned type, as in Triton (its poison); zeros here
                filler = self._zeros_like(then_val if then_ret else else_val, else_block if then_ret else then_block)
                then_val, else_val = (then_val, filler) if then_ret else (filler, else_val)
            then_ret = else_ret = True
        # both branches end the function: what followed the if is in them (hoist_returns), so nothing
        # after it reads the names they assign (`if M * N == 0: return`, then `A = A + offsets` in the
        # rest, as Inductor's templates begin): only the returned value merges
        ends_function = then_ret
        if then_ret and unwrap(then_val) is None and unwrap(else_val) is None:
            then_ret = False  # both return nothing: nothing to merge, the function returns after the if
            self.ret, self.returned = None, True
        names = [] if ends_function else [n for n in then_scope if n in else_scope and
                                          (then_scope[n] is not before.get(n) or else_scope[n] is not before.get(n))]
        merged, then_vals, else_vals = [], [], []
        for n in names:
            a, b = then_scope[n], else_scope[n]
            if not isinstance(a, tensor) and not isinstance(b, tensor) and not is_carriable(a) and a is b:
                self.scope[n] = a
                continue
            if _same_constant(a, b):
                self.scope[n] = a
                continue
            if not (is_carriable(a) and is_carriable(b)):
                raise TypeError(f"'{n}' is given different non-tensor values in the two branches of a runtime if")
            merged.append(n)
            then_vals.append(a)
            else_vals.append(b)
        if then_ret:
            merged.append(None)
            then_vals.append(then_val)
            else_vals.append(else_val)
        then_flat = self._yield_values(then_block, then_vals)
        else_flat = self._yield_values(else_block, else_vals)
        for n, (a_leaves, a_sig, _), (b_leaves, b_sig, _) in zip(merged, then_flat, else_flat):
            if a_sig != b_sig or [_exact(t.type) for t in a_leaves] != [_exact(t.type) for t in b_leaves]:
                # Triton's words first (users match them), then which value and its two types
                # (a return: the words of Triton 3.6's release, then those of its branch point)
                words = ("Ternary expression with dynamic condition has inconsistent type"
                         if isinstance(node, ast.IfExp) else
                         f"Mismatched type for {n}" if n else
                         f"Inconsistent return types (Return type mismatch: {describe(a_leaves)} and {describe(b_leaves)})")
                what = f"'{n}'" if n else "the returned value"
                error = TypeError(f"{words}: {what} is ({describe(a_leaves)}) in the then-branch but "
                                  f"({describe(b_leaves)}) in the else-branch")
                if n is None and self.def_node is not None:  # Triton decides the return type after the
                    # whole body and points at the `def`; the message names the last return
                    if self.ret_node is not None:
                        loc = self._loc(self.ret_node)
                        where = f"{loc.line - self.source.first_line + 1}:{loc.col - self.source.indent}"
                        error = TypeError(f"{error} (the return at {where})")
                    raise _caused_by(self.error(self.def_node, f"TypeError: {error}"), error)
                raise error
        types = [t.type for leaves, _, _ in then_flat for t in leaves]
        op = self.builder.create("if", [cond.handle], types, regions=[then_block, else_block])
        results = iter(tensor(v, v.type) for v in op.results)
        for n, (leaves, _, rebuild) in zip(merged, then_flat):
            value = rebuild([next(results) for _ in leaves])
            if n is None:
                self.ret, self.returned = value, True
            else:
                self.scope[n] = value
        for n in set(then_scope) ^ set(else_scope):
            if n not in before:
                self.scope.pop(n, None)

    def _zeros_like(self, value, block):
        """A value of `value`'s structure and types, zeros, made in `block`: what a path that returns
        nothing gives where the others return `value` (Triton's poison may be any value)."""
        leaves, _, rebuild = flatten(value)
        if any(scalar_of(t.type).is_ptr() for t in leaves):
            raise _Unsupported("a `return` of a pointer inside a runtime `if` needs a `return` on every path out "
                               "of the function")
        with semantic.insertion_block(block):
            return rebuild([semantic.full(list(t.type.shape or ()), 0, scalar_of(t.type)) for t in leaves])

    def _yield_values(self, block, values):
        """Flatten `values` inside `block` and end it with a yield of their tensors."""
        with semantic.insertion_block(block):
            flat = [flatten(v) for v in values]
            self.builder.create("yield", [t.handle for leaves, _, _ in flat for t in leaves], [])
        return flat

    def visit_For(self, node):
        if node.orelse:
            raise _Unsupported("for ... else is not supported")
        if not isinstance(node.iter, ast.Call):
            raise _Unsupported("a kernel loop must iterate over range(...), tl.range(...) or tl.static_range(...)")
        fn = unwrap(self.visit(node.iter.func))
        args = [self.visit(a) for a in node.iter.args]
        kwargs = {k.arg: self.visit(k.value) for k in node.iter.keywords}
        if fn is tl_static_range():
            return self.static_for(node, args, kwargs)
        if fn is not builtins.range and fn is not tl_range():
            raise _Unsupported("a kernel loop must iterate over range(...), tl.range(...) or tl.static_range(...)")
        if not isinstance(node.target, ast.Name):
            raise _Unsupported("the loop variable must be a single name")
        lb, ub, step, attrs = _range_args(args, kwargs)
        if isinstance(step, constexpr) and unwrap(step) == 0:
            raise ValueError("range() step must not be zero")
        # a constant step below zero (range(K, 0, -BK): Inductor's bmm template) runs as Triton runs it: the
        # loop counts up from the end to the start and the name takes start - (counter - end), so the loop
        # is one the passes know (pipelined, on tensor cores)
        descending = isinstance(step, constexpr) and unwrap(step) < 0
        if descending:
            lb, ub, step = ub, lb, constexpr(-unwrap(step))
        lb, ub, step = (semantic.to_tensor(v) for v in (lb, ub, step))
        for v, what in ((lb, "start"), (ub, "end"), (step, "step")):
            if v.type.shape or not v.dtype.is_int():
                raise TypeError(f"the loop {what} must be an integer scalar, not {v.type}")
        iv_type = semantic.integer_promote(semantic.integer_promote(lb.dtype, ub.dtype), step.dtype)
        if iv_type.primitive_bitwidth < 32:
            iv_type = semantic.int32
        lb, ub, step = (semantic.cast(v, iv_type) for v in (lb, ub, step))
        carried = self.carried_names(node.body)
        inits = [flatten(self.scope[n]) for n in carried]
        flat_inits = [t for leaves, _, _ in inits for t in leaves]
        body = Block([iv_type] + [t.type for t in flat_inits])
        before = self.scope
        self.scope = dict(before)
        self.scope[node.target.id] = tensor(body.args[0], iv_type)
        if descending:
            with semantic.insertion_block(body):
                self.scope[node.target.id] = semantic.add(semantic.sub(ub, self.scope[node.target.id]), lb)
        self.bind_carried(carried, inits, body.args[1:])
        self.loop_body(body, node.body, carried, inits)
        self.scope = before
        op = self.builder.create("for", [lb.handle, ub.handle, step.handle] + [t.handle for t in flat_inits],
                                 [t.type for t in flat_inits], attrs, [body])
        self.bind_carried(carried, inits, op.results)

    def loop_body(self, block, statements, carried, inits):
        """Build a loop body into `block`, ending it with a yield of the carried values."""
        with semantic.insertion_block(block):
            self.visit_body(statements)
            if self.returned:
                raise _Unsupported(_RETURN_IN_LOOP)
            yields = self.loop_values(carried, inits)
            self.builder.create("yield", [t.handle for t in yields], [])

    def carried_names(self, body) -> list[str]:
        return sorted(n for n in assigned_names(body) if n in self.scope and is_carriable(self.scope[n]))

    def bind_carried(self, carried, inits, values):
        """Rebuild each carried variable from its share of `values` (block arguments or results)."""
        values = iter(values)
        for n, (leaves, _, rebuild) in zip(carried, inits):
            self.scope[n] = rebuild([tensor(v, v.type) for v in (next(values) for _ in leaves)])

    def loop_values(self, carried, inits):
        """The tensors to yield at the end of a loop body, checked against the initial values."""
        out = []
        for n, (init_leaves, init_sig, _) in zip(carried, inits):
            if not is_carriable(self.scope[n]):
                raise TypeError(f"loop-carried variable '{n}' is re-assigned to a {type(self.scope[n]).__name__} "
                                "in the loop")
            leaves, sig, _ = flatten(self.scope[n])
            if sig != init_sig or [t.type for t in leaves] != [t.type for t in init_leaves]:
                raise TypeError(f"loop-carried variable '{n}' has initial type ({describe(init_leaves)}) but is "
                                f"re-assigned to ({describe(leaves)}) in the loop; make the types agree "
                                "(e.g. with .to())")
            out.extend(leaves)
        return out

    def static_for(self, node, args, kwargs):
        try:
            bound = _STATIC_RANGE_SIGNATURE.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"static_range: {e}") from None
        values = [unwrap(bound.arguments.get(k)) for k in ("arg1", "arg2", "step")]
        if any(isinstance(v, tensor) for v in values):
            raise TypeError("static_range bounds must be constexprs")
        start, end, step = (0, values[0], 1) if values[1] is None else (values[0], values[1], values[2])
        steps = range(start, end, 1 if step is None else step)
        made = []  # ops each of the first two steps made
        position = [len(steps), 0]  # this loop among the static_ranges being unrolled: steps, the current one
        self.builder.unrolling.append(position)
        try:
            for n, i in enumerate(steps):
                position[1] = n
                before = self.builder.created
                self.assign(node.target, constexpr(i), node)
                self.visit_body(node.body)
                if self.returned:
                    raise _Unsupported(_RETURN_IN_LOOP)
                if n < 2:
                    made.append(self.builder.created - before)
                    if n == 1:
                        self.builder.expect_unrolled(min(made), len(steps))
        finally:
            self.builder.unrolling.pop()

    def visit_While(self, node):
        if node.orelse:
            raise _Unsupported("while ... else is not supported")
        carried = self.carried_names(node.body)
        inits = [flatten(self.scope[n]) for n in carried]
        flat_inits = [t for leaves, _, _ in inits for t in leaves]
        types = [t.type for t in flat_inits]
        before_scope = self.scope
        cond_block, body = Block(types), Block(types)
        self.scope = dict(before_scope)
        self.bind_carried(carried, inits, cond_block.args)
        with semantic.insertion_block(cond_block):
            cond = self.visit(node.test)
            cond = self.scalar_condition(semantic.to_tensor(cond), "while")
            self.builder.create("condition", [cond.handle] + list(cond_block.args), [])
        self.scope = dict(before_scope)
        self.bind_carried(carried, inits, body.args)
        self.loop_body(body, node.body, carried, inits)
        self.scope = before_scope
        op = self.builder.create("while", [t.handle for t in flat_inits], types, regions=[cond_block, body],
                                 attrs=self.while_hints(node.test))
        self.bind_carried(carried, inits, op.results)

    def while_hints(self, test) -> dict:
        """The `while` op's attributes from `while tl.condition(c, disable_licm=True)`, as Triton's loop
        takes that hint (its value a compile-time one, as tl.range's)."""
        if not isinstance(test, ast.Call) or unwrap(self.visit(test.func)) is not tl_condition():
            return {}
        given = test.args[1:2] or [k.value for k in test.keywords if k.arg == "disable_licm"]
        return {"disable_licm": True} if given and _compile_time_hint("disable_licm", self.visit(given[0])) else {}

    def visit_Break(self, node):
        raise _Unsupported("`break` is not supported in kernels")

    def visit_Continue(self, node):
        raise _Unsupported("`continue` is not supported in kernels")

    # --- expressions --------------------------------------------------------------------
    def visit_Constant(self, node):
        return constexpr(node.value)

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    def visit_List(self, node):
        return [self.visit(e) for e in node.elts]

    def visit_ListComp(self, node):
        """`[f(v) for v in values if c]` over a compile-time sequence (a tuple, a constexpr
        range), unrolled as Triton does; the loop variable does not leak out."""
        if len(node.generators) != 1 or node.generators[0].is_async:
            raise _Unsupported("a list comprehension with more than one `for`")
        gen = node.generators[0]
        seq = unwrap(self.visit(gen.iter))
        if isinstance(seq, tensor):
            raise TypeError("a list comprehension iterates over a tuple or a constexpr range, not a tensor")
        saved, out = dict(self.scope), []
        try:
            for item in seq:
                self.assign(gen.target, item, node)
                conditions = [self.visit(c) for c in gen.ifs]
                if any(isinstance(c, tensor) for c in conditions):
                    raise TypeError("a list comprehension's `if` needs a compile-time (constexpr) condition")
                if all(unwrap(c) for c in conditions):
                    out.append(self.visit(node.elt))
        finally:
            self.scope = saved
        return out

    def visit_Attribute(self, node):
        value = self.visit(node.value)
        obj = value if isinstance(value, tensor) else unwrap(value)
        if is_aggregate(obj):
            return _aggregate_member(obj, node.attr)
        if isinstance(obj, type) and is_aggregate_class(obj):
            return _aggregate_class_member(obj, node.attr)
        if isinstance(value, constexpr) and node.attr == "value":
            return wrap(obj)  # Triton's constexpr.value: what it holds (a dtype a @jit callee was given)
        if isinstance(value, constexpr) and node.attr == "type" and not hasattr(obj, "type"):
            return value.type  # tl.constexpr_type, as Triton's constexpr has it
        if isinstance(obj, tuple) and node.attr == "type" and not hasattr(obj, "type"):
            return tuple_type.of(obj)
        return wrap(getattr(obj, node.attr))

    def visit_Subscript(self, node):
        value = self.visit(node.value)
        index = self.visit(node.slice)
        if isinstance(value, tensor):
            return value[index]
        if is_aggregate(unwrap(value)):
            return self.call(_aggregate_member(unwrap(value), "__getitem__"), [index], {})
        index = semantic.python_index(index)
        if isinstance(index, tuple):
            index = tuple(semantic.python_index(i) for i in index)
        return wrap(unwrap(value)[index])

    def visit_Slice(self, node):
        parts = [unwrap(self.visit(p)) if p is not None else None for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def binary(self, op, a, b):
        fn = _BINARY[type(op)]
        if not isinstance(a, tensor) and not isinstance(b, tensor):
            return wrap(fn(unwrap(a), unwrap(b)))
        return fn(a, b)

    def visit_BinOp(self, node):
        if type(node.op) not in _BINARY:
            raise _Unsupported(f"unsupported operator {type(node.op).__name__}")
        return self.binary(node.op, self.visit(node.left), self.visit(node.right))

    def visit_UnaryOp(self, node):
        v = self.visit(node.operand)
        if isinstance(v, tuple):  # as in Triton: a tuple has no unary operators, not even `not`
            symbol = {ast.Not: "not", ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}[type(node.op)]
            raise self.error(node, f"unary operator '{symbol}' is not defined for tuples", UnsupportedLanguageConstruct)
        if isinstance(node.op, ast.Not):
            if isinstance(v, tensor):
                return semantic.invert(semantic.logical_operand(v, "not"))
            return constexpr(not unwrap(v))
        fn = {ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Invert: lambda x: ~x}[type(node.op)]
        return fn(v) if isinstance(v, tensor) else wrap(fn(unwrap(v)))

    def visit_BoolOp(self, node):
        """Triton's rule: operands are visited in order; a constant that decides (a falsy one in
        `and`, a truthy one in `or`) is the result at once, one that does not is dropped; the
        tensors left combine logically (right to left), and with none left the last value is it."""
        is_and = isinstance(node.op, ast.And)
        tensors = []
        for value_node in node.values:
            value = self.visit(value_node)
            if not isinstance(value, tensor):
                if bool(unwrap(value)) != is_and:
                    return value
                continue
            if value.type.shape:
                semantic.warn_at_user_line("Logical operators 'and' and 'or' are deprecated for non-scalar tensors; "
                                           "please use '&' or '|' instead")
            tensors.append(value)
        if not tensors:
            return value
        word = "and" if is_and else "or"
        while len(tensors) > 1:
            rhs, lhs = tensors.pop(), tensors.pop()
            lhs, rhs = semantic.logical_operand(lhs, word), semantic.logical_operand(rhs, word)
            tensors.append(semantic.logical_and(lhs, rhs) if is_and else semantic.logical_or(lhs, rhs))
        return tensors[0]

    def visit_Compare(self, node):
        if len(node.ops) != 1:  # Triton's code generator takes one comparison at a time, constexprs too
            raise _Unsupported("simultaneous multiple comparison is not supported (Triton rejects chained "
                               "comparisons: write `(a < b) & (b < c)`, or `and` of constexprs)")
        left = self.visit(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.visit(right_node)
            if type(op) in (ast.Is, ast.IsNot, ast.In, ast.NotIn):
                value = _COMPARE[type(op)](unwrap(left), unwrap(right))
                part = constexpr(value)
            elif isinstance(left, tensor) or isinstance(right, tensor):
                part = _COMPARE[type(op)](left, right)
            else:
                part = wrap(_COMPARE[type(op)](unwrap(left), unwrap(right)))
            if result is None:
                result = part
            elif isinstance(result, tensor) or isinstance(part, tensor):
                result = semantic.logical_and(result, part)
            else:
                result = constexpr(bool(unwrap(result)) and bool(unwrap(part)))
            left = right
        return result

    def visit_IfExp(self, node):
        cond = self.visit(node.test)
        if not isinstance(cond, tensor):
            return self.visit(node.body if unwrap(cond) else node.orelse)
        if self.elementwise and cond.type.shape:
            return semantic.where(cond, self.visit(node.body), self.visit(node.orelse))
        cond = self.scalar_condition(cond, "if")
        saved_ret, saved_returned = self.ret, self.returned
        branches = [ast.Return(value=node.body, lineno=node.lineno, col_offset=node.col_offset),
                    ast.Return(value=node.orelse, lineno=node.lineno, col_offset=node.col_offset)]
        self.runtime_if(cond, [branches[0]], [branches[1]], node)
        value = self.ret
        self.ret, self.returned = saved_ret, saved_returned
        return value

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                parts.append(self.visit(v))
        return constexpr("".join(parts))

    def visit_FormattedValue(self, node):
        value = self.visit(node.value)
        if isinstance(value, tensor):
            raise TypeError("f-strings can only format constexprs")
        spec = unwrap(self.visit(node.format_spec)) if node.format_spec is not None else ""
        value = unwrap(value)
        if node.conversion == ord("r"):
            value = repr(value)
        elif node.conversion == ord("s"):
            value = str(value)
        return format(value, spec)

    def visit_Call(self, node):
        fn = self.visit(node.func)
        must_use = getattr(unwrap(fn), "_must_use_result", False)
        if must_use and getattr(node, "_is_unused", False):
            reason = f" {must_use}" if isinstance(must_use, str) else ""
            raise self.error(node, f"The result of {ast.unparse(node.func)} is not being used.{reason}")
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(unwrap(self.visit(a.value)))
            else:
                args.append(self.visit(a))
        kwargs = {}
        for k in node.keywords:
            if k.arg is None:
                kwargs.update(unwrap(self.visit(k.value)))
            else:
                kwargs[k.arg] = self.visit(k.value)
        return self.call(unwrap(fn) if not isinstance(fn, tensor) else fn, args, kwargs)

    def call(self, fn, args, kwargs):
        from .jit import JITFunction
        if isinstance(fn, functools.partial) and isinstance(fn.func, JITFunction):
            args = list(fn.args) + args
            kwargs = {**fn.keywords, **kwargs}
            fn = fn.func
        if isinstance(fn, JITFunction):
            return self.call_jit_function(fn, args, kwargs)
        if fn in _STATIC_BUILTINS:
            return _STATIC_BUILTINS[fn](self, args, kwargs)
        if is_builtin(fn):
            return wrap(fn(*args, **kwargs))
        if isinstance(fn, type) and issubclass(fn, tuple):  # a NamedTuple (or tl.tuple) of values
            return fn(*args, **kwargs)
        if isinstance(fn, type) and is_aggregate_class(fn):  # its __init__ takes the values as they are
            return fn(*args, **kwargs)
        static = isinstance(fn, _StaticMethod)
        if static or is_aggregate(getattr(fn, "__self__", None)):  # a plain method of an aggregate runs as Python
            fn = fn.fn if static else fn
            if "_semantic" in inspect.signature(fn).parameters:
                kwargs = {"_semantic": None, **kwargs}
            return wrap(fn(*args, **kwargs))
        if any(isinstance(a, tensor) for a in list(args) + list(kwargs.values())):
            name = getattr(fn, "__name__", repr(fn))
            raise TypeError(f"'{name}' is not a @jit function or a kiln builtin, so it cannot take tensors")
        return wrap(fn(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in kwargs.items()}))

    def call_jit_function(self, fn, args, kwargs, elementwise=False):
        if self.depth >= MAX_INLINE_DEPTH:
            raise RecursionError("too many nested @jit calls (recursion is not supported)")
        try:
            bound = fn.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{fn.__name__}(): {e}") from None
        bound.apply_defaults()
        scope = {}
        for name, value in bound.arguments.items():
            # a constexpr parameter given a runtime value takes it as it is, as in Triton; a dtype is a
            # constexpr whatever the annotation, as Triton passes it (FlagGems' `get_dtype_max(dtype)` reads
            # `dtype.value`)
            constant = (name in fn.constexpr_names and not _holds_runtime_values(value)) or isinstance(value, dtype)
            scope[name] = constexpr(unwrap(value)) if constant else wrap(value)
        if semantic.state.keep_calls and not fn.is_internal and not (self.elementwise or elementwise):
            return self.kept_call(fn, bound.arguments, scope)
        return self.inline(fn, scope, elementwise).ret

    def kept_call(self, fn, arguments, scope):
        """A `call` op whose region is the callee's body, built on block arguments (the tensors of
        the arguments): for TTIR's text only (kiln.ttir), never run or compiled."""
        from .ttir import call_leaves, mangle_call
        leaves, pieces, inner = [], [], {}
        for name, value in scope.items():
            if isinstance(value, constexpr):
                inner[name] = value
                continue
            found, rebuild = call_leaves(value)
            pieces.append((name, len(leaves), len(found), rebuild))
            leaves += found
        block = Block([t.type for t in leaves])
        for name, start, n, rebuild in pieces:
            inner[name] = rebuild([tensor(a, a.type) for a in block.args[start:start + n]])
        with semantic.insertion_block(block):
            ret = self.inline(fn, inner, False).ret
            results, rebuild_ret = call_leaves(ret)
            self.builder.create("yield", [t.handle for t in results])
        op = self.builder.create("call", [t.handle for t in leaves], [t.type for t in results],
                                 {"callee": mangle_call(fn, arguments)}, [block])
        return rebuild_ret([tensor(r, r.type) for r in op.results])

    def inline(self, fn, scope, elementwise):
        """Build the body of @jit function `fn` here, its parameters bound as `scope`; the generator."""
        fixed = self.builder.loc if fn.is_internal else self.fixed_loc
        gen = CodeGenerator(fn, scope, self.builder, self.depth + 1, fixed_loc=fixed)
        gen.elementwise = self.elementwise or elementwise
        saved = semantic.state.generator
        semantic.state.generator = gen
        try:
            gen.visit(fn.parse())
        except CompilationError as e:
            if self.builder.loc is None or self.fixed_loc is not None:
                raise  # inside kiln's library: the user's call into it is where it is shown
            outer = self.error_at(self.builder.loc, e.reason)
            if not fn.is_internal:  # at the call, caused by the error inside the callee (as Triton)
                raise outer from e.with_traceback(None)
            # Errors inside kiln's own library point at the user's call only.
            raise outer from e.__cause__
        finally:
            semantic.state.generator = saved
        return gen


_STATIC_RANGE_SIGNATURE = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d)
                                              for n, d in (("arg1", inspect.Parameter.empty), ("arg2", None),
                                                           ("step", None))])


def _holds_runtime_values(value) -> bool:
    value = unwrap(value)
    if isinstance(value, tuple):
        return any(_holds_runtime_values(v) for v in value)
    return isinstance(value, tensor) or (is_carriable(value) and not isinstance(value, (bool, numbers.Number,
                                                                                         np.generic)))


def tl_range():
    from kiln.language.core import range as r
    return r


def tl_condition():
    from kiln.language.builtins import condition
    return condition


def tl_static_range():
    from kiln.language.core import static_range as r
    return r


# tl.range's hints, as Triton sets them on the loop: ints (unless None) and switches (when true)
_INT_LOOP_HINTS = ("num_stages", "loop_unroll_factor")
_SWITCH_LOOP_HINTS = ("disallow_acc_multi_buffer", "flatten", "warp_specialize", "disable_licm")
_RANGE_SIGNATURE = inspect.Signature(
    [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d)
     for n, d in (("arg1", inspect.Parameter.empty), ("arg2", None), ("step", None),
                  *((h, None) for h in _INT_LOOP_HINTS), *((h, False) for h in _SWITCH_LOOP_HINTS))])


def _range_args(args, kwargs):
    """(start, end, step, the `for` op's hint attributes) of `range(...)` or `tl.range(...)`."""
    try:
        given = _RANGE_SIGNATURE.bind(*args, **kwargs).arguments
    except TypeError as e:
        raise TypeError(f"range: {e}") from None
    if unwrap(given.get("arg2")) is None:
        start, end = constexpr(0), given["arg1"]
    else:
        start, end = given["arg1"], given["arg2"]
    step = given.get("step")
    step = constexpr(1) if unwrap(step) is None else step
    attrs = {}
    for key in _INT_LOOP_HINTS:
        value = _compile_time_hint(key, given.get(key))
        if value is not None:
            if not isinstance(value, (int, np.integer)):
                raise TypeError(f"tl.range's {key} must be an int, not {value!r}")
            attrs[key] = int(value) if not isinstance(value, bool) else value
    for key in _SWITCH_LOOP_HINTS:
        if _compile_time_hint(key, given.get(key)):  # any true value, as Triton's `if flatten:`
            attrs[key] = True
    return start, end, step, attrs


def _compile_time_hint(key, value):
    value = unwrap(value)
    if isinstance(value, tensor):
        raise TypeError(f"the loop's {key} is a hint to the compiler: it must be known at compile time "
                        "(a constexpr), not a tensor")
    return value


def _minmax(reducer, name):
    def call(gen, args, kwargs):
        if kwargs.get("propagate_nan") is not None:
            kwargs = dict(kwargs)
        values = list(args[0]) if len(args) == 1 and isinstance(unwrap(args[0]), (tuple, list)) else list(args)
        if not any(isinstance(v, tensor) for v in values):
            values = [unwrap(v) for v in values]
            for v in values:  # Python's answer would hang on the order of the arguments; refused, as in Triton
                if isinstance(v, (float, np.floating)) and (math.isnan(v) or (v == 0.0 and math.copysign(1.0, v) < 0)):
                    raise ValueError(f"{name}() of constexprs cannot take {v} (NaN or -0.0): its result "
                                     f"would depend on the order of the arguments; use tl.{name}imum on tensors")
            return wrap(reducer(*values))
        result = values[0]
        for v in values[1:]:
            result = (semantic.minimum if name == "min" else semantic.maximum)(result, v)
        return result
    return call


def _aggregate_member(obj, name: str):
    """An attribute of an aggregate in a kernel: a @jit method bound to the instance (its `self`)."""
    from .jit import JITFunction
    method = getattr(type(obj), name, None)
    if isinstance(method, JITFunction):
        return functools.partial(method, obj)
    return wrap(getattr(obj, name))


@dataclasses.dataclass(frozen=True)
class _StaticMethod:
    """A plain `@staticmethod` of an aggregate class, met in a kernel: it runs as Python on the
    kernel's values as they are, as the class's `__init__` and plain methods do."""
    fn: object


def _aggregate_class_member(cls, name: str):
    member = inspect.getattr_static(cls, name)
    if isinstance(member, staticmethod) and inspect.isfunction(member.__func__):
        return _StaticMethod(member.__func__)
    return wrap(getattr(cls, name))


def is_aggregate_class(cls) -> bool:
    return hasattr(cls, "__kiln_aggregate_fields__")


def _print(gen, args, kwargs):
    prefix = ""
    if args and isinstance(unwrap(args[0]), str):
        prefix, args = unwrap(args[0]), args[1:]
    semantic.device_print(prefix, *args)


def _isinstance(gen, args, kwargs):
    """isinstance() on a kernel value: a tensor is a `tl.tensor`, a constexpr argument a
    `tl.constexpr`; anything else is judged on its Python value."""
    if len(args) != 2 or kwargs:
        raise TypeError("isinstance expected 2 arguments")
    value, classes = args[0], unwrap(args[1])
    classes = tuple(unwrap(c) for c in classes) if isinstance(classes, (tuple, list)) else (classes,)
    if isinstance(value, constexpr) and constexpr in classes:
        return constexpr(True)
    return constexpr(isinstance(value if isinstance(value, tensor) else unwrap(value), classes))


def _attribute_name(name, builtin: str) -> str:
    name = unwrap(name)
    if not isinstance(name, str):
        raise TypeError(f"{builtin}(): attribute name must be string, not {type(name).__name__}")
    return name


def _hasattr(gen, args, kwargs):
    """hasattr() on a kernel value, as Triton allows it: a tensor's attributes are its type's
    (`dtype`, `shape`, ...), a constexpr's those of its Python value."""
    if len(args) != 2 or kwargs:
        raise TypeError("hasattr expected 2 arguments")
    value = args[0] if isinstance(args[0], tensor) else unwrap(args[0])
    return constexpr(hasattr(value, _attribute_name(args[1], "hasattr")))


def _getattr(gen, args, kwargs):
    """getattr(value, name[, default]) on a kernel value (a tensor's own attributes, or a Python value's)."""
    if len(args) not in (2, 3) or kwargs:
        raise TypeError("getattr expected 2 or 3 arguments")
    value = args[0] if isinstance(args[0], tensor) else unwrap(args[0])
    name = _attribute_name(args[1], "getattr")
    return wrap(getattr(value, name, args[2]) if len(args) == 3 else getattr(value, name))


_STATIC_BUILTINS = {
    builtins.isinstance: _isinstance,
    builtins.hasattr: _hasattr,
    builtins.getattr: _getattr,
    builtins.min: _minmax(builtins.min, "min"),
    builtins.max: _minmax(builtins.max, "max"),
    builtins.print: _print,
}
_BUILTINS: dict = {}

def _capturable(value) -> bool:
    """What a kernel may read from outside itself without it being a constexpr: nothing that
    holds data which could change after the kernel is compiled."""
    if value is None or isinstance(value, (constexpr, dtype, types.ModuleType, type)):
        return True
    if callable(value) or is_builtin(value):
        return True
    return isinstance(value, tuple) and hasattr(type(value), "_fields")  # a namedtuple, as in Triton


def _is_data(value) -> bool:
    """A global read that a launch re-checks (as Triton): a value, not a module, class or function."""
    return not isinstance(value, (types.ModuleType, type)) and (isinstance(value, constexpr) or not callable(value))


import operator as _op  # noqa: E402

_BINARY = {
    ast.Add: _op.add, ast.Sub: _op.sub, ast.Mult: _op.mul, ast.Div: _op.truediv, ast.FloorDiv: _op.floordiv,
    ast.Mod: _op.mod, ast.Pow: _op.pow, ast.BitAnd: _op.and_, ast.BitOr: _op.or_, ast.BitXor: _op.xor,
    ast.LShift: _op.lshift, ast.RShift: _op.rshift,
}
_COMPARE = {
    ast.Eq: _op.eq, ast.NotEq: _op.ne, ast.Lt: _op.lt, ast.LtE: _op.le, ast.Gt: _op.gt, ast.GtE: _op.ge,
    ast.Is: _op.is_, ast.IsNot: _op.is_not, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


class _BoundedBuilder(Builder):
    """The kernel's builder. It refuses, while the kernel is built (an error at the user's line, at
    once), what the daemon would refuse (`kiln.daemon.limits`): more operations than a kernel may have
    (a static_range that unrolls 100,000 steps would take minutes to build) and blocks of more elements
    than Triton's TRITON_MAX_TENSOR_NUMEL (a tl.arange(0, 2**24))."""

    def __init__(self, block):
        from kiln.daemon.limits import MAX_BLOCK_ELEMENTS, MAX_OPS
        super().__init__(block)
        self.created, self.max_ops, self.max_numel = 0, MAX_OPS, MAX_BLOCK_ELEMENTS
        self.unrolling: list[list[int]] = []  # the static_ranges being unrolled, outermost first: [steps, current]

    def create(self, name, operands=(), result_types=(), attrs=None, regions=()):
        self.created += 1
        if self.created > self.max_ops:
            self.expect(0)
        for t in result_types:
            numel = 1
            for d in getattr(t, "shape", None) or ():
                numel *= d
            if numel > self.max_numel:
                raise ValueError(f"numel ({numel}) exceeds triton maximum tensor numel ({self.max_numel})")
        return super().create(name, operands, result_types, attrs, regions)

    def expect_unrolled(self, per_step: int, steps: int) -> None:
        """The innermost static_range being unrolled made `per_step` operations in each of its first
        two steps, of `steps`: refuse now what its other steps, and its runs in the steps left of the
        static_ranges around it, will add. That counts at half, as later steps may be lighter (a
        triangular nest, `if j >= i`, makes half on average); still, 100,000 steps, or three nested
        ranges of 100, are refused after a few operations, not after 65,536 (seconds of Python)."""
        later_runs, scale = 0, 1
        for total, current in reversed(self.unrolling[:-1]):
            later_runs += (total - current - 1) * scale
            scale *= total
        self.expect((per_step * (steps - 2) + per_step * steps * later_runs) // 2)

    def expect(self, more: int) -> None:
        """Refuse now a kernel that will have more operations than a kernel may, with `more` still to
        come (`expect_unrolled` estimates what a static_range's steps left will make)."""
        if self.created + more > self.max_ops:
            raise ValueError(f"the kernel has more than {self.max_ops} operations (a static_range unrolled too "
                             "far?): no GPU runs such a kernel well; use tl.range for long loops")


def build_kernel(jitfn, params, name: str | None = None, options: dict | None = None,
                 global_reads: dict | None = None, keep_calls: bool = False) -> Function:
    """The block IR of kernel `jitfn` for one specialization.

    `params` maps every parameter name to either `constexpr(value)` or
    `(dtype, attrs)` for a runtime argument, or a `DescriptorArgument` for a host tensor
    descriptor (several function arguments); runtime arguments become the function's
    arguments in signature order. `options` (num_warps...) are what tl.extra.cuda.num_warps reads.
    `global_reads`, when given, receives the module globals the kernel and its callees read.
    `keep_calls`: each call of a user's @jit function is a `call` op holding the callee's body
    (Triton's `tt.call` for kiln.ttir's text), not inlined; such IR is only printed, never run.
    """
    runtime = [(n, p) for n, p in params.items() if not isinstance(p, constexpr)]
    pieces = [(n, [p]) if isinstance(p, tuple) else (n, p.pieces) for n, p in runtime]  # a descriptor has several
    flat = [(f"{n}.{i}" if len(ps) > 1 else n, p) for n, ps in pieces for i, p in enumerate(ps)]
    fn = Function(name or jitfn.__name__, [p[0] for _, p in flat], [n for n, _ in flat], [p[1] for _, p in flat])
    builder = _BoundedBuilder(fn.body)
    scope = {}
    args = iter(fn.args)
    saved = (semantic.state.builder, semantic.state.generator, semantic.state.options, semantic.state.global_reads,
             semantic.state.keep_calls)
    semantic.state.builder, semantic.state.options = builder, dict(options or {})
    semantic.state.global_reads, semantic.state.keep_calls = global_reads, keep_calls
    try:
        for n, p in params.items():  # a descriptor's pieces may emit constants (its last stride)
            if isinstance(p, constexpr):
                scope[n] = p
            elif isinstance(p, tuple):
                scope[n] = tensor(next(args), p[0])
            else:
                scope[n] = p.build([tensor(next(args), t) for t, _ in p.pieces])
        gen = CodeGenerator(jitfn, scope, builder)
        semantic.state.generator = gen
        tree = jitfn.parse()
        both = [n for n in jitfn.arg_names if n in jitfn.constexpr_names and n in jitfn.do_not_specialize]
        if both:  # Triton refuses it when compiling, not when decorating
            raise gen.error(tree.body[0], f"{both[0]} marked as constexpr and listed in do_not_specialize")
        gen.visit(tree)
        if gen.returned and gen.ret is not None and not (isinstance(gen.ret, constexpr) and gen.ret.value is None):
            raise gen.error(gen.ret_node or tree, "a kernel launched from the host cannot return a value")
        builder.loc = None
        builder.create("return")
    finally:
        (semantic.state.builder, semantic.state.generator, semantic.state.options, semantic.state.global_reads,
         semantic.state.keep_calls) = saved
    unroll_loops(fn)  # where Triton's frontend ends, its LoopUnroll runs (asm["ttir"] shows it)
    if not keep_calls:  # block IR has no call op: the one that keeps them is text for TTIR only
        verify(fn)
    return fn
